"""The book's prose check: how long its sentences are, and how much of it narrates provenance.

    python -m tools.prose                  the figures of every file the rules name, and a failure
                                           (exit 1) for each figure past its file's threshold
    python -m tools.prose FILE...          the same for these files only
    python -m tools.prose --show FILE      its long sentences and its machine-diary sentences, each
                                           with its paragraph's line, for a writer to fix
    python -m tools.prose --at REV         the files as they were committed at REV (git show)

What is measured is a file's prose: a chapter's Markdown cells (`# %% [markdown]` in its py:percent
source), or a Markdown file (benchmarks/README.md), with its tables, fenced and indented code,
inline code, math ($...$ and $$...$$), headings (run-in ones too: a paragraph's bold lead ending
in a full stop, "**Mixed precision.**"), HTML, images and link targets left out. A paragraph or
list item is a unit: a sentence never runs across two. Per file:

    words          the prose's words
    mean           mean words a sentence
    over 40        the share of sentences over `long-sentence` (40) words
    diary          the share of the prose's words in machine-diary sentences: sentences that name a
                   CPU model or instruction set (AVX2, AMX, EPYC, Xeon, H200...), a record file (a
                   name in benchmarks/results/), a commit (a hex SHA, or the word "commit"), or an
                   earlier run or making ("the previous run", "an earlier making", "last retraining")
    numerals/100   words that are numbers (40.39, 3,040, 5%), per 100 words (reported, held to
                   nothing; `--show` marks a sentence with three or more: a table may read better)

The thresholds, and which files each holds, live in one place: pyproject.toml's
[tool.annotated.prose] (`rules()` reads it). A chapter source no rule names is an error, so a new
chapter cannot slip past. CONTRIBUTING.md, "Prose", says why the rules are what they are.

Sentences and words come from spaCy, not from a home-made splitter: a blank English pipeline
(`spacy.blank("en")`: spaCy's tokenizer, with its exceptions for "e.g.", "i.e.", "vs." and numbers
such as 3.2.1) and its rule-based `sentencizer`. spaCy is already one of the book's locked
dependencies (chapter 5 tokenizes with it), runs without a model to download, and, unlike
textstat, whose sentence count is a regular expression that returns only a number, gives the
sentences themselves, which `--show` lists. One rule is laid over the sentencizer's boundaries, the
issue's own definition (issue 71): a sentence ends at . ! or ? only before a capital letter (or at
the end of its paragraph), so "etc. and" or "Fig. 3" does not end one. A word is a run of spaCy's
tokens with no space between them (so "pre-norm", "don't" and "3.5%" are one word each) that holds
a letter or a digit. The Markdown is parsed by markdown-it-py (MyST's parser, also locked), with
its tables and mdit-py-plugins' dollar math, so code, math and tables are known for what they are.
"""

from __future__ import annotations

import argparse
import fnmatch
import functools
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout
PYPROJECT = ROOT / "pyproject.toml"
RULES_TABLE = "[tool.annotated.prose]"
RECORDS = ROOT / "benchmarks" / "results"  # the record files whose names a chapter leaves out

# --- what makes a sentence machine diary -----------------------------------------------------

