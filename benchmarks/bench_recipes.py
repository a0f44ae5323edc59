"""The search for chapter 7's recipe: train run 6 with a change, score it, and record it.

    python -m benchmarks.bench_recipes [--threads T] [--only NAME ...] [--list] [--step-costs]

Each candidate is run 6 (the lab notebook's) with the changes listed in CANDIDATES, trained for its
whole schedule (no time budget: candidates are compared step for step, since their minutes depend
on the machine and on what shared it). A candidate trains in runs/recipes/<name>-<digest>/ and
resumes from its checkpoint if stopped; as soon as it is scored, its line goes into
benchmarks/results/recipes.json (atomically, under a lock), so running the command again trains
only what is missing. Two workers of one thread each share the list, each claiming the candidate
it trains (the sweep machinery of annotated/training/sweeps.py, which chapter 9's Table 3 uses too):

    python -m benchmarks.bench_recipes --threads 1 &
    python -m benchmarks.bench_recipes --threads 1

The reference, "run 6", is chapter 7's recipe before the search (three layers a side; its run is
kept in runs/multi30k-run6/), scored the same way. Training minutes
are recorded with the workers and threads that produced them (each session that trains a
candidate adds a line to its folder's trained-with.json, from the step it resumed at): read them
as the step counts' companions, not as timings. What a candidate's step costs is measured by
`--step-costs`, alone: every candidate's step against run 6's, in alternating rounds in one process
(`sweeps.config_step_costs`), so that an hour on any CPU converts into steps of each candidate.
`--step-costs --as-avx2` measures them again with this CPU held to AVX2 kernels and fp32, the
nearest it comes to the AVX2-only machines (recorded apart, as "step costs as AVX2").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import torch

from annotated.base.checkpoints import read_checkpoint
from annotated.base.files import atomic_write
from annotated.base.threads import use_fair_threads
from annotated.ch05_text import load_multi30k
from annotated.ch07_multi30k import FULL, train_multi30k
from annotated.training.config import RUNS_DIR
from annotated.training.finish import final_scores
from annotated.training.folder import RunFolder
from annotated.training.sweeps import (
    Job,
    config_folder,
    config_identity,
    config_step_costs,
    run_jobs,
    updating_record,
)
from benchmarks.common import RESULTS_DIR, cpu_kind, describe

RECORD = RESULTS_DIR / "recipes.json"
STEPS_PER_EPOCH = 152  # chapter 7's full profile: Multi30k's train split in 3,000-token steps
# Every candidate is a change to one fixed reference: run 6 of the lab notebook, chapter 7's recipe
# before this search (three layers a side), whose own run is kept in runs/multi30k-run6/.
RUN6 = dataclasses.replace(FULL, N=3)
SESSIONS = "trained-with.json"  # in a candidate's folder: how each session trained it
# An AVX2-only CPU, as near as this one can play it: the same kernel limits as `make nbval-kernels`
# (oneDNN and MKL held to AVX2, ATen's AVX2 kernels) and fp32, since such a CPU has no bf16.
AS_AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


# name: (the changes to run 6, why it is a candidate)
CANDIDATES = {
    "run 6": ({}, "chapter 7's recipe before the search: the reference"),
    "dropout from 0": (
        {"p_drop": 0.0},
        "Table 3 row D: no dropout learned fastest at 700 steps; the rate still rises to 0.3",
    ),
    "two layers": (
        {"N": 2},
        "Table 3 row C: N 2 beat N 3 by 3.9 BLEU at 700 steps, and a step costs 0.74 of the base's",
    ),
    "two layers, dropout from 0": (
        {"N": 2, "p_drop": 0.0},
        "both changes that learned faster than run 6 early on, together",
    ),
    "two layers, learned positions": (
        {"N": 2, "learned_positions": True},
        "Table 3 row E: a learned position table scored 23.1 with beam search at 700 steps, the "
        "base 19.6 (the mean of its three seeds)",
    ),
    "two layers, 40 epochs": (
        {"N": 2, "epochs": 40, "cooldown_epochs": 20.0},
        "the Xeon's hour: two layers' 3,040 steps take about 22 of its minutes, so twice as many "
        "(the same schedule stretched) fill about 43, inside the budget's margin",
    ),
}


def own_lines(lines: list[dict]) -> list[dict]:
    """This search's lines of the record: the second search's (search_recipes.py) name it."""
    return [line for line in lines if "search" not in line]


def candidate_config(name: str):
    changes, _ = CANDIDATES[name]
    if name == "run 6":
        return RUN6  # as it was trained, with chapter 7's budget of the time
    return dataclasses.replace(RUN6, max_minutes=None, **changes)


def recorded_config(name: str) -> dict:
    """The candidate's configuration as the record holds it (sweeps.config_identity)."""
    return config_identity(candidate_config(name))


