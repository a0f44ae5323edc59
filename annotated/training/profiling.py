"""Where a training step's time goes: PyTorch's profiler over a few steps, in parts a reader can
act on.

`profile_steps` runs a step function under `torch.profiler` and adds up the CPU time of every
operation it recorded into the parts of `PARTS`: the matrix products (the arithmetic the hardware
is built for), the loss over the vocabulary with its backward pass, the dtype casts that mixed
precision inserts, the optimizer, the random draws of dropout, and everything else (element-wise
work, layer norms, softmaxes, masks, memory fills). Chapter 7, section 2, draws the parts before
and after the book's fast path (`step_profiles`).

The loss is found by name: the step's loss is called inside `torch.profiler.record_function(LOSS)`
(`labelled_loss` does it), and its backward operations are those autograd recorded with the
sequence numbers of the loss's forward operations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable

import pandas as pd
from torch import Tensor
from torch.profiler import ProfilerActivity, profile, record_function

from annotated.base.devices import LossScaling, training_device
from annotated.base.fast_step import smoothed_kl
from annotated.ch01_attention import MultiHeadAttention, kept_weights
from annotated.ch03_training import label_smoothing_loss, make_optimizer, train_step
from annotated.ch05_text import BatchPlan, Corpus
from annotated.training.config import RunConfig, new_model, shared_specials

LOSS = "loss over the vocabulary"
PARTS = (
    "matrix products",
    LOSS,
    "dtype casts",
    "optimizer",
    "dropout draws",
    "other element-wise work",
)
MATRIX_PRODUCTS = {
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
}
CASTS = {"aten::copy_", "aten::_to_copy", "aten::to"}
DRAWS = {"aten::random_", "aten::uniform_", "aten::bernoulli_", "aten::normal_"}


def labelled_loss(loss: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`loss`, called inside a profiler scope named LOSS (free when nothing profiles)."""

    def labelled(*args, **kwargs) -> Tensor:
        with record_function(LOSS):
            return loss(*args, **kwargs)

    return labelled


def _ancestors(event) -> Iterable:
    while event is not None:
        yield event
        event = event.cpu_parent


def _part(event, loss_sequence: set[int]) -> str:
    for above in _ancestors(event):
        backward = above.name.startswith("autograd::engine::evaluate_function")
        if above.name == LOSS or (backward and above.sequence_nr in loss_sequence):
            return LOSS
        if above.name.startswith("Optimizer."):  # Optimizer.step#Adam.step, zero_grad
            return "optimizer"
    if event.name in MATRIX_PRODUCTS:
        return "matrix products"
    if event.name in CASTS and any(above.name == "aten::_to_copy" for above in _ancestors(event)):
        return "dtype casts"  # a copy into another dtype (a copy into another layout is not)
    if event.name in DRAWS:
        return "dropout draws"
    return "other element-wise work"


def seconds_by_part(events: Iterable) -> dict[str, float]:
    """The profiled events' own CPU seconds (self time, so nothing counts twice), by part."""
    events = list(events)
    loss_sequence = {
        event.sequence_nr
        for event in events
        if event.sequence_nr >= 0 and any(above.name == LOSS for above in _ancestors(event))
    }
    seconds = dict.fromkeys(PARTS, 0.0)
    for event in events:
        seconds[_part(event, loss_sequence)] += event.self_cpu_time_total / 1e6
    return seconds


def profile_steps(step: Callable[[int], object], steps: int) -> dict[str, float]:
    """Run step(0), ..., step(steps - 1) under the profiler: CPU seconds by part of PARTS."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for index in range(steps):
            step(index)
    return seconds_by_part(profiler.events())


def shares(seconds: dict[str, float]) -> dict[str, float]:
    """Each part's share of the total, in percent."""
    total = sum(seconds.values()) or 1.0
    return {part: 100 * value / total for part, value in seconds.items()}


STEPS = {  # what the profile compares: (loss, chapter 1's attention forced)
    "chapter 3's formulas": (label_smoothing_loss, True),
    "the book's step": (smoothed_kl, False),
}


def step_profiles(config: RunConfig, corpus: Corpus, steps: int = 8) -> pd.DataFrame:
    """Milliseconds per training step by part, for the run's model on its own batches: with
    chapter 3's loss and chapter 1's attention, then with the book's fast path (one row a part).

    Each takes `steps` steps spread over the first epoch, untimed once (kernels and memory are
    set up then), then again under the profiler.
    """
    device = training_device()
    plan = BatchPlan.build(corpus.ids["train"][: config.train_pairs], config.max_tokens)
    picks = [i * plan.steps_per_epoch // steps for i in range(steps)]
    micro_batches = [[b.to(device) for b in plan.step(p, shared_specials(corpus))] for p in picks]
    train_config = config.train_config(config.schedule(plan.steps_per_epoch))
    rows = []
    for name, (loss, plain_attention) in STEPS.items():
        model = new_model(config, corpus).to(device).train()
        seconds = _profile(model, micro_batches, train_config, loss, plain_attention)
        rows += [
            {"step": name, "part": part, "ms per step": 1000 * value / steps}
            for part, value in seconds.items()
        ]
    return pd.DataFrame(rows)


def _profile(model, micro_batches: list, train_config, loss, plain_attention: bool) -> dict:
    """Train on each of `micro_batches` once untimed, then again under the profiler."""
    device = next(model.parameters()).device
    optimizer, scheduler = make_optimizer(model, train_config)
    scaling = LossScaling.for_training(train_config.precision, device)
    labelled, count = labelled_loss(loss), len(micro_batches)

    def step(index: int) -> None:
        batch = micro_batches[index % count]
        train_step(model, batch, optimizer, scheduler, train_config, index + 1, scaling, labelled)

    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    with kept_weights(attention) if plain_attention else contextlib.nullcontext():
        for index in range(count):
            step(index)
        return profile_steps(lambda index: step(count + index), count)
