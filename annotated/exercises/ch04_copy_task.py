"""Chapter 4's exercise: cutting decoded rows at </s> (`until_eos`), its cases and its mistakes."""

from __future__ import annotations

from dataclasses import replace

import torch

from annotated.ch03_training import SpecialTokens
from annotated.ch04_copy_task import until_eos
from annotated.exercises import Exercise, Mistake, draw


def _cases_until_eos() -> list:
    specials = SpecialTokens(pad=0, bos=1, eos=2)
    return [
        ((torch.tensor([[5, 6, 2, 0], [7, 2, 8, 2], [3, 4, 5, 6]]), specials), {}),
        ((torch.tensor([[2, 5, 5], [0, 4, 2]]), specials), {}),
        ((torch.tensor([[9, 0, 9, 2, 9]]), specials), {}),
    ]


def _fresh_until_eos(generator: torch.Generator) -> list:
    """Random rows of ids from 0 to 5 (the specials 0, 1, 2 among them), some without </s>."""
    specials = SpecialTokens(pad=0, bos=1, eos=2)
    shapes = [(draw(generator, 1, 5), draw(generator, 1, 8)) for _ in range(3)]
    return [((torch.randint(0, 6, shape, generator=generator), specials), {}) for shape in shapes]


def _until_with(ids, specials, keep_eos=False, last_eos=False, keep_pad=False):
    rows = []
    for row in ids.tolist():
        end = len(row)
        if specials.eos in row:
            end = (
                len(row) - 1 - row[::-1].index(specials.eos)
                if last_eos
                else row.index(specials.eos)
            )
            end += 1 if keep_eos else 0
        rows.append([t for t in row[:end] if keep_pad or t != specials.pad])
    return rows


def _until_eos_kept_pads(ids, specials):
    """Each row cut before its first </s>, its pads kept."""
    return _until_with(ids, specials, keep_pad=True)


exercise_4_2 = Exercise(
    "exercise 4.2 (cutting outputs at </s>)",
    "my_until_eos(ids, specials) -> list of lists of ids",
    until_eos,
    _cases_until_eos,
    (
        Mistake(
            "the </s> is kept; the output ends before it.",
            lambda ids, s: _until_with(ids, s, keep_eos=True),
        ),
        Mistake(
            "the row is cut at its last </s>; cut at the first, everything after it is noise.",
            lambda ids, s: _until_with(ids, s, last_eos=True),
        ),
        Mistake(
            "padding ids are kept in the output; leave them out.",
            lambda ids, s: _until_with(ids, s, keep_pad=True),
        ),
        Mistake(
            "the row stops at its first <pad>; only </s> ends a row, and a <pad> is left out "
            "wherever it is.",
            lambda ids, s: [
                row[: row.index(s.pad)] if s.pad in row else row
                for row in _until_eos_kept_pads(ids, s)
            ],
        ),
        Mistake(
            "pad and eos are swapped: the row is cut at <pad> and every </s> is dropped.",
            lambda ids, s: _until_with(ids, replace(s, pad=s.eos, eos=s.pad)),
        ),
        Mistake(
            "the row is not cut: every </s> is dropped, and the tokens after the first are kept.",
            lambda ids, s: [[t for t in row if t not in (s.eos, s.pad)] for row in ids.tolist()],
        ),
        Mistake(
            "a row without </s> comes back empty; keep the whole row (without its <pad>).",
            lambda ids, s: [
                r if s.eos in row else []
                for r, row in zip(until_eos(ids, s), ids.tolist(), strict=True)
            ],
        ),
    ),
    fresh=_fresh_until_eos,
)
