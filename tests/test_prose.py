"""The prose check (tools/prose.py, `make lint`) and the prose that cannot go stale (issue 71).

The check: it fails on a planted 60-word sentence and on a planted machine-diary sentence, passes
on clean text (tables, code, math, headings and link targets left out), and reads its thresholds
from their one place, pyproject.toml's [tool.annotated.prose], which holds every chapter.

What cannot go stale: no chapter of the textbook (0 to 10) names a commit or an earlier making
(those live in the records: benchmarks/README.md and the lab notebook), and every sentence about
this notebook's run or model is true of the notebook's own saved outputs: a number it gives is one
the notebook prints, and a sentence that says the shipped model is (or is not) the run this
notebook shows agrees with the shipped model's record, benchmarks/results/shipped.json.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from tools import prose
from tools.chapters import NOTEBOOKS, chapter_sources

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_RECORD = ROOT / "benchmarks" / "results" / "shipped.json"

CLEAN = [
    "Attention compares a query with every key.",
    "Each comparison becomes a weight between zero and one.",
    "The weights add up to one, so the answer is an average of the values.",
    "A query close to one key gets, in effect, that key's value.",
    "We build that operation first and look at it from several sides.",
    "The masks stop a position from looking at the future.",
    "Multi-head attention runs several of these lookups side by side.",
    "Each head has its own projections of the queries, keys and values.",
    "Their answers are joined and projected back to the model's width.",
    "The check at the end compares our code with PyTorch's own.",
]
LONG = (
    "This one sentence goes on and on, clause after clause, naming the queries and the keys and "
    "the values and the masks and the heads and the projections and the widths and the layers, "
    "the norms and the residual paths and the dropout and the optimizer and the warmup and the "
    "schedule until a reader has since lost the thread."
)
DIARY = {
    "a CPU": "It took 66 minutes on a 2-core AVX2 EPYC.",
    "an instruction set": "The bf16 path needs AMX to be fast.",
    "a record file": "The scores are kept in multi30k.json for good.",
    "a commit": "The notebook was executed at 3946b58 on that day.",
    "the word commit": "The notebook was executed for the commit before this one.",
    "an earlier run": "The previous run trained in float32 instead.",
    "an earlier making": "An earlier making of this chapter scored higher.",
    "a retraining": "The last retraining moved the score by a tenth.",
    "a run of this notebook": "An earlier run of this notebook chose another head.",
}


def chapter(*paragraphs: str) -> str:
    """A py:percent chapter whose Markdown cells hold these paragraphs, with a code cell between."""
    cells = ["# %% [markdown]\n# # Chapter 1 — A planted chapter\n#\n"]
    for paragraph in paragraphs:
        cells.append("# %% [markdown]\n" + "\n".join(f"# {line}" for line in paragraph.split("\n")))
        cells.append("# %%\nx = 1  # a code cell, never measured\n")
    return "\n\n".join(cells) + "\n"


def write(tmp_path: Path, *paragraphs: str, name: str = "ch01_planted.py") -> Path:
    path = tmp_path / name
    path.write_text(chapter(*paragraphs), encoding="utf-8")
    return path


def run_check(path: Path, capsys) -> tuple[int, str, str]:
    code = prose.main([str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


# --- the check ---------------------------------------------------------------------------------


def test_the_thresholds_live_in_pyproject_and_hold_every_chapter():
    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "prose" in table["tool"]["annotated"], "pyproject.toml has no [tool.annotated.prose]"
    held = prose.rules()
    assert held.long == 40
    by_name = {rule.name: rule for rule in held.groups}
    textbook, records = by_name["chapters"], by_name["records"]
    assert (textbook.mean_words, textbook.long_share, textbook.diary_share) == (20, 0.05, 0.05)
    # The records keep their detail, but their sentences follow the length rules.
    assert (records.mean_words, records.long_share, records.diary_share) == (20, 0.05, None)
    for source in chapter_sources():
        relative = source.relative_to(ROOT).as_posix()
        number = int(source.name[2:4])
        rule = held.rule_for(relative)
        assert rule is not None, f"{relative} is held to no rule"
        assert rule.name == ("records" if number == 11 else "chapters"), relative
    assert held.rule_for("benchmarks/README.md").name == "records"
    assert ROOT / "benchmarks" / "README.md" in held.files()
    # No threshold is written in the module itself: it reads them all.
    code = (ROOT / "tools" / "prose.py").read_text(encoding="utf-8")
    assert not re.search(r"^\s*\w+\s*=\s*(?:20|0\.05|40)\b", code, re.M)


def test_changing_pyproject_changes_the_verdict(tmp_path, capsys):
    path = write(tmp_path, " ".join(CLEAN))
    assert run_check(path, capsys)[0] == 0
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    stricter = text.replace("mean-words = 20  #", "mean-words = 5  #", 1)
    assert stricter != text
    (tmp_path / "pyproject.toml").write_text(stricter, encoding="utf-8")
    assert prose.main([str(path), "--pyproject", str(tmp_path / "pyproject.toml")]) == 1
    assert "over mean-words = 5" in capsys.readouterr().err


def test_clean_text_passes(tmp_path, capsys):
    table_row = "| " + " ".join(["word"] * 60) + " | 3946b58 on an AVX2 EPYC |"
    path = write(
        tmp_path,
        " ".join(CLEAN[:5]),
        "| a | b |\n|---|---|\n" + table_row,
        "```text\n" + LONG + "\nThe previous run was on a Xeon.\n```",
        "$$\n" + " + ".join(["x"] * 80) + "\n$$",
        "### A heading that is itself rather long but is never counted as a sentence at all ever",
        " ".join(CLEAN[5:]),
        "See [the records](https://example.org/commit/3946b58deadbeef/multi30k.json).",
        "<div>an HTML block, previous run, Xeon</div>",
    )
    code, out, err = run_check(path, capsys)
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if "ch01_planted.py" in line]
    words = sum(len(sentence.split()) for sentence in CLEAN) + 3  # and the link's three words
    assert row.split()[1:3] == [str(words), "11"], row
    assert "no sentence over 40 words" in prose.show(
        path, prose.sentences(prose.prose_lines(path)), 40, "x"
    )


def test_a_planted_60_word_sentence_fails(tmp_path, capsys):
    assert len(LONG.split()) == 60
    path = write(tmp_path, " ".join(CLEAN), LONG)
    code, _, err = run_check(path, capsys)
    assert code == 1
    assert (
        "ch01_planted.py: share of sentences over 40 words is 9.1%, over long-share = 0.05" in err
    )
    assert "[tool.annotated.prose.chapters]" in err
    assert prose.main(["--show", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "[60 words]" in shown and "lost the thread." in shown


@pytest.mark.parametrize("kind", DIARY)
def test_a_planted_machine_diary_sentence_fails(tmp_path, capsys, kind):
    path = write(tmp_path, " ".join(CLEAN[:6]), DIARY[kind])
    code, _, err = run_check(path, capsys)
    assert code == 1, kind
    assert "ch01_planted.py: share of words in machine-diary sentences is" in err
    assert "over diary-share = 0.05" in err
    found = prose.sentences(prose.prose_lines(path))
    assert [s.text for s in found if s.diary] == [DIARY[kind]]


def test_sentences_end_before_a_capital_and_at_a_paragraphs_end():
    lines = list(enumerate(chapter_text_lines(
        "We divide by the root, e.g. by 8 here, etc. and so on. Then we stop.\n"
        "\n"
        "- an item without a full stop\n"
        "- another item\n"
        "\n"
        "The code `a.b()` and the math $x.y$ hide their stops. A link [to this](https://a.b/c.d) too.\n"
        "\n"
        "**Mixed precision.** A run-in heading is a heading. **Bold** words are words."
    ), start=1))  # fmt: skip
    texts = [s.text for s in prose.sentences(lines)]
    assert texts == [
        "We divide by the root, e.g. by 8 here, etc. and so on.",
        "Then we stop.",
        "an item without a full stop",
        "another item",
        "The code `a.b()` and the math `x.y` hide their stops.",
        "A link to this too.",
        "A run-in heading is a heading.",
        "Bold words are words.",
    ]
    words = [s.words for s in prose.sentences(lines)]
    assert words == [13, 3, 6, 2, 8, 5, 6, 4]  # code and math left out; "e.g." one word


def chapter_text_lines(markdown: str) -> list[str]:
    return markdown.split("\n")


# --- nothing goes stale the same way (issue 71, deliverable 6) ------------------------------------

TEXTBOOK = [p for p in chapter_sources() if int(p.name[2:4]) <= 10]
THIS_RUN = re.compile(
    r"\bthis notebook(?:'s)?\s+(?:\w+\s+){0,2}?(?:trained|trains|reports|ran|runs|shows|showed"
    r"|prints|printed|was executed|executed|computed|measured)\b"
    r"|\bthis notebook's (?:run|model|training|outputs?|scores?)\b"
    r"|\b(?:run|model|training|scores?) (?:in|of|from|that|which) this notebook\b"
    r"|\b(?:run|model) this notebook\b",
    re.I,
)
# A sentence about another chapter's notebook or run: chapter 10 on chapter 8's, say.
OTHER_RUN = re.compile(r"\bchapter (\d+)'s (?:[\w-]+ ){0,2}?(?:notebook|run)s?\b", re.I)
SHIPPED_CHAPTER = "ch07_"  # the chapter whose run the book ships (shipped.json's "run" folder)
SHIPS = re.compile(
    r"\bship(?:s|ped|ping)?\b|\bweb browser\b|\bTry the model\b|annotated/model", re.I
)
DENIES = re.compile(r"\b(?:not|another|other|older|isn't|differs?|different)\b", re.I)
LABEL = re.compile(
    r"(?:section|chapter|exercise|table|equation|figure|step|steps|run|layer|head)\s$", re.I
)
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
SCORE_ROW = re.compile(
    r"(\w+)\s+(last|average of last \d+)\s+(greedy|beam \d+)\s+(yes|no)\s+(\d+\.\d+)\s+(\d+\.\d+)"
)


def stale_provenance(path: Path) -> list[str]:
    """The chapter's sentences that name a commit or an earlier run or making."""
    return [
        f"{path.name}:{s.line}: {s.text}"
        for s in prose.sentences(prose.prose_lines(path))
        if any(reason.startswith(("commit", "earlier run")) for reason in s.diary)
    ]


