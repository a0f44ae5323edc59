"""annotated/training/plan.py: the time budget's throughput probe (`plan.measure_step_seconds`,
through `plan.time_budget`), on a simulated machine whose step costs more on a batch shape it meets
for the first time; plans kept by runs before; and a recipe's schedule fitted to the minutes a
budget gives (`fit_schedule`)."""

import dataclasses
import json
import os
import random

import pytest
from toy_runs import run_in_progress

from annotated import ch03_training
from annotated.ch03_training import cooled_rate, rate
from annotated.ch05_text import SPECIALS, BatchPlan, Corpus, Vocab, step_shard
from annotated.training.config import RunConfig
from annotated.training.folder import RunFolder, RunInProgress
from annotated.training.plan import (
    PROBE_STEPS,
    TimeBudget,
    fit_schedule,
    plan_run,
    read_budget,
    steps_that_fit,
    time_budget,
)

WARM = 0.5  # seconds of a step on batch shapes the machine has met before
FIRST_TIME = 3.0  # how many times dearer a micro-batch of a shape met for the first time is


class _ShapeClock:
    """A stand-in for chapter 3's `time` module, on a machine where a micro-batch costs WARM
    seconds (shared among a step's micro-batches), FIRST_TIME times that on a shape met for the
    first time in this process (kernels chosen and set up for it)."""

    def __init__(self):
        self.now, self.reads, self.pending, self.seen = 0.0, 0, 0.0, set()

    def cost(self, shapes) -> float:
        """What training micro-batches of these shapes costs now (they are met from now on)."""
        seconds = 0.0
        for shape in shapes:
            seconds += WARM / len(shapes) * (1 if shape in self.seen else FIRST_TIME)
            self.seen.add(shape)
        return seconds

    def perf_counter(self) -> float:
        # chapter 3's loop reads the clock before a step's batches are made and after its update
        self.reads += 1
        if self.reads % 2 == 0:
            self.now += self.pending
        return self.now


def _tiny_corpus(pairs=320, seed=0) -> Corpus:
    rng = random.Random(seed)
    words = tuple(f"w{i}" for i in range(20))
    vocab = Vocab(SPECIALS + words, {})
    ids = [
        (
            [rng.randrange(4, len(vocab)) for _ in range(rng.randint(2, 16))],
            [rng.randrange(4, len(vocab)) for _ in range(rng.randint(2, 16))],
        )
        for _ in range(pairs)
    ]
    return Corpus(vocab, vocab, {}, {"train": ids})


def _tiny_recipe(**changes) -> RunConfig:
    """A 20-epoch recipe on a tiny model (it trains its probe in about a second)."""
    fields = dict(
        vocab_size=None,
        max_tokens=64,
        N=1,
        d_model=16,
        d_ff=32,
        h=2,
        warmup=20,
        steps=None,
        epochs=20,
        cooldown_epochs=10.0,
        evals_per_epoch=8,
        average_last=2,
        precision="fp32",
    )
    return RunConfig(**{**fields, **changes})


def _plan_and_run(config, tmp_path, monkeypatch):
    """Plan `config`'s budget with the probe on the simulated machine, then 'train' the planned
    steps on it: (the plan, the seconds the probe took, the seconds of each of the run's steps)."""
    corpus = _tiny_corpus()
    batches = BatchPlan.build(corpus.ids["train"], config.max_tokens, config.accumulate)
    clock = _ShapeClock()
    made = BatchPlan.step

    def step(self, *args, **kwargs):  # the probe's batches, priced as chapter 3's loop meets them
        micro_batches = made(self, *args, **kwargs)
        clock.pending = clock.cost([(*b.src.shape, b.tgt_in.size(1)) for b in micro_batches])
        return micro_batches

    monkeypatch.setattr(ch03_training, "time", clock)
    monkeypatch.setattr(BatchPlan, "step", step)
    plan = time_budget(run_in_progress(config, tmp_path, corpus, batches))
    probe = clock.now
    pairs, n = corpus.ids["train"], len(batches.batches)
    run = []
    for number in range(
        plan.schedule.steps
    ):  # the shapes of the batches `BatchPlan.step` would make
        chosen = step_shard(n, number, batches.per_step, batches.seed)
        run.append(clock.cost([_shape(pairs, batches.batches[b]) for b in chosen]))
    return plan, probe, run


