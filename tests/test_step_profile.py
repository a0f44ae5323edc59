"""benchmarks/bench_step_profile.py: the loss's block sizes are tried on the run's own logits, the
book's block is put back afterwards, and every size gives chapter 3's loss; the compiled loss it
times against the book's is chapter 3's loss with its gradient, and a compiler that fails is said."""

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


@pytest.fixture
def eager(bench, monkeypatch):
    """The compiled loss's two functions run as they are written (compiling is PyTorch's part)."""
    functions = {"forward": bench._rows_forward, "backward": bench._rows_backward}
    monkeypatch.setattr(bench, "_compiled", functions.__getitem__)
    return bench


@pytest.mark.parametrize("pad", [0, 7])
def test_the_compiled_loss_is_chapter_3s_loss_with_its_gradient(eager, pad):
    torch.manual_seed(1)
    logits = torch.randn(90, 30, dtype=torch.float64)
    logits[:, pad] = float("-inf")  # a model may give pad no probability at all
    target = torch.randint(0, 30, (90,))
    target[target == pad] = (pad + 1) % 30
    target[-9:] = pad
    mine = logits.clone().requires_grad_()
    loss = eager.compiled_kl(mine, target, pad, 0.1)
    (loss * 3).backward()
    theirs = logits.clone().requires_grad_()
    reference = label_smoothing_loss(theirs, target, pad, 0.1)
    (reference * 3).backward()
    assert float(loss.detach()) == pytest.approx(float(reference.detach()), rel=1e-12)
    assert torch.allclose(mine.grad, theirs.grad, rtol=0, atol=1e-12)
    assert mine.grad[-9:].abs().max() == 0  # pad rows get no gradient


def test_the_compiled_loss_is_timed_against_the_books_and_compared(eager):
    torch.manual_seed(0)
    logits = torch.randn(2, 30, 40)
    target = torch.randint(1, 40, (2, 30))
    batch = types.SimpleNamespace(src=None, tgt_in=None, src_mask=None, tgt_mask=None,
                                  tgt_out=target, pad=0)  # fmt: skip
    result = eager.loss_compiled(lambda *args: logits, batch, 0.1, rounds=3)
    assert set(result["ms forward and backward"]) == {"the book's", "compiled"}
    assert result["loss, relative difference"] < 1e-6
    assert result["gradient, largest difference"] < 1e-6 < result["gradient, largest entry"]


def test_a_compiler_that_fails_is_reported_not_raised(bench, monkeypatch):
    def refuse(name):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(bench, "_compiled", refuse)
    batch = types.SimpleNamespace(src=None, tgt_in=None, src_mask=None, tgt_mask=None,
                                  tgt_out=torch.ones(1, 4, dtype=torch.long), pad=0)  # fmt: skip
    result = bench.loss_compiled(lambda *args: torch.randn(1, 4, 9), batch, 0.1)
    assert result == {"compiled": False, "why not": "RuntimeError: no C++ compiler found"}


def test_the_compiled_model_is_timed_against_the_book_in_alternating_rounds(bench, monkeypatch):
    from benchmarks import step_speed

    calls = []
    monkeypatch.setattr(bench, "new_model", lambda config, corpus: "model")
    monkeypatch.setattr(torch, "compile", lambda model, dynamic: f"compiled {model}")
    monkeypatch.setattr(step_speed, "sample_steps", lambda config, corpus, count: ([1, 2], 10))

    def seconds(model, config, per_epoch, steps):
        calls.append(model)
        assert config.p_drop_final is None  # dropout held: a moving rate would recompile
        return 1.0 if model.startswith("compiled") else 3.0

    monkeypatch.setattr(step_speed, "seconds", seconds)
    config = bench.candidate_config("subwords 10k, 30 epochs")
    result = bench.model_compiled(config, corpus=None, count=2, rounds=3)
    forth, back = ["model", "compiled model"], ["compiled model", "model"]
    assert calls == forth + forth + back + forth  # a first pass each, then three rounds in turn
    assert result["ms per step"] == {"the book's": 1500.0, "compiled": 500.0}
    assert result["book's over compiled"] == 3.0 and result["first pass seconds (compiling)"] == 1.0


def test_a_model_that_does_not_compile_is_reported_not_raised(bench, monkeypatch):
    def refuse(model, dynamic):
        raise RuntimeError("inductor needs a C++ compiler")

    monkeypatch.setattr(bench, "new_model", lambda config, corpus: "model")
    monkeypatch.setattr(torch, "compile", refuse)
    from benchmarks import step_speed

    monkeypatch.setattr(step_speed, "sample_steps", lambda config, corpus, count: ([1], 10))
    result = bench.model_compiled(bench.candidate_config("full"), corpus=None)
    assert result == {"compiled": False, "why not": "RuntimeError: inductor needs a C++ compiler"}


def test_compile_model_adds_to_an_entry_that_exists_and_refuses_without_one(
    bench, monkeypatch, tmp_path, capsys
):
    record = tmp_path / "step-profile.json"
    monkeypatch.setattr(bench, "RECORD", record)
    monkeypatch.setattr(bench, "entry_key", lambda candidate: "this machine, " + candidate)
    assert bench.main(["--candidate", "full", "--compile-model"]) == 1
    assert "run without --compile-model first" in capsys.readouterr().out
    assert not record.exists()
    record.write_text('{"this machine, full": {"ms per step": 800.0}}')
    monkeypatch.setattr(bench, "load_multi30k", lambda *args, **kwargs: None)
    monkeypatch.setattr(bench, "model_compiled", lambda config, corpus: {"ms per step": {}})
    assert bench.main(["--candidate", "full", "--compile-model"]) == 0
    entry = __import__("json").loads(record.read_text())["this machine, full"]
    assert entry["ms per step"] == 800.0  # the rest of the entry kept
    assert set(entry["model compiled"]) >= {"ms per step", "machine", "commit", "timing"}


def test_alternating_rounds_take_turns_and_keep_each_timers_median():
    from benchmarks import step_speed

    calls, times = [], {"a": iter([5.0, 1.0, 2.0]), "b": iter([9.0, 7.0, 8.0])}

    def timer(name):
        calls.append(name)
        return next(times[name])

    timers = {name: lambda name=name: timer(name) for name in ("a", "b")}
    assert step_speed.alternating_medians(timers, 3) == {"a": 2.0, "b": 8.0}
    assert calls == ["a", "b", "b", "a", "a", "b"]
