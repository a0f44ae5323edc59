"""Copy task (chapter 4): bf16 against fp32 training-step speed, and the cost of reaching 100%.

Speed is a ratio measured side by side: the two precisions train the same model on the same
batches in alternating rounds within one process, so machine load affects both alike.
Writes benchmarks/results/copy.json.

    python -m benchmarks.bench_copy [--rounds 4] [--steps 20] [--widths 64 256 512] [--skip-convergence]

Besides the chapter's own model (d_model = 64), the same comparison runs for wider models on the
same batches (--widths), to show where bfloat16's faster matrix products start to pay for the
casts that autocast adds around them.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time

import torch

from annotated.base.threads import use_fair_threads
from annotated.ch02_model import make_model
from annotated.ch03_training import train, use_bf16
from annotated.ch04_copy_task import COPY_SETUP, train_copy_model
from benchmarks.common import Timing, describe, write_results


def seconds_per_step(
    precision: str, setup: dict, steps: int, first_step: int, d_model: int | None = None
) -> float:
    torch.manual_seed(0)
    model_config = setup["model"]
    if d_model is not None:
        model_config = dataclasses.replace(model_config, d_model=d_model, d_ff=4 * d_model)
    model = make_model(model_config)
    config = dataclasses.replace(setup["train"], max_steps=steps, precision=precision)
    task = setup["task"]
    batches = lambda step: task.batches(first_step + step)  # noqa: E731  same data for both precisions
    started = time.perf_counter()
    train(model, batches, config, progress=False)
    return (time.perf_counter() - started) / steps


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--widths", type=int, nargs="*", default=[64, 256, 512])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--skip-convergence", action="store_true")
    args = parser.parse_args()
    timing = Timing(use_fair_threads()).start()  # the load it runs under, recorded

    setup = COPY_SETUP

    def compare(d_model: int | None) -> dict[str, float]:
        seconds_per_step("fp32", setup, 3, 0, d_model)  # warm up kernels and allocator
        timings: dict[str, list[float]] = {"fp32": [], "bf16": []}
        for round_ in range(args.rounds):
            order = ("fp32", "bf16") if round_ % 2 == 0 else ("bf16", "fp32")
            for precision in order:
                timings[precision].append(
                    seconds_per_step(precision, setup, args.steps, round_ * args.steps, d_model)
                )
        fp32, bf16 = statistics.median(timings["fp32"]), statistics.median(timings["bf16"])
        return {
            "fp32_ms_per_step": round(1000 * fp32, 2),
            "bf16_ms_per_step": round(1000 * bf16, 2),
            "bf16_speedup_vs_fp32": round(fp32 / bf16, 3),
        }

    record = {
        "benchmark": "copy task training step (chapter 4 setup)",
        "machine": describe(),
        "config": {
            "model": dataclasses.asdict(setup["model"]),
            "batch_size": setup["task"].batch_size,
        },
        **compare(None),
        "by_width": {str(width): compare(width) for width in args.widths},
        "rounds": args.rounds,
        "steps_per_round": args.steps,
    }
    if not args.skip_convergence:
        started_wall = time.perf_counter()
        with tempfile.TemporaryDirectory():
            _, history, checks = train_copy_model(progress=False)
        record["steps_to_100pct_exact_match"] = int(checks["step"].iloc[-1])
        record["cpu_seconds_to_100pct_exact_match"] = round(
            float(checks["cpu seconds"].iloc[-1]), 1
        )
        record["wall_seconds_to_100pct_exact_match"] = round(time.perf_counter() - started_wall, 1)
        record["final_exact_match"] = float(checks["exact match"].iloc[-1])
        record["precision"] = (
            "bf16" if use_bf16(setup["train"].precision, torch.device("cpu")) else "fp32"
        )
    record["timing"] = timing.stop()
    write_results("copy", record)


if __name__ == "__main__":
    main()
