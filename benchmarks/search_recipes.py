"""The second search for chapter 7's recipe: shared subwords and longer schedules, many runs at once.

    python -m benchmarks.search_recipes [--stage screen|finalists] [--parallel K] [--only NAME ...]
                                        [--finalists N] [--record PATH] [--runs PATH] [--list]
                                        [--step-costs] [--smoke]

The first search (`bench_recipes.py`, the lab notebook's runs 6 to 11) changed run 6 one setting
at a time and chose chapter 7's full profile. This one starts from that profile (`BASE`, with no
time budget: candidates are compared step for step) and tries what a screen on one GPU pointed
at: the paper's shared subword vocabulary (section 3.4) of 8,000, 10,000 or 16,000 pieces, on
20, 30 or 40 epochs (the schedule stretched, as the profile `long` stretches it), then the peak
rate, the dropout and the width for subwords (`CANDIDATES`).

It runs in two stages, and the test set is read only in the second:

* `--stage screen` trains every candidate once (seed 0) and scores it on the validation set alone:
  the averaged weights, greedy and with the recipe's beam, and the best validation BLEU the bare
  weights reached on the way.
* `--stage finalists` ranks the screened candidates by validation BLEU (beam plus greedy), takes
  the best `--finalists` (2), trains each with seeds 0, 1 and 2, and scores every seed on
  test2016 too. The record's "finalists" section gives each finalist's band: the mean, lowest and
  highest of its seeds.

Each line goes into `--record` (benchmarks/results/recipes.json) as soon as it is measured, with
the machine, the device, the commit and how many runs shared the device, so running the command
again trains only what is missing; a stopped run resumes from its checkpoint in `--runs`.
`--parallel K` starts K worker processes of one thread each that share the list (each claims the
run it trains by its folder's lock, `annotated/training/sweeps.py`): on one GPU as many as fit
(twelve fit an H200; the default there is 12), on a CPU one per core at most (the default is one
worker). On a GPU machine without the book's git history, `ANNOTATED_COMMIT` names the commit.

`--step-costs` prices an epoch of every candidate on this machine against the full profile's,
alone (each with its own vocabulary's batches, in alternating rounds), so that an hour on any CPU
converts into epochs of each; `--smoke` shrinks every candidate to a tiny model on 2,000 pairs
with small vocabularies, to try the machinery in a minute (never recorded in recipes.json unless
`--record` says so).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import torch

from annotated.base.devices import training_device
from annotated.base.files import atomic_write
from annotated.base.threads import use_fair_threads
from annotated.ch05_text import BatchPlan, Corpus, load_multi30k
from annotated.ch06_decoding import Translator, evaluate_split
from annotated.ch07_multi30k import FULL, train_multi30k
from annotated.training import loop as training_loop
from annotated.training.config import RUNS_DIR, RunConfig, smoke_version
from annotated.training.finish import average_snapshots
from annotated.training.folder import RunFolder
from annotated.training.sweeps import (
    Job,
    config_folder,
    config_identity,
    config_step_costs,
    missing_jobs,
    read_record,
    run_jobs,
    updating_record,
)
from benchmarks.common import RESULTS_DIR, cpu_kind, describe
from benchmarks.common import code_commit as commit

RECORD = RESULTS_DIR / "recipes.json"
SEARCH = "subwords"  # every line of this search carries {"search": SEARCH}
BASE = dataclasses.replace(FULL, max_minutes=None)  # chapter 7's full profile, step for step
SEEDS = (0, 1, 2)  # a finalist's seeds
TEST = "test_2016_flickr"
KEPT = "kept-snapshots"  # in a run folder: a hard link to every snapshot the run wrote
GPU_WORKERS = 12  # runs at once on one GPU: twelve of chapter 7's size fit an H200
PEAK = 1.0e-3  # the full profile's peak learning rate (equation 3 at step `warmup`)


def lr_factor(d_model: int, warmup: int, peak: float) -> float:
    """Equation 3's factor that puts the peak rate, at step `warmup`, at `peak`."""
    return round(peak * (d_model * warmup) ** 0.5, 4)


def epochs(n: int) -> dict:
    """n epochs, the schedule stretched: the rate cools over the second half, as in `long`."""
    return {"epochs": n, "cooldown_epochs": n / 2}


