"""Chapter 2's exercises: the cases each check runs, and the plausible wrong answers it names.

2.2 asks for layer normalization (checked against `nn.functional.layer_norm`), 2.3 for the
sinusoidal table of section 3.5 (`sinusoidal_table`).
"""

from __future__ import annotations

import torch
from torch import nn

from annotated.ch02_model import sinusoidal_table
from annotated.exercises import Exercise, Mistake, draw


def _cases_layer_norm() -> list:
    """Random float64 inputs: centred, shifted and scaled, and nearly constant vectors."""
    generator = torch.Generator().manual_seed(22)
    cases = []
    for shape, loc, spread in (((4, 16), 0.0, 1.0), ((2, 3, 8), 5.0, 3.0), ((3, 6), 0.0, 1e-3)):
        x = loc + spread * torch.randn(*shape, generator=generator, dtype=torch.float64)
        weight = 1 + 0.5 * torch.randn(shape[-1], generator=generator, dtype=torch.float64)
        bias = torch.randn(shape[-1], generator=generator, dtype=torch.float64)
        cases.append(((x, weight, bias), {}))
    return cases


def _layer_norm_with(
    x, weight, bias, eps=1e-5, unbiased=False, eps_outside=False, dim=-1, root=True
):
    """Layer normalization with one thing changed (the variance, where epsilon goes)."""
    mean = x.mean(dim=dim, keepdim=True)
    variance = x.var(dim=dim, keepdim=True, unbiased=unbiased)
    spread = variance.sqrt() + eps if eps_outside else (variance + eps).sqrt()
    spread = spread if root else variance + eps
    return weight * (x - mean) / spread + bias


exercise_2_2 = Exercise(
    "exercise 2.2 (layer normalization)",
    "my_layer_norm(x, weight, bias, eps=1e-5) -> weight * (x - mean) / sqrt(var + eps) + bias",
    lambda x, weight, bias, eps=1e-5: nn.functional.layer_norm(x, (x.size(-1),), weight, bias, eps),
    _cases_layer_norm,
    (
        Mistake(
            "the variance divides by d - 1 (unbiased); layer normalization divides by d.",
            lambda x, w, b, eps=1e-5: _layer_norm_with(x, w, b, eps, unbiased=True),
        ),
        Mistake(
            "epsilon is added to the standard deviation; it belongs inside the square root.",
            lambda x, w, b, eps=1e-5: _layer_norm_with(x, w, b, eps, eps_outside=True),
        ),
        Mistake(
            "this is the original Annotated Transformer's version: the d - 1 standard deviation "
            "plus epsilon. Divide by d, and put epsilon inside the square root.",
            lambda x, w, b, eps=1e-5: _layer_norm_with(
                x, w, b, eps, unbiased=True, eps_outside=True
            ),
        ),
        Mistake(
            "the gain and the shift are swapped: weight multiplies, bias is added.",
            lambda x, w, b, eps=1e-5: _layer_norm_with(x, b, w, eps),
        ),
        Mistake(
            "the division is by the variance; divide by its square root, the standard deviation.",
            lambda x, w, b, eps=1e-5: _layer_norm_with(x, w, b, eps, root=False),
        ),
    ),
    atol=1e-9,
)


def _table_with(
    max_len, d_model, swap=False, exponent_of_i=False, base=10000.0, sign=-1, per_column=False
):
    """The sinusoidal table with one thing changed (sine and cosine swapped, the exponent, the
    base, the exponent's sign, one exponent per column instead of per pair)."""
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(d_model // 2, dtype=torch.float64)
    frequency = base ** (sign * (i if exponent_of_i else 2 * i) / d_model)
    if per_column:
        columns = torch.arange(d_model, dtype=torch.float64)
        angle = position * base ** (sign * columns / d_model)
        first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
        table = torch.empty(max_len, d_model, dtype=torch.float64)
        table[:, 0::2], table[:, 1::2] = first(angle[:, 0::2]), second(angle[:, 1::2])
        return table
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = first(position * frequency), second(position * frequency)
    return table


exercise_2_3 = Exercise(
    "exercise 2.3 (the sinusoidal table)",
    "my_sinusoidal_table(max_len, d_model) -> (max_len, d_model) float64",
    lambda max_len, d_model: sinusoidal_table(max_len, d_model, torch.float64),
    lambda: [((max_len, d_model), {}) for max_len, d_model in ((5, 4), (50, 16), (20, 64))],
    (
        Mistake(
            "sine and cosine are swapped: even dimensions (2i) get the sine.",
            lambda n, d: _table_with(n, d, swap=True),
        ),
        Mistake(
            "the exponent is i / d_model; it is 2i / d_model, with i the index of the sin/cos pair.",
            lambda n, d: _table_with(n, d, exponent_of_i=True),
        ),
        Mistake(
            "sines fill the first half and cosines the second; they alternate (0::2 and 1::2).",
            lambda n, d: torch.cat([_table_with(n, d)[:, 0::2], _table_with(n, d)[:, 1::2]], dim=1),
        ),
        Mistake(
            "each column has its own exponent j / d_model; a sine and its cosine share one, "
            "2i / d_model, with i the index of the pair.",
            lambda n, d: _table_with(n, d, per_column=True),
        ),
        Mistake(
            "the position is multiplied by 10000^(2i / d_model); it is divided by it (the "
            "exponent's sign is wrong).",
            lambda n, d: _table_with(n, d, sign=1),
        ),
        *(
            Mistake(
                f"the base of the power is {base:g}; the paper's is 10000.",
                lambda n, d, base=base: _table_with(n, d, base=base),
            )
            for base in (10.0, 1000.0, 100000.0)  # 100 would be the exponent i / d_model
        ),
    ),
    atol=1e-9,
    fresh=lambda generator: [
        ((draw(generator, 2, 60), 2 * draw(generator, 2, 40)), {}) for _ in range(3)
    ],
)
