"""annotated/export/spacy_rules.py: spaCy's tokenizer rules exported for the "Try the model" page,
its regular expressions converted to JavaScript's syntax (or refused, naming what JavaScript lacks).
(The page's tokenizer, run in headless Chromium over the exported rules against Python's tokens, is
tests/test_try_tokenizer.py's.)"""

import pytest

from annotated.export.spacy_rules import RegexConversionError, to_javascript


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
