"""Every claim of the prose about the paper agrees with the book's copy of the paper's facts.

A cross-cutting check. `annotated/paper.toml` is the paper's section map, Tables 1 to 3 and the
hyperparameters of sections 3, 5 and 6 as data (compared here with ../shared/PAPER.md, the sheet
the book is written from, where it is present). `benchmarks/paper_quoted.toml` ties the prose to it:

- a [[quote]] is a passage with {} for each figure and a paper key for each; the figure must be
  the key's value at the precision it is written;
- an [[absent]] is a passage saying the paper does not give something, with the keys where the
  paper would give it: each must be empty. Every such sentence of the chapters ("the paper gives
  no ...", "Table 2 gives no ...", "the paper does not say ...") must be tied, so a claim of
  absence is always checked against the tables;
- numerals of the paper (values annotated/paper.toml holds) in a sentence that cites a table or a
  section of the paper and that no quote ties are counted per chapter, and the count may only
  fall (UNTIED_AT_MOST): new claims about the paper come with their tie.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_numerals as numerals  # noqa: E402  (the prose's numerals, labels, precision)
import test_quoted_figures as quoted  # noqa: E402  (passages as patterns; paths into data)

ROOT = Path(__file__).resolve().parent.parent
PAPER_FILE = ROOT / "annotated" / "paper.toml"
TIES = ROOT / "benchmarks" / "paper_quoted.toml"
PAPER_SHEET = ROOT.parent / "shared" / "PAPER.md"

PAPER = tomllib.loads(PAPER_FILE.read_text(encoding="utf-8"))
TABLE = tomllib.loads(TIES.read_text(encoding="utf-8"))
QUOTES = TABLE.get("quote", [])
ABSENT = TABLE.get("absent", [])

# A sentence that cites the paper's tables or sections.
CITES = re.compile(r"\bTable [1-4]\b|\b(?:sections?|§)\s*\d|\bthe paper's\b", re.I)
# A sentence that says the paper (or one of its tables or sections) does not give something.
SUBJECT = r"(?:the paper|Table [1-4]|(?:the paper's )?section \d[\d.]*)"
DENIES = re.compile(
    rf"\b{SUBJECT}\s+(?:(?:gives|reports|says|states|lists|prints)\s+(?:no|nothing|neither)\b"
    rf"|(?:does not|doesn't|never)\s+(?:give|report|say|state|list|print)\b)",
    re.I,
)
# Untied numerals of the paper in sentences that cite it, per chapter: a debt to pay down by tying
# them in benchmarks/paper_quoted.toml, never to grow.
UNTIED_AT_MOST = {
    "annotated/ch00_preface.py": 2,
    "annotated/ch01_attention.py": 4,
    "annotated/ch02_model.py": 4,
    "annotated/ch03_training.py": 1,
    "annotated/ch04_copy_task.py": 0,
    "annotated/ch05_text.py": 0,
    "annotated/ch06_decoding.py": 3,
    "annotated/ch07_multi30k.py": 21,
    "annotated/ch08_wmt.py": 54,
    "annotated/ch09_table3.py": 37,
    "annotated/ch10_conclusion.py": 3,
    "annotated/ch11_lab_notebook.py": 2,
}


def paper_value(key: str):
    """A value of annotated/paper.toml by its path; KeyError where the paper gives none."""
    return quoted.walk(PAPER, key)


def paper_values() -> set[str]:
    """Every number annotated/paper.toml holds (but the section map's and the paper's own)."""
    found: set[str] = set()
    numerals._numbers_in({k: v for k, v in PAPER.items() if k not in ("sections", "paper")}, found)
    return found


def chapters() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "annotated").glob("ch[0-9][0-9]_*.py"))


def text_of(file: str, root: Path | None = None) -> str:
    return ((root or ROOT) / file).read_text(encoding="utf-8")


def pattern_of(says: str) -> re.Pattern:
    return quoted.words_pattern(says, numerals.FIGURE)


def quote_problems(quote: dict, root: Path | None = None) -> list[str]:
    raw = text_of(quote["in"], root)
    matches = list(pattern_of(quote["says"]).finditer(raw))
    if not matches:
        return [f"{quote['in']}: {quote['says']!r} is not there any more: update {TIES.name}"]
    problems = []
    for match in matches:
        for written, key in zip(match.groups(), quote["value"], strict=True):
            value = float(paper_value(key))
            if not numerals.agrees(written, value):
                line = quoted.line_of(raw, match.start())
                problems.append(
                    f"{quote['in']}:{line} says {written} where the paper's {key} is {value:g}"
                )
    return problems


def absent_problems(entry: dict, root: Path | None = None) -> list[str]:
    raw = text_of(entry["in"], root)
    if not pattern_of(entry["says"]).search(raw):
        return [f"{entry['in']}: {entry['says']!r} is not there any more: update {TIES.name}"]
    given = []
    for key in entry["keys"]:
        try:
            given.append(f"{key} = {paper_value(key)}")
        except (KeyError, IndexError):
            continue
    return (
        [f"{entry['in']}: {entry['says']!r}, but the paper gives {', '.join(given)}"]
        if given
        else []
    )


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of a prose view (a full stop and a space end one)."""
    spans, start = [], 0
    for match in re.finditer(r"[.!?](?=\s)|\n#?\s*\n", text):
        spans.append((start, match.end()))
        start = match.end()
    return spans + [(start, len(text))]


