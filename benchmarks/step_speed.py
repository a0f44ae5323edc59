"""The book's own training step, timed on a run's batches: ours against nn.Transformer.

    python -m benchmarks.step_speed [--profile full] [--steps 48] [--rounds 3] [--compile]

Both models go through chapter 3's `train` and so its `train_step` (the loss, optimizer, precision
and dropout the run uses) on the same sample of the run's own steps, drawn from the whole schedule
so that their shapes are a run's. Every step of the sample is taken once before the clock starts (a run meets
each of its batch shapes again every epoch, so set-up costs of a new shape are not a run's cost),
then the two models take the sample in alternating rounds, and the median round counts. With
`--compile`, each model is wrapped in `torch.compile(dynamic=True)` first, and the seconds of its
first pass (compiling, for every shape) are reported apart; dropout is then held at its first rate
(dropout's rate is a plain number to the compiler, so the run's rising rate would recompile the
model at every step).

It uses only what the book had before its fast path (chapter 3's `train`, `new_model`),
so the same command times an older checkout: `bench_multi30k.py --against <worktree>` runs it
with that checkout's `annotated` package first on the path, in alternation with this one, and
records both. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import random
import statistics
from collections.abc import Callable

import torch
from torch import nn

from annotated.base.threads import use_fair_threads
from annotated.ch02_model import Embeddings, PositionalEncoding, count_parameters
from annotated.ch03_training import train, use_fast_dropout
from annotated.ch05_text import BatchPlan, load_multi30k
from annotated.ch07_multi30k import profile_config
from annotated.training.config import new_model, shared_specials


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
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool, device=tgt.device).triu(1)
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


def sample_steps(config, corpus, count: int, seed: int = 0) -> tuple[list, int]:
    """`count` of the run's own steps (their micro-batches), drawn from its whole schedule."""
    pairs = corpus.ids["train"][: config.train_pairs]
    plan = BatchPlan.build(pairs, config.max_tokens, config.accumulate, 1, config.seed)
    total = config.schedule(plan.steps_per_epoch).steps
    chosen = sorted(random.Random(seed).sample(range(total), min(count, total)))
    specials = shared_specials(corpus)
    return [plan.step(step, specials) for step in chosen], plan.steps_per_epoch


def seconds(model: nn.Module, config, steps_per_epoch: int, steps: list) -> float:
    """Training seconds of chapter 3's `train` (and so `train_step`) taking `steps` in order."""
    recipe = config.train_config(config.schedule(steps_per_epoch))
    schedule = dataclasses.replace(recipe, max_steps=len(steps), cooldown=0, checkpoint_every=0)
    history = train(model, lambda step: steps[step], schedule, checkpoint=None, progress=False)
    return float(history.seconds.sum())


def alternating_medians(timers: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Each timer's median seconds over `rounds` rounds, run in turn: forward in even rounds,
    backward in odd ones, so that neither always goes first."""
    timed: dict[str, list[float]] = {name: [] for name in timers}
    for round_ in range(rounds):
        order = list(timers) if round_ % 2 == 0 else list(reversed(timers))
        for name in order:
            timed[name].append(timers[name]())
    return {name: statistics.median(values) for name, values in timed.items()}


def models(config, corpus, compiled: bool) -> dict[str, nn.Module]:
    """The run's model, and nn.Transformer of the same size with the same dropout."""
    ours = new_model(config, corpus)
    torch.manual_seed(config.seed)
    theirs = TorchTransformer(ours.config)
    if config.fast_dropout:  # the same dropout draws for both
        theirs = use_fast_dropout(theirs)
    pair = {"ours": ours, "nn.Transformer": theirs}
    return {name: torch.compile(m, dynamic=True) for name, m in pair.items()} if compiled else pair


def measure(config, corpus, count: int, rounds: int, compiled: bool = False) -> dict:
    """Tokens per second of both models' steps over the sample, in alternating rounds."""
    if compiled:  # dropout's rate is a Python number: a rate that moves recompiles every step
        config = dataclasses.replace(config, p_drop_final=None)
    steps, per_epoch = sample_steps(config, corpus, count)
    tokens = sum(batch.n_tokens for micro_batches in steps for batch in micro_batches)
    built = models(config, corpus, compiled)
    first_pass = {name: seconds(model, config, per_epoch, steps) for name, model in built.items()}
    median = alternating_medians(
        {
            name: functools.partial(seconds, m, config, per_epoch, steps)
            for name, m in built.items()
        },
        rounds,
    )
    result = {
        "target tokens/s": {name: round(tokens / s, 1) for name, s in median.items()},
        "ratio to nn.Transformer": round(median["nn.Transformer"] / median["ours"], 3),
        "parameters": {name: count_parameters(m) for name, m in built.items()},
        "steps": len(steps),
        "target tokens": tokens,
        "rounds": rounds,
        "threads": torch.get_num_threads(),
    }
    if compiled:
        result["first pass seconds (compiling)"] = {n: round(s, 1) for n, s in first_pass.items()}
        result["dropout"] = "held at p_drop: the run's rising rate would recompile at every step"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--profile", default="full")
    parser.add_argument("--steps", type=int, default=48, help="steps in the sample")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    args = parser.parse_args()
    use_fair_threads(quiet=True)
    _, config = profile_config(args.profile)
    corpus = load_multi30k(config.vocab_size, config.min_freq, None, splits=("train",))
    print(json.dumps(measure(config, corpus, args.steps, args.rounds, args.compile)))


if __name__ == "__main__":
    main()
