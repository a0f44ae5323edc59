"""The book's fast paths on a CUDA GPU: checked against the chapters' formulas, timed, and chapter
7's recipe trained there.

    python -m benchmarks.bench_gpu [--no-train]     (make bench-gpu; needs a CUDA GPU)

1. Fused attention (`MultiHeadAttention` through `F.scaled_dot_product_attention`) against
   chapter 1's `attention` (the same module with `keep_weights`), forward and backward, with no
   mask, a padding mask and a causal one, in float32 and under bf16 autocast.
2. `smoothed_kl` against chapter 3's `label_smoothing_loss`: value and gradient, and the time of
   a forward and backward pass on chapter 7's logits (3,000 tokens by 6,190 words), in one block
   of all rows (what the GPU takes) and in the CPU's 64-row blocks.
3. Chapter 7's full recipe, trained in runs/multi30k-gpu (resumes; a finished run is only
   scored): training minutes, target tokens/s, the probe's plan against the run, test2016 BLEU.

Writes benchmarks/results/gpu.json.
"""

from __future__ import annotations

import argparse
import time

import torch

from annotated.base import fast_step
from annotated.base.threads import use_fair_threads
from annotated.ch01_attention import MultiHeadAttention, fused_attention_pays
from annotated.ch03_training import label_smoothing_loss
from benchmarks.common import describe, write_results

CUDA = torch.device("cuda")


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max()).item()


def attention_check() -> list[dict]:
    """Fused against chapter 1's attention: the largest relative difference of each result."""
    torch.manual_seed(0)
    rows = []
    lengths = torch.tensor([23, 20, 17, 9, 1, 23, 5, 12], device=CUDA)
    padding = (torch.arange(23, device=CUDA)[None, :] < lengths[:, None])[:, None, :]
    causal = torch.ones(23, 23, dtype=torch.bool, device=CUDA).tril()[None] & padding
    x = torch.randn(8, 23, 256, device=CUDA)
    for precision in ("fp32", "bf16"):
        mha = MultiHeadAttention(256, 4).to(CUDA)
        for name, mask in (("none", None), ("padding", padding), ("causal", causal)):
            results = []
            for keep in (False, True):  # keep_weights: chapter 1's attention
                mha.zero_grad()
                mha.keep_weights = keep
                xi = x.clone().requires_grad_()
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
                    y = mha(xi, xi, xi, mask)
                y.float().square().mean().backward()
                results.append((y.float().detach(), xi.grad, mha.w_q.weight.grad.clone()))
            (fused, dx, dw), (plain, dx_plain, dw_plain) = results
            rows.append(
                {
                    "precision": precision,
                    "mask": name,
                    "fused kernel taken": fused_attention_pays(y),
                    "output": relative(fused, plain),
                    "input gradient": relative(dx, dx_plain),
                    "W_q gradient": relative(dw, dw_plain),
                    "any NaN": bool(fused.isnan().any()),
                }
            )
    return rows


def loss_check(tokens: int = 3000, vocab: int = 6190, repeats: int = 50) -> dict:
    """smoothed_kl against label_smoothing_loss: agreement, and ms per forward and backward."""
    generator = torch.Generator(device=CUDA).manual_seed(0)
    target = torch.randint(0, vocab, (tokens,), device=CUDA, generator=generator)
    target[::7] = 1  # padding
    record: dict = {"shape": [tokens, vocab]}
    for dtype in (torch.float32, torch.bfloat16):
        z = 3 * torch.randn(tokens, vocab, device=CUDA, generator=generator)
        values, grads = [], []
        for loss in (label_smoothing_loss, fast_step.smoothed_kl):
            zi = z.to(dtype).requires_grad_()
            value = loss(zi, target, 1, 0.1)
            value.backward()
            values.append(value.item())
            grads.append(zi.grad.float())
        record[f"{str(dtype).removeprefix('torch.')}: relative value difference"] = abs(
            values[1] - values[0]
        ) / abs(values[0])
        record[f"{str(dtype).removeprefix('torch.')}: largest gradient difference"] = (
            (grads[1] - grads[0]).abs().max().item()
        )
    z = torch.randn(tokens, vocab, device=CUDA, dtype=torch.bfloat16, requires_grad=True)
    blocks = fast_step.block_rows
    ways = {
        "chapter 3's label_smoothing_loss": (label_smoothing_loss, blocks),
        "smoothed_kl, all rows at once (the GPU's)": (fast_step.smoothed_kl, blocks),
        "smoothed_kl, 64-row blocks (the CPU's)": (
            fast_step.smoothed_kl,
            lambda logits: fast_step.ROWS,
        ),
    }
    timings = {}
    for name, (loss, block_rows) in ways.items():
        fast_step.block_rows = block_rows
        try:
            for _ in range(3):
                loss(z, target, 1, 0.1).backward()
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(repeats):
                loss(z, target, 1, 0.1).backward()
            torch.cuda.synchronize()
            timings[name] = round(1000 * (time.perf_counter() - started) / repeats, 2)
        finally:
            fast_step.block_rows = blocks
    record["ms per forward and backward (bf16 logits)"] = timings
    return record


def training() -> dict:
    """Chapter 7's full recipe on this GPU: the plan, the run, its scores."""
    from annotated.ch07_multi30k import profile_config, train_multi30k
    from annotated.training.config import RUNS_DIR
    from annotated.training.finish import final_scores, saved_scores
    from annotated.training.folder import folder_name

    _, config = profile_config("full")
    run = train_multi30k(config, RUNS_DIR / folder_name("multi30k", "gpu"))
    scores = saved_scores(run) or final_scores(run).to_dict("records")
    by = {(r["split"], r["decoding"]): r["BLEU"] for r in scores if r["weights"] != "last"}
    history, plan, per_epoch = run.history, run.budget, run.budget.schedule.steps_per_epoch
    later = history.seconds.iloc[per_epoch:]
    return {
        "train_minutes": round(history.seconds.sum() / 60, 2),
        "train_steps": int(history.step.max()),
        "run_target_tokens_per_s": round(history.tokens.sum() / history.seconds.sum(), 1),
        "seconds_per_step": {
            "probe (steady)": round(plan.seconds_per_step, 4),
            "probe (first epoch's extra)": round(plan.first_epoch_extra, 4),
            "run, first epoch": round(history.seconds.iloc[:per_epoch].mean(), 4),
            "run, after its first epoch": round(later.mean(), 4),
        },
        "planned_minutes": round(plan.training_seconds(plan.steps) / 60, 2),
        "test2016_bleu_beam": by[("test_2016_flickr", f"beam {config.decoding.beam}")],
        "test2016_bleu_greedy": by[("test_2016_flickr", "greedy")],
        "sacrebleu_signature": scores[0]["BLEU signature"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--no-train", dest="train", action="store_false")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA GPU; this machine has none")
    use_fair_threads()
    record = {
        "benchmark": "the fast paths on a CUDA GPU",
        "machine": describe(),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "attention": attention_check(),
        "loss": loss_check(),
    }
    if args.train:
        record["chapter 7, full recipe"] = training()
    write_results("gpu", record)


if __name__ == "__main__":
    main()