def outputs_text(notebook: Path) -> str:
    """Everything a saved notebook's cells print (streams and plain-text results)."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        for output in cell.get("outputs", []):
            for text in (output.get("text"), output.get("data", {}).get("text/plain")):
                if text:
                    found.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(found)


def printed_numbers(outputs: str) -> set[str]:
    """The numbers a notebook prints, commas dropped, each also as the prose may round it (38.33
    printed is 38.3 said)."""
    found = set()
    for m in NUMBER.finditer(outputs):
        number = m.group().rstrip(",").replace(",", "")
        found.add(number)
        if "." in number:
            whole, decimals = number.split(".")
            for places in range(len(decimals)):
                found.add(f"{float(number):.{places}f}")
    return found


def shipped_is_the_notebooks_run(outputs: str, record: Path) -> bool:
    """Whether the run a chapter 7 notebook shows is the shipped model's: its saved test-set scores
    for the run's own averaged weights (greedy and beam, <unk> copied) are the record's."""
    shipped = json.loads(record.read_text(encoding="utf-8"))
    own = next(form for name, form in shipped["forms"].items() if "run's own" in name)
    wanted = {
        (decoding, f"{own[decoding]['BLEU']:.2f}", f"{own[decoding]['chrF']:.2f}")
        for decoding in ("greedy", "beam 4")
    }
    shown = {
        (m[3], m[5], m[6])
        for m in SCORE_ROW.finditer(outputs)
        if m[1] == shipped["split"] and m[2].startswith("average") and m[4] == "yes"
    }
    return bool(shown) and wanted <= shown


def notebooks_spoken_of(text: str, chapter: Path, notebooks: Path) -> list[Path]:
    """The saved notebooks whose run a sentence of `chapter` speaks of: its own ("this notebook"),
    and another chapter's ("chapter 8's notebook", "chapter 8's run")."""
    found = [notebooks / f"{chapter.stem}.ipynb"] if THIS_RUN.search(text) else []
    for m in OTHER_RUN.finditer(text):
        found += sorted(notebooks.glob(f"ch{int(m[1]):02d}_*.ipynb"))[:1]
    return list(dict.fromkeys(found))


