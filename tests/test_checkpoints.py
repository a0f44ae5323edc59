"""annotated/base/checkpoints.py: checkpoint files written atomically, read safely (a file that is
not a checkpoint, or a pickle that would run code, is refused with a reason, never executed),
refused when written by a run of another configuration, and a run resumed from one exactly where
it stopped."""

import dataclasses
import random

import pytest
import torch
from test_ch03_training import source, tiny_model

from annotated.base.checkpoints import (
    CHECKPOINT_VERSION,
    _restore_rng_states,
    _rng_states,
    load_checkpoint,
    read_checkpoint,
    resume,
    save_checkpoint,
    save_training,
)
from annotated.ch03_training import TrainConfig, make_optimizer, train
from annotated.training.folder import RunFolder
from annotated.training.loop import save_snapshot


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, step=1, model_config={}, train_config={})
    before = path.read_bytes()

    def broken_save(obj, handle):
        handle.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, step=2, model_config={}, train_config={})
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"], "the temporary file must be removed"


class Payload:
    """An object that a full unpickler would rebuild (and could run code for)."""


def test_a_pickle_with_arbitrary_objects_is_refused_not_unpickled(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"model": Payload(), "model_config": {}}, path)
    with pytest.raises(ValueError, match="not a checkpoint this book can read"):
        read_checkpoint(path)


def test_checkpoint_refuses_another_configuration_but_allows_extending(tmp_path):
    checkpoint = tmp_path / "run.pt"
    model = tiny_model()
    config = TrainConfig(max_steps=3, warmup=2)
    train(model, source(), config, checkpoint=checkpoint, progress=False)
    with pytest.raises(ValueError, match="d_model: checkpoint 32, now 64"):
        load_checkpoint(checkpoint, dataclasses.replace(model.config, d_model=64, h=2))
    with pytest.raises(ValueError, match="eps_ls"):
        train(
            tiny_model(),
            source(),
            dataclasses.replace(config, eps_ls=0.2),
            checkpoint=checkpoint,
            progress=False,
        )
    longer = train(
        tiny_model(),
        source(),
        dataclasses.replace(config, max_steps=5),
        checkpoint=checkpoint,
        progress=False,
    )
    assert list(longer["step"]) == [1, 2, 3, 4, 5]
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt", model.config)


def test_a_checkpoint_from_before_learned_positions_loads_as_sinusoids(tmp_path):
    checkpoint = tmp_path / "old.pt"
    model = tiny_model()
    train(
        model, source(), TrainConfig(max_steps=2, warmup=2), checkpoint=checkpoint, progress=False
    )
    state = torch.load(checkpoint, weights_only=True)
    del state["model_config"]["learned_positions"]  # as every checkpoint written before row E
    torch.save(state, checkpoint)
    assert load_checkpoint(checkpoint, model.config)["model_config"] == state["model_config"]
    learned = dataclasses.replace(model.config, learned_positions=True)
    with pytest.raises(ValueError, match="learned_positions: checkpoint False, now True"):
        load_checkpoint(checkpoint, learned)


def test_a_gpus_random_state_is_kept_and_put_back_only_where_there_is_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a machine with a GPU
    cuda_state = torch.arange(8, dtype=torch.uint8)
    put_back = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": cuda_state)
    monkeypatch.setattr(
        torch.cuda, "set_rng_state", lambda state, device="cuda": put_back.append(state)
    )
    states = _rng_states()
    assert torch.equal(states["cuda"], cuda_state)
    _restore_rng_states(states)
    assert len(put_back) == 1 and torch.equal(put_back[0], cuda_state)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # resumed without a GPU
    _restore_rng_states(states)
    assert len(put_back) == 1 and "cuda" not in _rng_states()


# ---------------------------------------------------------------- reading back, refusing


