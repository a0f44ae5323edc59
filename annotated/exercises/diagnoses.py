"""What a wrong answer's output says about the mistake, for any exercise: the general diagnoses.

An exercise's own list of mistakes names the wrong answers its author foresaw. The diagnoses here
look at the output alone (and at the inputs), so they name mistakes nobody listed: `check` tries
them after the exercise's own mistakes have not matched: first those that run the book's function
on changed inputs (an off-by-one, a mask), then those that read the values, on the whole output and
then on the first item of a dict or a list that differs.

- the output is the book's transposed, or has a dimension of size 1 missing or extra;
- the output holds the book's items in another order;
- a number is 1 minus the book's (a complement), or the book's times (n/m)^x for a small fraction
  and an input x (a constant inside a power that differs);
- the output is the book's times a constant (a factor missing or extra; named when it is the
  square root of a size, a size, 2 or 100);
- the output is normalized over another dimension than the book's (a softmax's distributions, or a
  normalization's zero mean and unit variance);
- the output differs from the book's only where a mask hides positions, or equals the book's
  answer to the same input without its mask;
- the output is the book's for an integer input one more or one less (an off-by-one in a length or
  an index), or every id is one off, or a list has one item too many or too few;
- the output is within a relative 1e-7 to 1e-4 of the book's (a small constant such as epsilon, or
  float32 arithmetic).

A dtype or a device that differs is said before any of these, by `compare` (annotated/exercises).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

CLOSE = (1e-7, 1e-4)  # relative differences that look like epsilon or float32's rounding


def general(
    reference: Callable[..., Any], args: tuple, kwargs: dict, got: Any, expected: Any, atol: float
) -> str | None:
    """The first general diagnosis that explains `got`, or None. The diagnoses that run the book's
    function on other inputs look at the whole output; the others, when it is a dict, a list or a
    tuple, also at its first item that differs."""
    for diagnosis in WHOLE + ITEM:
        found = _try(diagnosis, reference, args, kwargs, got, expected, atol)
        if found:
            return found
    where, got_item, expected_item = _first_difference(got, expected, atol)
    if where is None:
        return None
    for diagnosis in ITEM:
        found = _try(diagnosis, reference, args, kwargs, got_item, expected_item, atol)
        if found:
            return f"{where}: {found}"
    return None


def _try(diagnosis, *arguments) -> str | None:
    try:
        return diagnosis(*arguments)
    except Exception:  # noqa: BLE001 - a diagnosis that cannot look at this output says nothing
        return None


def _first_difference(got: Any, expected: Any, atol: float) -> tuple[str | None, Any, Any]:
    """Where a dict's or a sequence's first differing item is, and the two items."""
    if isinstance(got, dict) and isinstance(expected, dict) and set(got) == set(expected):
        for key in expected:
            if not _same(got[key], expected[key], atol):
                return f"for {key!r}", got[key], expected[key]
    sequences = isinstance(got, list | tuple) and isinstance(expected, list | tuple)
    if sequences and len(got) == len(expected):
        for index, (mine, theirs) in enumerate(zip(got, expected, strict=True)):
            if not _same(mine, theirs, atol):
                return f"item {index}", mine, theirs
    return None, None, None


def _same(a: Any, b: Any, atol: float) -> bool:
    from annotated.exercises import compare

    return compare(a, b, atol) is None


def _float_tensors(got: Any, expected: Any) -> bool:
    return (
        isinstance(got, Tensor)
        and isinstance(expected, Tensor)
        and expected.is_floating_point()
        and got.is_floating_point()
    )


# --- shapes --------------------------------------------------------------------------------------
def _shape(reference, args, kwargs, got, expected, atol) -> str | None:
    if not (isinstance(got, Tensor) and isinstance(expected, Tensor)) or got.dim() < 1:
        return None
    square = got.shape == expected.shape and got.dim() >= 2 and got.size(-1) == got.size(-2)
    if square and _same(got.transpose(-2, -1), expected, atol):
        return "your output is the book's transposed: its last two dimensions are swapped."
    if got.shape != expected.shape and got.dim() == expected.dim():
        for i in range(got.dim()):
            for j in range(i + 1, got.dim()):
                if got.transpose(i, j).shape == expected.shape and _same(
                    got.transpose(i, j), expected, atol
                ):
                    return (
                        f"your output is the book's with dimensions {i} and {j} swapped "
                        f"(shape {tuple(got.shape)} for {tuple(expected.shape)})."
                    )
    reshaped = got.shape != expected.shape and got.numel() == expected.numel()
    if reshaped and _same(got.reshape(expected.shape), expected, atol):
        which = "missing" if got.dim() < expected.dim() else "extra"
        return (
            f"your output has the book's numbers, in shape {tuple(got.shape)} for "
            f"{tuple(expected.shape)}: a dimension of size 1 is {which} "
            "(keepdim=True, unsqueeze or squeeze)."
        )
    if got.dim() == expected.dim():
        off = [(d, got.size(d) - expected.size(d)) for d in range(got.dim())]
        off = [(d, n) for d, n in off if n]
        if len(off) == 1 and abs(off[0][1]) == 1:
            d, n = off[0]
            more = "one more" if n > 0 else "one fewer"
            return (
                f"off by one: your output has {more} position along dimension {d} than the "
                f"book's ({got.size(d)} for {expected.size(d)}): check a length or a range's end."
            )
    return None


# --- the items in another order ------------------------------------------------------------------
def _order(reference, args, kwargs, got, expected, atol) -> str | None:
    if not (isinstance(got, list | tuple) and isinstance(expected, list | tuple)):
        return None
    if len(got) != len(expected) or len(got) < 2:
        return None
    if _same(list(reversed(got)), list(expected), atol):
        return "your result holds the book's items in the reverse order."
    try:
        same_items = sorted(map(repr, got)) == sorted(map(repr, expected))
    except TypeError:
        return None
    return "your result holds the book's items, in another order." if same_items else None


# --- one minus ------------------------------------------------------------------------------------
def _complement(reference, args, kwargs, got, expected, atol) -> str | None:
    if not (isinstance(got, int | float) and isinstance(expected, int | float)):
        return None
    if 0 <= expected <= 1 and math.isclose(got, 1 - expected, rel_tol=1e-9, abs_tol=1e-12):
        return (
            "your output is 1 minus the book's: you computed the complement (the share of what "
            "the book's fraction leaves out)."
        )
    return None


# --- a constant factor ---------------------------------------------------------------------------
def _sizes(args: tuple, kwargs: dict) -> set[int]:
    found = set()
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, Tensor):
            found |= {int(n) for n in value.shape if n > 1}
        elif isinstance(value, int) and not isinstance(value, bool) and 1 < value <= 10**6:
            found.add(value)
    return found


def _ratio(got: Any, expected: Any) -> float | None:
    """got / expected, if it is one constant (other than 1) wherever the book's output is not 0."""
    if isinstance(expected, int | float) and isinstance(got, int | float):
        if expected == 0 or isinstance(got, bool):
            return None
        return got / expected
    if not _float_tensors(got, expected) or got.shape != expected.shape:
        return None
    g, e = got.detach().double().flatten(), expected.detach().double().flatten()
    big = e.abs() > 1e-6 * e.abs().max()
    if big.sum() < 2 or not torch.allclose(g[~big], torch.zeros_like(g[~big]), atol=1e-9):
        return None
    ratios = g[big] / e[big]
    r = ratios.mean().item()
    if not torch.allclose(ratios, torch.full_like(ratios, r), rtol=1e-6, atol=0):
        return None
    return r


