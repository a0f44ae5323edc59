"""Multi30k (chapter 7): training speed against nn.Transformer, the run's BLEU, decoding speed.

    python benchmarks/bench_multi30k.py [--profile full|smoke] [--rounds 4] [--batches 8]

1. The training run itself: `train_multi30k` in runs/multi30k-<profile> (resumed if stopped, just
   loaded if finished; a fresh clone trains for the full hour). Minutes of training to reach
   validation BLEU 30 and 35 come from its evaluation log; the final test scores from `final_scores`.
2. Training throughput of our model and of `torch.nn.Transformer` of the same size (same
   embeddings, output layer, block order (pre- or post-norm), loss, optimizer, bf16 autocast), on
   the same batches, in alternating rounds in this one process, so that machine load affects both
   alike. Achieved FLOP/s of our
   step (counted by torch.utils.flop_counter) against the bf16 matrix-product peak measured here.
3. Decoding speed on test_2016_flickr: cached batched greedy and beam search, and chapter 4's
   one-sentence, full-recompute greedy decoder on the same sentences.

Writes benchmarks/results/multi30k.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch
from common import Timing, describe, write_results
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from annotated.ch02_model import Embeddings, PositionalEncoding, count_parameters, make_model
from annotated.ch03_training import autocast, label_smoothing_loss, make_optimizer, use_fast_dropout
from annotated.ch04_copy_task import greedy_decode
from annotated.ch05_text import make_batch, padding_fraction, token_batches
from annotated.ch06_decoding import DecodeConfig, decode_ids
from annotated.ch07_multi30k import profile_config, train_multi30k
from annotated.runs import RUNS_DIR, final_scores, saved_scores
from annotated.threads import use_fair_threads

CPU = torch.device("cpu")


class TorchTransformer(nn.Module):
    """nn.Transformer with our embeddings, positional encoding and tied output layer around it."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config
        self.src_embed = nn.Sequential(
            Embeddings(config.src_vocab, config.d_model),
            PositionalEncoding(config.d_model, config.p_drop),
        )
        self.tgt_embed = nn.Sequential(
            Embeddings(config.tgt_vocab, config.d_model),
            PositionalEncoding(config.d_model, config.p_drop),
        )
        self.transformer = nn.Transformer(
            config.d_model,
            config.h,
            config.N,
            config.N,
            config.d_ff,
            config.p_drop,
            batch_first=True,
            norm_first=config.norm_first,
        )
        self.generator = nn.Linear(config.d_model, config.tgt_vocab)
        self.generator.weight = self.tgt_embed[0].lut.weight
        if config.share_embeddings:  # one vocabulary: one matrix, as in our model
            self.src_embed[0].lut.weight = self.tgt_embed[0].lut.weight

    def forward(self, src, tgt, src_mask, tgt_mask):
        # nn.Transformer's boolean masks mean the opposite of ours: True = may not attend.
        src_pad = ~src_mask[:, 0]
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).triu(1)  # True: masked
        out = self.transformer(
            self.src_embed(src),
            self.tgt_embed(tgt),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad,
            tgt_key_padding_mask=~tgt_mask[:, -1],  # the last row: every non-pad key
            tgt_is_causal=True,
        )
        return self.generator(out)


def train_seconds(model, optimizer, scheduler, batches, eps_ls) -> float:
    """Wall seconds for one optimizer step on each batch (bf16 autocast, our loss)."""
    model.train()
    started = time.perf_counter()
    for batch in batches:
        with autocast("auto", CPU):
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = label_smoothing_loss(logits, batch.tgt_out, batch.pad, eps_ls)
        (loss / batch.n_tokens).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def step_flops(model, batch, eps_ls) -> int:
    """Floating-point operations of one forward and backward pass (matrix products dominate)."""
    with FlopCounterMode(display=False) as counter:
        with autocast("auto", CPU):
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        label_smoothing_loss(logits, batch.tgt_out, batch.pad, eps_ls).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def bf16_matmul_peak(size: int = 2048, repeats: int = 20) -> float:
    """FLOP/s of large bf16 matrix products on this machine, now."""
    a = torch.randn(size, size, dtype=torch.bfloat16)
    b = torch.randn(size, size, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def throughput(run, rounds: int, n_batches: int) -> dict:
    """Our model against nn.Transformer, same size, same batches, alternating rounds."""
    config, corpus = run.config, run.corpus
    pairs = corpus.ids["train"][: config.train_pairs]
    plan = token_batches(pairs, config.max_tokens, config.seed)
    # Batches spread over the length range, as an epoch mixes them.
    picks = [plan[round(i * (len(plan) - 1) / max(1, n_batches - 1))] for i in range(n_batches)]
    batches = [make_batch([pairs[i] for i in b], corpus.tgt_vocab.specials) for b in picks]
    tokens = sum(b.n_tokens for b in batches)
    model_config = run.translator.model.config
    torch.manual_seed(0)
    ours = use_fast_dropout(make_model(model_config))
    torch.manual_seed(0)
    theirs = TorchTransformer(model_config)
    train_config = config.train_config(len(plan))
    optimizers = {
        name: make_optimizer(m, train_config) for name, m in (("ours", ours), ("theirs", theirs))
    }
    models = {"ours": ours, "theirs": theirs}
    for name in models:  # warm up kernels and the allocator
        train_seconds(models[name], *optimizers[name], batches[:2], config.eps_ls)
    seconds = {"ours": [], "theirs": []}
    for round_ in range(rounds):
        for name in ("ours", "theirs") if round_ % 2 == 0 else ("theirs", "ours"):
            seconds[name].append(
                train_seconds(models[name], *optimizers[name], batches, config.eps_ls)
            )
    ours_s, theirs_s = statistics.median(seconds["ours"]), statistics.median(seconds["theirs"])
    flops = sum(step_flops(ours, b, config.eps_ls) for b in batches)
    peak = bf16_matmul_peak()
    return {
        "train_tokens_per_s": round(tokens / ours_s, 1),
        "nn_transformer_tokens_per_s": round(tokens / theirs_s, 1),
        "throughput_ratio_vs_nn_transformer": round(theirs_s / ours_s, 3),
        "parameters_ours": count_parameters(ours),
        "parameters_nn_transformer": count_parameters(theirs),
        "achieved_flops_per_s": round(flops / ours_s),
        "bf16_matmul_peak_flops_per_s": round(peak),
        "flops_fraction_of_bf16_peak": round(flops / ours_s / peak, 4),
        "throughput_batches": n_batches,
        "throughput_target_tokens": tokens,
        "throughput_rounds": rounds,
    }


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", choices=["full", "smoke"], default=None)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--recompute-sentences", type=int, default=1000)
    args = parser.parse_args()
    timing = Timing(use_fair_threads()).start()  # the load it runs under, recorded
    profile, config = profile_config(args.profile)
    folder = RUNS_DIR / f"multi30k-{profile}"
    run = train_multi30k(config, folder)
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
    record = {
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
    record |= throughput(run, args.rounds, args.batches)
    record |= decoding_speed(run, args.recompute_sentences)
    record["timing"] = timing.stop()
    write_results("multi30k" if profile == "full" else f"multi30k-{profile}", record)


if __name__ == "__main__":
    main()
