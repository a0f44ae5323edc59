"""One side of chapter 8's data-parallel check; `ch08_wmt.ddp_check` starts it with torchrun.

    torchrun --standalone --nproc_per_node=2 -m annotated.ddp_check --out OUT --steps 4 --accumulate 1

Every process builds the same small model (float64, dropout off) and the same synthetic sentence pairs,
cut into token batches; each step takes `accumulate` x processes batches, shared out by chapter
5's `BatchPlan`, and chapter 3's `train` runs with the model wrapped in DistributedDataParallel
when there is more than one process. Process 0 writes the final checkpoint to OUT, and beside it
(OUT with the suffix .json) the process group's backend and the device the processes trained on.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch
from torch import nn

from annotated.base.devices import training_device
from annotated.base.files import atomic_write
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import TrainConfig, train
from annotated.ch05_text import BatchPlan, Vocab
from annotated.ch08_wmt import setup_distributed, teardown_distributed

# Sixteen made-up words; the specials (and their ids) come from the vocabulary, as everywhere.
VOCAB = Vocab.build([[f"w{i}" for i in range(16)]], min_freq=1, language="synthetic")


def synthetic_pairs(count: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Source/target id lists of varied lengths (the target reverses the source)."""
    rng = random.Random(seed)
    words = VOCAB.tokens[len(VOCAB.tokens) - 16 :]
    pairs = []
    for _ in range(count):
        source = VOCAB.encode([rng.choice(words) for _ in range(rng.randrange(3, 12))])
        pairs.append((source + [VOCAB.specials.eos], source[::-1]))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m annotated.ddp_check")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per process")
    parser.add_argument(
        "--report-threads", action="store_true", help="print the thread names left after teardown"
    )
    args = parser.parse_args(argv)
    rank, world = setup_distributed()
    device = training_device()  # a GPU each under nccl, the CPU under gloo
    torch.manual_seed(0)
    # float64: summing the same gradients in another order changes the last bits, and in float32
    # that is enough to move a parameter whose true gradient is 0 (the key projection's bias: a
    # shift of every key leaves the softmax unchanged) by up to a whole learning rate, because
    # Adam divides its rounding noise by a square root of the same noise. In float64 the noise
    # stays far below Adam's epsilon and the two runs agree to better than 1e-8.
    model = make_model(
        ModelConfig(len(VOCAB), len(VOCAB), N=1, d_model=32, d_ff=64, h=2, p_drop=0.0)
    ).double()
    model = model.to(device)
    pairs = synthetic_pairs(200)
    plan = BatchPlan.build(pairs, 60, args.accumulate, world)
    config = TrainConfig(
        max_steps=args.steps,
        warmup=2,
        accumulate=args.accumulate,
        precision="fp32",
        checkpoint_every=0,
    )

    trained = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    batches = lambda step: plan.step(step, VOCAB.specials, rank, world)  # noqa: E731
    train(trained, batches, config, checkpoint=args.out, progress=False)
    if rank == 0:
        backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else None
        report = {"backend": backend, "device": device.type, "processes": world}
        with atomic_write(Path(args.out).with_suffix(".json"), "w", encoding="utf-8") as handle:
            json.dump(report, handle)
    del trained  # the wrapper holds the process group: let it go before the group is destroyed
    teardown_distributed()
    if args.report_threads:
        # One write of one line: the processes share torchrun's output, and a pipe keeps a
        # single small write whole.
        sys.stdout.write(f"rank {rank} threads after teardown: {' '.join(thread_names())}\n")
        sys.stdout.flush()
    return 0


def thread_names() -> list[str]:
    """The names of this process's threads (Linux), to see that no gloo thread outlives teardown."""
    tasks = Path("/proc/self/task")
    if not tasks.exists():
        return []
    names = []
    for task in tasks.iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except FileNotFoundError:  # the thread ended while we listed them: it outlives nothing
            continue
    return sorted(names)


if __name__ == "__main__":
    sys.exit(main())