def subwords(n: int) -> dict:
    """A shared subword vocabulary of n pieces (section 3.4: all three embeddings shared)."""
    return {"vocab_size": n}


WIDE = {"d_model": 512, "d_ff": 2048, "h": 8}
# name: (the changes to BASE, why it is a candidate)
CANDIDATES: dict[str, tuple[dict, str]] = {
    "full": ({}, "chapter 7's full profile as it is: words, 20 epochs (the reference)"),
    "full, 40 epochs": (epochs(40), "the profile `long`: the words' schedule stretched"),
    **{
        f"subwords {n // 1000}k, {e} epochs": (
            {**subwords(n), **epochs(e)},
            f"the paper's shared subwords, {n:,} pieces; {e} epochs"
            + (" (the GPU screen's best: 41.34 validation BLEU)" if (n, e) == (10000, 40) else ""),
        )
        for n in (8000, 10000, 16000)
        for e in (20, 30, 40)
    },
    "subwords 10k, 40 epochs, peak 7e-4": (
        {**subwords(10000), **epochs(40), "lr_factor": lr_factor(256, 500, 7e-4)},
        "a lower peak rate: subwords make longer sequences, so more tokens share each update",
    ),
    "subwords 10k, 40 epochs, peak 1.4e-3": (
        {**subwords(10000), **epochs(40), "lr_factor": lr_factor(256, 500, 1.4e-3)},
        "a higher peak rate: the shared embeddings get gradients from both sides",
    ),
    "subwords 10k, 40 epochs, dropout to 0.2": (
        {**subwords(10000), **epochs(40), "p_drop_final": 0.2},
        "less regularization: the words' dropout rose to 0.3 against rare words' overfitting",
    ),
    "subwords 10k, 40 epochs, dropout to 0.4": (
        {**subwords(10000), **epochs(40), "p_drop_final": 0.4},
        "more regularization for the longer schedule",
    ),
    "subwords 10k, 40 epochs, label smoothing 0.2": (
        {**subwords(10000), **epochs(40), "eps_ls": 0.2},
        "twice the paper's label smoothing (section 5.4): a softer target for the second half, "
        "where the bare score stopped rising",
    ),
    "subwords 10k, 40 epochs, width 512": (
        {**subwords(10000), **epochs(40), **WIDE, "lr_factor": lr_factor(512, 500, PEAK)},
        "the base model's width (d_model 512, d_ff 2,048, 8 heads), the peak rate kept",
    ),
    "subwords 10k, 40 epochs, width 384": (
        {**subwords(10000), **epochs(40), "d_model": 384, "d_ff": 1536, "h": 6}
        | {"lr_factor": lr_factor(384, 500, PEAK)},
        "between the two widths (d_model 384, d_ff 1,536, 6 heads), the peak rate kept",
    ),
}


# Candidates that train nothing: another candidate's run, scored with more of its snapshots averaged
# (one every half epoch; the recipe averages the last 5). name: (the run it scores, snapshots).
AVERAGED_FROM = {
    f"subwords 10k, {e} epochs, last {last} averaged": (f"subwords 10k, {e} epochs", last)
    for e in (40, 30)
    for last in (10, 20)
}
CANDIDATES |= {
    name: (
        {**CANDIDATES[trained][0], "average_last": last},
        f"{trained}'s own run, its last {last} snapshots ({last / 2:g} epochs) averaged in "
        "place of 5: the bare score stopped rising well before the rate finished cooling",
    )
    for name, (trained, last) in AVERAGED_FROM.items()
}


def candidate_config(name: str, seed: int = 0, smoke: bool = False) -> RunConfig:
    if name in AVERAGED_FROM:  # the run it scores, averaged over more snapshots
        trained, last = AVERAGED_FROM[name]
        return dataclasses.replace(candidate_config(trained, seed, smoke), average_last=last)
    changes, _ = CANDIDATES[name]
    config = dataclasses.replace(BASE, seed=seed, **changes)
    if smoke:  # a tiny model, one epoch on 2,000 pairs; a tenth of the vocabulary; two snapshots
        size = None if config.vocab_size is None else config.vocab_size // 10
        config = smoke_version(
            config, train_pairs=2000, vocab_size=size, epochs=1, evals_per_epoch=2
        )
        config = dataclasses.replace(
            config, cooldown_epochs=0.5, average_last=1, val_sentences=40, test_sentences=40
        )
    return config


