"""Where a training step of chapter 7's full profile spends its time on this CPU, and what its
matrix products get of the CPU's own peak.

    python -m benchmarks.bench_step_profile [--steps 8] [--candidate NAME] [--compile-model]

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
  wants another block;
* the same loss as one compiled pass each way (`compiled_kl`, `torch.compile` of two functions over
  all rows at once) against the book's, on the same logits: its milliseconds, its compile seconds
  and how far its loss and gradient are from the book's. Where nothing compiles, the entry says why.

`--candidate` profiles one of the second recipe search's candidates instead
(benchmarks/search_recipes.py: a subword vocabulary changes the output layer's width).
`--compile-model` measures only the step with the whole model compiled (`model_compiled`) and adds
it to the entry already made for this machine and candidate. Run it alone: it is a timing.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from benchmarks import step_speed
from benchmarks.bench_multi30k import matmul_peaks, step_flops
from benchmarks.common import RESULTS_DIR, Timing, cpu_kind, describe, read_json_object
from benchmarks.search_recipes import CANDIDATES, candidate_config, commit, machine_label

RECORD = RESULTS_DIR / "step-profile.json"
BLOCKS = (16, 32, 64, 128, 256)  # rows of logits per block of the loss


def batch_logits(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's logits for one batch as float32 rows (tokens x vocabulary), and the targets."""
    with torch.no_grad(), autocast("auto", torch.device("cpu")):
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    return logits.reshape(-1, logits.size(-1)).detach().float(), batch.tgt_out.reshape(-1)


def loss_blocks(model, batch, eps_ls: float, rounds: int = 5) -> dict:
    """Milliseconds of smoothed_kl forward and backward on one batch's logits, by block size."""
    logits, target = batch_logits(model, batch)
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


# A candidate for the loss's next form, measured here before the book adopts it: the same loss as
# `fast_step.smoothed_kl`, written over all rows at once, for `torch.compile` to turn into one
# loop over the logits forward (the log-sum-exp and the row's sums together) and one backward.
def _rows_forward(z: torch.Tensor, target: torch.Tensor, pad: int, eps_ls: float):
    """Per row: the log-sum-exp, and the cross-entropy of the smoothed target against softmax(z)."""
    z = z.to(fast_step._compute_dtype(z.dtype))  # at least float32, as the book's
    spread = eps_ls / (z.size(1) - 2)
    columns = torch.arange(z.size(1), device=z.device)
    lse = torch.logsumexp(z, dim=-1)
    z_target = z.gather(1, target.unsqueeze(1)).squeeze(1)
    # Every column but pad's (pad's logit may be -inf) and the target's.
    z_others = torch.where(columns == pad, 0.0, z).sum(-1) - z_target
    return lse, lse - (1.0 - eps_ls) * z_target - spread * z_others


def _rows_backward(z, target, lse, weight, pad: int, eps_ls: float):
    """Each row's gradient, weight * (softmax(z) - q)."""
    spread = eps_ls / (z.size(1) - 2)
    columns = torch.arange(z.size(1), device=z.device)
    p = (z.to(lse.dtype) - lse.unsqueeze(1)).exp()
    # q is spread everywhere but pad's column (0) and the target's (1 - eps_ls).
    p_minus_q = torch.where(columns == pad, p, p - spread)
    p_minus_q = torch.where(columns == target.unsqueeze(1), p - (1.0 - eps_ls), p_minus_q)
    return (p_minus_q * weight.unsqueeze(1)).to(z.dtype)


_COMPILED: dict[str, object] = {}


def _compiled(name: str):
    if name not in _COMPILED:
        function = {"forward": _rows_forward, "backward": _rows_backward}[name]
        _COMPILED[name] = torch.compile(function, dynamic=True)
    return _COMPILED[name]


class _CompiledKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, pad: int, eps_ls: float):
        lse, cross = _compiled("forward")(logits, target, pad, eps_ls)
        real = target != pad
        vocab = logits.size(1)
        spread = eps_ls / (vocab - 2)
        neg_entropy = fast_step._xlogx(1.0 - eps_ls) + (vocab - 2) * fast_step._xlogx(spread)
        ctx.save_for_backward(logits, target, lse)
        ctx.pad, ctx.eps_ls = pad, eps_ls
        return torch.where(real, cross, 0.0).sum() + real.sum().to(cross.dtype) * neg_entropy

    @staticmethod
    def backward(ctx, grad_total):
        logits, target, lse = ctx.saved_tensors
        weight = (target != ctx.pad).to(lse.dtype) * grad_total.to(lse.dtype)
        grad = _compiled("backward")(logits, target, lse, weight, ctx.pad, ctx.eps_ls)
        return grad, None, None, None


def compiled_kl(logits, target, pad: int, eps_ls: float) -> torch.Tensor:
    """`fast_step.smoothed_kl` as one compiled pass each way (logits (n, vocab), target (n,))."""
    return _CompiledKL.apply(logits, target, pad, eps_ls)


def not_compiled(error: Exception) -> dict:
    """What the record says where nothing compiled (no C++ compiler, a backend that refuses)."""
    return {"compiled": False, "why not": f"{type(error).__name__}: {error}"[:300]}


def _timed_loss(loss, z, target, pad: int, eps_ls: float) -> tuple[float, float, torch.Tensor]:
    z = z.clone().requires_grad_()
    started = time.perf_counter()
    value = loss(z, target, pad, eps_ls)
    value.backward()
    return time.perf_counter() - started, float(value.detach()), z.grad