def unprinted(text: str, printed: set[str]) -> list[str]:
    """The numbers of a sentence (not in code; not a label such as "section 7"; not a count of
    ten or less) that are not among `printed`."""
    bare = re.sub(r"`[^`]*`", " ", text)
    missing = []
    for m in NUMBER.finditer(bare):
        value = m.group().rstrip(",").replace(",", "")
        if LABEL.search(bare[: m.start()]) or (value.isdigit() and int(value) <= 10):
            continue
        if value not in printed:
            missing.append(value)
    return missing


def untrue_run_sentences(
    chapter: Path, notebooks: Path = NOTEBOOKS, record: Path = SHIPPED_RECORD
) -> list[str]:
    """The sentences about a notebook's run or model (this notebook's, or chapter N's) that the
    saved notebook does not bear out: a number it does not print, or a claim that the shipped
    model is, or is not, chapter 7's run, which the shipped model's record contradicts."""
    wrong = []
    found = prose.sentences(prose.prose_lines(chapter))
    for i, s in enumerate(found):
        spoken = notebooks_spoken_of(s.text, chapter, notebooks)
        if not spoken:
            continue
        outputs = {nb: outputs_text(nb) if nb.exists() else "" for nb in spoken}
        printed = set().union(*(printed_numbers(text) for text in outputs.values()))
        names = " or ".join(nb.name for nb in spoken)
        wrong += [
            f"{chapter.name}:{s.line}: {value} is not printed by {names}: {s.text}"
            for value in unprinted(s.text, printed)
        ]
        before = found[i - 1] if i and found[i - 1].line == s.line else None
        if not (SHIPS.search(s.text) or (before and SHIPS.search(before.text))):
            continue
        for notebook in (nb for nb in spoken if nb.name.startswith(SHIPPED_CHAPTER)):
            same = shipped_is_the_notebooks_run(outputs[notebook], record)
            if bool(DENIES.search(s.text)) == same:
                truth = "is" if same else "is not"
                wrong.append(
                    f"{chapter.name}:{s.line}: the shipped model {truth} the run {notebook.name} "
                    f"shows ({record.name}), but the sentence says otherwise: {s.text}"
                )
    return wrong


