"""Chapter 3's exercises: the cases each check runs, and the plausible wrong answers it names.

3.2 asks for equation 3 (`rate`), 3.3 for the smoothed targets (`smoothed_targets`).
"""

from __future__ import annotations

import torch

from annotated.ch03_training import rate, smoothed_targets
from annotated.exercises import Exercise, Mistake, draw

exercise_3_2 = Exercise(
    "exercise 3.2 (equation 3)",
    "my_rate(step, d_model, warmup) -> d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)",
    lambda step, d_model, warmup: rate(step, d_model, warmup),
    lambda: [
        ((step, d_model, warmup), {})
        for step, d_model, warmup in (
            (1, 512, 4000),
            (4000, 512, 4000),
            (100_000, 512, 4000),
            (10, 64, 50),
            (3000, 256, 500),
        )
    ],
    (
        Mistake(
            "the factor d_model^-0.5 is missing.",
            lambda step, d, w: min(step**-0.5, step * w**-1.5),
        ),
        Mistake(
            "the warmup term is step * warmup^-0.5; its exponent is -1.5, so the two terms meet "
            "at step = warmup.",
            lambda step, d, w: d**-0.5 * min(step**-0.5, step * w**-0.5),
        ),
        Mistake(
            "max instead of min: the rate is the smaller of the two terms.",
            lambda step, d, w: d**-0.5 * max(step**-0.5, step * w**-1.5),
        ),
        Mistake(
            "the steps are counted from 0: equation 3 counts them from 1.",
            lambda step, d, w: d**-0.5 * min((step + 1) ** -0.5, (step + 1) * w**-1.5),
        ),
    ),
    atol=1e-12,
    fresh=lambda generator: [
        ((draw(generator, 1, 20_000), 2 ** draw(generator, 5, 10), draw(generator, 10, 8000)), {})
        for _ in range(4)
    ],
)


def _cases_smoothing() -> list:
    generator = torch.Generator().manual_seed(32)
    random_ids = torch.randint(0, 9, (12,), generator=generator)
    return [
        ((torch.tensor([3, 0, 5]), 7, 0, 0.1), {}),
        ((random_ids, 9, 1, 0.2), {}),
        ((torch.tensor([2, 2]), 4, 3, 0.0), {}),
    ]


def _fresh_smoothing(generator: torch.Generator) -> list:
    """Random targets (some of them the padding id) in random vocabularies."""
    cases = []
    for _ in range(3):
        vocab = draw(generator, 4, 12)
        target = torch.randint(0, vocab, (draw(generator, 2, 10),), generator=generator)
        cases.append(
            ((target, vocab, draw(generator, 0, vocab - 1), draw(generator, 0, 4) / 10), {})
        )
    return cases


def _smoothing_with(
    target,
    vocab,
    pad,
    eps_ls,
    share=None,
    zero_pad_column=True,
    zero_pad_rows=True,
    swapped=False,
    row_for_column=False,
):
    spread, kept = (1.0 - eps_ls, eps_ls) if swapped else (eps_ls, 1.0 - eps_ls)
    q = torch.full((target.size(0), vocab), spread / (share or vocab - 2))
    q.scatter_(1, target.unsqueeze(1), kept)
    if row_for_column:
        q[pad : pad + 1] = 0.0
    elif zero_pad_column:
        q[:, pad] = 0.0
    if zero_pad_rows:
        q[target == pad] = 0.0
    return q


exercise_3_3 = Exercise(
    "exercise 3.3 (smoothed targets)",
    "my_smoothed_targets(target, vocab, pad, eps_ls) -> (n, vocab)",
    smoothed_targets,
    _cases_smoothing,
    (
        Mistake(
            "eps is spread over all vocab tokens; it goes to the vocab - 2 that are neither the "
            "target nor the padding, so that each row sums to 1.",
            lambda t, v, p, e: _smoothing_with(t, v, p, e, share=v),
        ),
        Mistake(
            "eps is spread over vocab - 1 tokens; the padding token gets none of it, so share it "
            "among vocab - 2.",
            lambda t, v, p, e: _smoothing_with(t, v, p, e, share=v - 1),
        ),
        Mistake(
            "the padding column keeps its share: the model must never be taught to predict <pad>.",
            lambda t, v, p, e: _smoothing_with(t, v, p, e, zero_pad_column=False),
        ),
        Mistake(
            "rows whose target is the padding are kept; they must be all zeros (nothing to predict).",
            lambda t, v, p, e: _smoothing_with(t, v, p, e, zero_pad_rows=False),
        ),
        Mistake(
            "eps and 1 - eps are swapped: the target keeps 1 - eps, the others share eps.",
            lambda t, v, p, e: _smoothing_with(t, v, p, e, swapped=True),
        ),
        Mistake(
            "q[pad] zeroes row number pad; the padding token is a column: q[:, pad] = 0.",
            lambda t, v, p, e: _smoothing_with(t, v, p, e, row_for_column=True),
        ),
    ),
    fresh=_fresh_smoothing,
)
