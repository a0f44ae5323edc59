"""annotated/export/browser_model.py: the storage of the model the "Try the model" page runs:
packing integers of 8 to 12 bits and back, the rounding's error bound, compensated rounding
against plain, the bit allocation's budget. (The exported files, and the page running them in
headless Chromium, are tests/test_try_page.py's.)"""

import pytest
import torch

from annotated.export import browser_model
from annotated.export.browser_model import (
    allocate_bits,
    pack_bits,
    quantize,
    quantize_compensated,
)
from annotated.training.shipped import dequantize, unpack_bits


@pytest.mark.parametrize("bits", [8, 9, 10, 11, 12])
def test_packed_codes_read_back_the_same(bits):
    levels = 2 ** (bits - 1) - 1
    codes = torch.randint(-levels, levels + 1, (7, 64))
    codes[0, :2] = torch.tensor([-levels, levels])  # the extremes
    packed = pack_bits(codes, bits)
    assert len(packed) == (codes.numel() * bits + 7) // 8
    assert torch.equal(unpack_bits(packed, bits, codes.numel()).view_as(codes), codes.long())


@pytest.mark.parametrize("seed", range(5))
def test_rounding_errs_by_at_most_half_a_step_and_steps_are_stored_exactly(seed):
    """The step is rounded up, so that no weight is clipped, and stays within 0.1% of the least
    it could be even for small weights (float16 alone would store their steps as subnormals)."""
    torch.manual_seed(seed)
    weight = torch.randn(8, 128) * torch.logspace(-5, 0, 8).unsqueeze(1)
    for bits in (8, 10, 12):
        levels = 2 ** (bits - 1) - 1
        codes, scales = quantize(weight, bits)
        step = scales.repeat_interleave(64, dim=1)
        error = (dequantize(codes, scales) - weight).abs()
        assert bool((error <= step * (0.5 + 1e-6)).all())  # half a step (and float32's rounding)
        assert int(codes.abs().max()) <= levels
        least = weight.abs().view(8, 2, 64).amax(-1) / levels
        assert bool((scales >= least).all()) and bool((scales <= least * 1.001).all())
        shift = browser_model.scale_shift(weight, levels)
        stored = scales.double() * 2.0**shift
        assert torch.equal(stored.half().double(), stored)  # a float16 exactly, once shifted


def test_compensated_rounding_errs_less_on_the_layers_output_than_plain_rounding():
    torch.manual_seed(0)
    mixing = torch.randn(64, 64) / 8
    inputs = torch.randn(2000, 64) @ mixing + torch.randn(64)  # correlated, as real activations
    weight = torch.randn(32, 64)
    products = (inputs.double().T @ inputs.double(), inputs.size(0))
    wanted = inputs @ weight.T
    plain = inputs @ dequantize(*quantize(weight, 6)).T
    compensated = inputs @ dequantize(*quantize_compensated(weight, 6, products)).T
    plain_error = (plain - wanted).pow(2).mean()
    compensated_error = (compensated - wanted).pow(2).mean()
    assert compensated_error < 0.8 * plain_error, (compensated_error, plain_error)


def test_bits_go_where_they_buy_most_and_stay_within_the_budget():
    sizes = {"big": 1000, "small": 100}
    sensitivity = {"big": 1.0, "small": 1.0}  # the same harm: per byte the small one buys more
    budget = sum(n * (8 + 0.25) / 8 for n in sizes.values()) + 60  # 4 bits of small, 0 of big
    bits = allocate_bits(sensitivity, sizes, int(budget))
    assert bits == {"big": 8, "small": 12}
    used = sum(sizes[k] * (b + 0.25) / 8 for k, b in bits.items())
    assert used <= budget
    assert allocate_bits(sensitivity, sizes, 10**9) == {"big": 12, "small": 12}  # the cap
