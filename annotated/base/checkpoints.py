"""Checkpoint files: written atomically, read safely, refused with a reason when they do not fit.

Chapter 3's `train` saves one every `checkpoint_every` steps, at the end and when it stops early,
and resumes from it (`resume`); the runs of chapters 7 to 9 (`annotated.training`), chapter 8's
data-parallel check and the command-line tools read them. A checkpoint is a plain
`torch.save` dictionary: the model's weights and `model_config` at least, and for a training
checkpoint also the optimizer, scheduler and random-number states, the step, the history and the
`train_config`, and under float16 the loss scaler's state. It is read with `weights_only=True`
(tensors, numbers and strings only), so a file that is not a checkpoint, or one crafted to run code
when unpickled, is refused, never executed. It is read onto the CPU whatever device wrote it, and
what it holds then moves to the device of the model and optimizer it is loaded into: a checkpoint
written on a GPU loads on a laptop, and one from a laptop on a GPU.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from annotated.base.files import atomic_write

if TYPE_CHECKING:
    from annotated.base.devices import LossScaling

# The configurations saved and compared here are chapter 2's ModelConfig and chapter 3's
# TrainConfig. This module sits below the chapters (chapter 3 imports it), so it knows them only as
# dataclasses: their fields are what a checkpoint keeps.
ModelConfig = TrainConfig = Any

CHECKPOINT_VERSION = 1


def _rng_states() -> dict:
    """The random-number generators' states, so that a resumed run draws what it would have
    (dropout on a GPU draws from the current GPU's generator)."""
    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def _restore_rng_states(states: dict) -> None:
    """Put back the states `_rng_states` saved (a GPU's only where there is a GPU)."""
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])


def save_checkpoint(path: str | Path, **contents) -> None:
    """torch.save to a temporary file beside `path`, flushed to disk, then renamed over it."""
    with atomic_write(path) as handle:
        torch.save({"version": CHECKPOINT_VERSION, **contents}, handle)


def _config_differences(saved: dict, current: dict) -> list[str]:
    return [
        f"{key}: checkpoint {saved.get(key)!r}, now {current.get(key)!r}"
        for key in sorted(set(saved) | set(current))
        if saved.get(key) != current.get(key)
    ]


def read_checkpoint(path: str | Path) -> dict:
    """A checkpoint file's contents (a model's weights and its ModelConfig at least), or a clear error."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path} is a folder, not a checkpoint file: name the .pt file in it")
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}: train first, or give the right path")
    try:
        # Onto the CPU, whichever device saved it: the generators' states must be CPU tensors,
        # and load_state_dict copies weights and optimizer states onto their parameters' device.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a pickle, zip or EOF error, or a type weights_only refuses
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        raise ValueError(
            f"{path} is not a checkpoint this book can read ({type(error).__name__}: {reason}). "
            "Check the path. A file cut short (an interrupted copy or download) reads like this "
            "too; the book's own checkpoints are written atomically and are never left half-written."
        ) from None
    if not isinstance(state, dict) or not {"model", "model_config"} <= set(state):
        raise ValueError(
            f"{path} is a PyTorch file but not a checkpoint of this book "
            "(it holds no 'model' weights with their 'model_config')"
        )
    return state


def load_checkpoint(
    path: str | Path, model_config: ModelConfig, train_config: TrainConfig | None = None
) -> dict:
    """Read a checkpoint, refusing one written for another model or training configuration."""
    state = read_checkpoint(path)
    if state.get("version") != CHECKPOINT_VERSION:
        raise ValueError(
            f"{path} is not a training checkpoint of this book (version {state.get('version')!r})"
        )
    # Checkpoints written before `learned_positions` existed used the sinusoids.
    saved_model = {"learned_positions": False, **state["model_config"]}
    differences = _config_differences(saved_model, dataclasses.asdict(model_config))
    if train_config is not None:
        # How long to train and how often to save do not change the steps already taken, so a
        # finished run can be extended (unless a cooldown or a dropout schedule ties it to its end);
        # everything else must match. Runs saved before `cooldown` existed had none.
        tied = train_config.cooldown or train_config.p_drop_final is not None
        free = {"checkpoint_every"} | (set() if tied else {"max_steps"})
        saved = {"cooldown": 0, **state["train_config"]}
        saved = {k: v for k, v in saved.items() if k not in free}
        current = {k: v for k, v in dataclasses.asdict(train_config).items() if k not in free}
        differences += _config_differences(saved, current)
    if differences:
        raise ValueError(
            f"{path} was written by a run with another configuration ("
            + "; ".join(differences)
            + "). Use the same configuration, another checkpoint path, or delete the file to start over."
        )
    return state


def resume(
    checkpoint: str | Path | None,
    model: nn.Module,
    optimizer,
    scheduler,
    config: TrainConfig,
    scaling: LossScaling | None = None,
) -> tuple[int, list[dict]]:
    """Where training starts: the step and history saved in `checkpoint`, with the model's weights,
    the optimizer's, scheduler's and loss scaler's states and the random generators' put back, so
    that the run continues as if never stopped; without a checkpoint, step 0 with the generators
    seeded."""
    if checkpoint is not None and Path(checkpoint).exists():
        state = load_checkpoint(checkpoint, model.config, config)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if scaling is not None:
            scaling.restore(state)
        _restore_rng_states(state["rng"])
        return state["step"], state["history"]
    torch.manual_seed(config.seed)
    random.seed(config.seed)
    return 0, []


def save_training(
    checkpoint: str | Path,
    model: nn.Module,
    config: TrainConfig,
    step: int,
    history: list,
    more: dict,
) -> None:
    """A training checkpoint: the model, both configurations, the random generators' states, the
    step and history, and `more` (the optimizer's, scheduler's and loss scaler's states, a run's
    extras)."""
    save_checkpoint(
        checkpoint,
        model=model.state_dict(),
        rng=_rng_states(),
        step=step,
        history=history,
        model_config=dataclasses.asdict(model.config),
        train_config=dataclasses.asdict(config),
        **more,
    )
