"""The training step's fast path equals the formulas the chapters teach.

`fast_step.smoothed_kl` against chapter 3's `label_smoothing_loss` (value and autograd's
gradient) and against the gradient's closed form, softmax - q; multi-head attention through PyTorch's fused
kernel against chapter 1's `attention`; and a whole training step of chapter 3, whose loss is
recomputed with the plain formula.
"""

import dataclasses

import pytest
import torch

from annotated.base import fast_step
from annotated.base.devices import LossScaling
from annotated.ch01_attention import MultiHeadAttention, fused_attention_pays, subsequent_mask
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import (
    Batch,
    TrainConfig,
    label_smoothing_loss,
    make_optimizer,
    smoothed_targets,
    train_step,
)

PAD = 0


def case(rows: int, vocab: int, dtype=torch.float64, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(rows, vocab, dtype=torch.float64, generator=generator)
    target = torch.randint(0, vocab, (rows,), generator=generator)
    target[::4] = PAD  # padded positions, which predict nothing
    return logits.to(dtype).requires_grad_(), target


@pytest.mark.parametrize("eps_ls", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("rows", [1, 63, 64, 65, 300])  # around and across ROWS-row blocks
def test_the_loss_and_its_gradient_equal_chapter_3s(eps_ls, rows):
    logits, target = case(rows, 11)
    plain = label_smoothing_loss(logits, target, PAD, eps_ls)
    (expected,) = torch.autograd.grad(2.5 * plain, logits)
    before = logits.detach().clone()
    fast = fast_step.smoothed_kl(logits, target, PAD, eps_ls)
    (gradient,) = torch.autograd.grad(2.5 * fast, logits)
    assert torch.equal(logits, before)  # the backward pass works on copies, never in place
    torch.testing.assert_close(fast, plain, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(gradient, expected, rtol=1e-12, atol=1e-12)
    assert torch.all(gradient[target == PAD] == 0)  # pad rows get no gradient at all


def test_blocks_of_rows_on_a_cpu_all_rows_at_once_elsewhere():
    assert fast_step.block_rows(torch.empty(300, 11)) == fast_step.ROWS
    # A GPU's tensor stands in as a meta tensor: no memory, but a device that is not the CPU.
    assert fast_step.block_rows(torch.empty(300, 11, device="meta")) == 300
    assert fast_step.block_rows(torch.empty(0, 11, device="meta")) == 1


def test_one_block_of_all_rows_gives_the_same_loss_and_gradient(monkeypatch):
    """What a GPU computes (every row in one block), checked on the CPU against chapter 3."""
    monkeypatch.setattr(fast_step, "block_rows", lambda logits: max(logits.size(0), 1))
    logits, target = case(300, 11)
    plain = label_smoothing_loss(logits, target, PAD, 0.1)
    (expected,) = torch.autograd.grad(plain, logits)
    fast = fast_step.smoothed_kl(logits, target, PAD, 0.1)
    (gradient,) = torch.autograd.grad(fast, logits)
    torch.testing.assert_close(fast, plain, rtol=1e-12, atol=1e-10)
    torch.testing.assert_close(gradient, expected, rtol=1e-12, atol=1e-12)


def test_the_gradient_is_softmax_minus_the_smoothed_targets():
    """d KL(q || softmax(z)) / dz = softmax(z) - q, row by row (pad rows: 0)."""
    logits, target = case(70, 9)
    (gradient,) = torch.autograd.grad(fast_step.smoothed_kl(logits, target, PAD, 0.2), logits)
    q = smoothed_targets(target, 9, PAD, 0.2).double()  # built in float32: 1e-8 of rounding
    expected = (logits.detach().softmax(-1) - q) * (target != PAD).unsqueeze(1)
    torch.testing.assert_close(gradient, expected, rtol=0, atol=1e-7)


def test_batches_of_sentences_are_flattened_and_pad_may_be_any_column():
    logits, target = case(24, 9)
    logits3, target3 = logits.detach().reshape(4, 6, 9), target.reshape(4, 6)
    for pad in (0, 4, 8):
        torch.testing.assert_close(
            fast_step.smoothed_kl(logits3, target3, pad, 0.1),
            label_smoothing_loss(logits3, target3, pad, 0.1),
        )


def test_the_loss_stays_finite_where_pad_has_probability_zero():
    logits, target = case(6, 7)
    logits = logits.detach().clone()
    logits[:, PAD] = float("-inf")
    fast = fast_step.smoothed_kl(logits.requires_grad_(), target, PAD, 0.1)
    assert torch.isfinite(fast)
    torch.testing.assert_close(fast, label_smoothing_loss(logits, target, PAD, 0.1))
    (gradient,) = torch.autograd.grad(fast, logits)
    assert torch.isfinite(gradient).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_low_precision_logits_are_widened_as_chapter_3_widens_them(dtype):
    logits, target = case(200, 50, dtype)
    plain = label_smoothing_loss(logits, target, PAD, 0.1)
    fast = fast_step.smoothed_kl(logits, target, PAD, 0.1)
    assert fast.dtype == plain.dtype == torch.float32
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-3)
    (expected,) = torch.autograd.grad(plain, logits)
    (gradient,) = torch.autograd.grad(fast, logits)
    assert gradient.dtype == dtype
    # bf16 gradients: both round p - q to 8 significant bits, at slightly different points.
    tolerance = 1e-6 if dtype == torch.float32 else 2e-3
    torch.testing.assert_close(gradient.float(), expected.float(), rtol=0, atol=tolerance)


def test_bad_inputs_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="at least the target, the pad and one other"):
        fast_step.smoothed_kl(torch.randn(3, 2), torch.tensor([1, 0, 1]), PAD, 0.1)
    with pytest.raises(ValueError, match="one target id per row"):
        fast_step.smoothed_kl(torch.randn(3, 5), torch.tensor([1, 0]), PAD, 0.1)


# ---------------------------------------------------------------- fused attention


def test_the_fused_kernel_is_used_where_it_pays():
    assert fused_attention_pays(torch.zeros(1, dtype=torch.float32))
    assert fused_attention_pays(torch.zeros(1, dtype=torch.float64))
    # bf16 on a CPU: PyTorch's fused kernel was 4-5 times slower than chapter 1's attention.
    assert not fused_attention_pays(torch.zeros(1, dtype=torch.bfloat16))


@pytest.mark.parametrize("masked", ["padding", "causal", "none"])
def test_multi_head_attention_through_the_fused_kernel_equals_chapter_1s(masked):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=32, h=4).double()
    x = torch.randn(3, 6, 32, dtype=torch.float64, requires_grad=True)
    mask = {
        "padding": torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] + [False] * 5]),
        "causal": subsequent_mask(6).expand(3, 6, 6),
        "none": None,
    }[masked]
    if masked == "padding":
        mask = mask.unsqueeze(1)  # (batch, 1, len_k)
    fused = mha(x, x, x, mask)
    (fused_grad,) = torch.autograd.grad(fused.sum(), x)
    mha.keep_weights = True  # asking for the weights takes chapter 1's attention
    plain = mha(x, x, x, mask)
    assert mha.weights is not None
    (plain_grad,) = torch.autograd.grad(plain.sum(), x)
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(fused_grad, plain_grad, rtol=1e-12, atol=1e-12)