def _power_of_fraction(reference, args, kwargs, got, expected, atol) -> str | None:
    """A number's ratio to the book's that is (n/m)^x for a number x among the inputs: a constant
    inside a power that differs (5 where the book has 6)."""
    if not (isinstance(got, int | float) and isinstance(expected, int | float)) or expected == 0:
        return None
    r = got / expected
    if r <= 0 or math.isclose(r, 1.0, rel_tol=1e-9):
        return None
    for index, x in enumerate(args):
        if isinstance(x, float) and x not in (0.0, 1.0):
            base = r ** (1 / x)
            for m in range(1, 13):
                n = round(base * m)
                if 0 < n <= 12 and n != m and math.isclose(base, n / m, rel_tol=1e-9):
                    return (
                        f"your output is the book's times ({n}/{m})^{_short(x)} (input "
                        f"{index + 1} is the power): inside the power, a {m} where the book has "
                        f"{n}, or the other way round."
                    )
    return None


def _factor(reference, args, kwargs, got, expected, atol) -> str | None:
    r = _ratio(got, expected)
    if r is None or not math.isfinite(r) or r == 0 or math.isclose(r, 1.0, rel_tol=CLOSE[1]):
        return None  # a factor this near 1 is said as "close"
    scalar = isinstance(expected, int | float)  # one number: any two differ by "a factor"
    named = {2.0: ("2", ""), 100.0: ("100", " (a percentage?)")}
    for n in sorted(_sizes(args, kwargs)):
        named.setdefault(float(n), (str(n), ""))
        named.setdefault(math.sqrt(n), (f"sqrt({n})", f" (= {_short(math.sqrt(n))})"))
    for value, (name, note) in named.items():
        if math.isclose(r, value, rel_tol=1e-6):
            return (
                f"your output is the book's times {name}{note}: a division by {name} is "
                "missing, or a product by it is extra."
            )
        if math.isclose(r, 1 / value, rel_tol=1e-6):
            return (
                f"your output is the book's divided by {name}{note}: a product by {name} is "
                "missing, or a division by it is extra."
            )
    if scalar:
        return None
    return (
        f"your output is the book's times {_short(r)} everywhere: a constant factor is missing or "
        "extra."
    )


