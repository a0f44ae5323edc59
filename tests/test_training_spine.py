"""One spine for a training run: how far a run's configuration travels.

A run climbs back up the layers each time its configuration goes down to a lower module and comes
back: `runs -> ch05 -> runs` is one climb. `config_path` follows the configuration through a real
(tiny) run and counts them; the spine keeps them few. (That no two modules import each other, by
any road, is tests/test_layers.py's.)
"""

import dataclasses
import sys
from pathlib import Path

import pytest
from test_layers import layer  # (layer, chapter number): chapters 1 to 6 in their order

from annotated.ch02_model import ModelConfig
from annotated.ch03_training import TrainConfig
from annotated.training.config import RunConfig, Schedule
from annotated.training.folder import RunInProgress
from annotated.training.plan import TimeBudget

PACKAGE = Path(__file__).resolve().parent.parent / "annotated"
# The run in progress carries the configuration: a call that takes it takes the configuration.
MADE_FROM_THE_CONFIG = (RunConfig, ModelConfig, TrainConfig, Schedule, TimeBudget, RunInProgress)
# Before the run was split by stage (commit 1858904) it climbed 9 times; since, 5. Three are the
# run coming back up to the training layer after each of its descents: after chapter 2 has made
# its model, after the time budget's probe has trained a copy of it with chapter 3's `train`, and
# after the training itself. Two are inside chapter 3's `train`, once in the probe and once in the
# training: it hands its configuration down to `base.checkpoints.resume` and goes on with it. The
# run in progress (issue 63) took the stages' six arguments away, not a descent, so 5 it stays;
# fewer would take a change to chapter 3's `train`, or a run without a probe.
MOST_CLIMBS = 5


# ---------------------------------------------------------------- following the configuration


def _arguments(frame) -> list:
    """The values a function was called with (self, positional, keyword, *args and **kwargs)."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    values = []
    for name in code.co_varnames[:count]:
        value = frame.f_locals.get(name)
        values += list(value.values()) if isinstance(value, dict) else [value]
        values += list(value) if isinstance(value, tuple) else []
    return values


def config_path(call, kinds: tuple[type, ...] = MADE_FROM_THE_CONFIG) -> list[str]:
    """The `annotated` modules, in call order, of the functions `call()` calls with the run's
    configuration or a value made from it (an instance of `kinds`), repeats in a row made one."""
    path: list[str] = []

    def watch(frame, event, _):
        module = frame.f_globals.get("__name__", "")
        if event != "call" or not module.startswith("annotated"):
            return
        if (not path or path[-1] != module) and any(
            isinstance(value, kinds) for value in _arguments(frame)
        ):
            path.append(module)

    sys.setprofile(watch)
    try:
        call()
    finally:
        sys.setprofile(None)
    return path


def climbs(path: list[str]) -> list[str]:
    """Each step of the path into a higher layer than the one before, as 'lower -> higher'."""
    return [
        f"{low} -> {high}"
        for low, high in zip(path, path[1:], strict=False)
        if layer(high) > layer(low)
    ]


def test_climbs_are_counted_between_layers_not_modules():
    path = [
        "annotated.training.runs",
        "annotated.ch05_text",
        "annotated.training.runs",
        "annotated.training.plan",  # the same layer: no climb
        "annotated.ch02_model",
        "annotated.ch01_attention",
        "annotated.ch02_model",
        "annotated.base.files",
        "annotated.ch07_multi30k",
    ]
    assert climbs(path) == [
        "annotated.ch05_text -> annotated.training.runs",
        "annotated.ch01_attention -> annotated.ch02_model",
        "annotated.base.files -> annotated.ch07_multi30k",
    ]
    order = ["annotated.base.devices", "annotated.ch01_attention", "annotated.ch06_decoding"]
    order += ["annotated.training.loop", "annotated.ch07_multi30k", "annotated.ch09_table3"]
    order += ["annotated.figures.ch07_multi30k"]
    assert [layer(name) for name in order] == sorted(layer(name) for name in order)
    assert len({layer(name) for name in order}) == len(order)


@pytest.mark.multi30k
def test_a_run_climbs_the_layers_at_most_five_times(corpus, tmp_path, capsys):
    from annotated.ch05_text import Corpus
    from annotated.ch07_multi30k import PROFILES
    from annotated.training.finish import save_vocabularies
    from annotated.training.runs import train_run

    # Chapter 7's smoke profile with a time budget, cut to a few seconds: planned, trained,
    # evaluated, averaged.
    config = dataclasses.replace(
        PROFILES["smoke"], train_pairs=200, max_tokens=200, val_sentences=4, precision="fp32"
    )
    small = Corpus(corpus.src_vocab, corpus.tgt_vocab, corpus.raw, corpus.ids)
    save_vocabularies(small, tmp_path)
    path = config_path(lambda: train_run(config, tmp_path, small, progress=False))
    with capsys.disabled():
        print("\nthe configuration's path:\n  " + "\n  ".join(path))
        print(f"{len(climbs(path))} climbs:\n  " + "\n  ".join(climbs(path)))
    assert "annotated.training.runs" in path and "annotated.ch03_training" in path
    assert len(climbs(path)) <= MOST_CLIMBS, climbs(path)
