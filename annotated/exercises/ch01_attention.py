"""Chapter 1's exercises: the cases each check runs, and the plausible wrong answers it names.

1.2 asks for equation 1 (`attention`), 1.3 for the subsequent mask (`subsequent_mask`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from annotated.ch01_attention import attention, subsequent_mask
from annotated.exercises import Exercise, Mistake, draw


def _cases_attention() -> list:
    """Random inputs in float64: no mask, a padding mask, a subsequent mask, large scores."""
    generator = torch.Generator().manual_seed(12)

    def normal(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    cases = [((normal(2, 3, 8), normal(2, 5, 8), normal(2, 5, 4)), {})]
    padding = torch.tensor([[True, True, True, False, False], [True] * 5]).unsqueeze(1)
    cases.append(((normal(2, 3, 8), normal(2, 5, 8), normal(2, 5, 4)), {"mask": padding}))
    future = torch.ones(1, 4, 4, dtype=torch.bool).tril()
    cases.append(((normal(1, 4, 64), normal(1, 4, 64), normal(1, 4, 3)), {"mask": future}))
    cases.append(((10 * normal(3, 2, 16), 10 * normal(3, 6, 16), normal(3, 6, 5)), {}))
    return cases


def _attention_output(query, key, value, mask=None):
    """The book's answer: `attention`'s output without its weights."""
    return attention(query, key, value, mask)[0]


def _scores_with(query, key, value, mask, scale, axis=-1, fill_where_true=False):
    """Equation 1 with one thing changed (the scale, the softmax's axis, the mask's sense)."""
    scores = query @ key.transpose(-2, -1) / scale
    if mask is not None:
        scores = scores.masked_fill(mask if fill_where_true else ~mask, float("-inf"))
    return scores.softmax(dim=axis) @ value  # a row with every key hidden is NaN, as in yours


exercise_1_2 = Exercise(
    "exercise 1.2 (scaled dot-product attention)",
    "my_attention(query, key, value, mask=None) -> softmax(Q K^T / sqrt(d_k)) V",
    _attention_output,
    _cases_attention,
    (
        Mistake(
            "the scores are not divided by sqrt(d_k) (section 3.2.1).",
            lambda q, k, v, mask=None: _scores_with(q, k, v, mask, 1.0),
        ),
        Mistake(
            "the scores are divided by d_k, not by its square root.",
            lambda q, k, v, mask=None: _scores_with(q, k, v, mask, q.size(-1)),
        ),
        Mistake(
            "the softmax runs over the queries (dim=-2); each query's weights must sum to 1 over "
            "the keys (dim=-1).",
            lambda q, k, v, mask=None: _scores_with(q, k, v, mask, math.sqrt(q.size(-1)), -2),
        ),
        Mistake(
            "the mask is ignored: masked positions must get -inf before the softmax.",
            lambda q, k, v, mask=None: _scores_with(q, k, v, None, math.sqrt(q.size(-1))),
        ),
        Mistake(
            "the mask is read the wrong way round: True means 'may attend', so fill where it is False.",
            lambda q, k, v, mask=None: _scores_with(
                q, k, v, mask, math.sqrt(q.size(-1)), fill_where_true=True
            ),
        ),
        Mistake(
            "the output is divided by sqrt(d_k), not the scores: scale Q K^T before the softmax.",
            lambda q, k, v, mask=None: _scores_with(q, k, v, mask, 1.0) / math.sqrt(q.size(-1)),
        ),
    ),
)

exercise_1_3 = Exercise(
    "exercise 1.3 (the subsequent mask)",
    "my_subsequent_mask(size) -> (1, size, size) bool, True where j <= i",
    subsequent_mask,
    lambda: [((size,), {}) for size in (1, 2, 5, 9)],
    (
        Mistake(
            "the diagonal is missing: a position may attend to itself (j = i), only not to later ones.",
            lambda size: torch.ones(1, size, size, dtype=torch.bool).tril(-1),
        ),
        Mistake(
            "the mask is transposed: it lets position i see the future (j > i) instead of the past.",
            lambda size: torch.ones(1, size, size, dtype=torch.bool).triu(),
        ),
        Mistake(
            "the shape lacks the leading batch dimension of 1: (1, size, size).",
            lambda size: torch.ones(size, size, dtype=torch.bool).tril(),
        ),
    ),
    fresh=lambda generator: [((draw(generator, 3, 24),), {}) for _ in range(3)],
)
