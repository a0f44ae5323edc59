"""Every figure the prose quotes from a record or a saved output agrees with it.

`benchmarks/quoted.toml` lists the quotes: where a figure stands (`in`, a prose file: a chapter's
.py, README.md, site/course.md), the words around it (`says`, with `{}` where the figure is), and
where it comes from (`from`: a record in benchmarks/results/ or annotated/results/, or a chapter's executed notebook).
The table holds no line numbers and no copies of the figures: the test finds the words in the
prose, reads the figure there, and compares it with the record at the precision the prose prints
it. So changing a record without the prose, or the prose without the record, fails here, naming
the prose line; rewording around a figure fails too, naming the quote to update. Chapters are
checked in their notebook's markdown as well as in the .py.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "benchmarks" / "quoted.toml"
RECORDS = ROOT / "benchmarks" / "results"
PACKAGED_RECORDS = ROOT / "annotated" / "results"  # chapter 9's Table 3 record ships in the wheel


def record_file(name: str) -> Path:
    """A record named in quoted.toml: in benchmarks/results/, or in the package's results/."""
    return RECORDS / name if (RECORDS / name).is_file() else PACKAGED_RECORDS / name


NUMBER = r"[-−]?\d[\d,]*(?:\.\d+)?"  # 4,532 or 40.13 or 0.75 (a comma groups thousands)
OTHER_SOURCE = r"[\w-]+\.json: |notebooks/[\w-]+\.ipynb: "  # a value's own source, before its path


@dataclass(frozen=True)
class Quote:
    """One row of the table: a sentence's words with {} for each figure, and where each comes from."""

    file: str
    says: str
    source: str
    values: tuple[str, ...]
    scales: tuple[float, ...] = ()  # one for each value; none: 1

    @property
    def label(self) -> str:
        return f"{self.file}: {self.says!r}"


def load_quotes(table: Path = TABLE) -> list[Quote]:
    quotes = []
    for row in tomllib.loads(table.read_text(encoding="utf-8"))["quote"]:
        values = row["value"] if isinstance(row["value"], list) else [row["value"]]
        scales = row.get("scale", [1.0] * len(values))
        scales = scales if isinstance(scales, list) else [scales] * len(values)
        quote = Quote(row["in"], row["says"], row["from"], tuple(values), tuple(scales))
        if not quote.says.count("{}") == len(quote.values) == len(quote.scales):
            raise ValueError(f"{quote.label}: one value (and scale) for each {{}} in `says`")
        quotes.append(quote)
    return quotes


def words_pattern(says: str, number: str = NUMBER) -> re.Pattern:
    """`says` as a pattern: words apart by any whitespace (a line break, and the `# ` of a
    chapter's markdown, included), each {} a number (written as `number` matches)."""
    pieces = []
    for piece in re.split(r"(\{\}|\s+)", says.strip()):
        if piece == "{}":
            pieces.append(f"({number})")
        elif piece.isspace():
            pieces.append(r"(?:\s|#)+")
        elif piece:
            pieces.append(re.escape(piece))
    return re.compile("".join(pieces))


def prose_texts(file: str) -> list[tuple[str, str]]:
    """(name, text) for a prose file: a chapter's .py and its notebook's markdown."""
    path = ROOT / file
    texts = [(file, path.read_text(encoding="utf-8"))]
    if path.parent.name == "annotated" and re.fullmatch(r"ch\d\d_\w+\.py", path.name):
        notebook = nbformat.read(ROOT / "notebooks" / f"{path.stem}.ipynb", as_version=4)
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type == "markdown":
                texts.append((f"notebooks/{path.stem}.ipynb, cell {index}", cell.source))
    return texts


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def find(quote: Quote) -> list[tuple[str, list[str]]]:
    """Where the quote stands: (place, the figures as written) in the .py and the notebook alike."""
    pattern = words_pattern(quote.says)
    found = []
    texts = prose_texts(quote.file)
    for name, text in texts:  # every place the words stand, so that no quote is ambiguous
        for match in pattern.finditer(text):
            place = f"{name}:{line_of(text, match.start())}" if name == quote.file else name
            found.append((place, list(match.groups())))
    is_chapter = len(texts) > 1
    if not found or (is_chapter and [p for p, _ in found if p.startswith(quote.file)] == []):
        raise AssertionError(
            f"{quote.label}: these words are not in {quote.file} any more. Update the quote in "
            f"benchmarks/quoted.toml to the new wording (keeping the figure's {{}}), or remove "
            "it if the figure is gone."
        )
    if is_chapter and len(found) < 2 * len([p for p, _ in found if p.startswith(quote.file)]):
        raise AssertionError(
            f"{quote.label}: found in {quote.file} but not in its notebook: run `make notebooks`"
        )
    return found