# CPU models and instruction sets, and the accelerators the book's runs used: case as written.
MACHINES = re.compile(
    r"(?<![\w-])(?:AMX(?:-\w+)?|AVX(?:-?512\w*|-?VNNI|2)?|VNNI|SSE[234]?(?:\.\d)?|NEON|SVE2?"
    r"|EPYC|Xeon|Ryzen|Threadripper|Opteron|Core i[3579]"
    r"|(?:Sapphire|Emerald|Granite) Rapids|(?:Ice|Cascade|Cooper) Lake|Skylake|Haswell|Broadwell"
    r"|Zen ?[1-5]|Graviton ?\d?|Neoverse|Apple M[1-4]"
    r"|[HAV]100|GH200|H200|A10G?|RTX ?\d{3,4}|MI[123]\d\dX?)(?![\w-])"
)
# A commit: a hex SHA of 7 to 40 characters (with a digit and a letter, so neither a number nor a
# word), or the word itself.
SHA = re.compile(r"(?<![\w-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
COMMIT = re.compile(r"\bcommits?\b(?!\s+(?:to|itself|themselves)\b)", re.I)  # not "commits to"
# An earlier run or making of the book or a chapter.
_RUN = r"(?:runs?|makings?|retrainings?|executions?|versions? of (?:this|the) (?:notebook|chapter|book))"
EARLIER = re.compile(
    r"\b(?:previous|earlier|prior|former|older|preceding|last|later|newer)\s+(?:[\w-]+\s+){0,2}?"
    + _RUN
    + r"\b"
    r"|\b(?:previous|earlier|prior|last)\s+training\b"
    r"|\bmakings\b"
    r"|\b(?:an?|this|that|each|every|one|another|earlier|previous|later|last|older|newer|next"
    r"|first|second|third|fourth|latest|current)\s+making\b(?!\s+(?:of|it|them|sure|up|a|an|the)\b)"
    r"|\b(?:runs?|makings?|executions?|retrainings?)\s+(?:ago|back|older|earlier|before this one)\b"
    r"|\b(?:two|three|four|five|several|some|many)\s+(?:runs|makings|executions)\s+(?:ago|back)\b",
    re.I,
)


@functools.cache
def record_names(records: Path = RECORDS) -> re.Pattern:
    """The record files' names (benchmarks/results/*.json), and the folder itself."""
    names = sorted((p.name for p in records.glob("*.json")), key=len, reverse=True)
    alternatives = ["benchmarks/results/", *map(re.escape, names)]
    return re.compile(r"(?<![\w.-])(?:" + "|".join(alternatives) + r")(?![\w-])")


def diary_reasons(text: str, records: Path = RECORDS) -> list[str]:
    """What in `text` (a sentence, its inline code included) is machine diary, as `--show` says it:
    "machine AVX2", "record multi30k.json", "commit 8a4ee12", "earlier run 'the previous run'"."""
    found = [f"machine {m.group()}" for m in MACHINES.finditer(text)]
    found += [f"record {m.group()}" for m in record_names(records).finditer(text)]
    found += [f"commit {m.group()}" for m in SHA.finditer(text)]
    found += [f"commit '{m.group()}'" for m in COMMIT.finditer(text)]
    found += [f"earlier run '{m.group()}'" for m in EARLIER.finditer(text)]
    return found


# --- the prose of a file ---------------------------------------------------------------------

MARKDOWN_CELL = re.compile(r"^# %% \[(?:markdown|md)\]")
CELL = re.compile(r"^# %%")


def markdown_lines(source: str) -> list[tuple[int, str]]:
    """A py:percent chapter's Markdown cells, as (line number in the source, Markdown line), with a
    blank line between cells so that none runs into the next."""
    lines, inside = [], False
    for number, line in enumerate(source.splitlines(), start=1):
        if CELL.match(line):
            if inside:
                lines.append((number, ""))
            inside = bool(MARKDOWN_CELL.match(line))
        elif inside:
            lines.append((number, line[2:] if line.startswith("# ") else line.lstrip("#")))
    return lines


def prose_lines(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """The Markdown a file's prose is in, line by line with each line's number: a chapter's Markdown
    cells (a .py source), or the whole of a Markdown file."""
    text = path.read_text(encoding="utf-8") if text is None else text
    if path.suffix == ".py":
        return markdown_lines(text)
    return list(enumerate(text.splitlines(), start=1))


@functools.cache
def _markdown():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.dollarmath import dollarmath_plugin

    return MarkdownIt("commonmark").enable("table").use(dollarmath_plugin)


PLACEHOLDER = "Qzq{}zq"  # inline code and math, held out of the counts but kept for the diary
PLACEHOLDERS = re.compile(r"Qzq(\d+)zq")
URL = re.compile(r"\b(?:https?|ftp)://\S+")


RUN_IN_END = re.compile(r"[.:?!]\s*$")


def _without_run_in_heading(children: list) -> list:
    """A paragraph's inline tokens without its run-in heading: a bold lead that ends in . : ? or !
    ("**Mixed precision.** Hardware...", "**3.1 Predict.** ..."), which is a heading, left out as
    headings are."""
    start = 0
    while start < len(children) and children[start].type == "text" and not children[start].content:
        start += 1  # markdown-it opens a paragraph that starts in bold with an empty text
    if start >= len(children) or children[start].type != "strong_open":
        return children
    close = next((i for i, c in enumerate(children) if c.type == "strong_close"), None)
    if close is None:
        return children
    lead = "".join(c.content for c in children[start + 1 : close] if c.type == "text")
    return children[close + 1 :] if RUN_IN_END.search(lead) else children


@dataclass
class Paragraph:
    line: int  # in the file
    text: str  # with each piece of inline code or math as a placeholder
    held: list[str]  # what the placeholders stand for, by number


def paragraphs(lines: Sequence[tuple[int, str]]) -> list[Paragraph]:
    """The prose's paragraphs and list items, with what is left out taken out."""
    numbers = [number for number, _ in lines]
    tokens = _markdown().parse("\n".join(line for _, line in lines))
    found, skip = [], 0
    for i, token in enumerate(tokens):
        if token.type in ("table_open", "heading_open"):
            skip += 1
        elif token.type in ("table_close", "heading_close"):
            skip -= 1
        if token.type != "inline" or skip or tokens[i - 1].type != "paragraph_open":
            continue
        held: list[str] = []
        pieces: list[str] = []
        autolink = False
        for child in _without_run_in_heading(token.children or []):
            if child.type == "link_open":
                autolink = child.markup == "autolink"
            elif child.type == "link_close":
                autolink = False
            elif child.type == "text" and not autolink:
                pieces.append(URL.sub(" ", child.content))
            elif child.type in ("code_inline", "math_inline", "math_inline_double"):
                pieces.append(PLACEHOLDER.format(len(held)))
                held.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                pieces.append(" ")
        line = numbers[token.map[0]] if token.map and token.map[0] < len(numbers) else 0
        text = re.sub(r"\s+", " ", "".join(pieces)).strip()
        if text:
            found.append(Paragraph(line, text, held))
    return found


@functools.cache
def _nlp():
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


@dataclass
class Sentence:
    line: int  # its paragraph's first line in the file
    text: str  # as the reader sees it, inline code and math put back
    words: int
    numerals: int
    diary: list[str] = field(default_factory=list)


def _restore(text: str, held: Sequence[str]) -> str:
    return PLACEHOLDERS.sub(lambda m: f"`{held[int(m.group(1))]}`", text)


def _words(tokens) -> list[str]:
    """The words of a run of spaCy tokens: tokens joined where no space parts them (a dash breaks
    a word as a space does), kept where they hold a letter or a digit outside code and math."""
    words, current = [], ""
    for token in tokens:
        if token.text in ("—", "–", "--"):
            words.append(current)
            current = ""
            continue
        current += token.text
        if token.whitespace_:
            words.append(current)
            current = ""
    words.append(current)
    kept = (PLACEHOLDERS.sub("", word) for word in words)
    return [word for word in kept if any(c.isalnum() for c in word)]


def _is_numeral(word: str) -> bool:
    """A word that is a number: 40.39, 3,040, 5%, (2014), −0.5, 2-core; not float32 or H200."""
    core = word.lstrip("([{\"'“‘−-+±~≈<>=$€£")
    return bool(core) and core[0].isdigit()


def _starts_a_sentence(span) -> bool:
    """The issue's rule over the sentencizer's: a sentence starts with a capital letter (inline
    code or math counts as one), or it is not a new sentence."""
    for token in span:
        for c in token.text:
            if c.isalnum():
                return c.isupper()
    return False  # only punctuation: it stays with the sentence before


def sentences(lines: Sequence[tuple[int, str]], records: Path = RECORDS) -> list[Sentence]:
    """The prose's sentences, each with its words, numerals and machine-diary reasons."""
    found = []
    units = paragraphs(lines)
    for unit, doc in zip(units, _nlp().pipe(u.text for u in units), strict=True):
        spans: list[list] = []
        for sent in doc.sents:
            if spans and not _starts_a_sentence(sent):
                spans[-1].extend(sent)
            else:
                spans.append(list(sent))
        for tokens in spans:
            words = _words(tokens)
            if not words:
                continue
            text = _restore("".join(t.text_with_ws for t in tokens).strip(), unit.held)
            numerals = sum(_is_numeral(word) for word in words)
            found.append(
                Sentence(unit.line, text, len(words), numerals, diary_reasons(text, records))
            )
    return found


# --- the figures and the rules -------------------------------------------------------------


@dataclass
class Figures:
    words: int
    sentences: int
    mean: float  # words a sentence
    long_share: float  # of the sentences, over the long-sentence length
    diary_share: float  # of the words, in machine-diary sentences
    numerals: float  # words holding a digit, per 100 words


def figures(found: Sequence[Sentence], long: int) -> Figures:
    words = sum(s.words for s in found)
    count = len(found)
    return Figures(
        words=words,
        sentences=count,
        mean=words / count if count else 0.0,
        long_share=sum(s.words > long for s in found) / count if count else 0.0,
        diary_share=sum(s.words for s in found if s.diary) / words if words else 0.0,
        numerals=100 * sum(s.numerals for s in found) / words if words else 0.0,
    )


@dataclass
class Rule:
    name: str  # its table's name in pyproject.toml
    files: list[str]  # globs, relative to the checkout
    mean_words: float | None = None
    long_share: float | None = None
    diary_share: float | None = None

    def holds(self, relative: str) -> bool:
        return any(fnmatch.fnmatchcase(relative, pattern) for pattern in self.files)


@dataclass
class Rules:
    long: int  # a sentence over this many words is long
    groups: list[Rule]

    def rule_for(self, relative: str) -> Rule | None:
        return next((rule for rule in self.groups if rule.holds(relative)), None)

    def files(self, root: Path = ROOT) -> list[Path]:
        found = {p for rule in self.groups for pattern in rule.files for p in root.glob(pattern)}
        return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def rules(pyproject: Path = PYPROJECT) -> Rules:
    """The thresholds and the files each holds, from pyproject.toml's [tool.annotated.prose]."""
    table = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["annotated"]["prose"]
    groups = [
        Rule(
            name=name,
            files=list(group["files"]),
            mean_words=group.get("mean-words"),
            long_share=group.get("long-share"),
            diary_share=group.get("diary-share"),
        )
        for name, group in table.items()
        if isinstance(group, dict)
    ]
    return Rules(long=int(table["long-sentence"]), groups=groups)


def failures(name: str, found: Figures, rule: Rule, long: int) -> list[str]:
    """Each figure of `found` past its threshold in `rule`, said with the file, figure and limit."""
    where = f"pyproject.toml [tool.annotated.prose.{rule.name}]"
    checks = [
        ("mean words a sentence", found.mean, rule.mean_words, "{:.1f}", "mean-words"),
        (f"share of sentences over {long} words", found.long_share, rule.long_share, "{:.1%}",
         "long-share"),
        ("share of words in machine-diary sentences", found.diary_share, rule.diary_share,
         "{:.1%}", "diary-share"),
    ]  # fmt: skip
    return [
        f"{name}: {figure} is {form.format(value)}, over {key} = {limit} ({where})"
        for figure, value, limit, form, key in checks
        if limit is not None and value > limit + 1e-12
    ]


# --- the command -----------------------------------------------------------------------------


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _text(path: Path, root: Path, at: str | None) -> str:
    if at is None:
        return path.read_text(encoding="utf-8")
    show = ["git", "show", f"{at}:{_relative(path, root)}"]
    return subprocess.run(show, cwd=root, capture_output=True, text=True, check=True).stdout


def table(rows: Iterable[tuple[str, Figures]], long: int) -> str:
    head = ("file", "words", "sentences", "mean", f"over {long}", "diary", "numerals/100")
    lines = [head] + [
        (
            name,
            f"{f.words:,}",
            f"{f.sentences:,}",
            f"{f.mean:.1f}",
            f"{f.long_share:.1%}",
            f"{f.diary_share:.1%}",
            f"{f.numerals:.1f}",
        )
        for name, f in rows
    ]
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(
            zip(row, widths, strict=True)))
        for row in lines
    )  # fmt: skip