def test_a_checkpoint_reads_back_what_was_saved_with_the_books_version(tmp_path):
    model = tiny_model()
    history = [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.25}]
    path = tmp_path / "run.pt"
    save_checkpoint(
        path,
        model=model.state_dict(),
        model_config=dataclasses.asdict(model.config),
        step=2,
        history=history,
    )
    state = read_checkpoint(path)
    assert state["version"] == CHECKPOINT_VERSION
    assert (state["step"], state["history"]) == (2, history)
    assert state["model_config"] == dataclasses.asdict(model.config)
    assert state["model"].keys() == model.state_dict().keys()
    for name, tensor in model.state_dict().items():
        assert torch.equal(state["model"][name], tensor), name
    assert load_checkpoint(path, model.config)["step"] == 2  # the same model: accepted


def test_a_missing_file_a_folder_and_a_file_cut_short_each_say_what_they_are(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*train first"):
        read_checkpoint(tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="is a folder, not a checkpoint file: name the .pt file"):
        read_checkpoint(tmp_path)
    model = tiny_model()
    whole = tmp_path / "whole.pt"
    save_checkpoint(whole, model=model.state_dict(), model_config=dataclasses.asdict(model.config))
    cut = tmp_path / "cut.pt"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])  # an interrupted copy
    with pytest.raises(ValueError, match="not a checkpoint this book can read") as refused:
        read_checkpoint(cut)
    assert "cut short" in str(refused.value) and refused.value.__cause__ is None


def test_a_file_without_the_books_version_is_read_but_never_resumed(tmp_path):
    # A snapshot (or averaged.pt) holds weights and a config, and no training state: the
    # translator reads it, and training must refuse to resume from it.
    model = tiny_model()
    save_snapshot(model, RunFolder(tmp_path), step=4, keep=1)
    snapshot = tmp_path / "snapshots" / "step-000004.pt"
    assert read_checkpoint(snapshot)["step"] == 4
    with pytest.raises(
        ValueError, match=r"not a training checkpoint of this book \(version None\)"
    ):
        load_checkpoint(snapshot, model.config)


# ---------------------------------------------------------------- resuming


def _one_step(model, config):
    """An optimizer and scheduler that have taken one step (made-up gradients)."""
    optimizer, scheduler = make_optimizer(model, config)
    for parameter in model.parameters():
        parameter.grad = torch.randn_like(parameter)
    optimizer.step()
    scheduler.step()
    return optimizer, scheduler


def test_resume_puts_back_the_weights_the_optimizer_the_schedule_and_the_random_draws(tmp_path):
    config = TrainConfig(max_steps=5, warmup=2)
    torch.manual_seed(1)
    model = tiny_model()
    optimizer, scheduler = _one_step(model, config)
    history = [{"step": 1, "loss": 3.0}]
    more = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
    save_training(tmp_path / "run.pt", model, config, 1, history, more)
    # What the run would have drawn next, had it never stopped:
    expected = (torch.rand(4), random.random())
    torch.manual_seed(2)  # another process, another model, other generators
    random.seed(2)
    again = tiny_model()
    optimizer_again, scheduler_again = make_optimizer(again, config)
    step, saved = resume(tmp_path / "run.pt", again, optimizer_again, scheduler_again, config)
    assert (step, saved) == (1, history)
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    moments = [optimizer.state[p]["exp_avg_sq"] for p in model.parameters()]
    restored = [optimizer_again.state[p]["exp_avg_sq"] for p in again.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(moments, restored, strict=True))
    assert scheduler_again.last_epoch == 1
    assert scheduler_again.get_last_lr() == scheduler.get_last_lr()
    drawn = (torch.rand(4), random.random())
    assert torch.equal(drawn[0], expected[0]) and drawn[1] == expected[1]


def test_without_a_checkpoint_a_run_starts_at_step_0_from_its_seed(tmp_path):
    config = TrainConfig(max_steps=5, warmup=2, seed=7)
    model = tiny_model()
    optimizer, scheduler = make_optimizer(model, config)
    torch.manual_seed(123)
    random.seed(123)
    assert resume(tmp_path / "none.pt", model, optimizer, scheduler, config) == (0, [])
    drawn = (torch.rand(4), random.random())
    torch.manual_seed(7)
    random.seed(7)
    assert torch.equal(drawn[0], torch.rand(4)) and drawn[1] == random.random()
