"""WMT14 En-De (chapter 8): the sample run's BLEU, its step size, the paper's model sizes, DDP.

    python -m benchmarks.bench_wmt [--profile sample|smoke]

1. The sample run: `train_wmt` in runs/wmt-<profile> (resumed if stopped, just loaded if
   finished; a fresh clone trains it, about 20 minutes on 2 CPU cores), then `wmt_scores`:
   sacreBLEU with its signature and the paper-style tokenized BLEU on newstest2014, for the
   averaged weights with beam search (beam 4, alpha 0.6) and greedy decoding.
2. Target tokens per optimizer step, as trained (the mean over the run's steps).
3. Parameter counts of the paper's base and big models as this book builds them (shared
   37,000-symbol vocabulary, shared embeddings), on the meta device.
4. The data-parallel check: two gloo processes under torchrun against one process with the same
   global batches (`ddp_check`), with its wall time.

Writes benchmarks/results/wmt.json (wmt-smoke.json for the smoke profile).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

import torch

from annotated.base.threads import use_fair_threads
from annotated.ch02_model import count_parameters, make_model
from annotated.ch08_wmt import WMT_PROFILES, ddp_check, train_wmt, wmt_profile, wmt_scores
from annotated.training.config import RUNS_DIR
from annotated.training.finish import saved_scores
from benchmarks.common import Timing, describe, write_results


def paper_parameters(name: str, vocab: int = 37000) -> int:
    """Parameters of the paper's base or big model as this book builds it."""
    with torch.device("meta"):
        return count_parameters(make_model(WMT_PROFILES[name].model_config(vocab, vocab)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", choices=["sample", "smoke"], default="sample")
    args = parser.parse_args()
    timing = Timing(use_fair_threads()).start()  # the load it runs under, recorded
    profile, config = wmt_profile(args.profile)
    run = train_wmt(config, RUNS_DIR / f"wmt-{profile}")
    rows = saved_scores(run) or wmt_scores(run).to_dict("records")
    final = "last" if run.averaged is None else f"average of last {config.average_last}"
    by = {(row["split"], row["decoding"]): row for row in rows if row["weights"] == final}
    beam, greedy = by[("test", f"beam {config.decoding.beam}")], by[("test", "greedy")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        ddp = ddp_check(scratch)
    ddp_seconds = time.perf_counter() - started
    record = {
        "benchmark": "WMT14 en-de sample (chapter 8)",
        "profile": profile,
        "machine": describe(),
        "config": dataclasses.asdict(config),
        "model": dataclasses.asdict(run.translator.model.config),
        "params_sample_model": count_parameters(run.translator.model),
        "train_pairs": len(run.corpus.ids["train"][: config.train_pairs]),
        "train_minutes": round(run.history.seconds.sum() / 60, 2),
        "train_steps": int(run.history.step.max()),
        "tokens_per_optimizer_step": round(float(run.history.tokens.mean()), 1),
        "tokens_per_optimizer_step_configured": config.tokens_per_step,
        "accumulate": config.accumulation(1),
        "newstest2014_bleu": beam["BLEU"],
        "newstest2014_bleu_greedy": greedy["BLEU"],
        "newstest2014_tokenized_bleu": beam["tokenized BLEU"],
        "newstest2014_chrf": beam["chrF"],
        "newstest2014_bleu_last_weights_greedy": next(
            r["BLEU"] for r in rows if r["split"] == "test" and r["weights"] == "last"
        ),
        "newstest2013_bleu": by[("val", f"beam {config.decoding.beam}")]["BLEU"],
        "sacrebleu_signature": beam["BLEU signature"],
        "val_bleu_by_minute": run.evals[["train minutes", "val BLEU"]].values.tolist(),
        "params_base": paper_parameters("base"),
        "params_big": paper_parameters("big"),
        "ddp_matches_single_process": bool(ddp["matches"]),
        "ddp_max_parameter_difference": ddp["max parameter difference"],
        "ddp_check_seconds": round(ddp_seconds, 1),
    }
    record["timing"] = timing.stop()
    write_results("wmt" if profile == "sample" else f"wmt-{profile}", record)


if __name__ == "__main__":
    main()