def test_the_fused_path_really_runs_the_fused_kernel(monkeypatch):
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(args[0].dtype)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", counted)
    mha = MultiHeadAttention(d_model=16, h=2)
    x = torch.randn(2, 5, 16)
    mha(x, x, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mha(x, x, x)  # bf16 on the CPU: chapter 1's attention
    mha.keep_weights = True
    mha(x, x, x)  # weights asked for: chapter 1's attention
    assert calls == [torch.float32]


# ---------------------------------------------------------------- the training step


def test_a_training_step_reports_chapter_3s_loss():
    """train_step's loss (the fast path) equals label_smoothing_loss on the same logits."""
    torch.manual_seed(0)
    config = ModelConfig(src_vocab=13, tgt_vocab=11, N=1, d_model=16, d_ff=32, h=2, p_drop=0.0)
    model = make_model(config).double()
    src = torch.randint(3, 13, (4, 7))
    tgt = torch.randint(3, 11, (4, 6))
    tgt[2, 4:] = PAD
    batch = Batch.build(src, tgt, PAD)
    with torch.no_grad():
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        expected = label_smoothing_loss(logits, batch.tgt_out, PAD, 0.1).item() / batch.n_tokens
    train_config = dataclasses.replace(TrainConfig(max_steps=2, warmup=1), precision="fp32")
    optimizer, scheduler = make_optimizer(model, train_config)
    row = train_step(model, [batch], optimizer, scheduler, train_config, 1, LossScaling())
    assert row["loss"] == pytest.approx(expected, rel=1e-12)
