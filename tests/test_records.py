"""Every record of a measurement names the machine it was taken on and the code it measured.

A cross-cutting check over the records (benchmarks/results/*.json, and chapter 9's Table 3 record in
annotated/results/): a figure the book quotes is worth only as much as what a reader can find out
about how it was made. So each record must name

- its **machine**: a "machine" at its top, or in each of its parts (a list of runs or lines, each
  naming its own; a block of measurements naming its own "machine" or "cpu");
- its **commit**: "commit", the commit the code was measured on (`benchmarks/common.py` writes it
  into every new record), or, for a record made before records carried one, "last committed in",
  the last commit that changed the file before that field was added (its measurements were made
  on that commit's code, its parent's, or, for a record built up over several commits, earlier:
  `git log -- <record>` lists them). A list of runs, or a record of blocks (one per machine),
  may instead name a commit in each run or block.

"last committed in" is checked against the history where the checkout has one: it must be a commit
that changed that very file.
"""

from __future__ import annotations

import json
from pathlib import Path

import checkout
import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDS = sorted((ROOT / "benchmarks" / "results").glob("*.json")) + [
    ROOT / "annotated" / "results" / "table3.json"
]
MACHINE_KEYS = ("machine", "cpu")
COMMIT_KEYS = ("commit", "last committed in")


def _parts(record: dict) -> list:
    """The parts of a record that hold measurements: its lists' elements and its blocks."""
    parts = []
    for value in record.values():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            parts += value
        elif isinstance(value, dict):
            parts.append(value)
    return parts


def names(record: dict, keys: tuple[str, ...], parts_may: bool = True) -> bool:
    """Whether the record names one of `keys` at its top, or (if `parts_may`) in every part."""
    if any(record.get(key) for key in keys):
        return True
    parts = _parts(record)
    return parts_may and bool(parts) and all(any(p.get(k) for k in keys) for p in parts)


def missing(record: dict) -> list[str]:
    """What the record fails to name: 'machine', 'commit', or nothing."""
    gaps = []
    if not names(record, MACHINE_KEYS):
        gaps.append("machine")
    runs = [v for v in record.values() if isinstance(v, list) and v]
    per_run = runs and all(all(isinstance(r, dict) and r.get("commit") for r in v) for v in runs)
    if not (names(record, COMMIT_KEYS) or per_run):
        gaps.append("commit")
    return gaps


def _label(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", RECORDS, ids=_label)
def test_every_record_names_its_machine_and_its_commit(path):
    gaps = missing(json.loads(path.read_text(encoding="utf-8")))
    assert not gaps, (
        f"{_label(path)} does not name its {' or its '.join(gaps)}: a record says where it was "
        "measured ('machine', from benchmarks/common.py's describe()) and on which code ('commit', "
        "which write_results adds; see this test's docstring for older records)"
    )


@pytest.mark.parametrize("path", RECORDS, ids=_label)
def test_last_committed_in_is_a_commit_that_changed_the_record(path):
    record = json.loads(path.read_text(encoding="utf-8"))
    if "last committed in" not in record:
        pytest.skip("names the commit it was measured on")
    history = checkout.history(path)
    if history is None:
        pytest.skip("not a git checkout with this record's history (or a shallow clone)")
    assert record["last committed in"] in history, (
        f"{_label(path)}: 'last committed in' {record['last committed in']} is not a commit that "
        f"changed this file (`git log -- {_label(path)}`)"
    )


# ---------------------------------------------------------------- the test can fail


def test_a_record_without_machine_or_commit_is_named():
    assert missing({"machine": "x86_64", "commit": "abc"}) == []
    assert missing({"bleu": 40.1}) == ["machine", "commit"]
    assert missing({"machine": "x86_64", "bleu": 40.1}) == ["commit"]
    lines = {"lines": [{"machine": "a", "bleu": 1}, {"bleu": 2}], "last committed in": "abc"}
    assert missing(lines) == ["machine"]
    runs = {"runs": [{"machine": "a", "commit": "c1"}, {"machine": "b", "commit": "c2"}]}
    assert missing(runs) == []
    runs["runs"][1].pop("commit")
    assert missing(runs) == ["commit"]