@dataclasses.dataclass(frozen=True)
class SearchJob(Job):
    trains: (
        RunConfig  # what trains in the folder: `config`, or the run an averaging candidate scores
    )


def job(name: str, stage: str, seed: int, runs: Path, smoke: bool = False) -> SearchJob:
    """The candidate's training for `stage`, in runs/<name>-seed<seed>-<digest>/ (a screen and a
    finalist's seed 0 share the folder: one training, scored once more on test2016). A candidate
    of `AVERAGED_FROM` scores the folder of the run it names, and trains nothing of its own."""
    config = candidate_config(name, seed, smoke)
    key = {"search": SEARCH, "stage": stage, "name": name, "seed": seed}
    trained = AVERAGED_FROM.get(name, (name,))[0]
    trains = candidate_config(trained, seed, smoke)
    folder = config_folder(runs, f"{slug(trained)}-seed{seed}", trains)
    return SearchJob(f"{name} (seed {seed})", key, config, folder, trains)


def slug(name: str) -> str:
    """A candidate's name as a folder's: "subwords-10k-40-epochs"."""
    safe = "".join(c if c.isalnum() else "-" for c in name)
    while "--" in safe:
        safe = safe.replace("--", "-")
    return safe


def screen_jobs(names: list[str], runs: Path, smoke: bool) -> list[Job]:
    return [job(name, "screen", 0, runs, smoke) for name in names]


def ranked(lines: list[dict]) -> list[dict]:
    """This search's screen lines, best first by validation BLEU (beam plus greedy)."""
    screened = [x for x in lines if x.get("search") == SEARCH and x.get("stage") == "screen"]
    return sorted(screened, key=lambda x: -(x["val beam"] + x["val greedy"]))


def finalist_names(lines: list[dict], count: int) -> list[str]:
    """The `count` best screened candidates, by validation alone."""
    return [x["name"] for x in ranked(lines)[:count]]


def finalist_jobs(names: list[str], runs: Path, smoke: bool) -> list[Job]:
    return [job(name, "finalist", seed, runs, smoke) for name in names for seed in SEEDS]


# ---------------------------------------------------------------- measuring a run


def machine_label() -> str:
    """The device, or the CPU's model and instruction sets: "AMD EPYC (AVX2)"."""
    device = device_name()
    if device != "cpu":
        return device
    kind = cpu_kind()
    return f"{kind['model']} ({', '.join(kind['instruction sets'])})"


def device_name() -> str:
    device = training_device()
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return device.type


def measure(job: Job, workers: int) -> dict:
    """Train (or resume) the job's run and score it: validation always, test2016 for finalists.

    The run builds its vocabulary into its folder (or reads it back from there when it resumes).
    """
    config, name = job.config, job.key["name"]
    started = time.perf_counter()
    with keeping_snapshots(job.folder):
        run = train_multi30k(job.trains, job.folder, progress=False)
    final = None if job.trains == config else averaged(run, config.average_last)
    scores = bleu(run, ["val"] + ([TEST] if job.key["stage"] == "finalist" else []), final)
    best = run.evals.loc[run.evals["val BLEU"].idxmax()]
    return {
        **job.key,
        "changes": CANDIDATES[name][0],
        "why": CANDIDATES[name][1],
        "config": config_identity(config),
        **({"scores the run of": AVERAGED_FROM[name][0]} if name in AVERAGED_FROM else {}),
        "vocabulary": [len(run.corpus.src_vocab), len(run.corpus.tgt_vocab)],
        "steps": int(run.history.step.max()),
        "steps per epoch": run.schedule.steps_per_epoch,
        **scores,
        "best val BLEU (bare weights)": float(best["val BLEU"]),
        "epoch of best val BLEU": float(best["epoch"]),
        "val BLEU by step": run.evals[["step", "val BLEU"]].values.tolist(),
        "train minutes": round(run.history.seconds.sum() / 60, 2),
        "wall minutes with evaluations": round((time.perf_counter() - started) / 60, 2),
        "runs sharing the device": workers,
        "device": device_name(),
        "machine": describe(),
        "cpu": cpu_kind(),
        "commit": commit(),
    }