def _shape(pairs, indices) -> tuple[int, int, int]:
    """(rows, source length, decoder input length) of the batch `make_batch` makes of them."""
    return (
        len(indices),
        max(len(pairs[i][0]) for i in indices),
        max(len(pairs[i][1]) for i in indices) + 1,  # <s> before the target
    )


def test_the_probe_measures_the_runs_steady_speed_not_its_first_meetings(tmp_path, monkeypatch):
    # Ten minutes hold about half of the recipe's 20 epochs: the plan is shortened.
    config = _tiny_recipe(max_minutes=10.0)
    plan, probe, run = _plan_and_run(config, tmp_path, monkeypatch)
    per_epoch = plan.schedule.steps_per_epoch
    # The probe's speed is the machine's on shapes met before: the run's after its first epoch.
    steady = sum(run[per_epoch:]) / len(run[per_epoch:])
    assert steady == WARM
    assert plan.seconds_per_step == pytest.approx(steady, rel=0.1)
    assert plan.shortened and plan.schedule.steps > 5 * per_epoch
    # The run's measured steps a minute, first epoch included, are the plan's within 10%...
    measured = len(run) * 60 / sum(run)
    planned = plan.schedule.steps * 60 / plan.training_seconds(plan.schedule.steps)
    assert measured == pytest.approx(planned, rel=0.1)
    # ...so the run and the probe fit the budget and use most of it.
    assert 0.8 * 600 <= sum(run) + plan.probe_seconds <= 600
    # The probe's time is all of its training steps' (spent from the budget), no more than the
    # 27 first meetings the probe once timed cost.
    assert plan.probe_seconds == pytest.approx(probe)
    assert probe <= 27 * WARM * FIRST_TIME
    assert f"measured over {PROBE_STEPS} steps, on batches trained once" in plan.describe(config)


def test_a_short_budget_sets_aside_what_the_first_epoch_costs_more(tmp_path, monkeypatch):
    # Three minutes hold about two epochs, the first of them on batch shapes new but for the
    # probe's: planned at the steady speed alone, the run would take 1.4 times the time planned
    # for it, and with the probe 1.2 times the budget, where a time limit stops it.
    config = _tiny_recipe(max_minutes=3.0)
    plan, _, run = _plan_and_run(config, tmp_path, monkeypatch)
    assert 0.8 * 180 <= sum(run) + plan.probe_seconds <= 180
    measured = len(run) * 60 / sum(run)
    steps = plan.schedule.steps
    assert measured == pytest.approx(steps * 60 / plan.training_seconds(steps), rel=0.1)
    assert plan.shortened and steps < 3 * plan.schedule.steps_per_epoch
    assert plan.first_epoch_extra > 0.5 * WARM * (FIRST_TIME - 1)
    assert "more a step in the first epoch" in plan.describe(config)


def test_the_steps_that_fit_are_the_most_whose_time_fits():
    # 40 steps an epoch, 0.5 s a step and 1 s more in the first epoch: it ends at 60 s.
    plan = dataclasses.replace(_budget(), seconds_per_step=0.5, first_epoch_extra=1.0)
    assert plan.schedule.steps_per_epoch == 40
    for seconds in (1.0, 30.0, 59.5, 60.0, 61.0, 300.0):
        fit = steps_that_fit(seconds, 0.5, 1.0, steps_per_epoch=40)
        assert plan.training_seconds(fit) <= seconds < plan.training_seconds(fit + 1)


def _budget() -> TimeBudget:
    """The plan of a tiny recipe's 40 steps an epoch, at half a second a step, for an hour."""
    config = _tiny_recipe(max_minutes=60.0)
    return fit_schedule(config, config.schedule(40), seconds_per_step=0.5)


