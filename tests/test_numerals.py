"""Every numeral in the book's prose is placed: nothing is a number a reader must take on trust.

The prose is every chapter's markdown, the README, and the site's landing and course pages. Each
numeral in it (a figure like 40.39, 3,040, −5.16, 2.5e-3 or 10¹⁸) must be one of these, or the
test fails naming the file and line:

- **tied**: a figure of `benchmarks/quoted.toml`, checked against a record or a saved output by
  tests/test_quoted_figures.py;
- **computed**: a figure of `benchmarks/numerals.toml` [[computed]], an expression of the book's
  code or of arithmetic, checked here at the precision the prose prints;
- **illustrative**: inside a passage that `benchmarks/numerals.toml` [[illustrative]] names, with
  why (an example, a hypothetical, or a log of runs made before records were kept);
- **a fact of the paper**: the number is one that `../shared/PAPER.md` states (copied into
  `PAPER_NUMBERS` below, which a test compares with that sheet where it is present);
- **a setting**: the value of a field of the book's configurations (`settings()`);
- **printed**: a number the chapter's own saved notebook prints (for the README and the site
  pages, any chapter's), in text, as written;
- **a label**: a chapter, section, exercise, table, equation, run or step named by number, a
  list's or heading's numbering, a year, a version; or a count of ten or less;
- **in code or mathematics**: inside `code`, a code block, $math$, a link's target or a URL,
  which are read as code and formulas, not as claims.

A description of one particular output (a head, a beam tree) is best printed by the cell itself
and quoted, so that retraining cannot leave the prose behind; chapter 7 does so.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_quoted_figures as quoted  # noqa: E402  (the quotes, their pattern and precision)

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "benchmarks" / "numerals.toml"
PAPER_SHEET = ROOT.parent / "shared" / "PAPER.md"

# 40.39, 3,040, −5.16, 2.5e-3, 10¹⁸; not the 3 of "d_3", "v3", "1/3" or "2.13.0"'s parts.
NUMERAL = re.compile(
    r"(?<![\w.,\-−/])[-−]?"
    r"(?:(?:\d[\d.]*\s*×\s*)?10[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+|\d[\d,]*(?:\.\d+)*(?:e[-+−]?\d+)?)"
    r"(?![\w]|\.\d|,\d)"
)
SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
# A {} of numerals.toml: a number as quoted.toml's, or in e-notation (2.0e-3), or a power (10¹⁸).
FIGURE = r"[-−]?(?:10[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+|\d[\d,]*(?:\.\d+)?(?:e[-+−]?\d+)?)"
# Passages read as code or formulas: code blocks, `code`, $$math$$, $math$, link targets, URLs,
# HTML tags and comments, dates and times.
NOT_PROSE = [
    r"```.*?```",
    r"`[^`]*`",
    r"\$\$.*?\$\$",
    r"\$[^$\n]+(?:\n#?[^$\n]*)?\$",
    r"\]\([^)]*\)",
    r"https?://\S+",
    r"<!--.*?-->",
    r"<[^>\n]*>",
    r"\d{4}-\d\d-\d\d(?: \d\d:\d\d)?",
]
# A number that names something: chapter 7, sections 3.1 and 3.2, exercise 7.3, Table 3, run 9.
LABEL_WORDS = (
    r"chapters?|sections?|§|exercises?|tables?|figures?|equations?|footnotes?|issues?|runs?|"
    r"rows?|lectures?|parts?|cells?|lines?|appendix|steps?|epochs?|layers?|heads?|pilots?|"
    r"positions?|capability|"
    r"python|pytorch|torch|cuda|sacrebleu|version|ch\.?"
)
LABEL = re.compile(rf"(?:{LABEL_WORDS})\s+(?:[\d.,]+\s*(?:,|and|or|to|–|-)\s*)*$", re.I)

# The numbers PAPER.md states (the sheet of the paper's facts the book is written from), as
# plain numbers without thousands commas. The sheet lives outside the repository, so its numbers
# are kept here; test_the_paper_numbers_are_the_sheets compares the two where the sheet is present.
_PAPER = """
    0 0.0 0.1 0.2 0.3 0.4 0.6 0.9 0.98 1 1.0 1.0e20 1.1e21 1.2e20 1.2e21 1.4e20 1.5e20 1.5
    1.8e20 1e-9 2 2.0e19 2.3e19 3 3.1 3.2 3.2.1 3.2.2 3.2.3 3.3 3.3e18 3.4 3.5 4 4.33 4.5 4.66
    4.67 4.75 4.88 4.91 4.92 4.95 5 5.00 5.01 5.1 5.12 5.16 5.19 5.2 5.29 5.3 5.4 5.47 5.75 5.77
    6 6.1 6.11 6.2 6.3 7.7e19 8 8.0e20 9.6e18 12 16 20 23.7 23.75 24.5 24.6 24.9 25.1 25.16
    25.3 25.4 25.5 25.7 25.8 26.0 26.03 26.2 26.30 26.36 26.4 27.3 28 28.4 32 32000 36 37000
    38.1 39.2 39.92 40.4 40.46 40.56 41.0 41.16 41.29 41.8 50 53 58 60 64 65 80 90 91.3 92.7
    100 100000 128 168 213 256 300000 512 1024 1706.03762 2014 2017 2048 4000 4096 10000
    25000
