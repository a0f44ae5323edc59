"""annotated/training/profiling.py: a profiled step's CPU time, split into the parts chapter 7 draws."""

import torch

from annotated.base.devices import LossScaling
from annotated.base.fast_step import smoothed_kl
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import (
    Batch,
    TrainConfig,
    label_smoothing_loss,
    make_optimizer,
    train_step,
)
from annotated.training import profiling

PAD = 0


def tiny_step(loss):
    torch.manual_seed(0)
    config = ModelConfig(src_vocab=50, tgt_vocab=40, N=1, d_model=16, d_ff=32, h=2, p_drop=0.1)
    model = make_model(config)
    train_config = TrainConfig(max_steps=10, warmup=2, precision="fp32")
    optimizer, scheduler = make_optimizer(model, train_config)
    batch = Batch.build(torch.randint(3, 50, (4, 9)), torch.randint(3, 40, (4, 8)), PAD)
    labelled = profiling.labelled_loss(loss)

    def step(index: int) -> None:
        train_step(
            model, [batch], optimizer, scheduler, train_config, index + 1, LossScaling(), labelled
        )

    return step


def test_every_part_is_found_and_nothing_counts_twice():
    step = tiny_step(label_smoothing_loss)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        for index in range(2):
            step(index)
    events = profiler.events()
    seconds = profiling.seconds_by_part(events)
    assert list(seconds) == list(profiling.PARTS)
    # Self times add up to the profile's total: every event lands in exactly one part.
    total = sum(event.self_cpu_time_total for event in events) / 1e6
    assert abs(sum(seconds.values()) - total) < 1e-9
    for part in ("matrix products", profiling.LOSS, "optimizer", "other element-wise work"):
        assert seconds[part] > 0, part
    # The loss's backward operations (log-softmax's, the gather's) count as the loss too.
    loss_backward = [
        event
        for event in events
        if event.name.startswith("autograd::engine::evaluate_function: LogSoftmaxBackward")
    ]
    assert loss_backward
    sequence = {
        event.sequence_nr
        for event in events
        if any(above.name == profiling.LOSS for above in profiling._ancestors(event))
    }
    assert all(event.sequence_nr in sequence for event in loss_backward)


def test_only_copies_into_another_dtype_are_casts():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        x = torch.randn(64, 64)
        x.to(torch.float64)  # a cast
        x.t().contiguous()  # a copy into another layout: not a cast
    events = profiler.events()
    parts = {
        event.name: profiling._part(event, set())
        for event in events
        if event.name == "aten::copy_"
        and not any(above.name == "aten::_to_copy" for above in profiling._ancestors(event))
    }
    assert parts == {"aten::copy_": "other element-wise work"}
    casts = [
        event
        for event in events
        if event.name == "aten::copy_" and profiling._part(event, set()) == "dtype casts"
    ]
    assert len(casts) == 1


def test_the_fast_loss_is_profiled_as_the_loss_too():
    step = tiny_step(smoothed_kl)
    seconds = profiling.profile_steps(step, 2)
    shares = profiling.shares(seconds)
    assert seconds[profiling.LOSS] > 0
    assert abs(sum(shares.values()) - 100) < 1e-9
