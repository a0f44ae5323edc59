"""Where a training step of chapter 7's full profile spends its time on this CPU, and what its
matrix products get of the CPU's own peak.

    python -m benchmarks.bench_step_profile [--steps 8] [--candidate NAME]

Chapter 7's section 2 profiles the step on the machine that executed the book. This benchmark
keeps one entry per kind of CPU in benchmarks/results/step-profile.json ("AMD EPYC (AVX2)", ...),
so that the slowest kind a reader has, a laptop with AVX2 and no bf16, is measured as such:

* the step's milliseconds by part (annotated/training/profiling.py: matrix products, the loss over
  the vocabulary, casts, optimizer, dropout draws, the rest), with the book's fast path;
* the step's floating-point operations (PyTorch's FLOP counter), the FLOP/s its matrix products
  reached, and the peak this CPU reaches on a large square product and on the model's own shapes
  in the same arithmetic (float32 where the CPU has no bf16): how much a faster kernel could still
  give, and how much only fewer operations can;
* the loss's block of rows (annotated/base/fast_step.py's ROWS) tried at several sizes on the
  run's own logits, forward and backward, in alternating rounds: whether the cache this CPU has
  wants another block.

`--candidate` profiles one of the second recipe search's candidates instead
(benchmarks/search_recipes.py: a subword vocabulary changes the output layer's width). Run it
alone: it is a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from annotated.base import fast_step
from annotated.base.devices import PRECISION_ENV, chosen_precision
from annotated.base.files import atomic_write
from annotated.base.threads import use_fair_threads
from annotated.ch03_training import autocast
from annotated.ch05_text import BatchPlan, load_multi30k
from annotated.training.config import new_model, shared_specials
from annotated.training.profiling import step_profiles
from benchmarks.bench_multi30k import matmul_peaks, step_flops
from benchmarks.common import RESULTS_DIR, Timing, cpu_kind, describe, read_json_object
from benchmarks.search_recipes import CANDIDATES, candidate_config, commit, machine_label

RECORD = RESULTS_DIR / "step-profile.json"
BLOCKS = (16, 32, 64, 128, 256)  # rows of logits per block of the loss


def loss_blocks(model, batch, eps_ls: float, rounds: int = 5) -> dict:
    """Milliseconds of smoothed_kl forward and backward on one batch's logits, by block size."""
    with torch.no_grad(), autocast("auto", torch.device("cpu")):
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    logits = logits.reshape(-1, logits.size(-1)).detach().float()
    target = batch.tgt_out.reshape(-1)
    seconds: dict[int, list[float]] = {rows: [] for rows in BLOCKS}
    kept = fast_step.ROWS
    try:
        for _ in range(rounds):
            for rows in BLOCKS:
                fast_step.ROWS = rows
                z = logits.clone().requires_grad_()
                started = time.perf_counter()
                fast_step.smoothed_kl(z, target, batch.pad, eps_ls).backward()
                seconds[rows].append(time.perf_counter() - started)
    finally:
        fast_step.ROWS = kept
    median = {rows: 1000 * statistics.median(values[1:]) for rows, values in seconds.items()}
    best = min(median, key=median.get)
    return {
        "logits": list(logits.shape),
        "ms forward and backward": {str(r): round(ms, 1) for r, ms in median.items()},
        "the book's block": kept,
        "fastest block": best,
        "book's block over the fastest": round(median[kept] / median[best], 3),
    }


def measure(config, steps: int) -> dict:
    corpus = load_multi30k(config.vocab_size, config.min_freq)
    profile = step_profiles(config, corpus, steps)
    ours = profile[profile.step == "the book's step"].set_index("part")["ms per step"]
    plan = BatchPlan.build(corpus.ids["train"][: config.train_pairs], config.max_tokens)
    picks = [i * plan.steps_per_epoch // steps for i in range(steps)]
    batches = [plan.step(p, shared_specials(corpus)) for p in picks]
    model = new_model(config, corpus).train()
    flops = step_flops(model, batches, config.eps_ls) / steps
    tokens = round(statistics.mean(sum(b.n_tokens for b in micro) for micro in batches))
    model_config = config.model_config(len(corpus.src_vocab), len(corpus.tgt_vocab))
    peaks = matmul_peaks(model_config, tokens)
    matmul_seconds = ours["matrix products"] / 1000
    square = peaks["flops_per_s"]["square 2048"]
    return {
        "ms per step by part": {part: round(ms, 1) for part, ms in ours.items()},
        "ms per step": round(float(ours.sum()), 1),
        "ms per step with chapter 3's loss and attention": round(
            float(profile[profile.step != "the book's step"]["ms per step"].sum()), 1
        ),
        "matrix products' share": round(float(ours["matrix products"] / ours.sum()), 3),
        "GFLOP per step": round(flops / 1e9, 1),
        "matrix products' GFLOP/s": round(float(flops / matmul_seconds / 1e9), 1),
        "matmul peaks": peaks,
        "matrix products' fraction of the square peak": round(
            float(flops / matmul_seconds / square), 3
        ),
        "ms per step if the rest took nothing": round(1000 * flops / square, 1),
        "target tokens per step": tokens,
        "loss blocks": loss_blocks(model, batches[0][0], config.eps_ls),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--candidate", choices=sorted(CANDIDATES), default="full")
    args = parser.parse_args(argv)
    use_fair_threads()
    config = candidate_config(args.candidate)
    with Timing(torch.get_num_threads()) as timing:
        entry = measure(config, args.steps)
    entry |= {
        "candidate": args.candidate,
        "machine": describe(),
        "cpu": cpu_kind(),
        "commit": commit(),
        "timing": timing.conditions(),
    }
    precision = chosen_precision("auto", torch.device("cpu"))
    entry["precision"] = precision
    key = f"{machine_label()}, {args.candidate}"  # one entry per kind of machine
    if os.environ.get(PRECISION_ENV, "").strip():  # a precision asked for: an entry of its own
        key += f", {precision} ({PRECISION_ENV})"
    record = read_json_object(RECORD)
    record[key] = entry
    with atomic_write(RECORD, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    print(entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
