"""Chapter 8's exercise: micro-batches per step (`WMTConfig.accumulation`), cases and mistakes."""

from __future__ import annotations

import torch

from annotated.ch08_wmt import WMTConfig
from annotated.exercises import Exercise, Mistake, draw


def is_tie(tokens: int, max_tokens: int, processes: int) -> bool:
    """Whether tokens / (max_tokens * processes) ends in exactly .5 above 1, where Python's round
    (half to even) and a student's round half up differ (2.5: 2 or 3)."""
    share = max_tokens * processes
    return 2 * tokens % share == 0 and tokens % share != 0 and tokens > share


def _fresh_accumulation(generator: torch.Generator) -> tuple[tuple, dict]:
    """A random step, micro-batch and process count, drawn again on a tie: both ways of rounding
    a half are right answers, so a fresh input must not tell them apart."""
    while True:
        case = (500 * draw(generator, 2, 60), 500 * draw(generator, 2, 10), draw(generator, 1, 8))
        if not is_tie(*case):
            return case, {}


exercise_8_2 = Exercise(
    "exercise 8.2 (micro-batches per step)",
    "my_accumulation(tokens_per_step, max_tokens, processes) -> int >= 1",
    lambda tokens, max_tokens, processes: WMTConfig(
        tokens_per_step=tokens, max_tokens=max_tokens
    ).accumulation(processes),
    lambda: [
        ((tokens, max_tokens, processes), {})
        for tokens, max_tokens, processes in (
            (25000, 3125, 1),
            (25000, 3125, 8),
            (6000, 3000, 1),
            (6000, 3000, 4),
            (10000, 3000, 1),
            (5000, 3000, 1),
            (25000, 4000, 2),
        )
    ],
    (
        Mistake(
            "the processes are ignored: each of them runs its own share of the step's batches.",
            lambda tokens, max_tokens, processes: max(1, round(tokens / max_tokens)),
        ),
        Mistake(
            "the count is rounded down; round to the nearest whole number.",
            lambda tokens, max_tokens, processes: max(1, tokens // (max_tokens * processes)),
        ),
        Mistake(
            "it can be 0: with more processes than micro-batches, every process still runs one.",
            lambda tokens, max_tokens, processes: round(tokens / (max_tokens * processes)),
        ),
        Mistake(
            "the ratio is upside down: divide the step's tokens by what one micro-batch on every "
            "process holds, tokens_per_step / (max_tokens * processes).",
            lambda tokens, max_tokens, processes: max(1, round(max_tokens * processes / tokens)),
        ),
    ),
    fresh=lambda generator: [_fresh_accumulation(generator) for _ in range(4)],
)
