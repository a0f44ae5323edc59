"""Exercises whose checks say what is wrong: `check(exercise_1_2, your_function)`.

Each chapter ends with exercises. An "implement" exercise is an `Exercise`: the book's own function
(the reference), a set of inputs (random ones and edge cases), and the **mistakes** students
plausibly make, each written out as a small wrong function with a hint. `check` runs the student's
function on every input and compares it with the reference. At the first difference it looks for
the known mistake that gives exactly the student's output there, and names it; otherwise it tries
the general diagnoses of `annotated/exercises/diagnoses.py` (a transpose, a constant factor, a
normalization over another dimension, a mask not applied, an off-by-one, a difference the size of
epsilon or of float32's rounding...). Either way it says what differs (a device or a dtype first,
then a shape, a value, a length), and two numbers are shown with as many digits as it takes to
see that they differ. It never shows a traceback: an unfinished stub
(`raise NotImplementedError`) is reported as not done yet, and any other exception in one line.
`check` returns True or False and prints one line, so a notebook of exercises always runs to its
end. `tests/test_exercises.py` holds wrong answers, written apart from the book's list of mistakes,
that each check must reject with the right hint.

This package holds the machinery; each chapter's exercises (their `Exercise` objects, the cases
and the wrong answers) are in `annotated/exercises/chNN_topic.py`, which the chapter's notebook
imports in the cell where the exercises begin.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

Case = tuple[tuple, dict]  # positional and keyword arguments of one call


@dataclass(frozen=True)
class Mistake:
    """A plausible wrong answer, written out, and the hint to give when a student's output matches it."""

    hint: str
    function: Callable[..., Any]


@dataclass(frozen=True)
class Exercise:
    """An "implement" exercise: what to write, the book's answer, the inputs, the known mistakes."""

    name: str  # "1.2 scaled dot-product attention"
    task: str  # one line: what the function takes and returns
    reference: Callable[..., Any]
    cases: Callable[[], list[Case]]  # built afresh for each check (random, seeded, and edge cases)
    mistakes: Sequence[Mistake] = field(default_factory=tuple)
    atol: float = 1e-6  # tensors and floats must agree to this (relative to their size)
    # `make grade`'s extra inputs, drawn afresh from a generator at every grading; None: the cases
    # with their floating-point tensors redrawn (fresh_cases)
    fresh: Callable[[torch.Generator], list[Case]] | None = None


def check(exercise: Exercise, answer: Callable[..., Any]) -> bool:
    """Run `answer` on the exercise's inputs against the book's function; print one line, say if right."""
    cases = exercise.cases()
    outcomes = []
    for args, kwargs in cases:
        outcomes.append(run_answer(answer, args, kwargs))
        if not isinstance(outcomes[-1], Returned):
            break
    status, line = judge(exercise, cases, outcomes)
    print(line)
    return status == "pass"


@dataclass(frozen=True)
class Returned:
    """What an answer returned on one input."""

    value: Any


@dataclass(frozen=True)
class Raised:
    """An answer that raised on one input: the exception's type name and message (NotImplementedError
    is an unfinished stub: not done yet)."""

    kind: str
    message: str


@dataclass(frozen=True)
class TimedOut:
    """An answer stopped after its time limit on one input (only `make grade` sets one)."""

    seconds: float


Outcome = Returned | Raised | TimedOut


