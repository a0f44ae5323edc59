"""Sweeps: many trainings of one recipe with a change each, measured into one record.

Chapter 9 trains every line of the paper's Table 3 (`make table3`, benchmarks/bench_table3.py);
the recipe search for chapter 7 trains its candidates (benchmarks/bench_recipes.py). Both are
sweeps, and this module is what they share:

* a `Job` is one training of a sweep: the name it is reported by, the fields that name its line
  in the record, its `RunConfig`, and its run folder. `config_folder` names the folder by the
  configuration (a digest of `config_identity`), so a changed configuration trains afresh instead
  of resuming another one's checkpoint.
* the record is a JSON file, `{"lines": [...]}` plus whatever else a sweep keeps there (its step
  costs); `updating_record` changes it under the lock of its folder (`files.folder_lock`), so
  several workers can add lines at once without writing over each other's.
* `run_jobs` trains and measures every job the record does not hold with its configuration. Each
  worker claims a job by locking its run folder; another worker passes over a claimed job, and
  takes over the claim of one that was killed.
* `config_step_costs` prices a training step of each configuration, in one process on an idle
  machine, in rounds that alternate between the configurations so that a change in load touches
  all alike; minutes measured on a shared machine are never compared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from annotated.base.files import FolderInUseError, atomic_write, folder_lock
from annotated.base.machine import Timing, describe
from annotated.ch03_training import train
from annotated.ch05_text import BatchPlan, Corpus
from annotated.training.config import RunConfig, new_model

# Chapter 9's Table 3 record lives in the package, annotated/results/table3.json: the one copy,
# which `make table3` writes in a checkout and the wheel carries as package data, so an installed
# book reads it wherever pip put the package.
RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def config_identity(config: RunConfig) -> dict:
    """What identifies a configuration, as a record holds it (JSON: lists, not tuples).

    Every record line stores it, a recorded line counts only for the same identity, and a run
    folder is named by its digest: this function is the one place that decides what "the same
    configuration" means.
    """
    return json.loads(json.dumps(dataclasses.asdict(config)))


def config_digest(config: RunConfig) -> str:
    """Eight hex digits of a digest of the configuration's identity."""
    text = json.dumps(config_identity(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def config_folder(parent: Path, label: str, config: RunConfig) -> Path:
    """parent/<label>-<digest>: a run folder that belongs to this configuration alone."""
    return parent / f"{label}-{config_digest(config)}"


@dataclass(frozen=True)
class Job:
    """One training of a sweep, and the line of the record it becomes."""

    name: str  # how progress and missing lines name it: "h 1 (seed 0)"
    key: dict  # the fields that name its line in the record: {"row": "A", "variant": "h 1", ...}
    config: RunConfig
    folder: Path  # where it trains, and the lock a worker claims it by

    def names(self, line: dict) -> bool:
        """Whether `line` is this job's line, whatever configuration it was measured with."""
        return all(line.get(field) == value for field, value in self.key.items())

    def holds(self, line: dict) -> bool:
        """Whether `line` is this job's line measured with this job's configuration."""
        return self.names(line) and line.get("config") == config_identity(self.config)


# ---------------------------------------------------------------- the record


def read_record(path: Path) -> dict:
    """The whole record: {"lines": [...]} and whatever else the sweep keeps (its step costs)."""
    if not path.exists():
        return {"lines": []}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(record.get("lines"), list):
            raise KeyError("lines")
        return record
    except (ValueError, KeyError, AttributeError) as error:
        raise ValueError(
            f"{path} is not a sweep's record ({error!r}): move it away, and measure its lines again"
        ) from None


def read_results(path: Path) -> list[dict]:
    """The lines recorded so far (none if the file does not exist yet)."""
    return read_record(path)["lines"]


def _wait_for_lock(folder: Path, patience: float) -> contextlib.ExitStack:
    """`folder`'s lock, held by the returned stack, once no other process holds it."""
    stack, deadline = contextlib.ExitStack(), time.monotonic() + patience
    while True:
        try:
            stack.enter_context(folder_lock(folder, quiet=True))
            return stack
        except FolderInUseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # another worker writes the record: a moment


@contextlib.contextmanager
def updating_record(path: Path, patience: float = 60.0) -> Iterator[dict]:
    """Read the record, let the block change it, write it back atomically, all under a lock.

    Several workers may finish lines at the same time; the lock of the record's folder makes each
    one re-read the record and add to it, never write over another's line.
    """
    with _wait_for_lock(path.parent, patience):
        record = read_record(path)
        yield record
        with atomic_write(path, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)


def recorded_line(lines: list[dict], job: Job) -> dict | None:
    """The job's line, if it was measured with the job's configuration."""
    return next((line for line in lines if job.holds(line)), None)


def missing_jobs(jobs: Sequence[Job], lines: list[dict]) -> list[Job]:
    """The jobs whose line `lines` lacks (or holds with another configuration)."""
    return [job for job in jobs if recorded_line(lines, job) is None]


def _add_line(path: Path, line: dict, job: Job, jobs: Sequence[Job]) -> None:
    """Put the job's line in the record in place of any older one, the lines in the jobs' order.

    Lines of no job in `jobs` (the rest of the sweep, when a worker trains only some) come first,
    in the order they had.
    """

    def position(x: dict) -> int:
        return next((i for i, other in enumerate(jobs) if other.names(x)), -1)

    with updating_record(path) as record:
        others = [x for x in record["lines"] if not job.names(x)]
        record["lines"] = sorted([*others, line], key=position)


# ---------------------------------------------------------------- running a sweep


def run_jobs(
    jobs: Sequence[Job],
    record: Path,
    measure: Callable[[Job], dict],
    report: Callable[[dict], str] | None = None,
) -> list[dict]:
    """Measure every job not yet recorded with its configuration; the record's lines.

    The record gains each line as soon as it is measured, so a stopped sweep loses at most the
    job in progress, which resumes from its last checkpoint. Several workers can share a sweep
    (run the command twice): the worker that trains a job holds its run folder's lock, and the
    others pass over it. With `report`, each job is announced, and its line summed up by it.
    """
    for number, job in enumerate(jobs, 1):
        if recorded_line(read_results(record), job):
            continue
        with contextlib.ExitStack() as claim:
            try:  # the run folder's lock is the worker's claim on the job
                claim.enter_context(folder_lock(job.folder))
            except FolderInUseError:
                continue  # another worker trains it
            if recorded_line(read_results(record), job):  # finished since by another worker
                continue
            if report:
                print(f"[{number}/{len(jobs)}] {job.name}", flush=True)
            line = measure(job)
            _add_line(record, line, job, jobs)
        if report:
            print(f"    {report(line)}", flush=True)
    return read_results(record)


def current_lines(jobs: Sequence[Job], lines: list[dict], command: str) -> list[dict]:
    """The jobs' lines, in the jobs' order, naming the missing ones and the `command` to run.

    A line recorded with another configuration (an older sweep) is left out, as if missing.
    """
    missing = missing_jobs(jobs, lines)
    if missing:
        print(f"{len(missing)} of {len(jobs)} lines are not measured yet: run `{command}`")
        print("missing: " + ", ".join(job.name for job in missing))
    return [line for job in jobs if (line := recorded_line(lines, job))]


# ---------------------------------------------------------------- the cost of a step


def config_step_costs(
    configs: dict, corpus: Corpus | dict[str, Corpus], steps: int, rounds: int
) -> dict:
    """Seconds per training step of each named RunConfig (the first is the base), side by side.

    Each round trains every configuration for `steps` steps with chapter 3's `train` (the first
    step, which warms up, is not counted) on the same batches (the base's `max_tokens`); the rounds
    alternate between the configurations, so that a change in the machine's load touches them all
    alike. The cost of each is the median over its rounds, and its ratio to the base's is what the
    chapters compare. The record says how loaded the machine was meanwhile (`machine.Timing`).
    `corpus` may instead map each configuration's name to its own corpus (another vocabulary):
    each then trains on the first batches of its own.
    """
    corpora = corpus if isinstance(corpus, dict) else dict.fromkeys(configs, corpus)
    base = next(iter(configs))
    max_tokens, pairs = configs[base].max_tokens, configs[base].train_pairs
    batches = {}
    for name in configs:
        plan = BatchPlan.build(corpora[name].ids["train"][:pairs], max_tokens)
        specials = corpora[name].tgt_vocab.specials
        batches[name] = [plan.step(step, specials) for step in range(steps)]
    seconds: dict[str, list[float]] = {name: [] for name in configs}
    with Timing(torch.get_num_threads()) as timing:
        for _ in range(rounds):
            for name, config in configs.items():
                model = new_model(config, corpora[name])
                schedule = dataclasses.replace(
                    config.train_config(config.schedule(steps)), max_steps=steps, cooldown=0
                )
                history = train(model, batches[name].__getitem__, schedule, progress=False)
                seconds[name].append(float(history.seconds.iloc[1:].mean()))
    median = {name: statistics.median(values) for name, values in seconds.items()}
    return {
        "seconds per step": {name: round(value, 4) for name, value in median.items()},
        "relative to base": {
            name: round(value / median[base], 3) for name, value in median.items()
        },
        "steps": steps,
        "rounds": rounds,
        "machine": describe(),
        "timing": timing.conditions(),
    }


def recorded_step_costs(
    record: Path, measure: Callable[[], dict] | None, command: str
) -> dict | None:
    """The record's step costs (measured and recorded first if missing, with `measure`).

    None, and a word on the `command` that measures them, if there are none.
    """
    costs = read_record(record).get("step costs")
    if costs is None and measure is not None:
        costs = measure()
        with updating_record(record) as saved:
            saved["step costs"] = costs
    if costs is None:
        print(f"the cost of a step is not measured yet: run `{command}`")
    return costs