def walk(document, path: str):
    """A value in a JSON document by a path of keys apart by ' / '; `key=value` picks the element
    of a list whose `key` is `value` (`a=1&b=2`: both)."""
    here = document
    for step in path.split(" / "):
        if isinstance(here, list) and step.isdigit():
            here = here[int(step)]
        elif isinstance(here, list):
            wanted = [condition.partition("=")[::2] for condition in step.split("&")]
            matches = [i for i in here if all(str(i.get(k)) == v for k, v in wanted)]
            if len(matches) != 1:
                raise KeyError(f"{len(matches)} elements with {step!r} at {path!r}")
            here = matches[0]
        else:
            here = here[step]
    return here


def read_record(path: Path):
    """A record's JSON, parsed once per content (the table asks for the same few files often)."""
    text = path.read_text(encoding="utf-8")
    if text not in _RECORDS_READ:
        _RECORDS_READ[text] = json.loads(text)
    return _RECORDS_READ[text]


_RECORDS_READ: dict = {}


def source_value(quote: Quote, value: str, scale: float = 1.0) -> float:
    """The figure at its source: a record's value, or a notebook output's number (times scale)."""
    if value.startswith("= "):  # arithmetic on other values: get("path"), mean([...])
        names = {
            "get": lambda path: source_value(quote, path),
            "raw": lambda path: walk(read_record(record_file(quote.source)), path),
            "mean": statistics.mean,
            "stdev": statistics.stdev,
            "max": max,
            "min": min,
            "round": round,
            "abs": abs,
            "sum": sum,
            "len": len,
        }
        return float(eval(value[2:], {"__builtins__": {}, **names})) * scale
    source = quote.source
    if re.match(OTHER_SOURCE, value):  # another record or notebook than the quote's `from`
        source, value = value.split(": ", 1)
    if source.endswith(".json"):
        record = read_record(record_file(source))
        return float(walk(record, value)) * scale
    outputs = saved_text_outputs(nbformat.read(ROOT / source, as_version=4))
    match = re.search(value, outputs)
    if not match:
        raise AssertionError(f"{quote.label}: no output of {quote.source} matches {value!r}")
    return float(match.group(1).replace(",", "")) * scale


