"""spaCy's tokenizer in JavaScript (site/try/tokenizer.js) against the book's in Python.

The site's translation page cuts the reader's text into tokens in the browser, and must cut it as
`annotated.ch05_text.tokenize` cut the book's data. Here headless Chromium runs the script over the
rules `annotated.export.spacy_rules.tokenizer_rules` exports, and its tokens must equal Python's: on
Multi30k's sentences (German and English: the test and validation sets and the first 5,000 of the
training set, read from $ANNOTATED_DATA_DIR, else skipped), on hard strings (URLs, numbers,
abbreviations, quotes, emoji, odd whitespace...), on every special case wrapped in punctuation,
and on random strings. Without Chromium the browser tests are skipped with a message saying so.
"""

from __future__ import annotations

import gzip
import os
import random
import re
import unicodedata
from pathlib import Path

import pytest
from needs import missing

from annotated.base.datasets import DATA_DIR_ENV
from annotated.ch05_text import tokenize
from annotated.export.spacy_rules import to_javascript, tokenizer_rules

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "site" / "try" / "tokenizer.js"
LANGUAGES = ("de", "en")
MULTI30K = {"test_2016_flickr": None, "val": None, "train": 5000}  # split -> how many (None: all)

# Tokenizes every string of the list with the rules given, in the page.
_TOKENIZE = """([rules, texts]) => {
  const tokenize = AnnotatedTokenizer.make(rules);
  return texts.map((text) => tokenize(text));
}"""

HARD = [
    # URLs and e-mail addresses
    "Siehe https://www.example.com/pfad/seite.html?x=1&y=2#anker.",
    "Mehr unter www.uni-heidelberg.de/forschung!",
    "(http://example.org) und [https://de.wikipedia.org/wiki/Straße_(Begriffsklärung)]",
    "ftp://files.example.net/a_b-c.txt, localhost:8080/api, 192.168.0.1 oder 8.8.8.8.",
    "Schreib an max.mustermann@example.de, bitte. <anna@beispiel.org>",
    "user:passwort@host.com http://münchen.de/über",
    # numbers, times, percentages, units, money
    "3,5 Millionen, 1.000.000 Euro, 10.000,50 €, 3.14159 und -12,5°C.",
    "+49 (0)30 1234567; $5.99, 5$, US$10, €20, 20%, 50 %, 1/2, 2x3, 1990er, H2O",
    "Um 12:30 Uhr, 9:45am, 10pm, 3a.m., 11p.m. oder 7.30 h; 1st 2nd 3rd 4th",
    "100m, 5km/h, 24°, 30°C., 1.5kg, 3x, 10-15, 2020-01-31, 1,5-fach, 4:3",
    # hyphens
    "T-Shirt, E-Mail-Adresse, Baden-Württemberg, Ost- und Westdeutschland",
    "well-known state-of-the-art -- a--b 1-2 -so so- ---",
    # German abbreviations and ordinals
    "z.B. usw. Dr. Str. d.h. u.a. bzw. ca. Nr. 5 Fa. S. 12 v. Chr. etc. evtl. ggf. Jh.",
    "Am 3. Mai, am 3., 3.Mai, 2.), Nr.1, § 3, (z.B. hier), z. B., Dr.med., usw..",
    "Hauptstr. 5, Bahnhofstr.12, Mio. Mrd. Tel. inkl. zzgl. bzw.: geht's gibt’s auf'm",
    # English contractions and abbreviations
    "don't I'm can't y'all won't shouldn't've It's we're 'cause ain't gonna gotta",
    "Don’t I’m Can’t Y’all o'clock rock 'n' roll ma'am let's Let’s lovin' doin'",
    "Mr. Smith, U.S.A., e.g., i.e., a.m., St. Louis, Jan. 5, Mt. Everest, Peter's Peter’s",
    "DON'T I'M He'd they'll you've Jones' cats' 's '' ` ´",
    # quotes of several kinds
    "„Hallo“, «Bonjour», ‹x›, 'single', \"double\", ``tex'', “curly”, ‚einfach‘, »Buch«",
    'Er sagte: „Nein!“ Sie: "Ja." Und \'Tis. »Was?« ‘hm’ „…“',
    # brackets
    "(ja) [1] {x} ((doppelt)) [Anm. d. Red.] (a)b a(b) a[b]c {{x}} )( ][",
    # emoticons and emoji
    ":) :-) ;-) :D <3 xD (^_^) ¯\\_(ツ)_/¯ =) :( :'( ^_^ o_O :P :-P (: <33",
    "👍 👨‍👩‍👧 🇩🇪 Super!!!😀😀 C++ A&B AT&T #hashtag @user <b>fett</b> a->b",
    # non-breaking and other spaces, tabs, newlines, runs of spaces
    "10\u00a0km, z.B.\u00a0hier, \u202fschmal, a\u2009b, \u3000breit, a\u00a0\u00a0b",
    "a\tb\tc, Zeile 1\nZeile 2, a\r\nb, \n\n, a \n b, a\x0bb, a\x1cb, a\x85b, a\u2028b",
    "a  b   c    d",
    "  ",
    " ",
    " a",
    "a ",
    "  a  ",
    "\ta.\t",
    "\n",
    "",
    # accented and non-Latin letters
    "Ärger über Öl, Crème brûlée, São Paulo, Øre, Łódź, Ñandú, ß, ẞ",
    "Ελληνικά: Καλημέρα! Привет, мир! Україна, їжак.",
    "東京は大きい。中文，标点。한국어 문장. עברית. العربية؟ नमस्ते। ไทย",
    "e\u0301t\u00e9 ﬁnden Ǆ ǅ Ⅻ ½ ²³ ٣٤ ４５",
    # ellipses, and words followed by many punctuation marks
    "Und dann... Na ja… warte.... ...aber a...b Hm. . . ……",
    'Was?!?! Nein!!! Hallo?!..." Ende.)" (((a))) wow!?,;: Ja.“ so— —so ja;-)',
    "Mannes' Hans' Auto Klaus'. 'Hallo' ‚Tag‘. ‹a› usw.), (z.B.: Dr.!",
]