def test_a_plan_kept_from_the_probe_of_first_meetings_still_loads_and_says_so(tmp_path):
    kept = _budget().saved()
    del kept["first_epoch_extra"], kept["probe_batches"]
    (tmp_path / "plan.json").write_text(json.dumps(kept))
    plan = read_budget(RunFolder(tmp_path), _tiny_recipe().schedule(40), 60.0)
    assert plan.first_epoch_extra == 0.0 and plan.probe_batches is None
    assert plan.training_seconds(100) == 100 * plan.seconds_per_step
    said = plan.describe(_tiny_recipe(max_minutes=60.0))
    assert "(measured over 24 steps):" in said and "trained once" not in said


def test_the_plan_of_the_books_saved_wmt_run_does_not_disown_it():
    """Chapter 8's saved run is its `sample` profile, which the 20-minute budget shortens to a few
    hundred of the recipe's 100,000 steps on a CPU (section 10; here about 2.9 s a step, 78 steps
    an epoch). Its plan says that the run trains less than its recipe, not that it is not the
    book's run."""
    from annotated.ch08_wmt import wmt_profile

    profile, sample = wmt_profile("sample")
    plan = fit_schedule(sample, sample.schedule(78), seconds_per_step=2.9, probe_seconds=90.0)
    said = plan.describe(sample)
    assert plan.shortened and f"{plan.schedule.steps:,} of the recipe's 100,000 steps" in said
    assert "not the book's run" not in said
    assert "trains less than its recipe" in said and "the recipe runs unchanged" in said


# The plan.json files of the book's two saved runs (runs/multi30k-full and runs/wmt-sample), as
# the code before `Schedule` wrote them, and the `train_config` their checkpoints were trained with.
SAVED_PLANS = {
    "multi30k-full": {
        "budget_minutes": 60.0,
        "seconds_per_step": 0.6135282571874967,
        "probe_seconds": 19.12821015599988,
        "recipe_steps": 3040,
        "steps": 3040,
        "warmup": 500,
        "lr_factor": 0.358,
        "cooldown_epochs": 10.0,
        "average_last": 5,
        "steps_per_epoch": 152,
        "machine": "x86_64 AMD EPYC, 2 cores, torch 2.13.0+cpu, 2 threads, bf16 hardware: True",
        "load_average": 1.6923828125,
        "stopped_at": None,
        "unplanned": False,
        "first_epoch_extra": 0.0,
        "probe_batches": 16,
    },
    "wmt-sample": {
        "budget_minutes": 20.0,
        "seconds_per_step": 1.0295808025000213,
        "probe_seconds": 36.16187511099952,
        "recipe_steps": 100000,
        "steps": 1017,
        "warmup": 300,
        "lr_factor": 0.7,
        "cooldown_epochs": 0.0,
        "average_last": 5,
        "steps_per_epoch": 78,
        "machine": "x86_64 AMD EPYC, 2 cores, torch 2.13.0+cpu, 2 threads, bf16 hardware: True",
        "load_average": 2.39306640625,
        "stopped_at": None,
        "unplanned": False,
        "first_epoch_extra": 0.0,
        "probe_batches": 16,
    },
}
_ADAM = dict(beta1=0.9, beta2=0.98, adam_eps=1e-09, eps_ls=0.1, precision="auto", seed=0)
TRAINED_WITH = {
    "multi30k-full": dict(
        max_steps=3040,
        warmup=500,
        lr_factor=0.358,
        cooldown=1520,
        accumulate=1,
        checkpoint_every=76,
        p_drop_final=0.3,
        **_ADAM,
    ),
    "wmt-sample": dict(
        max_steps=1017,
        warmup=300,
        lr_factor=0.7,
        cooldown=0,
        accumulate=2,
        checkpoint_every=78,
        p_drop_final=None,
        **_ADAM,
    ),
}
SAID = {  # what the code before `Schedule` printed on loading each run
    "multi30k-full": (
        "plan kept from this run's start (60 minutes): 3,040 steps, planned then as\nplan: 60 "
        "training minutes at 98 steps a minute here (measured over 16 steps, on batches trained "
        "once before): the recipe's 3,040 steps (20 epochs) take about 31 of them, so the run is "
        "the recipe, unchanged.\n"
    ),
    "wmt-sample": (
        "plan kept from this run's start (20 minutes): 1,017 steps, planned then as\nplan: 20 "
        "training minutes at 58 steps a minute here (measured over 16 steps, on batches trained "
        "once before): 1,017 of the recipe's 100,000 steps (13.0 epochs), the whole schedule "
        "compressed into them: 300 warmup steps, no cooldown (the recipe has none), the last 5 "
        "snapshots averaged. The run trains less than its recipe, so expect lower scores than "
        "the whole recipe would give; on a machine of another speed the same budget holds another "
        "number of steps, and gives other scores. With more time (--minutes, or max_minutes=None "
        "for no budget) the recipe runs unchanged. The machine was busy while it measured (load "
        "average 2.4), so the plan may be shorter than this machine allows when idle.\n"
    ),
}


