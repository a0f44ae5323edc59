"""A cross-cutting check of the chapters' prose: every cross-reference resolves to what it names.

- "the cell below", "the next cell", "the code cell below" (and "the cell above", "the previous
  cell") must stand in the markdown cell just before (after) a code cell; where the sentence names
  something in `code` or "quotes", the code cell's source or saved outputs must show one of them.
- "section N" in chapter K names a numbered heading of chapter K (`## N.`); "chapter M, section N"
  (or "chapter M's section N", "the lab notebook, section N") one of chapter M. A chapter without
  numbered headings (the preface, the conclusion) and "the paper's section N" cite the paper, and a
  dotted number (5.1, 3.2.2) is always the paper's: those must be sections of the paper
  (annotated/paper.toml's section map).
- A reference that says what the section holds ("the analysis (sections 3 and 4)") is tied in
  DESCRIBED below to the sections it must name, so that a renumbering or a wrong number fails.

Chapters are read as the book reads them: annotated/chNN_*.py as jupytext py:percent (tools/book.py).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
from tools import book
from tools.chapters import chapter_sources

PAPER = tomllib.loads((ROOT / "annotated" / "paper.toml").read_text(encoding="utf-8"))
PAPER_SECTIONS = set(PAPER["sections"])

CELL_BELOW = re.compile(r"\b(?:the (?:code )?cell below|the next cell)\b", re.I)
CELL_ABOVE = re.compile(r"\b(?:the (?:code )?cell above|the previous cell)\b", re.I)
NUMBER = r"\d+(?:\.\d+)*"
WHOLE, DOTTED, JOIN = r"\d+(?!\.?\d)", r"\d+(?:\.\d+)+", r"\s*(?:,|and|or|to|–|-)\s*"
# "sections 1, 2 and 4" or "sections 5.2–5.4"; not the 39.7 of "sections 2 to 5 and 39.7 in ...".
LIST = rf"(?:{WHOLE}(?:{JOIN}{WHOLE})*|{DOTTED}(?:{JOIN}{DOTTED})*)"
NAMED_CHAPTER = r"chapter (\d+)|the lab notebook|appendix A"
REFERENCE = re.compile(
    rf"(?:(?P<chapter>{NAMED_CHAPTER})(?:'s|,)?\s+)?(?P<paper>(?:the )?paper's\s+)?"
    rf"\b(?:sections?|§)\s*(?P<list>{LIST})",
    re.I,
)
HIDDEN = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]+\$", re.S)

# References that say what the section holds: (chapter, the words before the reference, the
# sections they must name).
DESCRIBED = [
    ("ch07_multi30k", "can go straight to the analysis", ("3", "4")),
    ("ch08_wmt", "Rare names come apart into frequent pieces", ("4",)),
]


def plain(text: str) -> str:
    """Markdown with code, fenced code and math blanked (offsets kept), lines joined by spaces."""
    text = HIDDEN.sub(lambda m: " " * len(m.group()), text)
    return text.replace("\n", " ")


def numbered_sections(notebook: nbformat.NotebookNode) -> set[str]:
    found = set()
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            found |= set(re.findall(r"^## (\d+)\.", cell.source, re.M))
    return found


def sentence_after(text: str, start: int) -> str:
    end = re.search(r"[.!?](?:\s|$)", text[start:])
    return text[start : start + end.start() if end else len(text)]


def named_things(sentence: str) -> list[str]:
    """What a sentence names in `code` or "quotes"."""
    return re.findall(r"`([^`\n]+)`", sentence) + re.findall(r"[\"“]([^\"”\n]+)[\"”]", sentence)


def saved_outputs(stem: str, source: str) -> str:
    """The saved outputs, as text, of the chapter notebook's code cell with this source."""
    path = ROOT / "notebooks" / f"{stem}.ipynb"
    if not path.is_file():
        return ""
    texts = []
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code" and cell.source.strip() == source.strip():
            for output in cell.get("outputs", []):
                texts.append(output.get("text", "") or output.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


def cell_reference_problems(stem: str, notebook: nbformat.NotebookNode) -> list[str]:
    problems = []
    cells = notebook.cells
    for index, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        for pattern, step in ((CELL_BELOW, 1), (CELL_ABOVE, -1)):
            for match in pattern.finditer(cell.source):
                words = " ".join(sentence_after(cell.source, match.start()).split())
                neighbour = index + step
                if not 0 <= neighbour < len(cells) or cells[neighbour].cell_type != "code":
                    problems.append(
                        f"{stem}: '{words}': the cell {'after' if step > 0 else 'before'} this "
                        "markdown cell is not a code cell"
                    )
                    continue
                code = cells[neighbour].source
                shown = code + "\n" + saved_outputs(stem, code)
                things = named_things(words)
                if things and not any(thing in shown for thing in things):
                    problems.append(
                        f"{stem}: '{words}': the code cell there shows none of {things}"
                    )
    return problems


def numbers_of(listing: str) -> list[str]:
    return re.findall(NUMBER, listing)


def section_reference_problems(
    stem: str, notebook: nbformat.NotebookNode, sections_of: dict[str, set[str]]
) -> list[str]:
    own = sections_of[stem]
    problems = []
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        text = plain(cell.source)
        for match in REFERENCE.finditer(text):
            context = " ".join(text[max(0, match.start() - 40) : match.end() + 10].split())
            named = match.group("chapter")
            if named:
                number = re.search(r"\d+", named)
                target = f"chapter {number.group()}" if number else "the lab notebook"
                prefix = f"ch{int(number.group()):02d}_" if number else "ch11_"
                sections = next((s for k, s in sections_of.items() if k.startswith(prefix)), set())
            elif match.group("paper") or not own:
                target, sections = "the paper", PAPER_SECTIONS
            else:
                target, sections = stem, own
            for number in numbers_of(match.group("list")):
                if "." in number and not named:
                    known = PAPER_SECTIONS  # a dotted number: the paper's
                    where = "the paper"
                else:
                    known, where = sections, target
                if number not in known:
                    problems.append(f"{stem}: '…{context}…': {where} has no section {number}")
    return problems


def described_problems(stem: str, notebook: nbformat.NotebookNode) -> list[str]:
    problems = []
    text = " ".join(plain(c.source) for c in notebook.cells if c.cell_type == "markdown")
    text = " ".join(text.split())
    for chapter, words, expected in DESCRIBED:
        if chapter != stem:
            continue
        pattern = (
            re.escape(words).replace(r"\ ", r"\s+") + r"\s*\(?\s*(?:sections?|§)\s*(" + LIST + ")"
        )
        found = re.search(pattern, text)
        if not found:
            problems.append(f"{stem}: no reference after '{words}' any more: update DESCRIBED")
        elif tuple(numbers_of(found.group(1))) != expected:
            problems.append(
                f"{stem}: '{words}' names section(s) {found.group(1)}, where what it describes "
                f"is section(s) {' and '.join(expected)}"
            )
    return problems


@pytest.fixture(scope="module")
def notebooks() -> dict[str, nbformat.NotebookNode]:
    return {source.stem: book.read_chapter(source) for source in chapter_sources()}


@pytest.mark.parametrize("stem", [s.stem for s in chapter_sources()])
def test_cross_references_resolve(stem, notebooks):
    sections_of = {k: numbered_sections(nb) for k, nb in notebooks.items()}
    notebook = notebooks[stem]
    problems = (
        cell_reference_problems(stem, notebook)
        + section_reference_problems(stem, notebook, sections_of)
        + described_problems(stem, notebook)
    )
    assert not problems, "cross-references that do not resolve:\n  " + "\n  ".join(problems)


# ---------------------------------------------------------------- the test can fail


def _notebook(*cells: tuple[str, str]) -> nbformat.NotebookNode:
    make = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    return nbformat.v4.new_notebook(cells=[make[kind](source) for kind, source in cells])


def test_a_cell_below_that_is_not_code_fails():
    good = _notebook(
        ("markdown", 'The cell below splits "Tymoshenko".'), ("code", 'split("Tymoshenko")')
    )
    assert cell_reference_problems("x", good) == []
    far = _notebook(
        ("markdown", 'The cell below splits "Tymoshenko".'),
        ("markdown", "## 3. Next"),
        ("code", 'split("Tymoshenko")'),
    )
    assert "is not a code cell" in cell_reference_problems("x", far)[0]
    other = _notebook(("markdown", 'The cell below splits "Tymoshenko".'), ("code", "train()"))
    assert "shows none of" in cell_reference_problems("x", other)[0]


def test_a_section_that_does_not_exist_fails():
    chapter = _notebook(
        ("markdown", "## 1. One\n\nAs section 2 says, and section 5.1 of the paper.")
    )
    sections_of = {"ch07_x": {"1"}, "ch03_y": {"1", "2"}}
    problems = section_reference_problems("ch07_x", chapter, sections_of)
    assert problems == ["ch07_x: '…## 1. One As section 2 says, and…': ch07_x has no section 2"]
    named = _notebook(("markdown", "## 1. One\n\nchapter 3, section 2; chapter 3, section 4."))
    (problem,) = section_reference_problems("ch07_x", named, sections_of)
    assert problem.endswith("chapter 3 has no section 4")
    paper = _notebook(("markdown", "## 1. One\n\nthe paper's section 8"))
    assert section_reference_problems("ch07_x", paper, sections_of)[0].endswith(
        "the paper has no section 8"
    )


def test_a_described_section_with_another_number_fails():
    old = _notebook(("markdown", "a reader can go straight to the analysis (section 2)."))
    (problem,) = described_problems("ch07_multi30k", old)
    assert "names section(s) 2" in problem