@contextlib.contextmanager
def keeping_snapshots(folder: Path) -> Iterator[None]:
    """While a run trains, link each snapshot it writes into folder/kept-snapshots/: the recipe
    keeps only the last `average_last` (training/loop.py), and an averaging candidate needs more.

    The link is made as soon as the loop has saved the snapshot, before its next save can prune
    it: the search wraps the loop's `save_snapshot` for the run, rather than touch the recipe's
    code (the chapters import it). A look now and then would miss snapshots on a fast machine."""

    def save_and_keep(*args, **kwargs) -> None:
        saving(*args, **kwargs)
        link_snapshots(folder)

    saving = training_loop.save_snapshot
    training_loop.save_snapshot = save_and_keep
    try:
        yield
    finally:
        training_loop.save_snapshot = saving
        link_snapshots(folder)


def link_snapshots(folder: Path) -> None:
    """Hard-link the folder's snapshots into kept-snapshots/ (the recipe's pruning leaves them)."""
    kept = folder / KEPT
    for path in RunFolder(folder, writes=False).snapshots():
        if not (kept / path.name).exists():
            kept.mkdir(exist_ok=True)
            with contextlib.suppress(FileNotFoundError, FileExistsError):  # pruned, or linked
                os.link(path, kept / path.name)


def kept_snapshots(folder: Path) -> list[Path]:
    """Every snapshot of the run, oldest first: the kept ones and any not linked yet."""
    paths = {path.name: path for path in sorted((folder / KEPT).glob("step-*.pt"))}
    paths |= {path.name: path for path in RunFolder(folder, writes=False).snapshots()}
    return [paths[name] for name in sorted(paths)]


def averaged(run, last: int) -> Translator:
    """The run's last `last` snapshots averaged, in memory: its folder keeps the recipe's own."""
    snapshots = kept_snapshots(Path(run.folder))[-last:]
    if len(snapshots) < min(last, len(run.evals)):  # one snapshot an evaluation
        raise SystemExit(
            f"{run.folder} holds {len(snapshots)} snapshots, not the last {last}: it was trained "
            f"before the search kept them ({KEPT}/). Delete the folder to train it again."
        )
    model = copy.deepcopy(run.translator.model)
    model.load_state_dict(average_snapshots(snapshots))
    return Translator(
        model.eval(), run.corpus.src_vocab, run.corpus.tgt_vocab, run.translator.decoding
    )


def bleu(run, splits: list[str], final: Translator | None = None) -> dict:
    """BLEU of the run's final model (its averaged weights, or `final`) on each split, greedy and
    with the recipe's beam: {"val greedy": ..., "val beam": ..., "test2016 greedy": ...}."""
    config, final = run.config, final or run.averaged or run.translator
    scores = {}
    for split in splits:
        limit = config.test_sentences if split == TEST else config.val_sentences  # all: None
        for decoding, beam in (("greedy", 1), ("beam", config.decoding.beam)):
            result, _ = evaluate_split(
                final, run.corpus, split, limit=limit, beam=beam, alpha=config.decoding.alpha
            )
            scores[f"{'test2016' if split == TEST else split} {decoding}"] = result["BLEU"]
    return scores


def finalist_lines(lines: list[dict], names: list[str]) -> list[dict]:
    """This search's finalist lines (every seed) of the candidates named."""
    finalists = [x for x in lines if x.get("search") == SEARCH and x.get("stage") == "finalist"]
    return [x for x in finalists if x["name"] in names]


def bands(lines: list[dict], names: list[str]) -> dict:
    """Each finalist's seeds on test2016 and validation: mean, lowest, highest."""
    out = {}
    for name in names:
        seeds = finalist_lines(lines, [name])
        if len(seeds) < len(SEEDS):
            continue
        out[name] = {
            metric: {
                "mean": round(statistics.mean(x[metric] for x in seeds), 2),
                "lowest": min(x[metric] for x in seeds),
                "highest": max(x[metric] for x in seeds),
            }
            for metric in ("test2016 beam", "test2016 greedy", "val beam", "val greedy")
        }
        out[name]["seeds"] = [x["seed"] for x in seeds]
    return out


# ---------------------------------------------------------------- an hour on this machine


