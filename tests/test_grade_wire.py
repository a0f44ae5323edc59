"""The wire between the grader and a student's sandboxed process (tools/wire.py, which both
tools/grade.py and tools/grade_worker.py import). Values travel as plain JSON that carries data
and no code: what a function returns must come back equal, dtype and all; the book's dataclasses
come back as themselves; anything else only as its type's name; and what the student could write
on the channel is refused, not run. Every record the worker writes is of a shape the grader
reads, and every word annotated.exercises.judge says is a Status."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from annotated.ch03_training import SpecialTokens
from annotated.exercises import Raised, Returned, TimedOut, compare, judge
from annotated.exercises.ch01_attention import exercise_1_3
from tools import wire
from tools.wire import Status


@dataclasses.dataclass
class Elsewhere:
    """A dataclass that is not the book's: a student's record may name it."""

    x: int = 0


def through_the_wire(value, book_only: bool = True):
    return wire.decode(json.loads(json.dumps(wire.encode(value))), book_only)


@pytest.mark.parametrize(
    "tensor",
    [
        torch.randn(2, 3, dtype=torch.float64),
        torch.randn(4, 5).to(torch.bfloat16),
        torch.randn(3).half(),
        torch.tensor([[True, False]]),
        torch.arange(6).reshape(2, 3).t(),  # not contiguous
        torch.tensor(2.5),  # no dimension
        torch.empty(0, 4),
    ],
    ids=["float64", "bfloat16", "float16", "bool", "transposed", "scalar", "empty"],
)
def test_tensors_come_back_equal_with_their_dtype_and_shape(tensor):
    back = through_the_wire(tensor)
    assert back.dtype == tensor.dtype and back.shape == tensor.shape
    assert torch.equal(back, tensor)


def test_containers_numbers_and_the_books_dataclasses_come_back_as_they_were():
    value = {
        "ids": [[5, 6], (7,)],
        3: (1.5, float("inf"), None, True, "Ein Hund"),
        "specials": SpecialTokens(pad=0, bos=1, eos=2),
        "numpy": np.float64(0.25),
    }
    back = through_the_wire(value)
    assert back["ids"] == [[5, 6], (7,)] and isinstance(back["ids"][1], tuple)
    assert back[3][:2] == (1.5, math.inf) and back[3][2:] == (None, True, "Ein Hund")
    assert back["specials"] == SpecialTokens(pad=0, bos=1, eos=2)
    assert back["numpy"] == 0.25 and type(back["numpy"]) is float
    assert math.isnan(through_the_wire(float("nan")))


def test_other_types_travel_as_their_name_alone_and_the_hint_still_names_them():
    back = through_the_wire(np.zeros(3))
    assert type(back).__name__ == "ndarray" and not hasattr(back, "shape")
    assert (
        compare(back, torch.zeros(3), 1e-6) == "you returned a ndarray, the book returns a tensor"
    )

    @dataclasses.dataclass
    class Mine:
        x: int

    assert type(through_the_wire(Mine(3))).__name__ == "Mine"  # not the book's: not rebuilt


def test_what_the_student_writes_is_refused_not_run():
    for forged in (
        {"$dataclass": "os:system", "fields": {}},  # not a dataclass of the book's
        {"$dataclass": "subprocess:Popen", "fields": {"args": "true"}},
    ):
        assert isinstance(wire.decode(forged), wire.Foreign)
    named = {"$dataclass": f"{__name__}:Elsewhere", "fields": {"x": 1}}
    assert isinstance(wire.decode(named), wire.Foreign)
    assert wire.decode(named, book_only=False) == Elsewhere(1)  # the grader's own job only
    for bad in ({"$pickle": "x"}, {"$float": "1e400"}, ["a", "bare", "list"], {"$tensor": 3}):
        with pytest.raises((ValueError, TypeError)):
            wire.decode(bad)


def test_the_job_brings_the_cases_back_as_they_were_sent():
    cases = [((torch.arange(3),), {"mask": None, "specials": SpecialTokens(0, 1, 2)})]
    job = wire.read_job(wire.job_message("ch01_attention", ["x = 1"], 2.5, [("1.2", "f", cases)]))
    assert (job["chapter"], job["cells"], job["call_timeout"]) == ("ch01_attention", ["x = 1"], 2.5)
    (call,) = job["calls"]
    assert (call["id"], call["name"]) == ("1.2", "f")
    ((args, kwargs),) = wire.call_cases(call)
    assert torch.equal(args[0], torch.arange(3)) and kwargs == cases[0][1]


def test_every_record_the_worker_writes_is_one_the_grader_reads():
    outcomes = [wire.returned(torch.ones(2)), wire.raised("ValueError", "no"), wire.timed_out(5)]
    written = [
        wire.cell_record(1, None),
        wire.cell_record(2, "ZeroDivisionError: division by zero"),
        wire.missing_record("1.2", "my_attention"),
        wire.answer_record("1.3", outcomes),
        wire.DONE_RECORD,
    ]
    sent = "".join(wire.line(record) for record in written).encode()
    assert sent.endswith(wire.DONE)
    assert wire.read_records(sent) == written
    value, raised, timed_out = (wire.outcome(item) for item in outcomes)
    assert isinstance(value, Returned) and torch.equal(value.value, torch.ones(2))
    assert (raised, timed_out) == (Raised("ValueError", "no"), TimedOut(5.0))


def test_lines_of_no_known_shape_are_skipped_and_outcomes_of_none_refused():
    forged = (
        b'{"cell": [1], "raised": "x"}\n{"cell": 1, "raised": 7}\n{"exercise": {"a": 1}}\n'
        b'{"exercise": "1.3", "outcomes": "all passed"}\n{"done": false}\n[1]\n\xff\xfe junk\n'
    )
    assert wire.read_records(forged + wire.DONE) == [wire.DONE_RECORD]
    for item in (5, {"value": {"$tensor": 3}}, {"passed": True}, {"raised": "x"}):
        with pytest.raises((ValueError, TypeError, KeyError)):
            wire.outcome(item)


def test_every_word_of_the_books_judge_is_a_status():
    """The grader reads judge()'s first word as a Status: each of its four, here on chapter 1's
    exercise 1.3 (ERROR is the grader's own)."""
    cases = exercise_1_3.cases()
    right = [Returned(exercise_1_3.reference(*args, **kwargs)) for args, kwargs in cases]
    words = {
        judge(exercise_1_3, cases, outcomes)[0]
        for outcomes in (
            right,
            [Raised("NotImplementedError", "exercise: write your answer here")],
            [Raised("ValueError", "wrong")],
            [TimedOut(5.0)],
        )
    }
    assert {Status(word) for word in words} == set(Status) - {Status.ERROR}
    assert all(Status(word) == word and f"{Status(word)}" == word for word in words)