def candidate_job(name: str) -> Job:
    """The candidate's training, in runs/recipes/<name>-<digest of the configuration>/, so that a
    changed candidate trains afresh (run 6 in the folder it was trained in)."""
    config = candidate_config(name)
    if name == "run 6":
        return Job(name, {"name": name}, config, RUNS_DIR / "multi30k-run6")
    safe = "".join(c if c.isalnum() else "-" for c in name).replace("--", "-")
    return Job(name, {"name": name}, config, config_folder(RUNS_DIR / "recipes", safe, config))


def candidate_folder(name: str) -> Path:
    return candidate_job(name).folder


def first_step(evals, threshold: float) -> int | None:
    reached = evals[evals["val BLEU"] >= threshold]
    return None if reached.empty else int(reached["step"].iloc[0])


def note_session(folder: Path, last_step: int, threads: int, workers: int) -> None:
    """Add to the folder's trained-with.json the steps this session is about to train, and how."""
    checkpoint = RunFolder(folder, writes=False).checkpoint
    done = len(read_checkpoint(checkpoint)["history"]) if checkpoint.exists() else 0
    if done >= last_step:
        return  # finished: this session only scores it
    path = folder / SESSIONS
    sessions = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    sessions.append({"from step": done + 1, "threads": threads, "workers": workers})
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w", encoding="utf-8") as handle:
        json.dump(sessions, handle, indent=1)


def trained_with(folder: Path, last_step: int) -> str:
    """How the run was trained, session by session, as its trained-with.json says."""
    path = folder / SESSIONS
    if not path.exists():
        return "not noted"
    sessions = json.loads(path.read_text(encoding="utf-8"))
    ends = [session["from step"] - 1 for session in sessions[1:]] + [last_step]
    return "; ".join(
        f"steps {session['from step']:,}-{end:,}: {session['threads']} thread(s), "
        f"{session['workers']} worker(s) on the machine"
        + (f" ({session['note']})" if "note" in session else "")
        for session, end in zip(sessions, ends, strict=True)
    )