def hour(name: str, runs: Path, smoke: bool) -> dict:
    """The candidate as chapter 7 would train it here: within its budget of 60 training minutes
    (compressed by the budget where the recipe does not fit), scored on validation alone."""
    minutes = 1.0 if smoke else FULL.max_minutes
    config = dataclasses.replace(candidate_config(name, smoke=smoke), max_minutes=minutes)
    folder = config_folder(runs, "hour-" + slug(name), config)
    run = train_multi30k(config, folder, progress=True)
    scores = bleu(run, ["val"])
    steps = int(run.history.step.max())
    budget = run.budget
    return {
        "name": name,
        "config": config_identity(config),
        "recipe steps": budget.recipe_steps if budget else steps,
        "steps": steps,
        "epochs": round(steps / run.schedule.steps_per_epoch, 1),
        "planned steps a minute": round(60 / budget.seconds_per_step, 1) if budget else None,
        "train minutes": round(run.history.seconds.sum() / 60, 2),
        **scores,
        "best val BLEU (bare weights)": float(run.evals["val BLEU"].max()),
        "device": device_name(),
        "machine": describe(),
        "cpu": cpu_kind(),
        "commit": commit(),
    }


# ---------------------------------------------------------------- the cost of an epoch


def epoch_costs(names: list[str], smoke: bool) -> dict:
    """Seconds per step and minutes per epoch of each candidate on this machine, against the
    full profile's: each candidate with its own vocabulary's batches, in alternating rounds."""
    configs = {"full": candidate_config("full", smoke=smoke)}
    configs |= {name: candidate_config(name, smoke=smoke) for name in names}
    corpora: dict = {}
    for config in configs.values():
        key = (config.vocab_size, config.min_freq)
        corpora.setdefault(key, load_multi30k(config.vocab_size, config.min_freq))
    by_name = {name: corpora[(c.vocab_size, c.min_freq)] for name, c in configs.items()}
    costs = config_step_costs(configs, by_name, 12, 3)
    per_epoch = {name: _steps_per_epoch(c, by_name[name]) for name, c in configs.items()}
    seconds = costs["seconds per step"]
    costs["steps per epoch"] = per_epoch
    costs["minutes per epoch"] = {n: round(seconds[n] * per_epoch[n] / 60, 2) for n in configs}
    costs["epochs in 60 training minutes"] = {
        n: round(60 / costs["minutes per epoch"][n], 1) for n in configs
    }
    costs["cpu"] = cpu_kind()
    costs["commit"] = commit()
    costs["precision"] = "as chapter 7 (bf16 where the hardware has it, else float32)"
    return costs


def _steps_per_epoch(config: RunConfig, corpus: Corpus) -> int:
    plan = BatchPlan.build(corpus.ids["train"][: config.train_pairs], config.max_tokens)
    return plan.steps_per_epoch


# ---------------------------------------------------------------- the command


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stage", choices=("screen", "finalists"), default="screen")
    parser.add_argument("--only", nargs="+", choices=sorted(CANDIDATES), default=None)
    parser.add_argument("--finalists", type=int, default=2, help="how many candidates go on")
    parser.add_argument("--parallel", type=int, default=None, help="worker processes (see above)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per worker")
    parser.add_argument("--record", type=Path, default=RECORD)
    parser.add_argument("--runs", type=Path, default=RUNS_DIR / "search")
    parser.add_argument("--list", action="store_true", help="list the candidates and stop")
    parser.add_argument("--step-costs", action="store_true", help="price an epoch of each, alone")
    parser.add_argument("--smoke", action="store_true", help="tiny models: try the machinery")
    parser.add_argument(
        "--collect",
        type=Path,
        help="write every run's validation curve so far to this JSON file (finished or not)",
    )
    parser.add_argument(
        "--hour",
        choices=sorted(CANDIDATES),
        help="train this candidate in chapter 7's budget of 60 minutes here (alone), val scored",
    )
    parser.add_argument("--workers-sharing", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke and args.record == RECORD:
        parser.error("--smoke trains toy models: give it a --record of its own")
    if args.parallel is not None and args.parallel < 1:
        parser.error("--parallel needs at least one worker")
    return args


def jobs_for(args: argparse.Namespace) -> list[Job]:
    names = args.only or list(CANDIDATES)
    if args.stage == "screen":
        return screen_jobs(names, args.runs, args.smoke)
    lines = read_record(args.record)["lines"]
    chosen = finalist_names(
        [x for x in lines if args.only is None or x["name"] in names], args.finalists
    )
    if not chosen:
        raise SystemExit(f"no screened candidate in {args.record}: run --stage screen first")
    print("finalists, by validation BLEU: " + "; ".join(chosen), flush=True)
    return finalist_jobs(chosen, args.runs, args.smoke)


def launch(args: argparse.Namespace, argv: list[str], count: int) -> int:
    """Start `count` workers of this command (one thread each) and wait for them all."""
    args.runs.mkdir(parents=True, exist_ok=True)
    rest, skip = [], False
    for item in argv:  # the same arguments, less --parallel
        if skip:
            skip = False
        elif item == "--parallel":
            skip = True
        elif not item.startswith("--parallel="):
            rest.append(item)
    command = [sys.executable, "-m", "benchmarks.search_recipes", *rest, "--parallel", "1"]
    command += ["--threads", "1"]
    command += ["--workers-sharing", str(count)]
    logs, workers = [], []
    for index in range(count):
        log = args.runs / f"worker-{index}.log"
        logs.append(log)
        handle = log.open("w", encoding="utf-8")
        workers.append(subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT))
        time.sleep(2)  # each claims the next run before the one after it starts

    def stop(signum, frame):  # a time limit stops the search: stop the workers with it
        for worker in workers:
            worker.terminate()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    codes = [worker.wait() for worker in workers]
    for log, code in zip(logs, codes, strict=True):
        print(f"{log}: exit {code}")
        if code:
            print(log.read_text(encoding="utf-8")[-2000:])
    return max(codes)


