"""spaCy's tokenizer rules, exported for the browser.

The book cuts sentences into words with spaCy's blank tokenizer (`tokenize` in
annotated/ch05_text.py). The site's translation page must cut the reader's text the same way, in
JavaScript. So it does not rewrite spaCy's rules: `tokenizer_rules(language)` exports them, as
JSON-ready data with the regular expressions converted from Python's syntax to JavaScript's, and
site/try/tokenizer.js runs spaCy's algorithm over them. tests/test_try_tokenizer.py checks, in
Chromium, that the two give the same tokens.
"""

from __future__ import annotations

import re
from re import _parser  # the parser `re` itself compiles from (its opcodes are in re._constants)

import spacy
from spacy.symbols import ORTH

P = _parser


class RegexConversionError(ValueError):
    """A Python regular expression that `to_javascript` cannot write in JavaScript's syntax."""


# Python's \d, \w and \s match Unicode characters in str patterns; JavaScript's match ASCII only,
# even with the u flag. These are the same sets, written as the inside of a JavaScript [class].
_CATEGORIES = {
    P.CATEGORY_DIGIT: r"\p{Nd}",  # str.isdecimal(): Unicode's Nd
    P.CATEGORY_WORD: r"\p{L}\p{N}_",  # str.isalnum() (letters and numbers) or "_"
    P.CATEGORY_SPACE: r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000",
}
_NEGATED = {
    P.CATEGORY_NOT_DIGIT: P.CATEGORY_DIGIT,
    P.CATEGORY_NOT_WORD: P.CATEGORY_WORD,
    P.CATEGORY_NOT_SPACE: P.CATEGORY_SPACE,
}
_WORD = "[" + _CATEGORIES[P.CATEGORY_WORD] + "]"
_ANCHORS = {
    P.AT_BEGINNING: "^",
    P.AT_BEGINNING_STRING: "^",  # \A
    P.AT_END: r"(?=\n?$)",  # Python's $ also matches before a newline that ends the string
    P.AT_END_STRING: "$",  # \Z
    P.AT_BOUNDARY: f"(?:(?<={_WORD})(?!{_WORD})|(?<!{_WORD})(?={_WORD}))",  # \b, Unicode-aware
    P.AT_NON_BOUNDARY: f"(?:(?<={_WORD})(?={_WORD})|(?<!{_WORD})(?!{_WORD}))",  # \B
}
_UNSUPPORTED = {
    P.POSSESSIVE_REPEAT: "a possessive quantifier (such as a*+)",
    P.ATOMIC_GROUP: "an atomic group (?>...)",
    P.GROUPREF: "a backreference (JavaScript's matches empty where the group did not match)",
    P.GROUPREF_EXISTS: "a conditional group (?(1)...|...)",
}
_SYNTAX = set("^$\\.*+?()[]{}|/")  # what JavaScript reads as syntax outside a [class] ...
_CLASS_SYNTAX = set("\\[]^-")  # ... and inside one


def to_javascript(pattern: str, flags: int = 0) -> str:
    """A Python `re` pattern written for JavaScript's `new RegExp(..., "u")`, matching the same.

    The pattern is parsed by Python's own parser and written back out node by node, so what
    JavaScript gets is what Python runs. Raises RegexConversionError for what it cannot convert
    exactly (inline flags such as (?i), possessive quantifiers, atomic groups, backreferences...).
    """
    parsed = P.parse(pattern, flags)
    _check_flags(parsed.state.flags)
    return _emit(parsed)


def _check_flags(flags: int) -> None:
    unsupported = flags & ~(re.UNICODE | re.VERBOSE)  # the parser has applied VERBOSE already
    if unsupported:
        raise RegexConversionError(
            f"cannot convert the flag {re.RegexFlag(unsupported)!r} (or its inline form, such "
            "as (?i)) to JavaScript: its meaning differs there, or it does not exist"
        )