@pytest.fixture(scope="module")
def page(browser):  # noqa: F811 (test_site's fixture: skips with its reason without Chromium)
    tab = browser.new_page()
    tab.set_content("<html><body></body></html>")
    tab.add_script_tag(path=str(SCRIPT))
    yield tab
    tab.close()


@pytest.fixture(scope="module")
def rules():
    return {language: tokenizer_rules(language) for language in LANGUAGES}


def assert_same_tokens(page, rules: dict, language: str, texts: list[str]) -> None:
    """The script's tokens for each text equal Python's; else the first that differ, shown."""
    expected = tokenize(texts, language)
    got = page.evaluate(_TOKENIZE, [rules, texts])
    differ = [(t, e, g) for t, e, g in zip(texts, expected, got, strict=True) if e != g]
    shown = "\n".join(f"{t!r}\n  Python:     {e}\n  JavaScript: {g}" for t, e, g in differ[:10])
    assert not differ, f"{len(differ)} of {len(texts)} {language} texts differ; the first:\n{shown}"


def multi30k(language: str) -> list[str]:
    folder = os.environ.get(DATA_DIR_ENV)
    if not folder:
        missing(f"no local Multi30k copy: set {DATA_DIR_ENV} (CI points it at ../shared/data)")
    sentences = []
    for split, count in MULTI30K.items():
        path = Path(folder) / "multi30k" / f"{split}.{language}.gz"
        if not path.is_file():
            missing(f"no {path}: {DATA_DIR_ENV} names no folder with Multi30k's files")
        with gzip.open(path, "rb") as handle:
            lines = (
                handle.read().decode("utf-8").split("\n")
            )  # as annotated.base.datasets reads them
        if lines[-1] == "":
            lines.pop()
        sentences += lines[:count]
    return sentences