def saved_text_outputs(notebook: nbformat.NotebookNode) -> str:
    """What a saved notebook printed in text: its streams and plain-text results, joined."""
    return "\n".join(
        output.get("text", "") or output.get("data", {}).get("text/plain", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


def agrees(written: str, value: float) -> bool:
    """Whether the figure as written is the value rounded to the digits it shows."""
    shown = float(written.replace(",", "").replace("−", "-"))
    decimals = len(written.partition(".")[2])
    return abs(shown - value) <= 0.5 * 10**-decimals * (1 + 1e-9) and math.isfinite(value)


QUOTES = load_quotes()


@pytest.mark.parametrize("quote", QUOTES, ids=[f"{q.file}:{q.says[:40]}" for q in QUOTES])
def test_the_prose_quotes_its_sources_right(quote):
    for place, written in find(quote):
        for figure, value, scale in zip(written, quote.values, quote.scales, strict=True):
            expected = source_value(quote, value, scale)
            source = value if re.match(OTHER_SOURCE, value) else f"{quote.source}: {value}"
            assert agrees(figure, expected), (
                f"{place} says {figure} where {source} has {expected:g}: update the prose, or "
                "the record if the prose is right"
            )


def test_the_table_names_real_files_and_sources():
    for quote in QUOTES:
        assert (ROOT / quote.file).is_file(), quote.label
        assert record_file(quote.source).is_file() or (ROOT / quote.source).is_file(), quote.label


def record_paths(quote: Quote) -> list[tuple[str, str]]:
    """(record, path) for each record figure the quote reads: its values' plain paths, and the
    literal get("...") paths of its arithmetic (f-string paths are not followed)."""
    paths = []
    for value in quote.values:
        found = re.findall(r'get\("([^"{}]+)"\)', value) if value.startswith("= ") else [value]
        for path in found:
            source = quote.source
            if re.match(OTHER_SOURCE, path):
                source, path = path.split(": ", 1)
            if source.endswith(".json"):
                paths.append((source, path))
    return paths


def unnamed_repeats(quote: Quote) -> list[str]:
    """The quote's figures read from inside a sub-table whose last key is also the record's
    headline (copy.json's by_width / 64 / bf16_speedup_vs_fp32 beside its bf16_speedup_vs_fp32)
    where the words do not name the sub-table's key (64): read as the headline, they are not."""
    unnamed = []
    for source, path in record_paths(quote):
        record = read_record(record_file(source))
        steps = path.split(" / ")
        if len(steps) < 2 or not isinstance(record, dict) or steps[-1] not in record:
            continue
        if not re.search(rf"(?<![\w.]){re.escape(steps[-2])}(?![\w])", quote.says):
            unnamed.append(f"{source}: {path}")
    return unnamed


@pytest.mark.parametrize("quote", QUOTES, ids=[f"{q.file}:{q.says[:40]}" for q in QUOTES])
def test_a_figure_beside_the_records_headline_is_named_as_such(quote):
    unnamed = unnamed_repeats(quote)
    assert not unnamed, (
        f"{quote.label} quotes {unnamed}, a figure the record also holds as its headline, from "
        "inside a sub-table whose key the words do not name: quote the headline, or name the key "
        "(e.g. 'at width 64') in the prose and in `says`"
    )


# ---------------------------------------------------------------- the test can fail


def test_a_changed_record_fails_and_names_the_prose_line(tmp_path, monkeypatch):
    (tmp_path / "annotated").mkdir()
    (tmp_path / "README.md").write_text("Intro.\n\nIt trained for 30.1 training\nminutes.\n")
    (tmp_path / "record.json").write_text(json.dumps({"run": {"minutes": 30.12}}))
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "RECORDS", tmp_path)
    quote = Quote(
        "README.md", "trained for {} training minutes", "record.json", ("run / minutes",), (1,)
    )
    test_the_prose_quotes_its_sources_right(quote)  # agrees at the one decimal shown
    (tmp_path / "record.json").write_text(json.dumps({"run": {"minutes": 31.4}}))
    with pytest.raises(AssertionError, match=r"README.md:3 says 30.1 where record.json: run"):
        test_the_prose_quotes_its_sources_right(quote)
    (tmp_path / "README.md").write_text("It trained 30.1 minutes.\n")
    with pytest.raises(AssertionError, match="not in README.md any more"):
        test_the_prose_quotes_its_sources_right(quote)


def test_a_chapter_is_checked_in_its_notebook_too(tmp_path, monkeypatch):
    (tmp_path / "annotated").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "annotated" / "ch99_x.py").write_text(
        "# %% [markdown]\n# A run of 2.5\n# minutes.\n"
    )
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("A run of 2.7 minutes.")]
    )
    nbformat.write(notebook, tmp_path / "notebooks" / "ch99_x.ipynb")
    (tmp_path / "r.json").write_text(json.dumps({"m": 2.5}))
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "RECORDS", tmp_path)
    quote = Quote("annotated/ch99_x.py", "A run of {} minutes.", "r.json", ("m",), (1,))
    with pytest.raises(AssertionError, match=r"ch99_x.ipynb, cell 0 says 2.7"):
        test_the_prose_quotes_its_sources_right(quote)


def test_a_repeat_quoted_as_the_headline_fails():
    headline = "`make bench-copy` measures a bf16 step of this model only {} times as fast"
    old = Quote(
        "annotated/ch04_copy_task.py",
        headline,
        "copy.json",
        ("by_width / 64 / bf16_speedup_vs_fp32",),
    )
    assert unnamed_repeats(old) == ["copy.json: by_width / 64 / bf16_speedup_vs_fp32"]
    named = Quote("x.py", "({} times at width 64)", "copy.json", old.values)
    assert unnamed_repeats(named) == []
    assert unnamed_repeats(Quote("x.py", headline, "copy.json", ("bf16_speedup_vs_fp32",))) == []
    arithmetic = ('= 2 * get("copy.json: by_width / 64 / bf16_speedup_vs_fp32")',)
    assert unnamed_repeats(Quote("x.py", "{} times", "class.json", arithmetic)) != []


@pytest.mark.parametrize(
    ("written", "value", "ok"),
    [
        ("40.1", 40.13, True),
        ("40.13", 40.13, True),
        ("40.2", 40.13, False),
        ("4,532", 4532.4, True),
        ("0.75", 0.753, True),
        ("0.76", 0.753, False),
        ("39", 39.4, True),
        ("30", 30.6, False),
    ],
)
def test_a_figure_agrees_at_the_precision_it_is_written(written, value, ok):
    assert agrees(written, value) is ok