def collect(jobs: list[Job], path: Path) -> None:
    """Each run's validation BLEU so far, from its folder's evals.csv: what a stopped search keeps
    of the runs it had not finished (on a lent GPU, only the files written to $OUT come back)."""
    runs = {}
    for one in jobs:
        files = RunFolder(one.folder, writes=False)
        evals = files.evals
        if not evals.exists():
            continue
        table = pd.read_csv(evals)
        runs[one.name] = {
            **one.key,
            "config": config_identity(one.config),
            "finished": files.history.exists(),
            "epochs of the recipe": one.config.epochs,
            "val BLEU by epoch": table[["epoch", "val BLEU"]].values.tolist(),
            "best val BLEU (bare weights)": float(table["val BLEU"].max()),
        }
    record = {"device": device_name(), "machine": describe(), "commit": commit(), "runs": runs}
    with atomic_write(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    print(f"{len(runs)} runs' validation curves in {path}")


def summary(line: dict) -> str:
    tested = f", test2016 beam {line['test2016 beam']}" if "test2016 beam" in line else ""
    return f"val beam {line['val beam']}, greedy {line['val greedy']}{tested}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.list:
        for name, (changes, why) in CANDIDATES.items():
            print(f"{name}: {changes or 'no change'} ({why})")
        return 0
    if args.hour:
        use_fair_threads()
        line = hour(args.hour, args.runs, args.smoke)
        with updating_record(args.record) as record:
            record.setdefault("search 2: an hour", {})[f"{machine_label()}, {args.hour}"] = line
        print(json.dumps(line, indent=1))
        return 0
    if args.step_costs:
        use_fair_threads()
        costs = epoch_costs(args.only or list(CANDIDATES), args.smoke)
        with updating_record(args.record) as record:
            record[f"search 2: epoch costs, {machine_label()}"] = costs
        print(json.dumps(costs, indent=1))
        return 0
    jobs = jobs_for(args)
    if args.collect:
        collect(jobs, args.collect)
        return 0
    gpu = training_device().type == "cuda"
    count = args.parallel if args.parallel is not None else (GPU_WORKERS if gpu else 1)
    count = min(count, len(missing_jobs(jobs, read_record(args.record)["lines"])))
    if count > 1:  # never more workers than runs to train
        code = launch(args, argv, count)
    else:
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        else:
            use_fair_threads()
        run_jobs(jobs, args.record, lambda j: measure(j, args.workers_sharing), summary)
        code = 0
    if args.stage == "finalists":
        names = list(dict.fromkeys(j.key["name"] for j in jobs))
        with updating_record(args.record) as record:
            section = record.setdefault("search 2: finalists", {})
            section.update(bands(record["lines"], names))
            seeds = finalist_lines(record["lines"], names)
            for key in ("machine", "commit"):  # where the bands' seeds were measured
                section[key] = "; ".join(sorted({str(x.get(key)) for x in seeds}))
    return code


if __name__ == "__main__":
    sys.exit(main())
