"""Multi30k (chapter 7): the run's BLEU and minutes, the speed of its training step, decoding speed.

    python -m benchmarks.bench_multi30k [--profile full|smoke] [--steps 48] [--rounds 3]
                                        [--no-compile] [--against TREE]

1. The training run itself: `train_multi30k` in runs/multi30k-<profile> (resumed if stopped, just
   loaded if finished; a fresh clone trains for the full hour). Minutes of training to reach
   validation BLEU 30 and 35 come from its evaluation log; the final test scores from `final_scores`;
   the run's own target tokens per second from its history.
2. The book's own training step (chapter 3's `train_step`, as the run takes it) against
   `torch.nn.Transformer` of the same size given the same loss, optimizer, precision and dropout,
   on a sample of the run's own steps (`step_speed.py`), in alternating rounds in this one process.
   Achieved FLOP/s of our step (counted by torch.utils.flop_counter) against the matrix-product
   peak measured here, for square products and for the model's own shapes. Then both compiled
   (`torch.compile`, the compile seconds apart; `--no-compile` skips it). With `--against TREE`
   (a git worktree of an earlier commit), the same measurement with that checkout's code, in
   separate processes alternating with this one's: the speed-up since then.
3. Decoding speed on test_2016_flickr: cached batched greedy and beam search, and chapter 4's
   one-sentence, full-recompute greedy decoder on the same sentences.

Writes benchmarks/results/multi30k.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

import annotated
from annotated.base.fast_step import smoothed_kl
from annotated.base.threads import use_fair_threads
from annotated.ch03_training import autocast, use_bf16
from annotated.ch04_copy_task import greedy_decode
from annotated.ch05_text import padding_fraction, token_batches
from annotated.ch06_decoding import DecodeConfig, decode_ids
from annotated.ch07_multi30k import profile_config, train_multi30k
from annotated.training.config import RUNS_DIR
from annotated.training.finish import final_scores, saved_scores
from annotated.training.folder import folder_name
from benchmarks import step_speed
from benchmarks.common import Timing, describe, write_results

CPU = torch.device("cpu")


def step_flops(model, steps, eps_ls) -> int:
    """Floating-point operations of the steps' forward and backward passes (as the run does them)."""
    with FlopCounterMode(display=False) as counter:
        for micro_batches in steps:
            for batch in micro_batches:
                with autocast("auto", CPU):
                    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
                smoothed_kl(logits, batch.tgt_out, batch.pad, eps_ls).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def matmul_flops_per_s(rows: int, inner: int, cols: int, dtype, repeats: int = 20) -> float:
    """FLOP/s of (rows x inner) @ (inner x cols) products in `dtype` on this machine, now."""
    a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, cols, dtype=dtype)
    for _ in range(3):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * rows * inner * cols * repeats / (time.perf_counter() - started)


def matmul_peaks(model_config, tokens: int) -> dict:
    """The achievable FLOP/s of square products, and of the model's own products at `tokens` rows."""
    dtype = torch.bfloat16 if use_bf16("auto", CPU) else torch.float32
    d, d_ff, vocab = model_config.d_model, model_config.d_ff, model_config.tgt_vocab
    shapes = {
        "square 2048": (2048, 2048, 2048),
        f"({tokens} x {d}) @ ({d} x {d_ff}): feed-forward in": (tokens, d, d_ff),
        f"({tokens} x {d_ff}) @ ({d_ff} x {d}): feed-forward out": (tokens, d_ff, d),
        f"({tokens} x {d}) @ ({d} x {d}): attention projections": (tokens, d, d),
        f"({tokens} x {d}) @ ({d} x {vocab}): output layer": (tokens, d, vocab),
    }
    peaks = {name: round(matmul_flops_per_s(*shape, dtype)) for name, shape in shapes.items()}
    return {"dtype": str(dtype).removeprefix("torch."), "flops_per_s": peaks}


