"""benchmarks/bench_step_profile.py: the loss's block sizes are tried on the run's own logits, the
book's block is put back afterwards, and every size gives chapter 3's loss."""

import types
from pathlib import Path

import pytest
import torch
from benchmark_modules import load

from annotated.base import fast_step
from annotated.ch03_training import label_smoothing_loss

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench():
    return load("bench_step_profile")


def test_loss_blocks_try_each_size_and_put_the_books_back(bench, monkeypatch):
    torch.manual_seed(0)
    logits = torch.randn(3, 40, 50)
    target = torch.randint(1, 50, (3, 40))
    target[:, -5:] = 0  # pad
    batch = types.SimpleNamespace(src=None, tgt_in=None, src_mask=None, tgt_mask=None,
                                  tgt_out=target, pad=0)  # fmt: skip
    losses = {}
    real = fast_step.smoothed_kl

    def recorded(z, t, pad, eps):
        loss = real(z, t, pad, eps)
        losses[fast_step.ROWS] = float(loss.detach())
        return loss

    monkeypatch.setattr(fast_step, "smoothed_kl", recorded)
    result = bench.loss_blocks(lambda *args: logits, batch, 0.1, rounds=3)
    assert fast_step.ROWS == 64  # the book's block, put back
    assert set(result["ms forward and backward"]) == {str(r) for r in bench.BLOCKS}
    assert result["fastest block"] in bench.BLOCKS and result["logits"] == [120, 50]
    assert result["book's block over the fastest"] >= 1.0
    flat, flat_target = logits.reshape(-1, 50), target.reshape(-1)
    reference = float(label_smoothing_loss(flat, flat_target, 0, 0.1))  # chapter 3's
    assert all(value == pytest.approx(reference, rel=1e-5) for value in losses.values())