@pytest.mark.parametrize("name", sorted(SAVED_PLANS))
def test_a_saved_runs_plan_gives_the_schedule_it_was_trained_with(
    name, tmp_path, monkeypatch, capsys
):
    """A run folder written before the plan gave a schedule (instead of rewriting the
    configuration) resumes on the same schedule, and its plan is said in the same words."""
    from annotated.ch07_multi30k import profile_config
    from annotated.ch08_wmt import wmt_profile

    if name == "multi30k-full":
        config = profile_config("full")[1]
    else:
        sample = wmt_profile("sample")[1]
        config = dataclasses.replace(sample, accumulate=sample.accumulation(1))
    (tmp_path / "plan.json").write_text(json.dumps(SAVED_PLANS[name]))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # the machine the runs were planned on
    saved = SAVED_PLANS[name]
    recipe = config.schedule(saved["steps_per_epoch"])  # all a kept plan reads of the batches
    files = RunFolder(tmp_path, writes=True)
    run = RunInProgress(config, files, None, None, None, recipe, None, 0, 1, progress=True)
    schedule, plan = plan_run(run)
    assert plan.schedule == schedule
    # written again (as a stop by the time limit does), the plan is the same file, field for field
    assert list(plan.saved().items()) == list(saved.items())
    assert capsys.readouterr().out == SAID[name]
    # chapter 3's configuration, as the checkpoint holds it (a resumed run is refused otherwise)
    assert dataclasses.asdict(config.train_config(schedule)) == TRAINED_WITH[name]
    assert schedule.average_last == 5 and schedule.limit_seconds == saved["budget_minutes"] * 72


# ---------------------------------------------------------------- fitting a recipe to a budget


def _hour_recipe(**changes):
    """Chapter 7's recipe shape: 20 epochs of 152 steps, cooldown over the second half."""
    fields = dict(
        steps=None,
        epochs=20,
        warmup=500,
        lr_factor=0.358,
        d_model=256,
        cooldown_epochs=10.0,
        p_drop_final=0.3,
        max_minutes=60.0,
        evals_per_epoch=2,
        average_last=5,
    )
    return RunConfig(**{**fields, **changes})


def test_a_budget_that_fits_the_recipe_runs_the_recipe_unchanged():
    config = _hour_recipe()
    recipe = config.schedule(152)
    plan = fit_schedule(config, recipe, seconds_per_step=0.6, probe_seconds=16.0)
    assert not plan.shortened and plan.schedule.steps == plan.recipe_steps == 3040
    # The book's run, step for step: the recipe's schedule, with the budget's time limit.
    assert plan.schedule == dataclasses.replace(recipe, limit_seconds=60 * 60 * 1.2)
    assert config.train_config(plan.schedule) == config.train_config(recipe)
    assert round(plan.steps_per_minute) == 100
    assert "the run is the recipe, unchanged" in plan.describe(config)