@pytest.mark.slow
@pytest.mark.parametrize("language", LANGUAGES)
def test_multi30k_sentences_tokenize_as_in_python(page, rules, language):
    sentences = multi30k(language)
    assert len(sentences) == 1000 + 1014 + 5000
    assert_same_tokens(page, rules[language], language, sentences)


@pytest.mark.slow
@pytest.mark.parametrize("language", LANGUAGES)
def test_hard_strings_tokenize_as_in_python(page, rules, language):
    assert_same_tokens(page, rules[language], language, HARD)


@pytest.mark.slow
@pytest.mark.parametrize("language", LANGUAGES)
def test_special_cases_in_context_tokenize_as_in_python(page, rules, language):
    """Every special case alone, in brackets, in quotes, before punctuation and between words."""
    forms = ["{}", "({})", "„{}“", '"{}".', "{}...", "{}.)", "a {} b", "x{}", "{}x", "'{}'"]
    texts = [form.format(case) for case in rules[language]["special_cases"] for form in forms]
    assert_same_tokens(page, rules[language], language, texts)


@pytest.mark.slow
@pytest.mark.parametrize("language", LANGUAGES)
def test_random_strings_tokenize_as_in_python(page, rules, language):
    """Strings drawn from letters, digits, punctuation, spaces and pieces of special cases."""
    pieces = list("aAzZäÖßéΩжй東0159.,;:!?-–—'’\"„“«»()[]{}<>/\\@#$€%&*+=_~^|…°§ \t\n\u00a0")
    pieces += ["http://", "www.", ".de", "'s", "n't", "z.B.", "usw.", "Dr.", ":)", "...", "--"]
    draw = random.Random(20260101)
    texts = ["".join(draw.choices(pieces, k=draw.randint(1, 12))) for _ in range(3000)]
    assert_same_tokens(page, rules[language], language, texts)


@pytest.mark.slow
def test_the_comparison_can_fail(page, rules):
    """Without its special cases the script cuts "z.B." and "don't" otherwise than spaCy does."""
    for language, text in [("de", "z.B."), ("en", "don't")]:
        crippled = dict(rules[language], special_cases={})
        [got] = page.evaluate(_TOKENIZE, [crippled, [text]])
        assert got != tokenize([text], language)[0]
        with pytest.raises(AssertionError, match="1 of 1 .* texts differ"):
            assert_same_tokens(page, crippled, language, [text])


@pytest.mark.slow
def test_unicode_classes_match_pythons(page):
    """\\d, \\w, \\s and their complements, converted, match the characters Python's match.

    Only characters assigned in Python's Unicode version are compared: the browser's \\p{...}
    classes follow its own, newer version, which also classifies characters added since."""
    patterns = [r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", r"[\d_]", r"."]
    # For each pattern, the code points it matches, as [first, last] ranges.
    ranges = page.evaluate(
        """(patterns) => patterns.map((pattern) => {
          const regex = new RegExp(`^${pattern}$`, "u");
          const ranges = [];
          for (let code = 0; code <= 0x10ffff; code++) {
            if (!regex.test(String.fromCodePoint(code))) continue;
            const last = ranges[ranges.length - 1];
            if (last && last[1] === code - 1) last[1] = code;
            else ranges.push([code, code]);
          }
          return ranges;
        })""",
        [to_javascript(pattern) for pattern in patterns],
    )
    assigned = [c for c in range(0x110000) if unicodedata.category(chr(c)) != "Cn"]
    for pattern, found in zip(patterns, ranges, strict=True):
        in_javascript = {c for first, last in found for c in range(first, last + 1)}
        regex = re.compile(pattern)
        differ = [c for c in assigned if bool(regex.fullmatch(chr(c))) != (c in in_javascript)]
        assert not differ, f"{pattern} differs on {[hex(c) for c in differ[:20]]}"
