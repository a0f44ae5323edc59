"""annotated/export/spacy_rules.py: spaCy's tokenizer rules exported for the "Try the model" page,
its regular expressions converted to JavaScript's syntax (or refused, naming what JavaScript lacks).
(The page's tokenizer, run in headless Chromium over the exported rules against Python's tokens, is
tests/test_try_tokenizer.py's.)"""

import json

import pytest
import spacy

from annotated.ch05_text import tokenize
from annotated.export.spacy_rules import RegexConversionError, to_javascript, tokenizer_rules


def test_converter_refuses_what_it_cannot_convert():
    for pattern, says in [
        (r"a*+b", "possessive quantifier"),
        (r"(?>ab|a)c", "atomic group"),
        (r"(?i)straße", "IGNORECASE"),
        (r"a(?m:^b)", "MULTILINE"),
        (r"(a)?\1", "backreference"),
        (r"[\S\d]", "negated class"),
    ]:
        with pytest.raises(RegexConversionError, match=says):
            to_javascript(pattern)


def test_converter_writes_javascript_syntax():
    assert to_javascript(r"(?u)^\-\'[\"\-\]a-z]{2,}$") == r"^-'[" + '"' + r"\-\]a-z]{2,}(?=\n?$)"
    assert to_javascript(r"(?P<x>\d+?)\Z\A.") == r"([\p{Nd}]+?)$^[^\n]"
    assert to_javascript("\\U0001F600\u00a0|{|}") == "(?:😀\\u{a0}|\\{|\\})"


@pytest.mark.parametrize("language", ["de", "en"])
def test_the_exported_rules_are_json_and_their_special_cases_spacys_own_tokens(language):
    rules = tokenizer_rules(language)
    assert json.loads(json.dumps(rules)) == rules  # what the page reads, unchanged
    assert (rules["language"], rules["spacy_version"]) == (language, spacy.__version__)
    patterns = ("prefix", "suffix", "infix", "token_match", "url_match")
    assert {"whitespace", "faster_heuristics", "special_cases", *patterns} <= set(rules)
    assert all(rules[key] is None or isinstance(rules[key], str) for key in patterns)
    # Every special case (whitespace aside, which chapter 5's tokens drop) is cut as spaCy cuts
    # the string alone: the exported tokens are the tokenizer's own.
    cases = {k: v for k, v in rules["special_cases"].items() if not any(c.isspace() for c in k)}
    assert len(cases) > 100 and any(len(tokens) > 1 for tokens in cases.values())
    strings = sorted(cases)
    for string, tokens in zip(strings, tokenize(strings, language), strict=True):
        assert cases[string] == tokens, string