def run_answer(answer: Callable[..., Any], args: tuple, kwargs: dict) -> Outcome:
    """`answer` on copies of one input: what it returned or how it raised."""
    try:
        return Returned(answer(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
    except Exception as error:  # a student's bug: one line, not a traceback wall
        return Raised(type(error).__name__, str(error))


def judge(
    exercise: Exercise, cases: Sequence[Case], outcomes: Sequence[Outcome]
) -> tuple[str, str]:
    """The verdict on an answer's outcomes, one per case in order (they may stop at the first that
    is not a returned value): ("pass" | "fail" | "not done" | "timed out", the line to show).
    `check` prints the line; `make grade` (tools/grade.py) judges outcomes that a student's
    sandboxed process sent back, on the grader's side."""
    for number, ((args, kwargs), outcome) in enumerate(zip(cases, outcomes, strict=False), start=1):
        where = f"input {number} ({describe(args, kwargs)})"
        if isinstance(outcome, Raised) and outcome.kind == "NotImplementedError":
            return "not done", (
                f"… {exercise.name}: not done yet. Replace `raise NotImplementedError` with your code."
            )
        if isinstance(outcome, Raised):
            from annotated.exercises.diagnoses import raised

            hint = raised(outcome.kind, outcome.message, args, kwargs)
            return "fail", (
                f"✗ {exercise.name}: your function raised {outcome.kind} on {where}: "
                f"{outcome.message}" + (f" Likely: {hint}" if hint else "")
            )
        if isinstance(outcome, TimedOut):
            return "timed out", (
                f"✗ {exercise.name}: your function did not return within {outcome.seconds:g} s "
                f"on {where}."
            )
        expected = exercise.reference(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        difference = compare(outcome.value, expected, exercise.atol)
        if difference is None:
            continue
        runs = [
            (case_args, case_kwargs, other.value)
            for (case_args, case_kwargs), other in zip(cases, outcomes, strict=False)
            if isinstance(other, Returned)
        ]
        hint = diagnose(exercise, args, kwargs, outcome.value, expected, runs)
        return "fail", (
            f"✗ {exercise.name}: on {where} {difference}." + (f" Likely: {hint}" if hint else "")
        )
    if len(outcomes) < len(cases):
        raise ValueError(f"{len(outcomes)} outcomes for {len(cases)} cases, all returned values")
    return "pass", (
        f"✓ {exercise.name}: your function agrees with the book's on all {len(cases)} inputs."
    )


def draw(generator: torch.Generator, low: int, high: int) -> int:
    """An integer in [low, high], from `generator` (for the exercises' fresh draws)."""
    return int(torch.randint(low, high + 1, (), generator=generator))


def fresh_cases(exercise: Exercise, generator: torch.Generator) -> list[Case]:
    """Inputs drawn afresh from `generator`, for `make grade`: the exercise's own `fresh` draw, or
    its cases with every floating-point tensor redrawn at the same shape, dtype and spread (masks,
    ids and sizes kept). A table of answers prepared for the fixed cases cannot pass them."""
    if exercise.fresh is not None:
        return exercise.fresh(generator)

    def redraw(value: Any) -> Any:
        if isinstance(value, Tensor) and value.is_floating_point():
            spread = value.double().std().item() if value.numel() > 1 else 1.0
            noise = torch.randn(value.shape, generator=generator, dtype=torch.float64)
            return (noise * (spread if spread > 0 else 1.0)).to(value.dtype)
        if isinstance(value, dict):
            return {key: redraw(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(redraw(item) for item in value)
        return value

    return [(redraw(args), redraw(kwargs)) for args, kwargs in exercise.cases()]


def diagnose(
    exercise: Exercise,
    args: tuple,
    kwargs: dict,
    got: Any,
    expected: Any = None,
    runs: Sequence[tuple[tuple, dict, Any]] = (),
) -> str | None:
    """The hint of the first known mistake whose output equals the student's on this input and on
    every other input the answer returned on (`runs`: arguments, keyword arguments, value); else
    the first general diagnosis that explains it (annotated/exercises/diagnoses.py). A mistake that
    gives the student's output on one input only is a coincidence, not a diagnosis."""
    for mistake in exercise.mistakes:
        if all(
            _gives(mistake.function, exercise.atol, *run) for run in [(args, kwargs, got), *runs]
        ):
            return mistake.hint
    from annotated.exercises.diagnoses import general

    if _device_or_dtype(got, expected):  # compare has said it, first: nothing to add
        return None
    return general(exercise.reference, args, kwargs, got, expected, exercise.atol, runs)


def _gives(function: Callable[..., Any], atol: float, args: tuple, kwargs: dict, got: Any) -> bool:
    """Whether `function` returns `got` on this input (False where it cannot run on it)."""
    try:
        value = function(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    except Exception:  # noqa: BLE001 - a mistake that cannot run here is not the student's
        return False
    if isinstance(got, Tensor) and isinstance(value, Tensor) and got.is_floating_point():
        # a row with every position hidden is NaN in one answer and 0 in another: the same slip
        got, value = got.detach().nan_to_num(), value.detach().nan_to_num()
    return compare(got, value, atol) is None


def _device_or_dtype(got: Any, expected: Any) -> bool:
    return (
        isinstance(got, Tensor)
        and isinstance(expected, Tensor)
        and (got.device != expected.device or got.dtype != expected.dtype)
    )


def numbers(mine: float, book: float) -> str:
    """ "you have X, the book Y", with as many digits as it takes to see they differ, and by how
    much when they look alike."""
    for digits in range(4, 18):
        a, b = f"{mine:.{digits}g}", f"{book:.{digits}g}"
        if a != b:
            break
    text = f"you have {a}, the book {b}"
    if digits > 4:
        text += f" (a difference of {abs(mine - book):.1e})"
    return text


def compare(got: Any, expected: Any, atol: float) -> str | None:
    """None if `got` equals `expected` (tensors and floats to within atol), else what differs; a
    tensor's device or dtype first, when it differs."""
    if isinstance(expected, Tensor):
        if not isinstance(got, Tensor):
            return f"you returned a {type(got).__name__}, the book returns a tensor"
        if got.device != expected.device:
            return (
                f"your output is on {got.device}, the book's on {expected.device}: make it where "
                "the inputs are (torch.zeros(..., device=x.device), or no .to())"
            )
        difference = _tensor_difference(got, expected, atol)
        if got.dtype != expected.dtype:  # a dtype the task does not ask for is wrong, alone too
            mine, book = (str(t.dtype).replace("torch.", "") for t in (got, expected))
            lead = f"your output is {mine}, the book's {book}"
            if difference is None or difference.startswith("your output is"):
                return lead
            return f"{lead} ({difference})"
        return difference
    if isinstance(got, float) and isinstance(expected, list | tuple | dict | str):
        return f"you returned a float, the book returns a {type(expected).__name__}"
    if isinstance(expected, float) or isinstance(got, float):
        if not isinstance(got, int | float) or isinstance(got, bool):
            return f"you returned a {type(got).__name__}, the book returns a number"
        if not math.isclose(got, expected, rel_tol=atol, abs_tol=atol):
            return numbers(got, expected)
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return "your result does not have the book's keys"
        for key in expected:
            difference = compare(got[key], expected[key], atol)
            if difference is not None:
                return f"for {key!r}: {difference}"
        return None
    if isinstance(expected, list | tuple):
        if not isinstance(got, list | tuple):
            return (
                f"you returned a {type(got).__name__}, the book returns a {type(expected).__name__}"
            )
        if len(got) != len(expected):
            return f"your result has {len(got)} items, the book's {len(expected)}"
        for index, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
            difference = compare(mine, theirs, atol)
            if difference is not None:
                return f"item {index}: {difference}"
        return None
    if got != expected:
        return f"you have {got!r}, the book {expected!r}"
    return None


def _tensor_difference(got: Tensor, expected: Tensor, atol: float) -> str | None:
    """What differs between two tensors on one device: the shape, then the largest gap."""
    if tuple(got.shape) != tuple(expected.shape):
        return f"your output has shape {tuple(got.shape)}, the book's {tuple(expected.shape)}"
    if expected.dtype == torch.bool or not expected.is_floating_point():
        if got.dtype != expected.dtype and expected.dtype == torch.bool:
            return "your output is not a bool tensor: make it one (.bool(), or a comparison)"
        wrong = (got != expected).nonzero()
        if len(wrong):
            index = tuple(wrong[0].tolist())
            return (
                f"at index {index} you have {got[index].item()}, the book {expected[index].item()}"
            )
        return None
    got64, expected64 = got.detach().double(), expected.detach().double()
    if torch.isnan(got64).any() and not torch.isnan(expected64).any():
        return "your output has NaN where the book's has numbers"
    scale = max(1.0, expected64.abs().max().item()) if expected64.numel() else 1.0
    both_nan = torch.isnan(got64) & torch.isnan(expected64)  # NaN where the other has NaN agrees
    gap = (got64 - expected64).abs().nan_to_num(nan=math.inf).masked_fill(both_nan, 0.0)
    if gap.numel() and gap.max().item() > atol * scale:
        index = tuple(int(i) for i in (gap == gap.max()).nonzero()[0].tolist())
        return f"at index {index} " + numbers(got64[index].item(), expected64[index].item())
    return None


def describe(args: tuple, kwargs: dict) -> str:
    """A short description of one input, for the messages: shapes of tensors, values of the rest."""

    def one(value: Any) -> str:
        if isinstance(value, Tensor):
            return f"{value.dtype}".replace("torch.", "") + f" {tuple(value.shape)}"
        if isinstance(value, list | tuple) and len(value) > 4:
            return f"{type(value).__name__} of {len(value)}"
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."

    parts = [one(value) for value in args] + [f"{k}={one(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)