def tied_spans(file: str, raw: str, entries: list[dict]) -> list[tuple[int, int]]:
    return [
        m.span() for e in entries if e["in"] == file for m in pattern_of(e["says"]).finditer(raw)
    ]


def untied_denials(file: str, root: Path | None = None, absent: list[dict] = ABSENT) -> list[str]:
    raw = text_of(file, root)
    view = numerals.prose_view(file) if root is None else numerals.markdown_view(raw)
    tied = tied_spans(file, raw, absent)
    return [
        f"{file}:{quoted.line_of(view, m.start())}: "
        + " ".join(view[m.start() : m.start() + 90].replace("#", " ").split())
        for m in DENIES.finditer(view)
        if not any(a <= m.start() < b for a, b in tied)
    ]


def untied_paper_numerals(file: str) -> list[str]:
    raw = text_of(file)
    view = numerals.prose_view(file)
    values = paper_values()
    tied = tied_spans(file, raw, QUOTES + ABSENT) + [
        span
        for q in quoted.QUOTES
        if q.file == file
        for span in numerals.spans(quoted.words_pattern(q.says), raw, whole=True)
    ]
    citing = [(a, b) for a, b in sentences(view) if CITES.search(view[a:b])]
    found = []
    for numeral in numerals.numerals(file, view):
        if numerals.is_label(numeral, view) or numerals.plain(numeral.written) not in values:
            continue
        if not any(a <= numeral.offset < b for a, b in citing):
            continue
        if any(a <= numeral.offset < b for a, b in tied):
            continue
        found.append(f"{file}:{numeral.line}: {numeral.written}   …{numeral.context}…")
    return found


# ---------------------------------------------------------------- the ties


@pytest.mark.parametrize("quote", QUOTES, ids=lambda q: f"{q['in']}:{q['says'][:40]}")
def test_the_prose_quotes_the_paper_right(quote):
    problems = quote_problems(quote)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("entry", ABSENT, ids=lambda e: f"{e['in']}:{e['says'][:40]}")
def test_what_the_prose_says_the_paper_lacks_it_lacks(entry):
    assert entry.get("why"), f"{entry['says']!r}: say why in `why`"
    problems = absent_problems(entry)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("file", chapters())
def test_every_claim_that_the_paper_lacks_something_is_tied(file):
    left = untied_denials(file)
    assert not left, (
        "sentences saying the paper does not give something, not tied to annotated/paper.toml:\n  "
        + "\n  ".join(left)
        + f"\nCheck each against the paper; if it holds, tie it in {TIES.name} as an [[absent]] "
        "with the keys where the paper would give it."
    )


@pytest.mark.parametrize("file", chapters())
def test_untied_numerals_of_the_paper_do_not_grow(file):
    left = untied_paper_numerals(file)
    allowed = UNTIED_AT_MOST.get(file, 0)
    assert len(left) <= allowed, (
        f"{len(left)} numerals of the paper in sentences citing it are not tied (at most "
        f"{allowed}):\n  " + "\n  ".join(left) + f"\nTie the new ones in {TIES.name}."
    )


# ---------------------------------------------------------------- the copy against the sheet


def sheet_table(sheet: str, title: str) -> list[list[str]]:
    """The rows (cells stripped) of the markdown table under `## <title>` in PAPER.md."""
    block = sheet.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def number(cell: str) -> float | None:
    cell = cell.replace(",", "")
    if cell.endswith("K"):
        return float(cell[:-1]) * 1000
    if cell.endswith("M"):
        return float(cell[:-1])
    return float(cell) if cell else None