def notebook_scores(chapter: str) -> dict[tuple[str, str, str, str], float]:
    """The BLEU column of a training chapter's saved scores table: (split, weights, decoding,
    <unk> copied) -> BLEU."""
    notebook = nbformat.read(ROOT / "notebooks" / f"{chapter}.ipynb", as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code" and "final_scores(run)" in cell.source:
            text = "\n".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs)
            row = r"^\d+\s+(\S+)\s+(last|average of last \d+)\s+(greedy|beam \d+)\s+(yes|no)\s+([\d.]+)"
            return {m[:4]: float(m[4]) for m in re.findall(row, text, re.M)}
    raise AssertionError(f"{chapter}: no saved scores table")


def test_chapter_7s_run_and_the_records_are_two_makings_a_few_tenths_apart():
    """Chapter 7, section 5, says its notebook's run and the benchmark record's are two makings
    of one recipe (on two kinds of CPU), up to eight tenths of a point apart on every score both
    keep."""
    record = json.loads((RECORDS / "multi30k.json").read_text())
    scores = notebook_scores("ch07_multi30k")
    averaged = f"average of last {record['config']['average_last']}"
    beam = f"beam {record['config']['decoding']['beam']}"
    pairs = {
        "test2016_bleu_beam": ("test_2016_flickr", averaged, beam, "yes"),
        "test2016_bleu_greedy": ("test_2016_flickr", averaged, "greedy", "yes"),
        "test2016_bleu_greedy_last_weights_no_copy": ("test_2016_flickr", "last", "greedy", "no"),
        "val_bleu_beam": ("val", averaged, beam, "yes"),
        "val_bleu_greedy": ("val", averaged, "greedy", "yes"),
        "val_bleu_greedy_last_weights_no_copy": ("val", "last", "greedy", "no"),
    }
    for key, row in pairs.items():
        assert abs(scores[row] - record[key]) <= 0.8 + 1e-9, (
            f"notebooks/ch07_multi30k.ipynb scores {row} {scores[row]}, multi30k.json {key} "
            f"{record[key]}: chapter 7's section 5 says they are up to eight tenths of a point apart; update it"
        )


def _with_a_changed_output(notebook: nbformat.NotebookNode, pattern: str) -> bool:
    """Change, in a notebook's saved outputs, the number `pattern`'s group captures (as a retrained
    run would print another), keeping its digits' layout. Whether it was found."""
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            key = "text" if "text" in output else None
            text = output.get("text") if key else output.get("data", {}).get("text/plain")
            match = re.search(pattern, text or "")
            if not match:
                continue
            written = match.group(1)
            decimals = len(written.partition(".")[2])
            changed = f"{float(written.replace(',', '')) + 0.37:.{decimals}f}"
            text = text[: match.start(1)] + changed + text[match.end(1) :]
            if key:
                output["text"] = text
            else:
                output["data"]["text/plain"] = text
            return True
    return False


# The prose that describes one particular run's output: a retrained run must fail it, naming the
# line (issue 44). Each is (the quote's file, words of its `says`).
DESCRIBED_OUTPUTS = [
    ("annotated/ch08_wmt.py", "tokenized, {} sacreBLEU (section 8)"),
    ("annotated/ch07_multi30k.py", "The verb *fahren* puts {} of its weight"),
    ("annotated/ch07_multi30k.py", "*are* against *riding* and *ride*"),
]


@pytest.mark.parametrize(("file", "words"), DESCRIBED_OUTPUTS)
def test_a_retrained_run_fails_the_prose_that_describes_it(tmp_path, monkeypatch, file, words):
    (quote,) = [q for q in QUOTES if q.file == file and words in q.says]
    stem = Path(file).stem
    for folder, name in (("annotated", f"{stem}.py"), ("notebooks", f"{stem}.ipynb")):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / name).write_bytes((ROOT / folder / name).read_bytes())
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    test_the_prose_quotes_its_sources_right(quote)  # the saved run agrees with the prose
    notebook = nbformat.read(tmp_path / quote.source, as_version=4)
    patterns = [v for v in quote.values if not v.startswith("= ")]
    for pattern in patterns:  # every figure of the passage, one at a time
        changed = nbformat.read(tmp_path / quote.source, as_version=4)
        assert _with_a_changed_output(changed, pattern), f"{quote.label}: no output matches"
        nbformat.write(changed, tmp_path / quote.source)
        with pytest.raises(AssertionError, match=rf"{re.escape(file)}:\d+ says"):
            test_the_prose_quotes_its_sources_right(quote)
        nbformat.write(notebook, tmp_path / quote.source)