def _short(x: float) -> str:
    return f"{x:.6g}"


# --- normalized over another dimension -----------------------------------------------------------
def _distribution_dims(t: Tensor) -> list[int]:
    """Dimensions along which t is a probability distribution (nonnegative, summing to 1)."""
    if (t < -1e-12).any():
        return []
    return [d for d in range(t.dim()) if t.size(d) > 1 and _near(t.sum(d), 1.0)]


def _standardized_dims(t: Tensor) -> list[int]:
    """Dimensions along which t has mean 0 and variance 1 (biased or not)."""
    found = []
    for d in range(t.dim()):
        if t.size(d) < 2:
            continue
        mean = t.mean(d)
        if _near(mean, 0.0, 1e-6) and (
            _near(t.var(d, unbiased=False), 1.0, 1e-3) or _near(t.var(d), 1.0, 1e-3)
        ):
            found.append(d)
    return found


def _near(t: Tensor, value: float, tol: float = 1e-6) -> bool:
    return bool(((t - value).abs() <= tol).all())


def _affine_undone(t: Tensor, args: tuple) -> list[Tensor]:
    """t, and t with a per-feature gain and shift undone for each pair of 1-D inputs that fit."""
    vectors = [
        a for a in args if isinstance(a, Tensor) and a.dim() == 1 and a.size(0) == t.size(-1)
    ]
    found = [t]
    for gain in vectors:
        for shift in vectors:
            if gain is not shift and bool((gain.abs() > 1e-12).all()):
                found.append((t - shift) / gain)
    return found


def _normalized_elsewhere(reference, args, kwargs, got, expected, atol) -> str | None:
    if not _float_tensors(got, expected) or got.shape != expected.shape or got.dim() < 2:
        return None
    g, e = got.detach().double(), expected.detach().double()
    mine, book = _distribution_dims(g), _distribution_dims(e)
    if mine and book and not set(mine) & set(book):
        return (
            f"your output sums to 1 over dimension {mine[0]}, the book's over dimension "
            f"{book[0]}: the softmax (or the normalization) runs over the wrong dimension."
        )
    for g_view, e_view in zip(_affine_undone(g, args), _affine_undone(e, args), strict=False):
        mine, book = _standardized_dims(g_view), _standardized_dims(e_view)
        if mine and book and not set(mine) & set(book):
            last = " (the last)" if book[0] == e.dim() - 1 else ""
            return (
                f"your output is normalized over dimension {mine[0]}; the book normalizes over "
                f"dimension {book[0]}{last}: take the mean and the variance along that one."
            )
    return None


# --- masks ---------------------------------------------------------------------------------------
def _mask_positions(args: tuple, kwargs: dict) -> list[tuple[str | int, Tensor]]:
    found = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor) and a.dtype == torch.bool]
    found += [(k, a) for k, a in kwargs.items() if isinstance(a, Tensor) and a.dtype == torch.bool]
    return found


def _without(args: tuple, kwargs: dict, where: str | int, value: Any) -> tuple[tuple, dict]:
    args, kwargs = list(copy.deepcopy(args)), copy.deepcopy(kwargs)
    if isinstance(where, int):
        args[where] = value
    else:
        kwargs[where] = value
    return tuple(args), kwargs