TABLE_HINT = 3  # numerals in one sentence from which `--show` suggests a table (a hint, no limit)


def show(path: Path, found: Sequence[Sentence], long: int, name: str) -> str:
    """The sentences a writer should fix: the long ones and the machine-diary ones, and, as a hint,
    those with three numerals or more (which may read better as a small table)."""
    out = []
    for s in found:
        why = ([f"{s.words} words"] if s.words > long else []) + s.diary
        hint = [f"{s.numerals} numerals: a table?"] if s.numerals >= TABLE_HINT else []
        if why or hint:
            out.append(f"{name}:{s.line}: [{'; '.join(why + hint)}]\n    {s.text}")
    clean = not any(s.words > long or s.diary for s in found)
    if clean:
        out.append(f"{name}: no sentence over {long} words, and no machine diary")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.prose", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help="files to measure (default: every file the rules name)"
    )
    parser.add_argument(
        "--show", type=Path, metavar="FILE", help="list FILE's long and machine-diary sentences"
    )
    parser.add_argument("--at", metavar="REV", help="measure the files as committed at REV")
    parser.add_argument(
        "--pyproject", type=Path, default=root / "pyproject.toml", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    held = rules(args.pyproject)
    records = root / "benchmarks" / "results"
    if args.show is not None:
        name = _relative(args.show, root)
        found = sentences(prose_lines(args.show, _text(args.show, root, args.at)), records)
        print(show(args.show, found, held.long, name))
        return 0
    problems: list[str] = []
    if not args.files:
        from tools.chapters import chapter_sources

        for chapter in chapter_sources(root / "annotated"):
            if held.rule_for(_relative(chapter, root)) is None:
                problems.append(f"{_relative(chapter, root)}: no rule in {RULES_TABLE} holds it")
    paths = args.files or held.files(root)
    rows = []
    for path in paths:
        name = _relative(path, root)
        rule = held.rule_for(name) or held.groups[0]  # a file no rule names: the first (chapters')
        found = figures(
            sentences(prose_lines(path, _text(path, root, args.at)), records), held.long
        )
        rows.append((name, found))
        problems += failures(name, found, rule, held.long)
    print(table(rows, held.long))
    if problems:
        print("\n" + "\n".join(problems), file=sys.stderr)
        print(
            "\n`python -m tools.prose --show FILE` lists a file's long and machine-diary sentences;"
            " CONTRIBUTING.md, 'Prose', says what goes in a chapter and what in the records.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