def loss_compiled(model, batch, eps_ls: float, rounds: int = 5) -> dict:
    """The book's loss against `compiled_kl` on one batch's logits, forward and backward: the
    milliseconds of each (alternating rounds, medians), the seconds compiling took, and how far
    the compiled loss and gradient are from the book's."""
    logits, target = batch_logits(model, batch)
    started = time.perf_counter()
    try:
        _, value, grad = _timed_loss(compiled_kl, logits, target, batch.pad, eps_ls)
    except Exception as error:
        return not_compiled(error)
    compile_seconds = time.perf_counter() - started
    _, book_value, book_grad = _timed_loss(fast_step.smoothed_kl, logits, target, batch.pad, eps_ls)
    losses = {"the book's": fast_step.smoothed_kl, "compiled": compiled_kl}
    timers = {
        name: lambda loss=loss: _timed_loss(loss, logits, target, batch.pad, eps_ls)[0]
        for name, loss in losses.items()
    }
    ms = {name: 1000 * s for name, s in step_speed.alternating_medians(timers, rounds).items()}
    return {
        "logits": list(logits.shape),
        "ms forward and backward": {name: round(value, 1) for name, value in ms.items()},
        "book's over compiled": round(ms["the book's"] / ms["compiled"], 3),
        "compile seconds": round(compile_seconds, 1),
        "loss, relative difference": float(f"{abs(value - book_value) / abs(book_value):.2g}"),
        "gradient, largest difference": float(f"{float((grad - book_grad).abs().max()):.2g}"),
        "gradient, largest entry": float(f"{float(book_grad.abs().max()):.2g}"),
    }


def model_compiled(config, corpus, count: int = 16, rounds: int = 3) -> dict:
    """The book's step with its model as it is and compiled (`torch.compile(dynamic=True)`):
    milliseconds a step on `count` of the run's own steps (chapter 3's `train`, alternating rounds,
    medians), and the seconds the compiled model's first pass took (compiling, every shape).
    Dropout is held at its first rate in both: a moving rate would recompile at every step."""
    config = dataclasses.replace(config, p_drop_final=None)
    steps, per_epoch = step_speed.sample_steps(config, corpus, count)
    models = {"the book's": new_model(config, corpus)}
    timers = {  # seconds of one pass over the steps
        name: lambda name=name: step_speed.seconds(models[name], config, per_epoch, steps)
        for name in ("the book's", "compiled")
    }
    try:
        models["compiled"] = torch.compile(new_model(config, corpus), dynamic=True)
        first = {name: timer() for name, timer in timers.items()}
    except Exception as error:
        return not_compiled(error)
    medians = step_speed.alternating_medians(timers, rounds)
    ms = {name: 1000 * s / len(steps) for name, s in medians.items()}
    return {
        "ms per step": {name: round(value, 1) for name, value in ms.items()},
        "book's over compiled": round(ms["the book's"] / ms["compiled"], 3),
        "first pass seconds (compiling)": round(first["compiled"], 1),
        "steps": len(steps),
        "rounds": rounds,
        "dropout": "held at p_drop in both: the run's rising rate would recompile at every step",
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
        "loss compiled": loss_compiled(model, batches[0][0], config.eps_ls),
    }


def entry_key(candidate: str) -> str:
    """The record's key for this kind of machine, the candidate and a precision asked for."""
    key = f"{machine_label()}, {candidate}"  # one entry per kind of machine
    if os.environ.get(PRECISION_ENV, "").strip():  # a precision asked for: an entry of its own
        key += f", {chosen_precision('auto', torch.device('cpu'))} ({PRECISION_ENV})"
    return key


def add_model_compiled(config, candidate: str) -> int:
    """`--compile-model`: time the compiled model's step and add it, with its own machine, commit
    and load, to the entry the full profile made here (which must exist)."""
    key = entry_key(candidate)
    record = read_json_object(RECORD)
    if key not in record:
        print(f"error: {RECORD.name} has no entry {key!r} yet: run without --compile-model first")
        return 1
    corpus = load_multi30k(config.vocab_size, config.min_freq, None, splits=("train",))
    with Timing(torch.get_num_threads()) as timing:
        part = model_compiled(config, corpus)
    part |= {"machine": describe(), "commit": commit(), "timing": timing.conditions()}
    record[key]["model compiled"] = part
    with atomic_write(RECORD, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    print(part)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--candidate", choices=sorted(CANDIDATES), default="full")
    parser.add_argument(
        "--compile-model",
        action="store_true",
        help="only time the step with the model compiled, into this machine's existing entry",
    )
    args = parser.parse_args(argv)
    use_fair_threads()
    config = candidate_config(args.candidate)
    if args.compile_model:
        return add_model_compiled(config, args.candidate)
    with Timing(torch.get_num_threads()) as timing:
        entry = measure(config, args.steps)
    entry |= {
        "candidate": args.candidate,
        "machine": describe(),
        "cpu": cpu_kind(),
        "commit": commit(),
        "timing": timing.conditions(),
    }
    entry["precision"] = chosen_precision("auto", torch.device("cpu"))
    key = entry_key(args.candidate)
    record = read_json_object(RECORD)
    record[key] = entry
    with atomic_write(RECORD, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    print(entry)
    return 0


if __name__ == "__main__":
    sys.exit(main())