@pytest.mark.parametrize("source", TEXTBOOK, ids=lambda p: p.stem)
def test_no_chapter_names_a_commit_or_an_earlier_making(source):
    stale = stale_provenance(source)
    assert not stale, (
        "a chapter says what was done for the run it shows; commits and earlier makings belong in "
        "the records (benchmarks/README.md, the lab notebook; CONTRIBUTING.md, 'Prose'):\n"
        + "\n".join(stale)
    )


@pytest.mark.parametrize(
    "kind", [k for k in DIARY if k not in ("a CPU", "an instruction set", "a record file")]
)
def test_a_planted_commit_or_earlier_making_is_found(tmp_path, kind):
    assert stale_provenance(write(tmp_path, " ".join(CLEAN), DIARY[kind]))
    assert not stale_provenance(write(tmp_path, " ".join(CLEAN)))


@pytest.mark.parametrize("source", TEXTBOOK, ids=lambda p: p.stem)
def test_what_a_chapter_says_of_a_notebooks_run_is_that_notebooks_saved_outputs(source):
    wrong = untrue_run_sentences(source)
    assert not wrong, "\n".join(wrong)


def planted_notebook(
    folder: Path, stem: str, greedy: tuple[float, float], beam: tuple[float, float]
) -> Path:
    table = (
        "              split            weights decoding <unk> copied   BLEU   chrF\n"
        f"0  test_2016_flickr  average of last 5   greedy          yes  {greedy[0]:.2f}  {greedy[1]:.2f}\n"
        f"1  test_2016_flickr  average of last 5   beam 4          yes  {beam[0]:.2f}  {beam[1]:.2f}\n"
        "plan: 3,040 steps, about 51 training minutes\n"
    )
    folder.mkdir(exist_ok=True)
    notebook = folder / f"{stem}.ipynb"
    cell = {
        "cell_type": "code",
        "source": "",
        "outputs": [{"output_type": "stream", "text": table}],
    }
    notebook.write_text(json.dumps({"cells": [cell]}), encoding="utf-8")
    return notebook