"""
PAPER_NUMBERS = frozenset(_PAPER.split())


@dataclass(frozen=True)
class Entry:
    """A row of numerals.toml: a passage (`says`, {} for a figure; or a whole `section`)."""

    kind: str  # "computed", "fact" or "illustrative"
    file: str
    says: str = ""
    section: str = ""
    values: tuple[str, ...] = ()
    why: str = ""

    @property
    def label(self) -> str:
        return f"{self.file}: {self.says or self.section!r}"


def load_registry(path: Path = REGISTRY) -> list[Entry]:
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    entries = []
    for kind in ("computed", "fact", "illustrative"):
        for row in table.get(kind, []):
            values = row.get("value", [])
            values = tuple(values if isinstance(values, list) else [values])
            entry = Entry(
                kind,
                row["in"],
                row.get("says", ""),
                row.get("section", ""),
                values,
                row.get("why", ""),
            )
            if kind == "computed" and entry.says.count("{}") != len(values):
                raise ValueError(f"{entry.label}: one value for each {{}} in `says`")
            if kind in ("fact", "illustrative") and not entry.why:
                raise ValueError(f"{entry.label}: say where it comes from or why (`why`)")
            if bool(entry.says) == bool(entry.section):
                raise ValueError(f"{entry.label}: give `says` or `section`, one of them")
            entries.append(entry)
    return entries


def prose_files() -> list[str]:
    chapters = sorted((ROOT / "annotated").glob("ch[0-9][0-9]_*.py"))
    return [str(c.relative_to(ROOT)) for c in chapters] + [
        "README.md",
        "CONTRIBUTING.md",
        "benchmarks/README.md",
        "data/README.md",
        "site/course.md",
        "site/index.md",
    ]


def prose_view(file: str) -> str:
    """The file's text with everything but its prose blanked (a chapter's code cells), so that
    offsets and line numbers stay the file's own."""
    raw = (ROOT / file).read_text(encoding="utf-8")
    return markdown_view(raw) if file.endswith(".py") else raw


def markdown_view(raw: str) -> str:
    """A chapter's text (py:percent) with its code cells blanked, offsets kept."""
    lines, markdown = [], False
    for line in raw.splitlines(keepends=True):
        if line.startswith("# %%"):
            markdown = "[markdown]" in line
            lines.append(re.sub(r"[^\n]", " ", line))
        else:
            lines.append(line if markdown else re.sub(r"[^\n]", " ", line))
    return "".join(lines)


def plain(numeral: str) -> str:
    """A numeral as a plain number: no sign, no thousands commas; 3.3 × 10¹⁸ as 3.3e18."""
    number = numeral.lstrip("-−").replace(",", "")
    if "10" in number and number.translate(SUPERSCRIPTS) != number:
        mantissa, _, power = number.rpartition("10")
        mantissa = mantissa.replace("×", "").strip() or "1"
        return f"{mantissa}e{power.translate(SUPERSCRIPTS)}"
    return number


def printed_numbers(notebook: Path) -> set[str]:
    """Every number a saved notebook prints in text (streams and plain-text results)."""
    texts = quoted.saved_text_outputs(nbformat.read(notebook, as_version=4))
    return {plain(n) for n in re.findall(r"[-−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?", texts)}