def _mask(reference, args, kwargs, got, expected, atol) -> str | None:
    masks = _mask_positions(args, kwargs)
    if not masks or not isinstance(got, Tensor) or not isinstance(expected, Tensor):
        return None
    for where, mask in masks:
        if bool(mask.all()):
            continue
        for stand_in in (None, torch.ones_like(mask)):
            plain_args, plain_kwargs = _without(args, kwargs, where, stand_in)
            try:
                unmasked = reference(*plain_args, **plain_kwargs)
            except Exception:  # noqa: BLE001 - this reference needs its mask
                continue
            if _same(got, unmasked, atol):
                return (
                    "your output is the book's answer with no mask at all: the mask is ignored. "
                    "Fill the masked positions with minus infinity before the softmax."
                )
        hidden_rows = (~mask).any(-1)  # a query (a row) that has some position hidden
        if got.shape != expected.shape:
            continue
        differs = ((got.detach().double() - expected.detach().double()).abs() > atol).reshape(
            got.shape
        )
        rows = differs.any(-1)
        try:
            hidden = torch.broadcast_to(hidden_rows, rows.shape)
        except RuntimeError:
            continue
        if rows.any() and not (rows & ~hidden).any():
            return (
                "your output differs from the book's only where the mask hides positions: the "
                "masked positions are not ignored. Fill them with minus infinity before the "
                "softmax (filling with 0 still lets them in)."
            )
    return None


# --- off by one ----------------------------------------------------------------------------------
def _off_by_one(reference, args, kwargs, got, expected, atol) -> str | None:
    for index, value in enumerate(args):
        if isinstance(value, int) and not isinstance(value, bool):
            for step in (1, -1):
                changed = list(args)
                changed[index] = value + step
                try:
                    other = reference(*copy.deepcopy(tuple(changed)), **copy.deepcopy(kwargs))
                except Exception:  # noqa: BLE001 - not a valid input for the book's function
                    continue
                if _same(got, other, atol):
                    return (
                        f"off by one: your output is the book's for input {index + 1} = "
                        f"{value + step} instead of {value}. Check a length, a count or a "
                        "range's end."
                    )
    if isinstance(got, int) and isinstance(expected, int) and abs(got - expected) == 1:
        return f"off by one: you have {got}, the book {expected}."
    if (
        (
            isinstance(got, Tensor)
            and isinstance(expected, Tensor)
            and not expected.is_floating_point()
        )
        and got.shape == expected.shape
        and expected.dtype != torch.bool
    ):
        gap = (got - expected).unique()
        if gap.numel() == 1 and abs(int(gap)) == 1:
            return f"off by one: every value of yours is the book's {int(gap):+d}."
    if isinstance(got, list | tuple) and isinstance(expected, list | tuple):
        if abs(len(got) - len(expected)) == 1:
            more = "one item more" if len(got) > len(expected) else "one item fewer"
            return f"off by one: your result has {more} than the book's."
        if len(got) == len(expected):
            gaps = {
                len(g) - len(e)
                for g, e in zip(got, expected, strict=True)
                if isinstance(g, list | tuple) and isinstance(e, list | tuple) and g != e
            }
            if len(gaps) == 1 and abs(gaps.pop()) == 1:
                return (
                    "off by one: where yours differ, each list has one item more or fewer "
                    "than the book's (an end kept or cut one too early?)."
                )
    return None


# --- close -----------------------------------------------------------------------------------------
def _close(reference, args, kwargs, got, expected, atol) -> str | None:
    if isinstance(got, int | float) and isinstance(expected, int | float) and expected:
        relative = abs(got - expected) / abs(expected)
    elif _float_tensors(got, expected) and got.shape == expected.shape:
        e = expected.detach().double()
        scale = e.abs().max().item() or 1.0
        relative = (got.detach().double() - e).abs().max().item() / scale
    else:
        return None
    if CLOSE[0] <= relative <= CLOSE[1]:
        return (
            f"close, but not equal: a relative difference of {relative:.1g}. That is the size of "
            "a small constant such as epsilon (missing, or elsewhere), or of float32 arithmetic "
            "where the book computes in float64."
        )
    return None


# The diagnoses, in the order they are tried: first those that run the book's function on other
# inputs or read the output as a whole, then those that read the values.
WHOLE = (_off_by_one, _mask)
ITEM = (_shape, _order, _complement, _power_of_fraction, _factor, _normalized_elsewhere, _close)
