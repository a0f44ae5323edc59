"""A run's plan: the schedule it trains, fitted into its time budget on this machine.

A run without `RunConfig.max_minutes` trains its recipe's schedule (`RunConfig.schedule`). A run
with one first measures its step's cost over a few probe steps (`measure_step_seconds`: a few
batches trained twice, timed the second time, when their shapes are no longer new to the machine),
then `fit_schedule` decides how many of the recipe's steps fit and, when they do not all fit,
compresses the whole schedule into the steps that do. The result, a `TimeBudget`, is kept in the
run folder (plan.json) so that a resumed run follows it (`time_budget`); the schedule the run
trains is the budget's (`TimeBudget.schedule`), and the run's configuration is left as it was.
The budget stops the run, loudly, if the machine turns out much slower than measured
(`settle_budget`, `report_stop`). `plan_run` is the stage: it takes the run in progress
(`folder.RunInProgress`, with the recipe's schedule computed once) and gives the schedule, and
the budget behind it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from dataclasses import dataclass

from annotated.base.checkpoints import read_checkpoint
from annotated.base.distributed import data_parallel, sum_over_processes
from annotated.base.files import atomic_write
from annotated.base.machine import describe as describe_machine
from annotated.ch03_training import train
from annotated.training.config import RunConfig, Schedule
from annotated.training.folder import RunFolder, RunInProgress

# The throughput probe trains PROBE_STEPS batches twice (32 steps, about the cost of the 27 it
# once took) and times the second pass. A step on a batch shape the process meets for the first
# time costs more: oneDNN, which runs PyTorch's bf16 matrix products on a CPU, prepares its kernels
# for the shape then. A run meets its shapes for the first time in its first epoch only, so the
# second pass is its steady speed, and what the first pass cost more is set aside for the first
# epoch's steps on batches the probe did not meet (`TimeBudget.first_epoch_extra`). That holds
# only while oneDNN keeps the kernels: with its default cache of 1,024, smaller than the kernels of
# one epoch, chapter 7's run prepared them afresh at every step and ran 1.5 times slower than the
# probe measured, which is why importing the book enlarges the cache (annotated/__init__.py).
PROBE_STEPS = 16
# Plan for 90% of the budget. On a 2-core cloud CPU a step's cost wanders by several percent
# between epochs: chapter 8's saved run, planned at 95%, found its steps 10% dearer than the probe
# had measured (1.70 s against 1.52) and ran 6% over. 90% absorbs such a drift.
SAFETY = 0.9
GRACE = 1.2  # a planned run is stopped, loudly, only past 1.2 times its budget


@dataclass(frozen=True)
class TimeBudget:
    """How a run with a time budget (`RunConfig.max_minutes`) fits its schedule into it: the
    `Schedule` it gives the run, and what it measured to give it.

    Made once, before the first step, from the throughput measured over a few probe steps (on
    batches trained once before: the steady speed, with what the first epoch's new batch shapes
    cost more set aside), and kept in the run folder (plan.json) so that a resumed run follows the
    same schedule. When the recipe's steps fit, the plan is the recipe itself, step for step.
    When they do not, the whole schedule is compressed into the steps that
    fit: the cooldown and the dropout ramp end at the new last step, the snapshots averaged still
    lie inside the cooldown, and the warmup shrinks only if it no longer fits before the cooldown
    (with the same peak rate). Either way the schedule stops the run after `limit_seconds` of the
    budget the run has now (a resumed run may have been given more minutes than it was planned in).
    """

    schedule: Schedule  # what the run trains
    budget_minutes: float  # the budget it was planned in
    seconds_per_step: float  # measured by the probe (a run begun without a plan: its history)
    probe_seconds: float  # the probe's own training time, spent from the budget
    recipe_steps: int
    # The cooldown as planned, in epochs: plan.json keeps it and the plan's words say it, where the
    # schedule holds it rounded to whole steps.
    cooldown_epochs: float
    machine: str = ""
    load_average: float | None = None  # the 1-minute load average while the probe ran
    stopped_at: int | None = None  # the step a time limit stopped the run at, if one did
    # A run begun before budgets were planned: it keeps its recipe, and the budget stays what it
    # was then, a limit that stops it (without the grace, which only a measured plan earns).
    unplanned: bool = False
    # What a step costs more on average in the first epoch, where the batch shapes the probe did not
    # meet are new to the process (its first pass against its second); 0 in plans made before.
    first_epoch_extra: float = 0.0
    # The batches the probe trained twice, timing the second pass (None: a plan made before, whose
    # probe timed 24 steps on batches new to it, after 3 untimed ones).
    probe_batches: int | None = None

    @property
    def steps_per_minute(self) -> float:
        return 60 / self.seconds_per_step

    def training_seconds(self, steps: int) -> float:
        """Training seconds of `steps` steps at the measured speed (the first epoch's extra too)."""
        return steps_seconds(
            steps, self.seconds_per_step, self.first_epoch_extra, self.schedule.steps_per_epoch
        )

    @property
    def shortened(self) -> bool:
        return self.schedule.steps < self.recipe_steps

    def limit_seconds(self, budget_minutes: float) -> float:
        """Training time after which the run stops (`time_limit`)."""
        return time_limit(budget_minutes, self.unplanned)

    def saved(self) -> dict:
        """What plan.json holds: the fields as the plan has always written them, in their order
        (the schedule's own, but its stopping time, among them)."""
        saved = dataclasses.asdict(self)
        del saved["schedule"]
        planned = self.schedule
        order = ["budget_minutes", "seconds_per_step", "probe_seconds", "recipe_steps"]
        planned_fields = dict(
            steps=planned.steps,
            warmup=planned.warmup,
            lr_factor=planned.lr_factor,
            cooldown_epochs=self.cooldown_epochs,
            average_last=planned.average_last,
            steps_per_epoch=planned.steps_per_epoch,
        )
        return {**{name: saved.pop(name) for name in order}, **planned_fields, **saved}

    @classmethod
    def from_saved(cls, saved: dict, recipe: Schedule, budget_minutes: float) -> TimeBudget:
        """The budget plan.json holds (`saved`), giving the run with this recipe's schedule a
        schedule stopped after `limit_seconds(budget_minutes)`: the recipe itself when it fitted,
        else the compressed one the plan recorded. A KeyError or TypeError: not such a plan."""
        fields = dict(saved)
        planned = {
            name: fields.pop(name)
            for name in ("steps", "warmup", "lr_factor", "average_last", "steps_per_epoch")
        }
        budget = cls(schedule=recipe, **fields)
        limit = budget.limit_seconds(budget_minutes)
        if planned["steps"] >= budget.recipe_steps:
            return dataclasses.replace(
                budget, schedule=dataclasses.replace(recipe, limit_seconds=limit)
            )
        schedule = dataclasses.replace(
            recipe,
            steps=planned["steps"],
            warmup=planned["warmup"],
            lr_factor=planned["lr_factor"],
            cooldown=round(budget.cooldown_epochs * recipe.steps_per_epoch),
            average_last=planned["average_last"],
            limit_seconds=limit,
        )
        return dataclasses.replace(budget, schedule=schedule)

    def describe(self, recipe: RunConfig) -> str:
        """The plan in words: the speed measured here, the steps it will take, the recipe's."""
        planned = self.schedule
        epochs = planned.steps / planned.steps_per_epoch
        measured = "measured over 24 steps"  # a plan from before the probe trained batches twice
        if self.probe_batches:
            measured = f"measured over {self.probe_batches} steps, on batches trained once before"
        speed = (
            f"{self.budget_minutes:g} training minutes at {self.steps_per_minute:.0f} steps a "
            f"minute here ({measured})"
        )
        if self.first_epoch_extra >= 0.01 * self.seconds_per_step:
            speed += (
                f", {self.first_epoch_extra:.2g} s more a step in the first epoch (its batch "
                "shapes are new to the machine)"
            )
        busy = ""
        if self.load_average is not None and self.load_average > os.cpu_count():
            busy = (
                f" The machine was busy while it measured (load average {self.load_average:.1f}), "
                "so the plan may be shorter than this machine allows when idle."
            )
        if self.unplanned:
            return (
                f"plan: this run was begun without a plan (with no time budget, or by an older "
                f"version of the book), so it keeps its recipe's {self.recipe_steps:,} steps; the "
                f"budget of {self.budget_minutes:g} training minutes stops it, and says so, if "
                "they do not fit."
            )
        if not self.shortened:
            minutes = self.training_seconds(planned.steps) / 60
            return (
                f"plan: {speed}: the recipe's {self.recipe_steps:,} steps ({epochs:g} epochs) take "
                f"about {minutes:.0f} of them, so the run is the recipe, unchanged.{busy}"
            )
        cooldown = f"the rate cooled down over the last {self.cooldown_epochs:.1f} epochs"
        if not self.cooldown_epochs:
            cooldown = "no cooldown (the recipe has none)"
        warmup = f"{planned.warmup} warmup steps"
        if planned.warmup != recipe.warmup:
            warmup += f" (the recipe's {recipe.warmup}, with the same peak rate)"
        return (
            f"plan: {speed}: {planned.steps:,} of the recipe's {self.recipe_steps:,} steps "
            f"({epochs:.1f} epochs), the whole schedule compressed into them: {warmup}, "
            f"{cooldown}, the last {planned.average_last} snapshots averaged. The run trains less "
            "than its recipe, so expect lower scores than the whole recipe would give; on a "
            "machine of another speed the same budget holds another number of steps, and gives "
            "other scores. With more time (--minutes, or max_minutes=None for no budget) the "
            f"recipe runs unchanged.{busy}"
        )


def time_limit(budget_minutes: float, unplanned: bool) -> float:
    """Training time after which a run stops: its budget with some grace (never silently), or for
    a run begun without a plan the budget itself."""
    return budget_minutes * 60 * (1.0 if unplanned else GRACE)


def steps_seconds(
    steps: int, seconds_per_step: float, first_epoch_extra: float, steps_per_epoch: int
) -> float:
    """The training time of `steps` steps: the first epoch's steps each cost the extra too."""
    return steps * seconds_per_step + min(steps, steps_per_epoch) * first_epoch_extra


def steps_that_fit(
    seconds: float, seconds_per_step: float, first_epoch_extra: float, steps_per_epoch: int
) -> int:
    """The most steps whose training time (`steps_seconds`) is at most `seconds`."""
    first = seconds_per_step + first_epoch_extra
    if steps_per_epoch * first >= seconds:  # they end inside the first epoch
        return math.floor(seconds / first)
    return math.floor((seconds - steps_per_epoch * first_epoch_extra) / seconds_per_step)


def fit_schedule(
    config: RunConfig,
    recipe: Schedule,
    seconds_per_step: float,
    probe_seconds: float = 0.0,
    keep_recipe: bool = False,
    first_epoch_extra: float = 0.0,
    **details,
) -> TimeBudget:
    """Fit the recipe's schedule (`config.schedule`, given as `recipe`) into `config.max_minutes`
    of training, at this speed per step.

    `first_epoch_extra`: what a step costs more on average in the first epoch (new batch shapes).
    `keep_recipe`: plan the recipe whatever the time (a run begun without a plan, whose checkpoint
    is tied to the recipe's schedule; the time limit still stops it, and says so).
    """
    steps_per_epoch = recipe.steps_per_epoch
    available = max(config.max_minutes * 60 - probe_seconds, 0.0)
    fit = steps_that_fit(available * SAFETY, seconds_per_step, first_epoch_extra, steps_per_epoch)
    every = recipe.eval_every
    plan = dict(budget_minutes=config.max_minutes, seconds_per_step=seconds_per_step, **details)
    plan |= dict(probe_seconds=probe_seconds, recipe_steps=recipe.steps)
    plan |= dict(first_epoch_extra=first_epoch_extra, unplanned=keep_recipe)
    plan["probe_batches"] = None if keep_recipe else PROBE_STEPS
    limit = time_limit(config.max_minutes, keep_recipe)
    if fit >= recipe.steps or keep_recipe:
        schedule = dataclasses.replace(recipe, limit_seconds=limit)
        return TimeBudget(schedule, cooldown_epochs=config.cooldown_epochs, **plan)
    if fit < max(2 * every, 10):
        raise ValueError(
            f"{config.max_minutes:g} training minutes give about {fit} steps on this machine "
            f"({60 / seconds_per_step:.0f} a minute), too few for this recipe's "
            f"{recipe.steps:,} (it evaluates every {every}). Give more minutes, or no budget "
            "(max_minutes=None, --minutes none), or choose a smaller profile."
        )
    shrink = fit / recipe.steps
    cooldown_epochs = config.cooldown_epochs * shrink
    cooldown = round(cooldown_epochs * steps_per_epoch)
    warmup = max(1, min(config.warmup, fit - cooldown))  # the warmup ends before the cooldown
    # Equation 3 peaks at the last warmup step at lr_factor / sqrt(d_model * warmup): a shorter
    # warmup keeps the recipe's peak rate by lowering the factor in proportion.
    lr_factor = config.lr_factor * math.sqrt(warmup / config.warmup)
    # Average only snapshots of settled weights: inside the cooldown when there is one.
    window = cooldown if config.cooldown_epochs else fit
    average_last = max(1, min(config.average_last, window // every))
    schedule = dataclasses.replace(
        recipe,
        steps=fit,
        warmup=warmup,
        lr_factor=lr_factor,
        cooldown=cooldown,
        average_last=average_last,
        limit_seconds=limit,
    )
    return TimeBudget(schedule, cooldown_epochs=cooldown_epochs, **plan)


def read_budget(folder: RunFolder, recipe: Schedule, budget_minutes: float) -> TimeBudget | None:
    """The budget kept in a run folder (plan.json), or None before the run has one; its schedule
    is stopped after `budget_minutes` (with the plan's grace), the budget the run has now."""
    path = folder.plan
    if not path.exists():
        return None
    try:
        return TimeBudget.from_saved(
            json.loads(path.read_text(encoding="utf-8")), recipe, budget_minutes
        )
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(
            f"{path} is not a plan this book wrote ({error}). Delete it to plan again; if the run "
            "has a checkpoint, its configuration must then be planned the same way to resume."
        ) from None


def write_budget(folder: RunFolder, budget: TimeBudget) -> None:
    """Keep the budget in the run folder (plan.json), atomically, where this process writes."""
    if folder.writes:
        with atomic_write(folder.plan, "w", encoding="utf-8") as handle:
            json.dump(budget.saved(), handle, indent=1)


def report_stop(budget: TimeBudget, folder: RunFolder, step: int, minutes: float) -> TimeBudget:
    """Say, and record in plan.json, that the time limit ended the schedule early."""
    budget = dataclasses.replace(budget, stopped_at=step)
    write_budget(folder, budget)
    why = (
        f"the {budget.budget_minutes:g}-minute budget of a run begun without a plan"
        if budget.unplanned
        else f"more than {GRACE:g} times the {budget.budget_minutes:g}-minute budget: the machine "
        "became slower than when the plan was made"
    )
    if folder.writes:
        print(
            f"TIME LIMIT: training stopped at step {step:,} of the {budget.schedule.steps:,} "
            f"planned, after {minutes:.1f} training minutes ({why}). The schedule did not finish: "
            "the learning rate never reached its planned end, and the scores below are of an "
            "unfinished run. Run the same command with a larger budget (--minutes) to finish it.",
            flush=True,
        )
    return budget


def settle_budget(
    budget: TimeBudget | None, folder: RunFolder, step: int, minutes: float
) -> TimeBudget | None:
    """The budget once training has ended at `step` of the steps its schedule planned, after
    `minutes` of training: a stop by the time limit said and recorded (`report_stop`), or the
    record of an earlier stop cleared when the run has finished since (under a larger budget)."""
    if budget is not None and step < budget.schedule.steps:
        return report_stop(budget, folder, step, minutes)
    if budget is not None and budget.stopped_at is not None:
        budget = dataclasses.replace(budget, stopped_at=None)
        write_budget(folder, budget)
    return budget


def measure_step_seconds(run: RunInProgress) -> tuple[float, float, float]:
    """This run's training step on this machine: (seconds per step, what a step costs more on
    average in the run's first epoch, the probe's total seconds).

    A throwaway copy of the run's freshly initialized model trains through chapter 3's `train`
    on PROBE_STEPS batches spread over the first epoch (short and long sentences alike), with the
    run's precision, dropout and optimizer, twice over: the same batches in the same order. A step
    on a batch shape the process meets for the first time costs more (kernels are chosen and set
    up for it, memory is allocated), and the run meets its shapes for the first time in its first
    epoch only; so the second pass, on shapes met before, times the run's steady step. The first
    pass's excess over it, per batch (the first one left out: it also sets up the process), is what
    a step on a new batch costs more; the run's first epoch pays it on the batches the probe did
    not train (the probe runs in the run's process, just before it). Nothing of it is kept: the
    run itself starts from its model as it was. Under torch.distributed every process probes, and
    all plan with the mean of their times.
    """
    batches, specials, rank, world = run.batches, run.specials, run.rank, run.world
    spread = [i * batches.steps_per_epoch // PROBE_STEPS for i in range(PROBE_STEPS)]
    probe = dataclasses.replace(
        run.config.train_config(run.recipe), max_steps=2 * PROBE_STEPS, cooldown=0
    )
    history = train(
        data_parallel(copy.deepcopy(run.model)),
        lambda step: batches.step(spread[step % PROBE_STEPS], specials, rank, world),
        probe,
        checkpoint=None,
        progress=False,
    )
    seconds = history.seconds.tolist()
    first, second = seconds[:PROBE_STEPS], seconds[PROBE_STEPS:]
    excess = [once - twice for once, twice in zip(first[1:], second[1:], strict=True)]
    steady = sum(second) / PROBE_STEPS
    unmet = 1 - len(set(spread)) / batches.steps_per_epoch  # the first epoch's new batches' share
    extra = max(sum(excess) / len(excess), 0.0) * unmet
    device = next(run.model.parameters()).device
    steady, extra, total = sum_over_processes([steady, extra, sum(seconds)], device)
    return steady / world, extra / world, total / world


def time_budget(run: RunInProgress) -> TimeBudget | None:
    """The run's time budget: the one kept in its folder, else a new one (None without a budget)."""
    config, folder = run.config, run.folder
    if config.max_minutes is None:
        return None
    budget = read_budget(folder, run.recipe, config.max_minutes)
    if budget is not None:
        if run.says:
            kept = f"plan kept from this run's start ({budget.budget_minutes:g} minutes)"
            if budget.budget_minutes != config.max_minutes:
                kept += f"; the budget of {config.max_minutes:g} now only moves the time limit"
            print(f"{kept}: {budget.schedule.steps:,} steps, planned then as", flush=True)
            print(budget.describe(config), flush=True)
        return budget
    checkpoint = folder.checkpoint
    history = read_checkpoint(checkpoint)["history"] if checkpoint.exists() else []
    if history:  # a run begun before plans existed: it stays its recipe
        seconds, extra, probe = sum(row["seconds"] for row in history) / len(history), 0.0, 0.0
    else:
        seconds, extra, probe = measure_step_seconds(run)
    budget = fit_schedule(
        config,
        run.recipe,
        seconds,
        probe,
        keep_recipe=bool(history),  # a checkpoint is tied to the recipe's schedule
        first_epoch_extra=extra,
        machine=describe_machine(),
        load_average=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    )
    write_budget(folder, budget)
    if run.says:
        print(budget.describe(config), flush=True)
    return budget


def plan_run(run: RunInProgress) -> tuple[Schedule, TimeBudget | None]:
    """The schedule the run trains (the recipe's, or its time budget's), and the budget (None
    without one). The probe, when a new budget needs it, trains a copy of the run's model."""
    budget = time_budget(run)
    return (run.recipe, None) if budget is None else (budget.schedule, budget)