def measure(job: Job, threads: int, workers: int) -> dict:
    """Train (or resume) the candidate and score it; its line of the record."""
    name, config, folder = job.name, job.config, job.folder
    last_step = config.schedule(STEPS_PER_EPOCH).steps
    corpus = load_multi30k(config.vocab_size, config.min_freq, folder)
    note_session(folder, last_step, threads, workers)
    run = train_multi30k(config, folder, corpus=corpus)
    scores = final_scores(run)
    rows = {
        (row["split"], row["weights"], row["decoding"], row["<unk> copied"]): row["BLEU"]
        for row in scores.to_dict("records")
    }
    averaged = f"average of last {config.average_last}"
    beam = f"beam {config.decoding.beam}"
    first = run.evals.iloc[0]  # evaluated every half epoch
    steps_per_epoch = round(first["step"] / first["epoch"])
    return {
        "name": name,
        "changes": CANDIDATES[name][0],
        "why": CANDIDATES[name][1],
        "config": recorded_config(name),
        "steps": int(run.history.step.max()),
        "steps per epoch": steps_per_epoch,
        "test2016 beam": rows[("test_2016_flickr", averaged, beam, "yes")],
        "test2016 greedy": rows[("test_2016_flickr", averaged, "greedy", "yes")],
        "test2016 last weights": rows[("test_2016_flickr", "last", "greedy", "no")],
        "val beam": rows[("val", averaged, beam, "yes")],
        "val greedy": rows[("val", averaged, "greedy", "yes")],
        "best val BLEU (bare weights)": float(run.evals["val BLEU"].max()),
        "step of val BLEU 30": first_step(run.evals, 30),
        "step of val BLEU 35": first_step(run.evals, 35),
        "val BLEU by step": run.evals[["step", "val BLEU"]].values.tolist(),
        "train minutes": round(run.history.seconds.sum() / 60, 2),
        "trained with": trained_with(folder, int(run.history.step.max())),
        "machine": describe(),
        "cpu": cpu_kind(),
    }


def step_costs(names: list[str], as_avx2: bool) -> dict:
    """Seconds per training step of each named candidate and of run 6 (the base), side by side."""
    configs = {"run 6": RUN6, **{name: candidate_config(name) for name in names}}
    if as_avx2:
        configs = {name: dataclasses.replace(c, precision="fp32") for name, c in configs.items()}
    costs = config_step_costs(configs, load_multi30k(None, FULL.min_freq), 12, 3)
    costs["precision"] = "fp32" if as_avx2 else "as chapter 7 (bf16 where the CPU has it)"
    if as_avx2:
        costs["kernels"] = AS_AVX2
        costs["steps a minute"] = {
            name: round(60 / seconds, 1) for name, seconds in costs["seconds per step"].items()
        }
    return costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--workers", type=int, default=1, help="workers sharing the machine")
    parser.add_argument("--only", nargs="+", choices=sorted(CANDIDATES), default=None)
    parser.add_argument("--list", action="store_true", help="list the candidates and stop")
    parser.add_argument(
        "--step-costs",
        action="store_true",
        help="only measure each candidate's seconds per step against run 6's (run it alone)",
    )
    parser.add_argument(
        "--as-avx2",
        action="store_true",
        help="with --step-costs: hold this CPU to AVX2 kernels and fp32, as an AVX2-only CPU runs",
    )
    args = parser.parse_args(argv)
    if args.as_avx2 and not args.step_costs:
        parser.error("--as-avx2 only applies to --step-costs")
    if args.as_avx2 and any(os.environ.get(key) != value for key, value in AS_AVX2.items()):
        # the kernel limits are read when torch starts: start again with them set
        arguments = sys.argv[1:] if argv is None else argv
        command = [sys.executable, "-m", "benchmarks.bench_recipes", *arguments]
        os.execve(sys.executable, command, {**os.environ, **AS_AVX2})
    if args.list:
        for name, (changes, why) in CANDIDATES.items():
            print(f"{name}: {changes or 'none'} ({why}) -> {candidate_folder(name)}")
        return 0
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    else:
        use_fair_threads()
    if args.step_costs:
        costs = step_costs(args.only or list(CANDIDATES), args.as_avx2)
        with updating_record(RECORD) as record:
            record["step costs as AVX2" if args.as_avx2 else "step costs"] = costs
        print(json.dumps(costs, indent=1))
        return 0
    jobs = [candidate_job(name) for name in args.only or CANDIDATES]
    threads = torch.get_num_threads()
    run_jobs(jobs, RECORD, lambda job: measure(job, threads, args.workers), summary)
    return 0


def summary(line: dict) -> str:
    return (
        f"test2016 beam {line['test2016 beam']}, greedy {line['test2016 greedy']}, "
        f"val 35 at step {line['step of val BLEU 35']}"
    )


if __name__ == "__main__":
    sys.exit(main())