def _numbers_in(value, found: set[str]) -> None:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            _numbers_in(getattr(value, field.name), found)
    elif isinstance(value, dict):
        for item in value.values():
            _numbers_in(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _numbers_in(item, found)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        found.update({f"{value:g}", str(value), f"{value:.1e}".replace("e-0", "e-")})


def settings() -> set[str]:
    """Every number the book's configurations hold: the models', the training runs' and the
    decoders' settings of every profile, as plain numbers."""
    ch04 = importlib.import_module("annotated.ch04_copy_task")
    ch07 = importlib.import_module("annotated.ch07_multi30k")
    ch08 = importlib.import_module("annotated.ch08_wmt")
    ch09 = importlib.import_module("annotated.ch09_table3")
    found: set[str] = set()
    for value in (ch04.COPY_SETUP, ch07.PROFILES, ch08.WMT_PROFILES, ch09.BASE):
        _numbers_in(value, found)
    for variant in ch09.VARIANTS:
        _numbers_in(variant.changes, found)
    return found


def spans(entry_pattern: re.Pattern, text: str, whole: bool) -> list[tuple[int, int]]:
    """Where a passage stands in a text: the whole match, or each {} figure."""
    found = []
    for match in entry_pattern.finditer(text):
        if whole:
            found.append((match.start(), match.end()))
        else:
            found += [(match.start(g), match.end(g)) for g in range(1, len(match.groups()) + 1)]
    return found


def section_span(text: str, heading: str) -> tuple[int, int]:
    start = text.find(heading)
    if start < 0:
        raise AssertionError(f"no heading {heading!r}: update benchmarks/numerals.toml")
    level = re.match(r"#* *(#+)", heading).group(1)  # a chapter's "# ## 2." is a level-2 heading
    after = re.search(rf"\n# {level} |\n# #{{1,{len(level) - 1}}} ", text[start + 1 :])
    return start, (start + 1 + after.start()) if after else len(text)


@dataclass
class Numeral:
    file: str
    line: int
    written: str
    offset: int
    context: str


def numerals(file: str, text: str) -> list[Numeral]:
    hidden = [m.span() for pattern in NOT_PROSE for m in re.finditer(pattern, text, re.S)]
    found = []
    for match in NUMERAL.finditer(text):
        if any(a <= match.start() < b for a, b in hidden):
            continue
        context = text[max(0, match.start() - 50) : match.end() + 30]
        found.append(
            Numeral(
                file,
                quoted.line_of(text, match.start()),
                match.group(),
                match.start(),
                re.sub(r"\s*\n#?\s*", " ", context),
            )
        )
    return found


def is_label(numeral: Numeral, text: str) -> bool:
    before = text[max(0, numeral.offset - 60) : numeral.offset]
    value = plain(numeral.written)
    if LABEL.search(before):
        return True
    if re.search(r"\*\*$", before) and re.fullmatch(r"\d+\.\d+|[A-Z]\.\d+", value):
        return True  # an exercise's number: **7.3 Modify.**
    if re.search(r"(?:^|\n)#?\s*(?:#+\s*)?$", before) and text[numeral.offset :].startswith(
        numeral.written + "."
    ):
        return True  # a heading's or a list's numbering
    if re.search(r"(?:^|\n)#?\s*\|\s*$", before) and re.fullmatch(r"\d+", value):
        return True  # a table's first column: chapter 7, run 9
    if re.fullmatch(r"(?:19[5-9]\d|20[0-3]\d)", value):
        return True  # a year
    if re.fullmatch(r"\d+\.\d+\.\d+", value):
        return True  # a version
    return bool(re.fullmatch(r"\d+", value)) and int(value) <= 10


class Places:
    """What places the numerals of one file."""

    def __init__(self, registry: list[Entry], quotes: list[quoted.Quote], known: set[str]):
        self.registry, self.quotes, self.known = registry, quotes, known

    def placed_spans(self, file: str, raw: str) -> list[tuple[int, int]]:
        found = []
        for quote in self.quotes:
            if quote.file == file:
                found += spans(quoted.words_pattern(quote.says), raw, whole=False)
        for entry in self.registry:
            if entry.file != file:
                continue
            if entry.section:
                found.append(section_span(raw, entry.section))
            else:
                found += spans(quoted.words_pattern(entry.says, FIGURE), raw, whole=True)
        return found

    def unplaced(self, file: str) -> list[Numeral]:
        raw = (ROOT / file).read_text(encoding="utf-8")
        text = prose_view(file)
        placed = self.placed_spans(file, raw)
        printed = PRINTED_UP_TO(Path(file).stem if file.startswith("annotated/") else None)
        left = []
        for numeral in numerals(file, text):
            if any(a <= numeral.offset < b for a, b in placed):
                continue
            if is_label(numeral, text):
                continue
            value = plain(numeral.written)
            if value in PAPER_NUMBERS or value in self.known or value in printed:
                continue
            left.append(numeral)
        return left


_CACHE: dict = {}


def PRINTED_UP_TO(chapter: str | None) -> set[str]:  # noqa: N802  (constants, computed once)
    """The numbers printed by a chapter's notebook and the chapters before it (a chapter may
    recall an earlier one's output); for the README and the site, by every chapter's."""
    if "printed" not in _CACHE:
        _CACHE["printed"] = {
            notebook.stem: printed_numbers(notebook)
            for notebook in sorted((ROOT / "notebooks").glob("ch*.ipynb"))
        }
    found: set[str] = set()
    for stem, numbers in _CACHE["printed"].items():
        if chapter is None or stem <= chapter:
            found |= numbers
    return found


REGISTRY_ENTRIES = load_registry()


@pytest.fixture(scope="module")
def places() -> Places:
    return Places(REGISTRY_ENTRIES, quoted.QUOTES, settings() | set(PAPER_NUMBERS))


@pytest.mark.parametrize("file", prose_files())
def test_every_numeral_in_the_prose_is_placed(file, places):
    left = places.unplaced(file)
    report = "\n".join(f"  {n.file}:{n.line}: {n.written}   …{n.context}…" for n in left[:40])
    assert not left, (
        f"{len(left)} numerals of {file} are neither tied, computed, marked illustrative, the "
        f"paper's, a setting, printed by the notebook nor a label:\n{report}\nTie each to its "
        "source in benchmarks/quoted.toml, compute it or mark it in benchmarks/numerals.toml, or "
        "take it out of the prose."
    )


def book_module(name: str):
    """A module of the book by its name ("ch07_multi30k"; "" for the package itself)."""
    return importlib.import_module(f"annotated.{name}" if name else "annotated")


def agrees(written: str, value: float) -> bool:
    """Whether a figure as written (40.39, 2.0e-3, 10¹⁸) is the value at the digits it shows."""
    number = plain(written)
    if "e" in number and number.translate(SUPERSCRIPTS) != written.lstrip("-−"):
        mantissa, _, power = number.partition("e")
        if not mantissa.replace(".", "").isdigit():
            return False
        if written.strip().startswith("10"):  # a bare power: the order of magnitude
            return abs(math.log10(abs(value)) - int(power)) < 0.5
    if "e" in number:
        mantissa, _, power = number.partition("e")
        decimals = len(mantissa.partition(".")[2])
        tolerance = 0.5 * 10 ** (int(power.replace("−", "-")) - decimals)
        return abs(float(mantissa) * 10 ** int(power.replace("−", "-")) - value) <= tolerance * (
            1 + 1e-9
        )
    return quoted.agrees(written, value)


@pytest.mark.parametrize(
    "entry",
    [e for e in REGISTRY_ENTRIES if e.kind == "computed"],
    ids=lambda e: f"{e.file}:{e.says[:40]}",
)
def test_computed_figures_agree_with_their_expression(entry):
    pattern = quoted.words_pattern(entry.says, FIGURE)
    raw = (ROOT / entry.file).read_text(encoding="utf-8")
    matches = list(pattern.finditer(raw))
    assert matches, (
        f"{entry.label}: these words are not in {entry.file} any more; update "
        "benchmarks/numerals.toml"
    )
    names = {
        "book": book_module,
        "module": importlib.import_module,
        "math": math,
        "ROOT": ROOT,
        "round": round,
        "min": min,
        "max": max,
        "sum": sum,
    }
    for match in matches:
        for written, expression in zip(match.groups(), entry.values, strict=True):
            value = float(eval(expression, {"__builtins__": {}}, names))
            assert agrees(written, value), (
                f"{entry.file}:{quoted.line_of(raw, match.start())} says {written} where "
                f"{expression} is {value:g}: update the prose or the entry"
            )


def test_every_registry_entry_still_stands_in_its_file():
    for entry in REGISTRY_ENTRIES:
        raw = (ROOT / entry.file).read_text(encoding="utf-8")
        if entry.section:
            section_span(raw, entry.section)
        else:
            assert quoted.words_pattern(entry.says, FIGURE).search(raw), (
                f"{entry.label}: not in {entry.file} any more; update benchmarks/numerals.toml"
            )


@pytest.mark.skipif(not PAPER_SHEET.is_file(), reason="../shared/PAPER.md is not beside the book")
def test_the_paper_numbers_are_the_sheets():
    sheet = {
        plain(n) for n in re.findall(r"\d[\d,]*(?:\.\d+)*(?:e-?\d+)?", PAPER_SHEET.read_text())
    }
    missing = PAPER_NUMBERS - sheet - {"1706.03762"}  # the arXiv number, written 1706.03762
    assert not missing, f"not numbers of PAPER.md: {sorted(missing)}"


# ---------------------------------------------------------------- the test can fail


def test_an_untied_figure_fails_and_names_its_line(tmp_path, monkeypatch):
    (tmp_path / "README.md").write_text(
        "Intro.\n\nSee chapter 7 and section 3.2; in 2017 the base model had 65M parameters.\n"
        "Our run scored 41.37 BLEU. `make test` takes 12.5 s. The code:\n```\nx = 99.9\n```\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setitem(_CACHE, "printed", {})
    left = Places([], [], set()).unplaced("README.md")
    assert [(n.line, n.written) for n in left] == [(4, "41.37"), (4, "12.5")]
    entry = Entry(
        "illustrative",
        "README.md",
        says="scored {} BLEU. `make test` takes {} s.",
        why="an example",
    )
    assert Places([entry], [], set()).unplaced("README.md") == []
