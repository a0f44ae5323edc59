"""Chapter 7's exercise: averaging checkpoints (`average_snapshots`), its cases and its mistakes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from annotated.exercises import Exercise, Mistake
from annotated.training.finish import average_snapshots


def _average_via_snapshots(state_dicts: list[dict]) -> dict:
    """The book's average_snapshots, on state dicts saved as snapshot files in a scratch folder."""
    with tempfile.TemporaryDirectory() as scratch:
        paths = []
        for index, state in enumerate(state_dicts):
            paths.append(Path(scratch) / f"step-{index:06d}.pt")
            torch.save({"model": state, "model_config": {}}, paths[-1])
        return average_snapshots(paths)


def _cases_average() -> list:
    generator = torch.Generator().manual_seed(72)

    def state() -> dict:
        return {
            "w": torch.randn(3, 4, generator=generator),
            "b": torch.randn(4, generator=generator),
        }

    return [(([state() for _ in range(count)],), {}) for count in (1, 3, 5)]


exercise_7_2 = Exercise(
    "exercise 7.2 (checkpoint averaging)",
    "my_average(state_dicts) -> {name: mean tensor}",
    _average_via_snapshots,
    _cases_average,
    (
        Mistake(
            "the weights are summed, not averaged: divide by the number of checkpoints.",
            lambda states: {k: sum(s[k] for s in states) for k in states[0]},
        ),
        Mistake(
            "only the last checkpoint is returned.",
            lambda states: dict(states[-1]),
        ),
        Mistake(
            "the first and the last are averaged; every checkpoint counts.",
            lambda states: {k: (states[0][k] + states[-1][k]) / 2 for k in states[0]},
        ),
    ),
)