def _emit(items) -> str:
    out = []
    for op, av in items:
        if op is P.LITERAL:
            out.append(_char(av))
        elif op is P.NOT_LITERAL:
            out.append("[^" + _char(av, in_class=True) + "]")
        elif op is P.ANY:
            out.append(r"[^\n]")  # Python's . (without DOTALL) is anything but \n
        elif op is P.IN:
            out.append(_class(av))
        elif op is P.AT and av in _ANCHORS:
            out.append(_ANCHORS[av])
        elif op is P.BRANCH:
            out.append("(?:" + "|".join(_emit(branch) for branch in av[1]) + ")")
        elif op is P.SUBPATTERN:
            group, add_flags, del_flags, sub = av
            _check_flags(add_flags | del_flags)
            out.append(("(" if group else "(?:") + _emit(sub) + ")")  # names are dropped
        elif op in (P.MAX_REPEAT, P.MIN_REPEAT):
            low, high, sub = av
            lazy = "?" if op is P.MIN_REPEAT else ""
            out.append(_atom(sub) + _quantifier(low, high) + lazy)
        elif op in (P.ASSERT, P.ASSERT_NOT):
            direction, sub = av
            kind = ("<" if direction < 0 else "") + ("=" if op is P.ASSERT else "!")
            out.append(f"(?{kind}{_emit(sub)})")
        else:
            what = _UNSUPPORTED.get(op, f"{op} {av!r}")
            raise RegexConversionError(f"cannot convert {what} to JavaScript")
    return "".join(out)


def _atom(sub) -> str:
    """`sub` as one unit that a quantifier can follow."""
    single = len(sub) == 1 and sub[0][0] in (P.LITERAL, P.NOT_LITERAL, P.ANY, P.IN, P.BRANCH)
    grouped = len(sub) == 1 and sub[0][0] is P.SUBPATTERN
    return _emit(sub) if single or grouped else "(?:" + _emit(sub) + ")"


def _quantifier(low: int, high: int) -> str:
    if high == P.MAXREPEAT:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _class(items) -> str:
    negate = items[0][0] is P.NEGATE
    items = items[1:] if negate else items
    if len(items) == 1 and items[0][0] is P.CATEGORY and items[0][1] in _NEGATED:
        # \S alone (or [^\S]): the complement of a set JavaScript can write
        negate, items = not negate, [(P.CATEGORY, _NEGATED[items[0][1]])]
    parts = []
    for op, av in items:
        if op is P.LITERAL:
            parts.append(_char(av, in_class=True))
        elif op is P.RANGE:
            parts.append(_char(av[0], in_class=True) + "-" + _char(av[1], in_class=True))
        elif op is P.CATEGORY and av in _CATEGORIES:
            parts.append(_CATEGORIES[av])
        else:
            raise RegexConversionError(
                f"cannot convert {op} {av!r} inside a [...] set to JavaScript (a negated class "
                "such as \\S, \\W or \\D can only stand alone there)"
            )
    return "[" + "^" * negate + "".join(parts) + "]"


def _char(code: int, in_class: bool = False) -> str:
    char = chr(code)
    if char in (_CLASS_SYNTAX if in_class else _SYNTAX):
        return "\\" + char
    return char if char.isprintable() else f"\\u{{{code:x}}}"


# spaCy keeps these as bound methods of compiled patterns: the method each must be.
_PATTERNS = {
    "prefix": ("prefix_search", "search"),
    "suffix": ("suffix_search", "search"),
    "infix": ("infix_finditer", "finditer"),
    "token_match": ("token_match", "match"),
    "url_match": ("url_match", "match"),
}


def tokenizer_rules(language: str) -> dict:
    """Everything `spacy.blank(language).tokenizer` uses, as JSON-serializable data.

    Keys: spacy_version, language; whitespace (a JavaScript class of Python's str.isspace
    characters, which spaCy splits the text at); prefix, suffix, infix, token_match, url_match
    (JavaScript patterns for the u flag, or None); faster_heuristics (a spaCy setting the special
    cases' second pass depends on); special_cases (each string spaCy tokenizes by a fixed rule ->
    its tokens' texts, including rules that keep the string whole: those stop the prefix, suffix
    and infix splitting, so they matter too).
    """
    tokenizer = spacy.blank(language).tokenizer
    rules = {"spacy_version": spacy.__version__, "language": language}
    rules["whitespace"] = to_javascript(r"\s")
    for key, (attribute, method) in _PATTERNS.items():
        function = getattr(tokenizer, attribute)
        compiled = getattr(function, "__self__", None)
        if function is None:
            rules[key] = None
            continue
        if not isinstance(compiled, re.Pattern) or function.__name__ != method:
            raise TypeError(f"tokenizer.{attribute} is not the .{method} of a compiled pattern")
        if key == "infix" and P.parse(compiled.pattern, compiled.flags).getwidth()[0] == 0:
            raise RegexConversionError(
                "the infix pattern can match the empty string, where Python's finditer and "
                "JavaScript's matchAll go on differently"
            )
        rules[key] = to_javascript(compiled.pattern, compiled.flags)
    rules["faster_heuristics"] = tokenizer.faster_heuristics
    rules["special_cases"] = {
        string: [token[ORTH] for token in tokens]
        for string, tokens in sorted(tokenizer.rules.items())
    }
    return rules