needs_sheet = pytest.mark.skipif(
    not PAPER_SHEET.is_file(), reason="../shared/PAPER.md is not beside the book"
)


@needs_sheet
def test_table_2_is_the_sheets():
    rows = sheet_table(PAPER_SHEET.read_text(encoding="utf-8"), "Table 2")
    assert [r[0] for r in rows] == [r["model"] for r in PAPER["table_2"]]
    for cells, row in zip(rows, PAPER["table_2"], strict=True):
        for cell, key in zip(
            cells[1:5], ("bleu_en_de", "bleu_en_fr", "cost_en_de", "cost_en_fr"), strict=True
        ):
            if key == "cost_en_fr" and "cost" in row:  # one cost spanning both columns
                assert row[key] == row["cost"] == number(cells[3]), row["model"]
                continue
            assert row.get(key) == number(cell), f"{row['model']} {key}: {cell!r}"


def test_chapter_8s_table_2_is_the_papers():
    """Chapter 8 prints Table 2 with the paper's own digits; every cell is paper.toml's value, and
    each Transformer's one cost stands under both tasks."""
    from annotated.ch08_wmt import table_2

    table = table_2()
    assert list(table["model"]) == [row["model"] for row in PAPER["table_2"]]
    columns = {"BLEU EN-DE": "bleu_en_de", "BLEU EN-FR": "bleu_en_fr"}
    columns |= {"FLOPs EN-DE": "cost_en_de", "FLOPs EN-FR": "cost_en_fr"}
    for (_, cells), row in zip(table.iterrows(), PAPER["table_2"], strict=True):
        for column, key in columns.items():
            assert (float(cells[column]) if cells[column] else None) == row.get(key), (
                f"chapter 8's Table 2, {row['model']}, {column}: {cells[column]!r}"
            )


@needs_sheet
def test_table_3_is_the_sheets():
    rows = sheet_table(PAPER_SHEET.read_text(encoding="utf-8"), "Table 3")
    columns = ["N", "d_model", "d_ff", "h", "d_k", "d_v", "p_drop", "eps_ls", "steps"]
    assert len(rows) == len(PAPER["table_3"])
    for cells, row in zip(rows, PAPER["table_3"], strict=True):
        assert row["row"] == cells[0].strip("()"), cells
        if row["row"] != "E":
            for column, cell in zip(columns, cells[1:10], strict=True):
                assert row.get(column) == number(cell), f"{cells[0]} {column}: {cell!r}"
        for key, cell in zip(("ppl", "bleu", "params_m"), cells[10:13], strict=True):
            assert row.get(key) == number(cell), f"{cells[0]} {key}: {cell!r}"


@needs_sheet
def test_table_1_and_the_sections_are_the_sheets():
    sheet = PAPER_SHEET.read_text(encoding="utf-8")
    rows = sheet_table(sheet, "Table 1")
    assert [
        [r["layer"], r["complexity"], r["sequential"], r["path"]] for r in PAPER["table_1"]
    ] == [[c.replace("O(n^2 d)", "O(n^2 d)") for c in row] for row in rows]
    listed = re.findall(r"^\| (\d+(?:\.\d+)*) ", sheet.split("## Section map", 1)[1], re.M)
    assert set(listed) <= set(PAPER["sections"]), set(listed) - set(PAPER["sections"])


