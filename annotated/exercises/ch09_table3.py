"""Chapter 9's exercise: the cases the check of 9.2 (perplexity) runs, and the wrong answers it
names.
"""

from __future__ import annotations

import math

import torch

from annotated.ch03_training import label_smoothing_loss
from annotated.exercises import Exercise, Mistake


def reference_perplexity(logits: torch.Tensor, targets: torch.Tensor, pad: int) -> float:
    """exp of chapter 3's loss without smoothing, per real target token (as `perplexity` computes)."""
    tokens = int((targets != pad).sum())
    return math.exp(label_smoothing_loss(logits, targets, pad, 0.0).item() / tokens)


def _cases_perplexity() -> list:
    generator = torch.Generator().manual_seed(93)
    cases = []
    for batch, length, vocab, lengths in (
        (2, 5, 7, (5, 2)),
        (3, 4, 11, (4, 1, 3)),
        (1, 6, 5, (6,)),
    ):
        logits = 3 * torch.randn(batch, length, vocab, generator=generator, dtype=torch.float64)
        targets = torch.randint(1, vocab, (batch, length), generator=generator)
        for row, real in enumerate(lengths):
            targets[row, real:] = 0
        cases.append(((logits, targets, 0), {}))
    return cases


def _sentence_mean(logits: torch.Tensor, targets: torch.Tensor, pad: int) -> float:
    losses = torch.nn.functional.cross_entropy(
        logits.transpose(1, 2), targets, ignore_index=pad, reduction="none"
    )
    real = (targets != pad).sum(1)
    return math.exp((losses.sum(1) / real).mean().item())


exercise_9_2 = Exercise(
    "exercise 9.2 (perplexity)",
    "my_perplexity(logits, targets, pad) -> float",
    reference_perplexity,
    _cases_perplexity,
    (
        Mistake(
            "the padding positions are counted: average over the real (non-pad) targets only.",
            lambda logits, targets, pad: math.exp(
                torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), targets.flatten(), reduction="mean"
                ).item()
            ),
        ),
        Mistake(
            "each sentence is averaged first, then the sentences: average over all real tokens "
            "at once, so that a long sentence counts for more than a short one.",
            _sentence_mean,
        ),
        Mistake(
            "this is the mean cross-entropy itself: perplexity is its exponential.",
            lambda logits, targets, pad: math.log(reference_perplexity(logits, targets, pad)),
        ),
        Mistake(
            "2 is raised to the mean cross-entropy, but PyTorch's cross-entropy is in nats "
            "(natural log): use exp.",
            lambda logits, targets, pad: 2 ** math.log(reference_perplexity(logits, targets, pad)),
        ),
    ),
)