def starting_point(tree: Path, args) -> dict:
    """step_speed.py with this checkout and with `tree` (an older one), alternating: ABBA."""
    script = Path(__file__).with_name("step_speed.py")
    command = [sys.executable, str(script), "--steps", str(args.steps), "--rounds", "2"]
    trees = {"this": Path(__file__).resolve().parents[1], "start": tree.resolve()}
    results: dict[str, list[dict]] = {"this": [], "start": []}
    for which in ("this", "start", "start", "this"):
        env = dict(os.environ, PYTHONPATH=str(trees[which]))
        if annotated.ONEDNN_CACHE_FROM_BOOK:  # importing the book set it: each side sets its own
            env.pop("ONEDNN_PRIMITIVE_CACHE_CAPACITY", None)
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
        results[which].append(json.loads(out.stdout.strip().splitlines()[-1]))

    def mean(which: str, name: str) -> float:
        values = [r["target tokens/s"][name] for r in results[which]]
        return round(statistics.mean(values), 1)

    commit = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    this, start = mean("this", "ours"), mean("start", "ours")
    return {
        "commit": commit or str(tree),
        "tokens_per_s": {"this": this, "start": start},
        "nn_transformer_tokens_per_s": {
            "this": mean("this", "nn.Transformer"),
            "start": mean("start", "nn.Transformer"),
        },
        "ratio_vs_nn_transformer": {
            which: round(mean(which, "ours") / mean(which, "nn.Transformer"), 3)
            for which in ("this", "start")
        },
        "speedup": round(this / start, 3),
        "runs": "this, start, start, this: a process each, the mean of each side's two",
    }


def throughput(run, args) -> dict:
    """The book's step against nn.Transformer's (step_speed.py), FLOP/s, matrix-product peaks."""
    config, corpus = run.config, run.corpus
    measured = step_speed.measure(config, corpus, args.steps, args.rounds)
    steps, _ = step_speed.sample_steps(config, corpus, args.steps)
    tokens = measured["target tokens"]
    ours = tokens / measured["target tokens/s"]["ours"]  # seconds of the median round
    flops = step_flops(step_speed.new_model(config, corpus), steps, config.eps_ls)
    model_config = run.translator.model.config
    largest = max(b.tgt_out.numel() for micro_batches in steps for b in micro_batches)
    peaks = matmul_peaks(model_config, largest)
    square = peaks["flops_per_s"]["square 2048"]
    record = {
        "train_tokens_per_s": measured["target tokens/s"]["ours"],
        "nn_transformer_tokens_per_s": measured["target tokens/s"]["nn.Transformer"],
        "throughput_ratio_vs_nn_transformer": measured["ratio to nn.Transformer"],
        "parameters_ours": measured["parameters"]["ours"],
        "parameters_nn_transformer": measured["parameters"]["nn.Transformer"],
        "achieved_flops_per_s": round(flops / ours),
        "bf16_matmul_peak_flops_per_s": square,
        "flops_fraction_of_bf16_peak": round(flops / ours / square, 4),
        "matmul_peaks": peaks,
        "throughput_steps": measured["steps"],
        "throughput_target_tokens": tokens,
        "throughput_rounds": measured["rounds"],
    }
    if args.compile:
        try:
            record["compiled"] = step_speed.measure(config, corpus, args.steps, 1, compiled=True)
        except Exception as error:  # noqa: BLE001  (a machine where compiling fails: say so)
            record["compiled"] = {"failed": f"{type(error).__name__}: {error}"[:300]}
    if args.against:
        record["starting_point"] = starting_point(Path(args.against), args)
    return record


def decoding_speed(run, sentences: int) -> dict:
    """Sentences per second: cached batched greedy, beam, and one-sentence full-recompute greedy."""
    model, corpus = run.translator.model.eval(), run.corpus
    sources = [s for s, _ in corpus.ids["test_2016_flickr"]]
    specials_src, specials_tgt = corpus.src_vocab.specials, corpus.tgt_vocab.specials

    def timed(fn, items) -> float:
        started = time.perf_counter()
        fn(items)
        return len(items) / (time.perf_counter() - started)

    greedy_config = DecodeConfig(1, 0.6, run.config.decoding.extra_length)
    greedy = timed(
        lambda s: decode_ids(model, s, specials_src, specials_tgt, greedy_config), sources
    )
    beam = timed(
        lambda s: decode_ids(model, s, specials_src, specials_tgt, run.config.decoding), sources
    )

    def one_by_one(items):
        with torch.no_grad():
            for ids in items:
                src = torch.tensor([ids])
                greedy_decode(
                    model,
                    src,
                    torch.ones(1, 1, len(ids), dtype=torch.bool),
                    specials_tgt,
                    len(ids) + 50,
                )

    # The same sentences both ways (all of them, by default): the ratio of the two rates.
    slow = timed(one_by_one, sources[:sentences])
    fast = (
        greedy
        if sentences >= len(sources)
        else timed(
            lambda s: decode_ids(model, s, specials_src, specials_tgt, beam=1), sources[:sentences]
        )
    )
    return {
        "greedy_sentences_per_s": round(greedy, 1),
        "beam_sentences_per_s": round(beam, 1),
        "recompute_greedy_sentences_per_s": round(slow, 2),
        "decode_speedup_vs_recompute": round(fast / slow, 1),
        "decode_speed_sentences": len(sources),
        "recompute_comparison_sentences": min(sentences, len(sources)),
    }