# Each hyperparameter of the copy, found in the sheet's words (its section map).
SHEET_WORDS = [
    ("model / N", r"N=(\d+) identical layers"),
    ("model / d_model", r"d_model=(\d+)"),
    ("model / h", r"h=(\d+) heads"),
    ("model / d_k", r"d_k=d_v=d_model/h=(\d+)"),
    ("model / d_ff", r"d_ff=(\d+)"),
    ("data / en_de_vocab", r"vocabulary of about (\d+) tokens"),
    ("data / en_fr_sentences", r"En-Fr (\d+)M sentences"),
    ("data / en_fr_vocab", r"(\d+) word-piece"),
    ("data / batch_source_tokens", r"about (\d+) source"),
    ("hardware / gpus", r"(\d+) NVIDIA P100"),
    ("hardware / base_seconds_per_step", r"base: ([\d.]+) s/step"),
    ("hardware / base_steps", r"([\d,]+) steps \(12 hours\)"),
    ("hardware / base_hours", r"steps \((\d+) hours\)"),
    ("hardware / big_seconds_per_step", r"big: ([\d.]+) s/step"),
    ("hardware / big_steps", r"([\d,]+) steps \(3.5 days\)"),
    ("hardware / big_days", r"\(([\d.]+) days\)"),
    ("optimizer / beta1", r"beta1=([\d.]+)"),
    ("optimizer / beta2", r"beta2=([\d.]+)"),
    ("optimizer / epsilon", r"epsilon=([\de.-]+)"),
    ("optimizer / warmup_steps", r"warmup_steps=(\d+)"),
    ("regularization / p_drop", r"P_drop=([\d.]+) \(base\)"),
    ("regularization / eps_ls", r"eps_ls=([\d.]+)"),
    ("translation / big_en_de_bleu", r"big En-De ([\d.]+) BLEU"),
    ("translation / big_en_fr_bleu", r"big En-Fr ([\d.]+)"),
    ("translation / big_en_fr_bleu_first_arxiv", r"first arXiv versions: ([\d.]+)"),
    ("translation / base_average_last", r"average of the last (\d+) checkpoints"),
    ("translation / checkpoint_minutes", r"every (\d+) minutes"),
    ("translation / big_average_last", r"big: last (\d+)"),
    ("translation / beam", r"beam size (\d+)"),
    ("translation / alpha", r"alpha=([\d.]+)"),
    ("translation / max_output_extra", r"input length \+ (\d+)"),
    ("parsing / layers", r"(\d+)-layer model"),
    ("parsing / wsj_only_f1", r"WSJ only ([\d.]+) F1"),
    ("parsing / semi_supervised_f1", r"semi-supervised ([\d.]+) F1"),
]


@needs_sheet
@pytest.mark.parametrize(("key", "words"), SHEET_WORDS, ids=[k for k, _ in SHEET_WORDS])
def test_the_hyperparameters_are_the_sheets(key, words):
    found = re.search(words, PAPER_SHEET.read_text(encoding="utf-8"))
    assert found, f"PAPER.md no longer says {words!r}"
    written = float(found.group(1).replace(",", ""))
    value = paper_value(key)
    scale = 1_000_000 if key == "data / en_fr_sentences" else 1
    assert value == written * scale, f"annotated/paper.toml {key} = {value}; PAPER.md: {written}"


# ---------------------------------------------------------------- the test can fail


def _planted(tmp_path: Path, file: str, old: str, new: str) -> Path:
    target = tmp_path / file
    target.parent.mkdir(parents=True, exist_ok=True)
    text = text_of(file)
    assert old in text, old
    target.write_text(text.replace(old, new), encoding="utf-8")
    return tmp_path


def test_a_wrong_numeral_about_the_paper_fails(tmp_path):
    (quote,) = [q for q in QUOTES if "as ConvS2S ({} against {} FLOPs)" in q["says"]]
    assert quote_problems(quote) == []
    root = _planted(
        tmp_path, quote["in"], "(3.3e18 against 9.6e18 FLOPs)", "(3.3e18 against 9.2e18 FLOPs)"
    )
    (problem,) = quote_problems(quote, root)
    assert (
        "says 9.2e18 where the paper's table_2 / model=ConvS2S / cost_en_de is 9.6e+18" in problem
    )


FINDING_14 = (
    "# Only the big model (41.8) passes them, and the paper gives no training cost for either\n"
    "# Transformer on that task.\n"
)


def test_the_claim_of_no_en_fr_cost_fails(tmp_path):
    """Issue 62's finding 14: chapter 10 said the paper gives no English→French training cost for
    either Transformer; Table 2 gives one cost per model, for both tasks."""
    file = "annotated/ch10_conclusion.py"
    (tmp_path / "annotated").mkdir()
    (tmp_path / file).write_text("# %% [markdown]\n" + FINDING_14, encoding="utf-8")
    (left,) = untied_denials(file, tmp_path)
    assert "the paper gives no training cost" in left
    tie = {
        "in": file,
        "says": "the paper gives no training cost for either Transformer on that task",
        "keys": [
            "table_2 / model=Transformer (base) / cost_en_fr",
            "table_2 / model=Transformer (big) / cost_en_fr",
        ],
    }
    assert untied_denials(file, tmp_path, [tie]) == []
    (problem,) = absent_problems(tie, tmp_path)
    assert (
        "but the paper gives table_2 / model=Transformer (base) / cost_en_fr = 3.3e+18" in problem
    )