def planted_record(tmp_path: Path, greedy: tuple[float, float], beam: tuple[float, float]) -> Path:
    shipped = json.loads(SHIPPED_RECORD.read_text(encoding="utf-8"))
    own = next(name for name in shipped["forms"] if "run's own" in name)
    shipped["forms"][own]["greedy"] = {"BLEU": greedy[0], "chrF": greedy[1]}
    shipped["forms"][own]["beam 4"] = {"BLEU": beam[0], "chrF": beam[1]}
    record = tmp_path / "shipped.json"
    record.write_text(json.dumps(shipped), encoding="utf-8")
    return record


def test_a_claim_about_this_notebooks_run_is_checked_against_its_outputs_and_the_record(tmp_path):
    ours, older = ((39.55, 58.45), (40.06, 58.95)), ((39.17, 58.15), (40.19, 59.0))
    notebooks = tmp_path / "notebooks"
    claim = "The model this notebook trained ships with the book."
    claims = write(tmp_path, " ".join(CLEAN), claim, name="ch07_claims.py")
    denial = "The book ships an averaged model. It is not the run this notebook shows."
    denies = write(tmp_path, " ".join(CLEAN), denial, name="ch07_denies.py")
    numbers = "The run this notebook shows took 3,040 steps and 51 minutes."
    right = write(tmp_path, numbers, name="ch07_right.py")
    wrong = write(tmp_path, numbers.replace("51", "66"), name="ch07_wrong.py")
    for chapter in (claims, denies, right, wrong):
        planted_notebook(notebooks, chapter.stem, *ours)
    # The shipped model is this notebook's run: the claim holds, the denial does not.
    same = planted_record(tmp_path, *ours)
    assert untrue_run_sentences(claims, notebooks, same) == []
    (denied,) = untrue_run_sentences(denies, notebooks, same)
    assert "the shipped model is the run" in denied
    # An older making ships: the claim is the stale sentence issue 71 found, the denial is true.
    other = planted_record(tmp_path, *older)
    (claimed,) = untrue_run_sentences(claims, notebooks, other)
    assert "the shipped model is not the run" in claimed
    assert untrue_run_sentences(denies, notebooks, other) == []
    # Its numbers are the notebook's own.
    assert untrue_run_sentences(right, notebooks, same) == []
    (unprinted_one,) = untrue_run_sentences(wrong, notebooks, same)
    assert "66 is not printed by ch07_wrong.ipynb" in unprinted_one


def test_a_chapter_describing_another_chapters_run_is_checked_against_that_notebook(tmp_path):
    notebooks = tmp_path / "notebooks"
    planted_notebook(notebooks, "ch08_planted", (1.0, 2.0), (3.0, 4.0))  # prints 3,040 and 51
    right = "Chapter 8's notebook shows a run of 3,040 steps in about 51 minutes."
    stale = "Chapter 8's run took 427 steps in about 51 minutes."  # an earlier run's steps
    good = write(tmp_path, " ".join(CLEAN), right, name="ch10_good.py")
    bad = write(tmp_path, " ".join(CLEAN), stale, name="ch10_bad.py")
    assert untrue_run_sentences(good, notebooks) == []
    (found,) = untrue_run_sentences(bad, notebooks)
    assert "427 is not printed by ch08_planted.ipynb" in found
