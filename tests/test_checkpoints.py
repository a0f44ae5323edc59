"""annotated/base/checkpoints.py: checkpoint files written atomically, read safely (a file that is
not a checkpoint, or a pickle that would run code, is refused with a reason, never executed),
refused when written by a run of another configuration, and a run resumed from one exactly where
it stopped."""

import dataclasses

import pytest
import torch
from test_ch03_training import source, tiny_model

from annotated.base.checkpoints import (
    _restore_rng_states,
    _rng_states,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from annotated.ch03_training import TrainConfig, train


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