def minutes_to(evals, threshold: float):
    reached = evals[evals["val BLEU"] >= threshold]
    return None if reached.empty else float(reached["train minutes"].iloc[0])


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", choices=["full", "smoke"], default=None)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of the sample")
    parser.add_argument("--steps", type=int, default=48, help="the run's steps in the sample")
    parser.add_argument(
        "--no-compile", dest="compile", action="store_false", help="skip the compiled step"
    )
    parser.add_argument(
        "--against",
        metavar="TREE",
        help="a checkout of an earlier commit (a git worktree): time its step too, alternating",
    )
    parser.add_argument("--recompute-sentences", type=int, default=1000)
    return parser.parse_args()


def run_record(run, profile: str, config) -> dict:
    """The training run's part of the record (section 1 of the module docstring): its scores,
    minutes, steps and speed, and the padding of its batches."""
    last_step = int(run.history.step.max())
    scores = saved_scores(run) or final_scores(run).to_dict("records")
    # The headline figures are the book's final model and decoding: averaged weights, and for a
    # word vocabulary <unk> copied from the source (chapter 6, section 4), the last of the rows.
    by = {(row["split"], row["decoding"]): row for row in scores if row["weights"] != "last"}
    bare = {row["split"]: row["BLEU"] for row in scores if row["weights"] == "last"}
    train_pairs = run.corpus.ids["train"][: config.train_pairs]
    plan = token_batches(train_pairs, config.max_tokens, config.seed)
    test_greedy, test_beam = (
        by[("test_2016_flickr", "greedy")],
        by[("test_2016_flickr", f"beam {config.decoding.beam}")],
    )
    return {
        "benchmark": "Multi30k de-en (chapter 7)",
        "profile": profile,
        "machine": describe(),
        "config": dataclasses.asdict(config),
        "model": dataclasses.asdict(run.translator.model.config),
        "train_minutes": round(run.history.seconds.sum() / 60, 2),
        "train_steps": last_step,
        "run_target_tokens_per_s": round(run.history.tokens.sum() / run.history.seconds.sum(), 1),
        "test2016_bleu_greedy": test_greedy["BLEU"],
        "test2016_bleu_beam": test_beam["BLEU"],
        "test2016_chrf_greedy": test_greedy["chrF"],
        "test2016_chrf_beam": test_beam["chrF"],
        "val_bleu_greedy": by[("val", "greedy")]["BLEU"],
        "val_bleu_beam": by[("val", f"beam {config.decoding.beam}")]["BLEU"],
        "test2016_bleu_greedy_last_weights_no_copy": bare["test_2016_flickr"],
        "val_bleu_greedy_last_weights_no_copy": bare["val"],
        "sacrebleu_signature": test_greedy["BLEU signature"],
        "chrf_signature": test_greedy["chrF signature"],
        "val_minutes_to_bleu_30": minutes_to(run.evals, 30),
        "val_minutes_to_bleu_35": minutes_to(run.evals, 35),
        "val_bleu_by_minute": run.evals[["train minutes", "val BLEU"]].values.tolist(),
        "padding_fraction": round(padding_fraction(train_pairs, plan), 4),
    }


def main() -> None:
    args = parse_arguments()
    timing = Timing(use_fair_threads()).start()  # the load it runs under, recorded
    profile, config = profile_config(args.profile)
    folder = RUNS_DIR / folder_name("multi30k", profile)
    run = train_multi30k(config, folder)
    record = run_record(run, profile, config)
    record |= throughput(run, args)
    record |= decoding_speed(run, args.recompute_sentences)
    record["timing"] = timing.stop()
    write_results("multi30k" if profile == "full" else f"multi30k-{profile}", record)


if __name__ == "__main__":
    main()
