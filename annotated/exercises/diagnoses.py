"""What a wrong answer's output says about the mistake, for any exercise: the general diagnoses.

An exercise's own list of mistakes names the wrong answers its author foresaw. The diagnoses here
look at the output alone (and at the inputs), so they name mistakes nobody listed: `check` tries
them after the exercise's own mistakes have not matched: first those that run the book's function
on changed inputs, then those that read the values, on the whole output and then on the first item
of a dict or a list that differs. Those that change an input must explain the answer on every input
where it differs from the book's, not on one only (`runs`), so that a coincidence is not a hint.
An input is named by its parameter's name in the book's function where it has one.

Changed inputs:
- an integer input one more or one less (an off-by-one in a length, a count or an index), or off by
  a small constant (2 to 5); or an input not used at all: the book's answer for one fixed value of
  it on every input (a number hard-coded where the argument belongs);
- a number input that became 0 (a floor division or an int() that cut it away);
- two inputs in the other order;
- a tensor input scaled by the square root of a ratio of sizes, or the ratio (a scale taken from
  the wrong size, such as sqrt(d_v) for sqrt(d_k));
- a mask ignored, inverted, or not hiding what it hides (the output differs only where it hides).
Values:
- the output is the book's transposed, or has a dimension of size 1 missing or extra, or has one
  position more or fewer along a dimension;
- the output holds the book's items in another order (reversed, or the first ones moved last);
- a number is 1 minus the book's (a complement), 1 over it (upside down), its logarithm or its
  exponential, the book's rounded, or a whole number where the book's is a fraction (a floor
  division); the book's times (n/m)^x for a small fraction and an input x (a constant inside a
  power that differs); the book's to a power (a sum where a mean belongs, or a mean over the wrong
  count);
- the output is the book's times a constant (a factor missing or extra; named when it is the
  square root of a size, a size, a power of an input, 2 or 100, or a ratio of counts one apart
  such as n / (n - 1));
- a bool mask that keeps the wrong triangle (j <= i + 1, j >= i, everything) or is the book's
  inverted;
- a tensor that is the book's shifted by one position (positions counted from 1);
- a count that is an input's whole length;
- the output is normalized over another dimension than the book's (a softmax's distributions, or a
  normalization's zero mean and unit variance), or its rows do not sum to 1 where the book's do;
- a dict's entry copied unchanged from an input;
- a number one more or one less than the book's (an off-by-one);
- the output is within a relative 1e-7 to 1e-4 of the book's (a small constant such as epsilon, or
  float32 arithmetic).
An answer that raises is read too (`raised`): shapes that do not line up, a division by zero.

A dtype or a device that differs is said before any of these, by `compare` (annotated/exercises).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor

CLOSE = (1e-7, 1e-4)  # relative differences that look like epsilon or float32's rounding


@dataclass(frozen=True)
class Seen:
    """What a diagnosis looks at: the book's function, one input, the answer's output and the
    book's there, and every input the answer returned on with its value (`runs`)."""

    reference: Callable[..., Any]
    args: tuple
    kwargs: dict
    got: Any
    expected: Any
    atol: float
    runs: tuple = ()

    def book(self, args: tuple, kwargs: dict) -> Any:
        """The book's function on copies of an input."""
        return self.reference(*copy.deepcopy(args), **copy.deepcopy(kwargs))

    def name(self, index: int) -> str:
        """Input `index` (from 0) as a reader finds it: "input 2 (d_model)"."""
        short = self.short(index)
        return f"input {index + 1}" + (f" ({short})" if short != f"input {index + 1}" else "")

    def short(self, index: int) -> str:
        """The parameter's name in the book's function, or "input N"."""
        try:
            names = [
                p.name
                for p in inspect.signature(self.reference).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        except (TypeError, ValueError):
            names = []
        return names[index] if index < len(names) else f"input {index + 1}"

    def explained(self, change: Callable[[tuple, dict], tuple[tuple, dict] | None]) -> bool:
        """Whether the book's function on changed inputs gives the answer's output on this input
        and on every other input where the answer differs from the book's."""
        for args, kwargs, value in [(self.args, self.kwargs, self.got), *self.runs]:
            try:
                if value is not self.got and _same(value, self.book(args, kwargs), self.atol):
                    continue
                changed = change(args, kwargs)
                if changed is None or not _same(value, self.book(*changed), self.atol):
                    return False
            except Exception:  # noqa: BLE001 - not a valid input for the book's function
                return False
        return True


def general(
    reference: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    got: Any,
    expected: Any,
    atol: float,
    runs: Sequence[tuple[tuple, dict, Any]] = (),
) -> str | None:
    """The first general diagnosis that explains `got`, or None. The diagnoses that run the book's
    function on other inputs look at the whole output; the others, when it is a dict, a list or a
    tuple, also at its first item that differs. `runs`: every input the answer returned on, with
    its value, that a diagnosis which changes an input must explain too."""
    seen = Seen(reference, args, kwargs, got, expected, atol, tuple(runs))
    for diagnosis in WHOLE + ITEM:
        found = _try(diagnosis, seen)
        if found:
            return found
    where, got_item, expected_item = _first_difference(got, expected, atol)
    if where is None:
        return None
    item = replace(seen, got=got_item, expected=expected_item, runs=())
    for diagnosis in ITEM:
        found = _try(diagnosis, item)
        if found:
            return f"{where}: {found}"
    return None


def _try(diagnosis, seen: Seen) -> str | None:
    try:
        return diagnosis(seen)
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


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _integer(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _short(x: float) -> str:
    return f"{x:.6g}"


def _apart(mine: float, book: float) -> tuple[str, str]:
    """Two numbers with as many digits as it takes to see that they differ."""
    for digits in range(4, 18):
        a, b = f"{mine:.{digits}g}", f"{book:.{digits}g}"
        if a != b:
            return a, b
    return a, b


# --- an input changed ----------------------------------------------------------------------------
def _with(args: tuple, index: int, value: Any) -> tuple:
    changed = list(args)
    changed[index] = value
    return tuple(changed)


def _fixed_or_off(seen: Seen) -> str | None:
    """An integer input off by one (or by a small constant), or not used at all: the book's answer
    for one fixed value of it on every input."""
    for index, value in enumerate(seen.args):
        if not _integer(value):
            continue
        name, short = seen.name(index), seen.short(index)
        off = [
            step
            for step in (1, -1)
            if seen.explained(lambda a, k, i=index, s=step: (_with(a, i, a[i] + s), k))
        ]
        values = {run[0][index] for run in seen.runs if len(run[0]) > index}
        fixed = [
            c
            for c in sorted(values | {0, 1})
            if c != value
            and len(values) > 1
            and seen.explained(lambda a, k, i=index, c=c: (_with(a, i, c), k))
        ]
        if off and fixed:
            return (
                f"off by one, or {short} not used: on every input your output is the book's for "
                f"{short} = {fixed[0]} (here {fixed[0]} instead of {value}). Use the {short} given, "
                "and check a length, a count or a range's end."
            )
        if off:
            return (
                f"off by one: your output is the book's for {name} = {value + off[0]} instead of "
                f"{value}. Check a length, a count or a range's end."
            )
        if fixed:
            return (
                f"your output is the book's for {name} = {fixed[0]} on every input: {short} "
                f"makes no difference (not used, a fixed {fixed[0]} hard-coded in its place, or "
                f"a term with it that never counts). Use the {short} given."
            )
    for index, value in enumerate(seen.args):
        if not _integer(value):
            continue
        for step in (2, -2, 3, -3, 4, -4, 5, -5):
            if seen.explained(lambda a, k, i=index, s=step: (_with(a, i, a[i] + s), k)):
                short = seen.short(index)
                return (
                    f"your output is the book's for {seen.name(index)} = {value + step} instead "
                    f"of {value}: a constant added to {short} differs by {abs(step)} (or {short} "
                    "is counted from another start)."
                )
    return None


def _zeroed(seen: Seen) -> str | None:
    """A number input that became 0: cut away by a floor division or an int(), or not used."""
    for index, value in enumerate(seen.args):
        if (
            isinstance(value, float)
            and value != 0.0
            and seen.explained(lambda a, k, i=index: (_with(a, i, 0.0 * a[i]), k))
        ):
            short = seen.short(index)
            return (
                f"your output is the book's for {seen.name(index)} = 0: {short} is lost, cut "
                f"to 0 by a floor division (//) or an int(), or not used."
            )
    return None


def _swapped(seen: Seen) -> str | None:
    """Two inputs in the other order."""
    for i in range(len(seen.args)):
        for j in range(i + 1, len(seen.args)):
            if type(seen.args[i]) is not type(seen.args[j]) and not (
                _number(seen.args[i]) and _number(seen.args[j])
            ):
                continue

            def change(a, k, i=i, j=j):
                b = list(a)
                b[i], b[j] = b[j], b[i]
                return tuple(b), k

            if seen.explained(change):
                return (
                    f"your output is the book's with {seen.name(i)} and {seen.name(j)} swapped: "
                    "check the order of the parameters."
                )
    return None


def _scaled_input(seen: Seen) -> str | None:
    """A tensor input scaled by sqrt(a/b) or a/b for two sizes: a scale from the wrong size."""
    if not _float_tensors(seen.got, seen.expected) or _ratio(seen.got, seen.expected) is not None:
        return None
    sizes = sorted(_sizes(seen.args, seen.kwargs))
    for index, value in enumerate(seen.args):
        if not (isinstance(value, Tensor) and value.is_floating_point()):
            continue
        # the size a scale is about first: the input's own last dimension (d_k for a query)
        last = value.size(-1)
        for a in sorted(sizes, key=lambda n: n != last):
            for b in sizes:
                if a == b:
                    continue
                for factor, book, mine in (
                    (math.sqrt(a / b), f"sqrt({a})", f"sqrt({b})"),
                    (a / b, f"{a}", f"{b}"),
                ):
                    changed = _with(seen.args, index, value * factor)
                    if _same(seen.got, seen.book(changed, seen.kwargs), seen.atol):
                        return (
                            f"your output is the book's with {seen.name(index)} multiplied by "
                            f"{book}/{mine}: a scale taken from the wrong size, as if you divided "
                            f"by {mine} where the book divides by {book}."
                        )
    return None


# --- shapes --------------------------------------------------------------------------------------
def _shape(seen: Seen) -> str | None:
    got, expected, atol = seen.got, seen.expected, seen.atol
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
def _order(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if not (isinstance(got, list | tuple) and isinstance(expected, list | tuple)):
        return None
    if len(got) != len(expected) or len(got) < 2:
        return None
    if _same(list(reversed(got)), list(expected), seen.atol):
        return "your result holds the book's items in the reverse order."
    for k in range(1, len(got)):
        if list(got) == list(expected[k:]) + list(expected[:k]):
            return (
                f"your result holds the book's items with its first {k} moved to the end: put "
                "them first."
            )
    try:
        same_items = sorted(map(repr, got)) == sorted(map(repr, expected))
    except TypeError:
        return None
    return "your result holds the book's items, in another order." if same_items else None


# --- one number from another -----------------------------------------------------------------------
def _tol(seen: Seen) -> float:
    """The relative tolerance of a relation between two numbers: the exercise's, at least 1e-9."""
    return max(1e-9, seen.atol)


def _scalars(seen: Seen) -> bool:
    return _number(seen.got) and _number(seen.expected)


def _complement(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if not _scalars(seen) or not 0 < expected < 1 or math.isclose(expected, 0.5):
        return None
    if math.isclose(got, 1 - expected, rel_tol=1e-9, abs_tol=1e-12):
        return (
            "your output is 1 minus the book's: you computed the complement (the share of what "
            "the book's fraction leaves out)."
        )
    return None


def _reciprocal(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if _scalars(seen):
        if expected in (0, 1, -1) or not math.isclose(got * expected, 1.0, rel_tol=_tol(seen)):
            return None
    elif _float_tensors(got, expected) and got.shape == expected.shape:
        product = got.detach().double() * expected.detach().double()
        far_from_one = (expected.detach().double().abs() - 1).abs() > 1e-6
        if not far_from_one.any() or not _near(product, 1.0, 1e-9):
            return None
    else:
        return None
    return (
        "your output is 1 over the book's: a fraction upside down (the reciprocal), or a power's "
        "exponent with the wrong sign."
    )


def _log_or_exp(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if not _scalars(seen):
        return None
    if expected > 0 and math.isclose(got, math.log(expected), rel_tol=_tol(seen), abs_tol=1e-12):
        return "your output is the natural log of the book's: a log too many, or an exp missing."
    if expected < 700 and math.isclose(got, math.exp(expected), rel_tol=_tol(seen)):
        return "your output is e to the power of the book's: an exp too many, or a log missing."
    return None


def _rounded(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if not _scalars(seen) or got == expected:
        return None
    if isinstance(expected, int) and isinstance(got, float) and not got.is_integer():
        if round(got) == expected:
            a = _short(got)
            return (
                f"your output is not a whole number ({a}): the book rounds it to the nearest "
                "whole number (round())."
            )
        return None
    if not isinstance(expected, float) or expected.is_integer():
        return None
    for digits in range(10, -1, -1):
        if math.isclose(got, round(expected, digits), rel_tol=1e-12, abs_tol=1e-15):
            return (
                f"your output is the book's rounded to {digits} decimals: return it unrounded "
                "(round only when you print it)."
            )
    if float(got).is_integer() and abs(got - expected) < 1:
        return (
            "you have a whole number where the book's is a fraction: a floor division (//), an "
            "int() or a round() cuts the fraction away; divide with /."
        )
    return None


# --- a constant factor ---------------------------------------------------------------------------
def _sizes(args: tuple, kwargs: dict) -> set[int]:
    found = set()
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, Tensor):
            found |= {int(n) for n in value.shape if n > 1}
        elif _integer(value) and 1 < value <= 10**6:
            found.add(value)
    return found


def _counts(args: tuple, kwargs: dict) -> set[int]:
    """The sizes, and the lengths of the list inputs: what a mean may divide by."""
    found = _sizes(args, kwargs)
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, list | tuple) and len(value) > 1:
            found.add(len(value))
    return found


def _ratio(got: Any, expected: Any) -> float | None:
    """got / expected, if it is one constant (other than 1) wherever the book's output is not 0."""
    if _number(expected) and _number(got):
        if expected == 0:
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


def _power_of_fraction(seen: Seen) -> str | None:
    """A number's ratio to the book's that is (n/m)^x for a number x among the inputs: a constant
    inside a power that differs (5 where the book has 6)."""
    got, expected = seen.got, seen.expected
    if not _scalars(seen) or expected == 0:
        return None
    r = got / expected
    if r <= 0 or math.isclose(r, 1.0, rel_tol=1e-9):
        return None
    for index, x in enumerate(seen.args):
        if isinstance(x, float) and x not in (0.0, 1.0):
            base = r ** (1 / x)
            for m in range(1, 13):
                n = round(base * m)
                if 0 < n <= 12 and n != m and math.isclose(base, n / m, rel_tol=1e-9):
                    return (
                        f"your output is the book's times ({n}/{m})^{_short(x)} ({seen.name(index)} "
                        f"is the power): inside the power, a {m} where the book has {n}, or the "
                        "other way round."
                    )
    return None


def _factor(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    r = _ratio(got, expected)
    if r is None or not math.isfinite(r) or r == 0 or math.isclose(r, 1.0, rel_tol=CLOSE[1]):
        return None  # a factor this near 1 is said as "close"
    named = {2.0: ("2", ""), 100.0: ("100", " (a percentage?)")}
    for n in sorted(_sizes(seen.args, seen.kwargs)):
        named.setdefault(float(n), (str(n), ""))
        named.setdefault(math.sqrt(n), (f"sqrt({n})", f" (= {_short(math.sqrt(n))})"))
    for value, (name, note) in named.items():
        if math.isclose(r, value, rel_tol=1e-6):
            return (
                f"your output is the book's times {name}{note}: a factor {name} too many (a "
                f"division by {name} is missing, or a product by it is extra){_exponent(seen, r)}."
            )
        if math.isclose(r, 1 / value, rel_tol=1e-6):
            return (
                f"your output is the book's divided by {name}{note}: a factor {name} missing (a "
                f"product by {name}, or a division by it is extra){_exponent(seen, r)}."
            )
    for index, x in enumerate(seen.args):  # an exponent of an input that differs
        if _integer(x) and x > 1:
            power = math.log(r) / math.log(x) if r > 0 else 0.0
            if power and abs(power * 2 - round(power * 2)) < 1e-6 and abs(power) <= 4:
                return (
                    f"your output is the book's times {seen.short(index)}^{_short(power)}: an "
                    f"exponent of {seen.name(index)} is off by {_short(abs(power))}: check its "
                    "size and its sign."
                )
    for n in sorted(_counts(seen.args, seen.kwargs)):
        for m in (n - 1, n + 1):
            if m > 0 and math.isclose(r, n / m, rel_tol=1e-6):
                return (
                    f"your output is the book's times {n}/{m}: you divide by {m} where the book "
                    f"divides by {n} (a count off by one, such as n - 1 for n)."
                )
    if _number(expected):  # one number: any two differ by "a factor"
        return None
    return (
        f"your output is the book's times {_short(r)} everywhere: a constant factor is missing or "
        "extra."
    )


def _exponent(seen: Seen, r: float) -> str:
    """ ", or an exponent of d_model off by 1 (its sign?)" where r is a power of an integer input."""
    for index, x in enumerate(seen.args):
        if _integer(x) and x > 1 and r > 0:
            power = math.log(r) / math.log(x)
            if abs(power * 2 - round(power * 2)) < 1e-9 and round(power * 2):
                return (
                    f", or an exponent of {seen.short(index)} off by {_short(abs(power))} (its "
                    "sign?)"
                )
    return ""


def _power_of_book(seen: Seen) -> str | None:
    """The book's number to a power: a sum where a mean belongs, or a mean over the wrong count."""
    got, expected = seen.got, seen.expected
    if not _scalars(seen) or expected <= 0 or got <= 0 or math.isclose(expected, 1.0):
        return None
    k = math.log(got) / math.log(expected)
    if abs(k - round(k)) < 1e-9 and 2 <= round(k) <= 10**6:
        return (
            f"your output is the book's to the power {round(k)}: a sum where the book takes a "
            f"mean over {round(k)} items (in an exponent), or a mean over too few."
        )
    fraction = Fraction(k).limit_denominator(1000)
    n, m = fraction.numerator, fraction.denominator
    if m > 1 and n > 0 and n != m and math.isclose(k, n / m, rel_tol=1e-9):
        return (
            f"your output is the book's to the power {n}/{m}: a mean over {m} items where the "
            f"book's is over {n}: count only what the book counts (the padding?)."
        )
    return None


# --- masks as bool tensors -----------------------------------------------------------------------
def _triangle_of(t: Tensor) -> str | None:
    """Which triangle a square bool mask keeps, in words ("j <= i + 1"), if it is one."""
    n = t.size(-1)
    ones = torch.ones(n, n, dtype=torch.bool)
    rows = t.reshape(-1, n, n)
    if not (rows == rows[0]).all():
        return None
    square = rows[0]
    if square.all():
        return "everywhere"
    for k in range(-n + 1, n):
        offset = "" if k == 0 else f" {'+' if k > 0 else '-'} {abs(k)}"
        if torch.equal(square, ones.tril(k)):
            return f"j <= i{offset}"
        if torch.equal(square, ones.triu(k)):
            return f"j >= i{offset}" if k != 1 else "j > i"
    return None


def _bool_mask(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if not (isinstance(got, Tensor) and isinstance(expected, Tensor)):
        return None
    for args, kwargs, value in seen.runs:  # the largest mask that differs shows the pattern best
        if isinstance(value, Tensor) and value.dim() >= 2 and value.size(-1) > got.size(-1):
            book = seen.book(args, kwargs)
            if isinstance(book, Tensor) and not _same(value, book, seen.atol):
                got, expected = value, book
    if got.dtype != torch.bool or expected.dtype != torch.bool or got.shape != expected.shape:
        return None
    inverted = torch.equal(got, ~expected)
    if got.dim() >= 2 and got.size(-1) == got.size(-2) and got.size(-1) > 1:
        mine, book = _triangle_of(got), _triangle_of(expected)
        if mine and book and mine != book:
            lead = f"your mask is True where {mine}, the book's where {book}"
            if mine == "everywhere":
                return f"your mask is True everywhere, the book's only where {book}: it hides nothing; hide the later positions (j > i) with a triangle (tril)."
            if mine.startswith("j <= i") and book == "j <= i":
                k = mine.removeprefix("j <= i").replace(" ", "")
                extra = (
                    "it lets each position see the next position (a later one)"
                    if k.startswith("+")
                    else "it hides the diagonal too, where a position sees itself"
                )
                return f"{lead}: the diagonal's offset (tril's argument) is off by {k.lstrip('+-')}: {extra}."
            if inverted:
                return f"{lead}: it is the book's inverted (True where the book's is False): a missing == 0 or ~."
            return f"{lead}: your mask lets a position see the future (later positions); keep the lower triangle (tril)."
    if inverted:
        return "your mask is the book's inverted (True where the book's is False): a missing == 0 or ~."
    return None


# --- a shift along a dimension -------------------------------------------------------------------
def _shifted(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if not _float_tensors(got, expected) or got.shape != expected.shape:
        return None
    for d in range(got.dim()):
        n = got.size(d)
        if n < 3:
            continue
        if _same(got.narrow(d, 0, n - 1), expected.narrow(d, 1, n - 1), seen.atol):
            return (
                f"off by one: your output is the book's shifted along dimension {d} (your entry k "
                f"is the book's k + 1): positions or indices counted from 1, not from 0?"
            )
        if _same(got.narrow(d, 1, n - 1), expected.narrow(d, 0, n - 1), seen.atol):
            return (
                f"off by one: your output is the book's shifted along dimension {d} (your entry k "
                f"is the book's k - 1): positions or indices counted from -1, or one too late?"
            )
    return None


# --- a count that is an input's length -----------------------------------------------------------
def _an_input_length(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if not (_integer(got) and _integer(expected)) or got == expected:
        return None
    for index, value in enumerate(seen.args):
        if isinstance(value, list | tuple) and len(value) == got:
            return (
                f"your {got} is the length of {seen.name(index)}; the book's count is "
                f"{expected}: count what the book counts, not the whole length."
            )
    return None


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


def _normalized_elsewhere(seen: Seen) -> str | None:
    got, expected, args = seen.got, seen.expected, seen.args
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


def _sums(seen: Seen) -> str | None:
    """The book's rows are distributions (each sums to 1, or is all zeros); one of yours is not."""
    got, expected = seen.got, seen.expected
    if not _float_tensors(got, expected) or got.shape != expected.shape or got.dim() < 1:
        return None
    e, g = expected.detach().double(), got.detach().double()
    if (e < -1e-12).any() or e.size(-1) < 2:
        return None
    book = e.sum(-1)
    if not bool(((book - 1).abs().le(1e-5) | book.abs().le(1e-12)).all()):
        return None
    mine = g.sum(-1)
    wrong = ((mine - book).abs() > 1e-5).nonzero()
    if not len(wrong):
        return None
    row = tuple(wrong[0].tolist())
    a, b = _apart(mine[row].item(), book[row].item())
    return (
        f"each of the book's rows sums to 1 (or is all zeros); your row {row[0] if len(row) == 1 else row} "
        f"sums to {a}, the book's to {b}: the shares do not add up (what goes to the target, "
        "and what is spread over the others)."
    )


# --- an input added or left out -------------------------------------------------------------------
def _input_term(seen: Seen) -> str | None:
    """The output differs from the book's by a tensor input exactly: a term left out or doubled."""
    got, expected = seen.got, seen.expected
    if not _float_tensors(got, expected) or got.shape != expected.shape:
        return None
    difference = got.detach().double() - expected.detach().double()
    for index, value in enumerate(seen.args):
        if not (isinstance(value, Tensor) and value.is_floating_point()) or not value.abs().any():
            continue
        try:
            term = torch.broadcast_to(value.detach().double(), difference.shape)
        except RuntimeError:
            continue
        short = seen.short(index)
        if torch.allclose(difference, -term, rtol=1e-6, atol=1e-9):
            return f"your output is the book's minus {seen.name(index)}: {short} is not added."
        if torch.allclose(difference, term, rtol=1e-6, atol=1e-9):
            return f"your output is the book's plus {seen.name(index)}: {short} is added twice."
    return None


# --- a part copied from an input -----------------------------------------------------------------
def _copied(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if not (isinstance(got, dict) and isinstance(expected, dict)) or set(got) != set(expected):
        return None
    for key in expected:
        if _same(got[key], expected[key], seen.atol):
            continue
        for index, value in enumerate(seen.args):
            items = value if isinstance(value, list | tuple) else [value]
            for position, item in enumerate(items):
                if isinstance(item, dict) and key in item and _same(got[key], item[key], seen.atol):
                    return (
                        f"for {key!r}: your value is item {position} of {seen.name(index)}, "
                        "copied unchanged: compute it as the book does for every entry (every "
                        "tensor)."
                    )
        return None
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


def _mask(seen: Seen) -> str | None:
    reference, args, kwargs, got, expected, atol = (
        seen.reference,
        seen.args,
        seen.kwargs,
        seen.got,
        seen.expected,
        seen.atol,
    )
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
        try:
            inverted = reference(*_without(args, kwargs, where, ~mask))
        except Exception:  # noqa: BLE001 - the book's function refuses this mask
            inverted = None
        if (
            isinstance(inverted, Tensor)
            and got.shape == inverted.shape
            and _same(got.detach().nan_to_num(), inverted.detach().nan_to_num(), atol)
        ):
            return (
                "your output is the book's with the mask inverted: True means 'may attend', so "
                "hide the positions where it is False (~mask, or mask == 0)."
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
def _off_by_one(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if _integer(got) and _integer(expected) and abs(got - expected) == 1:
        if not all(_number(value) for value in seen.args):
            return f"off by one: you have {got}, the book {expected}."
        how = "one too many, or rounded up" if got > expected else "one too few, or rounded down"
        return (
            f"off by one: you have {got}, the book {expected} ({how} where the book rounds to "
            "the nearest?)."
        )
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
        if abs(len(got) - len(expected)) == 1 and not any(
            isinstance(x, list | tuple) for x in [*got, *expected]
        ):
            more = "one item more" if len(got) > len(expected) else "one item fewer"
            return f"off by one: your result has {more} than the book's."
        if len(got) == len(expected):
            pairs = [
                (g, e)
                for g, e in zip(got, expected, strict=True)
                if isinstance(g, list | tuple) and isinstance(e, list | tuple) and g != e
            ]
            ends = {
                "one more" if list(g[:-1]) == list(e) else "one fewer"
                for g, e in pairs
                if list(g[:-1]) == list(e) or list(e[:-1]) == list(g)
            }
            if pairs and len(ends) == 1 and all(abs(len(g) - len(e)) == 1 for g, e in pairs):
                return (
                    f"off by one: where yours differ, each list ends {ends.pop()} item than the "
                    "book's (an end kept, or cut one too early)."
                )
    return None


# --- close -----------------------------------------------------------------------------------------
def _close(seen: Seen) -> str | None:
    got, expected = seen.got, seen.expected
    if _scalars(seen) and expected:
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


# --- an answer that raised -------------------------------------------------------------------------
SHAPE_ERRORS = ("must match the size", "size mismatch", "cannot be multiplied", "shape mismatch")
ZERO_ERRORS = ("division by zero", "divide by zero", "cannot be raised to a negative power")


def raised(kind: str, message: str, args: tuple, kwargs: dict) -> str | None:
    """What an exception says about the mistake: shapes that do not line up, a division by zero."""
    text = message.lower()
    if any(words in text for words in SHAPE_ERRORS):
        return (
            "two tensors' shapes do not line up on that line: print their shapes (a transpose of "
            "the wrong dimensions, .T on a tensor of more than two dimensions, or a mean taken "
            "without keepdim=True, which cannot broadcast back)."
        )
    if kind == "ZeroDivisionError" or any(words in text for words in ZERO_ERRORS):
        return (
            "a division by zero on this input: a count that comes out 0, such as a step or a "
            "position counted from 0 where the book counts from 1 (an off by one), or a case "
            "with nothing to count."
        )
    return None


# The diagnoses, in the order they are tried: first those that run the book's function on other
# inputs or read the output as a whole, then those that read the values.
WHOLE = (_fixed_or_off, _zeroed, _swapped, _mask, _scaled_input, _copied)
ITEM = (
    _shape,
    _order,
    _bool_mask,
    _complement,
    _reciprocal,
    _log_or_exp,
    _rounded,
    _an_input_length,
    _power_of_fraction,
    _factor,
    _power_of_book,
    _shifted,
    _input_term,
    _normalized_elsewhere,
    _sums,
    _off_by_one,
    _close,
)
