"""The wire between the grader and a student's sandboxed process (tools/wire.py, which both
tools/grade.py and tools/grade_worker.py import). Values travel as plain JSON that carries data
and no code: what a function returns must come back equal, dtype and all; the book's dataclasses
come back as themselves; anything else only as its type's name; and what the student could write
on the channel is refused, not run."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from annotated.ch03_training import SpecialTokens
from annotated.exercises import compare
from tools import wire


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