def test_a_short_budget_compresses_the_whole_schedule_into_the_steps_that_fit():
    config = _hour_recipe()
    plan = fit_schedule(config, config.schedule(152), seconds_per_step=1.4, probe_seconds=40.0)
    planned = plan.schedule
    train = config.train_config(planned)
    # The steps fit the budget (with the probe's time spent from it)...
    assert plan.shortened and train.max_steps == planned.steps
    assert planned.steps * 1.4 + 40.0 <= 60 * 60
    assert planned.steps * 1.4 + 40.0 >= 0.85 * 60 * 60  # ...and use most of it
    # Steps 10% dearer than the probe measured (seen on a cloud CPU) still finish in time.
    assert planned.steps * 1.4 * 1.1 + 40.0 <= 60 * 60
    # ...the cooldown keeps its share of the run and ends at the new last step...
    assert train.cooldown / train.max_steps == pytest.approx(0.5, abs=0.01)
    assert cooled_rate(train.max_steps, 256, train) == pytest.approx(
        rate(train.max_steps, 256, train.warmup, train.lr_factor) / train.cooldown
    )
    # ...the warmup still fits before it, and the averaged snapshots lie inside it.
    assert (train.warmup, train.lr_factor) == (500, 0.358)
    assert planned.average_last * planned.eval_every <= train.cooldown
    assert planned.average_last == 5 and planned.eval_every == config.schedule(152).eval_every
    assert config == _hour_recipe()  # the configuration is left as it was
    text = plan.describe(config)
    assert f"{planned.steps:,} of the recipe's 3,040 steps" in text
    assert "trains less than its recipe" in text and "lower scores" in text


def test_a_tiny_budget_shortens_the_warmup_but_keeps_the_peak_rate():
    config = _hour_recipe(epochs=5, cooldown_epochs=2.5, max_minutes=5.0, average_last=2)
    plan = fit_schedule(config, config.schedule(152), seconds_per_step=0.6, probe_seconds=16.0)
    train = config.train_config(plan.schedule)
    assert plan.schedule.steps < 760 and train.warmup < 500
    assert train.warmup <= train.max_steps - train.cooldown
    peak = rate(train.warmup, 256, train.warmup, train.lr_factor)
    assert peak == pytest.approx(rate(500, 256, 500, 0.358))  # 1.0e-3, the recipe's peak
    assert 1 <= plan.schedule.average_last <= 2
    assert plan.schedule.average_last * config.schedule(152).eval_every <= train.cooldown


def test_a_recipe_without_cooldown_keeps_its_averaging():
    # chapter 8's sample: the paper's 100,000 steps, of which 20 minutes give a few hundred
    config = _hour_recipe(
        steps=100_000, epochs=None, cooldown_epochs=0.0, warmup=300, max_minutes=20.0
    )
    plan = fit_schedule(config, config.schedule(56), seconds_per_step=2.2, probe_seconds=60.0)
    planned = plan.schedule
    assert 450 < planned.steps < 530 and planned.warmup == 300 and planned.average_last == 5
    assert config.train_config(planned).cooldown == 0
    assert "no cooldown" in plan.describe(config)


def test_too_little_time_is_refused_with_what_to_do():
    config = _hour_recipe(max_minutes=0.5)
    with pytest.raises(ValueError, match="give about 18 steps.*Give more minutes"):
        fit_schedule(config, config.schedule(152), seconds_per_step=1.5)
    with pytest.raises(ValueError, match="max_minutes must be positive"):
        _hour_recipe(max_minutes=0.0)


def test_a_run_begun_before_plans_keeps_its_recipe_and_its_old_limit():
    # Its checkpoint is tied to the recipe's schedule, so nothing is compressed; the budget stays
    # the plain limit it was when the run began (a measured plan's grace would train past it).
    config = _hour_recipe(max_minutes=20.0)
    recipe = config.schedule(152)
    plan = fit_schedule(config, recipe, seconds_per_step=2.0, keep_recipe=True)
    assert plan.unplanned and plan.schedule.steps == 3040
    assert plan.schedule == dataclasses.replace(recipe, limit_seconds=20 * 60)
    assert plan.limit_seconds(20.0) == 20 * 60
    assert "begun without a plan" in plan.describe(config)
    measured = fit_schedule(config, recipe, seconds_per_step=0.3)
    assert not measured.unplanned and measured.limit_seconds(20.0) == 20 * 60 * 1.2
