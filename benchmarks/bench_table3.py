"""Table 3 at Multi30k scale (chapter 9): train every variant not yet recorded, and record it.

    python -m benchmarks.bench_table3 [--profile full|smoke] [--threads T] [--step-costs]

Each (variant, seed) trains in runs/table3/<variant>-seed<n>-<digest of its configuration>/ and
resumes from its checkpoint if stopped; each finished line is added to annotated/results/table3.json at once (atomically), so
running the command again measures only what is missing. A line recorded with another
configuration is measured again. The smoke profile writes under runs/table3-smoke/ instead.

On two cores, two workers of one thread each measure more lines an hour than one worker with two
threads (small models use two threads poorly). Each claims the line it trains, so the two share
the sweep without training anything twice (annotated/training/sweeps.py):

    python -m benchmarks.bench_table3 --threads 1 &
    python -m benchmarks.bench_table3 --threads 1

Training minutes recorded by workers that share the machine are not comparable with each
other, which is why the chapter prices each variant by `--step-costs` instead: the seconds a
training step of each variant takes, measured in one process, in alternating rounds, alone.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from annotated.base.threads import use_fair_threads
from annotated.ch05_text import load_multi30k
from annotated.ch09_table3 import TABLE3_PROFILES, run_table3, step_costs, table3_sweep
from annotated.training.sweeps import missing_jobs, read_record, updating_record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=sorted(TABLE3_PROFILES), default=None)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: the CPUs this process may use, annotated/base/threads.py)",
    )
    parser.add_argument(
        "--step-costs",
        action="store_true",
        help="only measure each variant's seconds per step, again (after the lines, it runs once)",
    )
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    else:
        use_fair_threads()
    profile, sweep = table3_sweep(args.profile)
    jobs = sweep.jobs()
    print(f"profile {profile}: {len(jobs)} lines, recorded in {sweep.results}", flush=True)
    try:
        if not args.step_costs:
            missing = [job.name for job in missing_jobs(jobs, run_table3(sweep))]
            print(f"{len(jobs) - len(missing)} lines recorded in {sweep.results}")
            if missing:  # another worker is still training them
                print(f"step costs wait for the last lines: {', '.join(missing)}")
                return 0
        if args.step_costs or "step costs" not in read_record(sweep.results):
            # Measured once every line is done, so that no worker shares the machine with it.
            corpus = load_multi30k(sweep.base.vocab_size, sweep.base.min_freq)
            costs = step_costs(sweep, corpus)  # afresh, replacing any earlier measurement
            with updating_record(sweep.results) as record:
                record["step costs"] = costs
            print(json.dumps(costs, indent=1))
        return 0
    except (ValueError, OSError) as error:
        print(f"table3: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
