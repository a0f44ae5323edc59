# %% [markdown] slideshow={"slide_type": "slide"}
# # Chapter 3 — Training
#
# *Paper: section 5 (5.1 batching, 5.3 the optimizer and its schedule, 5.4 regularization:
# dropout and label smoothing).*
#
# Chapter 2 left us with a model that produces arbitrary predictions. This chapter builds
# everything needed to teach it, in the order a training step uses it:
#
# 1. a `Batch`: source and target token ids, the target shifted for *teacher forcing*, the
#    masks, and how many tokens the loss counts;
# 2. the optimizer, Adam, and the paper's learning-rate schedule (equation 3);
# 3. the loss, with label smoothing ($\epsilon_{ls} = 0.1$);
# 4. dropout, section 5.4's other regularizer: chapter 2 already put it in the model, so we look
#    at where it sits, let its rate change during training, and make its masks cheaper;
# 5. the loop: gradient accumulation, mixed precision, checkpoints that survive a killed
#    process, and a guard against a loss that is not a number.
#
# Chapter 4 then uses all of this to train a first model.
#
# What only serves the lesson lives beside it. The charts' code (and the loss curve computed for
# one of them) is in `annotated/figures/ch03_training.py`. The exercises' checks are in
# `annotated/exercises/ch03_training.py`. The checkpoint files and the sums over processes live in
# `annotated/base/checkpoints.py` and `annotated/base/distributed.py`.

# %% tags=["active-ipynb", "hide-input"]
# # Run this cell first: it finds the book's code, or installs the release this notebook ran with.
# def find_or_install_the_book(name="annotated-transformer-book", version="0.1.0"):
#     import subprocess, sys, tempfile
#     from importlib import invalidate_caches, metadata
#
#     try:
#         found = metadata.version(name)
#     except metadata.PackageNotFoundError:
#         # Pins what this kernel has imported already (numpy...): pip must not replace any of it.
#         imported = metadata.packages_distributions()
#         kept = {d for module, ds in imported.items() if module in sys.modules for d in ds}
#         with tempfile.TemporaryDirectory() as folder:
#             pins = f"{folder}/imported.txt"
#             with open(pins, "w") as file:
#                 file.writelines(f"{d}=={metadata.version(d)}\n" for d in sorted(kept))
#             pip = [sys.executable, "-m", "pip", "install", f"{name}=={version}", "-c", pins]
#             result = subprocess.run(pip, capture_output=True, text=True)
#         if result.returncode != 0:
#             print(result.stdout + result.stderr)
#             print(f"Could not install the book's code, {name}=={version} (pip's words above):"
#                   " that release may not be on the package index yet, or this machine is offline.")
#             print("Work in a clone of the book instead (`make lab` there opens the chapters), or"
#                   " install a clone here (`pip install -e path/to/clone`) and restart the kernel.")
#             raise RuntimeError(f"{name} is not installed") from None
#         invalidate_caches()
#         found = metadata.version(name)
#     note = "" if found == version else f" (this notebook was executed with {version})"
#     print(f"The book's code: {name} {found}{note}.")
#
#
# find_or_install_the_book()

# %%
from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor, nn
from tqdm import tqdm

from annotated.base.checkpoints import resume, save_training
from annotated.base.devices import PRECISIONS, LossScaling, chosen_precision
from annotated.base.distributed import rank_and_world, sum_over_processes
from annotated.base.fast_step import smoothed_kl
from annotated.base.files import folder_lock
from annotated.ch01_attention import padding_mask, subsequent_mask
from annotated.ch02_model import (
    EncoderDecoder,
    LearnedPositions,
    PositionalEncoding,
    SublayerConnection,
)

# %% tags=["active-ipynb"]
# from annotated.ch02_model import ModelConfig, make_model
# from annotated.figures import use_book_charts
# from annotated.base.threads import use_fair_threads
#
# use_fair_threads()  # torch's threads: the CPUs this process may use (annotated/base/threads.py)
# use_book_charts()
# _ = torch.manual_seed(0)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. Batches and teacher forcing
#
# A translation model learns from pairs: a source sentence and its target sentence, both as
# token ids. Every target begins with a start symbol `<s>` and ends with an end symbol `</s>`.
# Sentences shorter than the longest in the batch are filled with a pad symbol. Which ids these
# symbols have is decided by the vocabulary, never by the training code. Here they live in one
# small object, `SpecialTokens`, that vocabularies provide.
#
# The decoder is trained with **teacher forcing**: at every position it is shown the *true*
# previous tokens, not its own guesses, and asked for the next one. So one target sentence gives
# two aligned sequences:
#
# | | `<s>` | a | dog | runs | `</s>` |
# |---|---|---|---|---|---|
# | decoder input (`tgt_in`) | `<s>` | a | dog | runs | |
# | what it must predict (`tgt_out`) | a | dog | runs | `</s>` | |
#
# `tgt_in` is the target without its last token, `tgt_out` the target without its first. So the
# decoder's input is the target shifted one position to the right (section 3.1): at every
# position the input holds the token *before* the one to predict. Thanks to the subsequent mask
# of chapter 1, all positions are trained at once, yet each sees only its past.
#
# In a padded batch, "the last token" is the last column. A shorter sentence's `tgt_in` then
# still holds its `</s>` and some pads. The positions that read them must predict pad, which the
# loss leaves out, so they teach nothing. The batch printed below has one.
#
# The loss is averaged over *tokens*, not sentences, and pads are not tokens: `n_tokens` counts
# the non-pad entries of `tgt_out`.


# %%
@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the padding, start and end symbols; vocabularies provide one of these."""

    pad: int
    bos: int
    eos: int


@dataclass(frozen=True)
class Batch:
    """One batch of sentence pairs, ready for the model and the loss."""

    src: Tensor  # (batch, src_len) source ids, padded
    # From a target <s> y1 ... y_n </s>, two rows of n + 1 tokens (tgt_len: the longest n + 1):
    tgt_in: Tensor  # (batch, tgt_len) decoder input: <s> y1 ... y_n, the target less its last
    tgt_out: Tensor  # (batch, tgt_len) what to predict: y1 ... y_n </s>, the target less its first
    src_mask: Tensor  # (batch, 1, src_len) True at real source tokens
    tgt_mask: Tensor  # (batch, tgt_len, tgt_len) no pads, no future
    n_tokens: int  # non-pad tokens in tgt_out: the loss is averaged over these
    pad: int

    @classmethod
    def build(cls, src: Tensor, tgt: Tensor, pad: int) -> Batch:
        """From padded ids: src (batch, src_len) and tgt (batch, tgt_len + 1) starting with <s>."""
        if src.dim() != 2 or tgt.dim() != 2 or src.size(0) != tgt.size(0):
            raise ValueError(
                "src and tgt must be (batch, len) with the same batch size, "
                f"got {tuple(src.shape)} and {tuple(tgt.shape)}"
            )
        if tgt.size(1) < 2:
            raise ValueError("tgt needs at least <s> and one more token per sentence")
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        return cls(
            src=src,
            tgt_in=tgt_in,
            tgt_out=tgt_out,
            src_mask=padding_mask(src, pad),
            tgt_mask=padding_mask(tgt_in, pad) & subsequent_mask(tgt_in.size(1)).to(src.device),
            n_tokens=int((tgt_out != pad).sum()),
            pad=pad,
        )

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on another device."""
        tensors = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **tensors)


def pad_sequences(sequences: Sequence[Sequence[int]], pad: int) -> Tensor:
    """A list of id lists -> (len(sequences), longest) tensor, padded on the right."""
    longest = max(len(s) for s in sequences)
    out = torch.full((len(sequences), longest), pad, dtype=torch.long)
    for i, sequence in enumerate(sequences):
        out[i, : len(sequence)] = torch.as_tensor(sequence, dtype=torch.long)
    return out


# %% [markdown]
# Two pairs of different lengths, with pad = 0, `<s>` = 1 and `</s>` = 2:

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# specials = SpecialTokens(pad=0, bos=1, eos=2)
# src = pad_sequences([[5, 6, 7, 2], [8, 9, 2]], specials.pad)
# tgt = pad_sequences([[1, 15, 16, 17, 2], [1, 18, 2]], specials.pad)
# example = Batch.build(src, tgt, specials.pad)
# print("tgt_in  ", example.tgt_in.tolist())
# print("tgt_out ", example.tgt_out.tolist())
# print("n_tokens", example.n_tokens, " (4 + 2: pads are not counted)")
# print("tgt_mask of the second sentence:")
# print(example.tgt_mask[1].int())

# %% [markdown]
# The same as a picture, drawn from a batch by `teacher_forcing` (in
# `annotated/figures/ch03_training.py`). At the top, the first sentence's target is cut into what
# the decoder reads and what it must write. Below it is the sentence's mask, read from `tgt_mask`
# itself, one row per position. Reading the grid row by row is reading teacher forcing: position 3
# sees `<s>` and the first two words, and must say the third. The ids are named here by hand; with
# a real vocabulary they are its words.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# from annotated.figures.ch03_training import teacher_forcing
#
# teacher_forcing(example, ["<s>", "a", "dog", "runs", "</s>"], row=0)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. The optimizer and the learning-rate schedule (section 5.3)
#
# The paper trains with Adam using $\beta_1 = 0.9$, $\beta_2 = 0.98$ and $\epsilon = 10^{-9}$.
# Here $\beta_2$ sets how many steps Adam averages the squared gradients over: about
# $1/(1-\beta_2)$. The common choice, 0.999, averages over about 1000 steps. With 0.98 it is only
# 50, so the estimate keeps up with the fast-changing gradients of early training. The learning
# rate is not constant but follows equation 3:
#
# $$lrate = d_\text{model}^{-0.5} \cdot \min\!\left(step\_num^{-0.5},\;
#   step\_num \cdot warmup\_steps^{-1.5}\right)$$
#
# For the first $warmup\_steps = 4000$ steps the second term is the smaller one, so the rate
# grows linearly from almost 0. Afterwards the first term takes over, and the rate decays as
# $1/\sqrt{step}$. The two terms are equal at $step = warmup$, which is therefore the peak,
# $d_\text{model}^{-0.5}\, warmup^{-0.5}$ (0.0007 for the base model). The factor
# $d_\text{model}^{-0.5}$ makes wider models take smaller steps.
#
# Why warm up at all? At the start, Adam's estimates of the gradients' scale rest on very few
# samples. And, as chapter 2 measured, a post-norm Transformer sends large gradients to the layers
# near its output. Large steps then can wreck the model before it has learned anything.
#
# In PyTorch a schedule is a `LambdaLR`: it multiplies the optimizer's base rate by a function
# of the number of optimizer steps taken so far. We give Adam a base rate of 1 and let the
# function return equation 3. `LambdaLR` counts from 0, the paper from 1, hence the `+ 1`.
#
# We also ask for PyTorch's **fused** Adam, which updates every parameter in one pass. It does the
# same arithmetic; the tests compare it with the unfused loop. On a CPU, though, the default loop
# of several small operations per tensor costs a few percent of a training step.
#
# One addition the paper does not have, off by default: `cooldown`. Equation 3 never lets the rate
# reach 0. On a small dataset trained for a fixed budget, the last steps then keep jumping around
# the minimum instead of settling into it. With `cooldown = c`, the rate of the last $c$ steps is
# equation 3 times a straight line from 1 down to $1/c$ at the final step. Chapter 7 uses it. With
# a cooldown, a run's schedule depends on its length, so a finished run can no longer be extended
# by raising `max_steps`.


# %%
def rate(step: int, d_model: int, warmup: int, factor: float = 1.0) -> float:
    """Equation 3: the learning rate at optimizer step `step` (counted from 1)."""
    if step < 1:
        raise ValueError(f"steps are counted from 1, got {step}")
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@dataclass(frozen=True)
class TrainConfig:
    """How to train; defaults are the paper's (section 5)."""

    max_steps: int = 100_000  # optimizer steps (the base model: 100K, section 5.2)
    warmup: int = 4000  # warmup_steps of equation 3
    lr_factor: float = 1.0  # multiplies equation 3 (the paper: 1)
    cooldown: int = 0  # c: the last c steps scale eq. 3 by a line from 1 down to 1/c (paper: none)
    beta1: float = 0.9  # Adam (section 5.3)
    beta2: float = 0.98
    adam_eps: float = 1e-9
    eps_ls: float = 0.1  # label smoothing (section 5.4)
    accumulate: int = 1  # micro-batches whose gradients make one optimizer step
    precision: str = "auto"  # "bf16", "fp16" or "fp32"; "auto": chosen by the hardware
    checkpoint_every: int = 1000  # optimizer steps between checkpoints (0: only at the end)
    # Dropout moves linearly from the model's p_drop at the first step to this at the last one
    # (None: it stays at p_drop, as in the paper). See section 4.
    p_drop_final: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_steps", "warmup", "accumulate"):
            if getattr(self, name) < 1:
                raise ValueError(
                    f"TrainConfig.{name} must be at least 1, got {getattr(self, name)}"
                )
        if not 0.0 <= self.eps_ls < 1.0:
            raise ValueError(f"TrainConfig.eps_ls must be in [0, 1), got {self.eps_ls}")
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise ValueError(f"Adam's betas must be in [0, 1), got {self.beta1}, {self.beta2}")
        if not 0 <= self.cooldown <= self.max_steps:
            raise ValueError(
                f"TrainConfig.cooldown must be between 0 and max_steps ({self.max_steps}), "
                f"got {self.cooldown}"
            )
        if self.lr_factor <= 0 or self.adam_eps <= 0:
            raise ValueError("lr_factor and adam_eps must be positive")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.checkpoint_every < 0:
            raise ValueError("checkpoint_every must be 0 (only at the end) or positive")
        if self.p_drop_final is not None and not 0.0 <= self.p_drop_final < 1.0:
            raise ValueError(f"TrainConfig.p_drop_final must be in [0, 1), got {self.p_drop_final}")


def cooled_rate(step: int, d_model: int, config: TrainConfig) -> float:
    """Equation 3, times a line falling to 1/c over the last c = `config.cooldown` steps
    (if any)."""
    lr = rate(step, d_model, config.warmup, config.lr_factor)
    if config.cooldown:
        lr *= min(1.0, (config.max_steps - step + 1) / config.cooldown)
    return lr


def make_optimizer(
    model: nn.Module, config: TrainConfig
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam with the paper's betas and epsilon, scheduled by equation 3 (and the cooldown)."""
    d_model = model.config.d_model
    parameters = list(model.parameters())
    optimizer = torch.optim.Adam(
        parameters,
        lr=1.0,
        betas=(config.beta1, config.beta2),
        eps=config.adam_eps,
        # One kernel for all parameters (the same update): on a CPU much faster than PyTorch's
        # default there, a loop of small operations per tensor.
        fused=all(p.device.type in ("cpu", "cuda") for p in parameters),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda taken: cooled_rate(taken + 1, d_model, config)
    )
    return optimizer, scheduler


# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# from annotated.figures.ch03_training import (  # the drawing code of this chapter's charts
#     confidence_chart,
#     confidence_curve,
#     schedule_chart,
#     smoothing_chart,
# )
#
# schedule_chart([(512, 4000), (512, 8000), (256, 4000), (1024, 4000)])

# %% [markdown]
# The `LambdaLR` reproduces equation 3 exactly; here it is stepped through the base model's
# warmup:

# %% tags=["active-ipynb"]
# base = nn.Linear(1, 1)
# base.config = ModelConfig(10, 10)  # only d_model = 512 is read
# optimizer, scheduler = make_optimizer(base, TrainConfig())
# seen = {}
# for step in range(1, 8001):
#     seen[step] = optimizer.param_groups[0]["lr"]  # the rate this step will use
#     optimizer.step()
#     scheduler.step()
# pd.DataFrame(
#     {
#         "step": [1, 1000, 4000, 8000],
#         "LambdaLR": [f"{seen[s]:.3e}" for s in (1, 1000, 4000, 8000)],
#         "equation 3": [f"{rate(s, 512, 4000):.3e}" for s in (1, 1000, 4000, 8000)],
#     }
# )

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Label smoothing (section 5.4)
#
# The usual loss for predicting the next token is cross-entropy against a *one-hot* target: all
# probability on the right token. Minimizing it pushes the model to put ever more probability
# there, without limit. The logits grow, and the model becomes over-confident. The paper instead
# trains against a *smoothed* target: the right token gets $1 - \epsilon_{ls}$, and the remaining
# $\epsilon_{ls} = 0.1$ is spread over the other tokens. The paper notes the trade. Perplexity
# gets worse, since the model is deliberately less sure, while accuracy and BLEU improve.
#
# Both measures are met properly later, but here is what they are. **Perplexity** is $e$ to the
# power of the average cross-entropy per target token, against the one-hot target. A model that
# gave the right token probability $1/k$ everywhere would have perplexity $k$, and lower is better
# (chapter 9 measures it). **BLEU** scores a translation by how many of its runs of one to four
# words also occur in a reference translation. A penalty for translations shorter than the
# reference keeps a one-word output from scoring perfectly. The score goes from 0 to 100, and
# higher is better (chapter 6 computes it).
#
# Two details the paper leaves open, and our choices:
#
# * **How $\epsilon_{ls}$ is spread.** We spread it evenly over the tokens that are *neither*
#   the right one *nor* the pad symbol. A vocabulary of $V$ tokens gives each of them
#   $\epsilon_{ls} / (V - 2)$. Pad gets exactly 0, since the model must never predict it.
#   PyTorch's `F.cross_entropy(label_smoothing=ε)` instead spreads $\epsilon/V$ over *all* $V$
#   tokens, the right one and pad included. The end of this section compares the two.
# * **Which loss.** We minimize the Kullback-Leibler divergence $KL(q \,\|\, p) = \sum_c q_c
#   (\log q_c - \log p_c)$ from the smoothed target $q$ to the model's distribution $p$. It differs
#   from cross-entropy $-\sum_c q_c \log p_c$ only by the entropy of $q$, a constant, so the
#   gradients are the same. KL has the advantage that a perfect model scores exactly 0.
#
# Positions whose target is pad contribute nothing. Classes with $q_c = 0$ must contribute exactly
# 0, even where the model gives them probability 0. Computed naively, their term is
# $0 \cdot \log 0 = 0 \cdot (-\infty)$, which is NaN in floating point. Our loss is handed logits,
# whose log-softmax is finite wherever the logits are. Pad is the one class whose $q_c$ is 0 at
# every position (for $\epsilon_{ls} > 0$), and the loss sums around its column, so a $-\infty$
# there does no harm.
#
# The Annotated Transformer's own label-smoothing example, in the original and in its 2022
# revision alike, meets the other side of that trap. Its example predictions hold exact zeros,
# whose log is $-\infty$, on tokens where the smoothed target is not zero. So the loss it prints
# is `inf`, as readers report in the project's issue threads (harvardnlp/annotated-transformer,
# issues 39 and 109).
#
# We never build $q$ itself in the loss. It takes only three values: the target's
# $1 - \epsilon_{ls}$, pad's 0, and $s = \epsilon_{ls} / (V - 2)$ everywhere else. So for one
# position
#
# $$KL(q \,\|\, p) = \underbrace{(1 - \epsilon_{ls}) \log (1 - \epsilon_{ls}) + \epsilon_{ls} \log s}_{\sum_c q_c \log q_c,\ \text{a constant}}
# \;-\; (1 - \epsilon_{ls}) \log p_{y} \;-\; s \Big(\sum_c \log p_c - \log p_y - \log p_\text{pad}\Big),$$
#
# which needs one sum over the vocabulary instead of several full $n \times V$ tensors, and so
# makes a training step faster. `smoothed_targets` builds $q$ explicitly for the picture below,
# and the tests check the closed form against the explicit sum.


# %%
def smoothed_targets(target: Tensor, vocab: int, pad: int, eps_ls: float) -> Tensor:
    """(n,) ids -> (n, vocab) distributions: 1 - eps on the target, eps spread over the rest
    but pad."""
    if vocab < 3:
        raise ValueError("label smoothing needs at least the target, the pad and one other token")
    q = torch.full((target.size(0), vocab), eps_ls / (vocab - 2), device=target.device)
    q.scatter_(1, target.unsqueeze(1), 1.0 - eps_ls)
    q[:, pad] = 0.0
    q[target == pad] = 0.0  # pad positions are not predicted at all
    return q


def label_smoothing_loss(logits: Tensor, target: Tensor, pad: int, eps_ls: float) -> Tensor:
    """Sum over non-pad positions of KL(smoothed target || softmax(logits)), without building q."""
    vocab = logits.size(-1)
    if vocab < 3:
        raise ValueError("label smoothing needs at least the target, the pad and one other token")
    target = target.reshape(-1)  # (n,)
    real = target != pad
    target = target[real]  # (m,) pad positions are not predicted at all
    log_p = logits.reshape(-1, vocab)[real]  # (m, vocab)
    # At least fp32 (bf16 logits are widened); float64 stays float64.
    log_p = log_p.to(torch.promote_types(log_p.dtype, torch.float32)).log_softmax(dim=-1)
    spread = eps_ls / (vocab - 2)  # q of every class that is neither the target nor pad
    log_p_target = log_p.gather(1, target.unsqueeze(1)).squeeze(1)  # (m,)
    # Sum around the pad column rather than subtracting it: pad may have log p = -inf.
    log_p_others = log_p[:, :pad].sum(-1) + log_p[:, pad + 1 :].sum(-1) - log_p_target  # (m,)
    cross_entropy = -((1.0 - eps_ls) * log_p_target + spread * log_p_others).sum()
    # sum_c q_c log q_c is the same constant for every position (0 log 0 taken as 0).
    neg_entropy = _xlogx(1.0 - eps_ls) + (vocab - 2) * _xlogx(spread)
    return target.numel() * neg_entropy + cross_entropy


def _xlogx(x: float) -> float:
    return x * math.log(x) if x > 0 else 0.0


# %% [markdown]
# The smoothed targets for four positions of a 10-token vocabulary with pad = 0 (the last
# position is padding, so it has no target at all):

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# smoothing_chart(torch.tensor([2, 5, 9, 0]), vocab=10, pad=0, eps_ls=0.1)

# %% [markdown]
# Each of the first three rows has 0.9 on its target, $0.1/8 = 0.0125$ on the other eight tokens,
# and nothing on pad. The last row, whose target is pad itself, is all zeros.
#
# What does smoothing do to the model's incentives? Suppose the model puts probability $p$ on the
# right token and spreads the rest evenly. Plain cross-entropy ($\epsilon_{ls} = 0$) keeps
# falling as $p \to 1$: more confidence is always rewarded. The smoothed loss has its minimum at
# $p = 1 - \epsilon_{ls} = 0.9$ and rises again beyond it: over-confidence is penalized.
# (`confidence_curve` computes that loss for a range of $p$, in float64.)

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# curve = confidence_curve()
# confidence_chart(curve)

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# best = curve.loc[curve.groupby("eps_ls")["loss"].idxmin()]
# best.round(4)

# %% [markdown] slideshow={"slide_type": "slide"}
# ### Our loss against PyTorch's
#
# `F.cross_entropy(logits, target, label_smoothing=ε)` targets $q^{pt} = (1-\epsilon)\,
# \text{one-hot} + \epsilon / V$: every token, the right one and pad included, gets $\epsilon/V$.
# Ours gives the right token exactly $1 - \epsilon$ and pad 0. Cross-entropy is KL plus the entropy
# of the target, so the two losses agree exactly only when their targets are the same. Computing
# our KL against $q^{pt}$ and adding its entropy reproduces PyTorch's number. With our own
# targets, the numbers differ by a small amount, because the targets differ. The tests check both.

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# import torch.nn.functional as F
#
# logits = torch.randn(6, 10, dtype=torch.float64)  # float64: five digits that hold on any machine
# target = torch.tensor([3, 4, 5, 6, 7, 0])
# real = target != 0
# eps = 0.1
# q_pt = (1 - eps) * F.one_hot(target[real], 10).double() + eps / 10
# kl_pt = (torch.xlogy(q_pt, q_pt) - q_pt * logits[real].log_softmax(-1)).sum()
# entropy_pt = -torch.xlogy(q_pt, q_pt).sum()
# theirs = F.cross_entropy(logits, target, ignore_index=0, label_smoothing=eps, reduction="sum")
# ours = label_smoothing_loss(logits, target, pad=0, eps_ls=eps)
# q_ours = smoothed_targets(target, 10, 0, eps).double()
# entropy_ours = -torch.xlogy(q_ours, q_ours).sum()
# print(f"PyTorch cross-entropy, label_smoothing=0.1:     {theirs.item():.5f}")
# print(f"KL to PyTorch's target + its entropy:           {(kl_pt + entropy_pt).item():.5f}")
# print(f"our KL + entropy of our target (cross-entropy): {(ours + entropy_ours).item():.5f}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. Dropout (section 5.4)
#
# The paper's second regularizer is dropout, with $P_{drop} = 0.1$ for the base model. It sits in
# two places. One is the output of every sub-layer, before it is added to the residual stream.
# The other is the sum of the embeddings and positional encodings at the bottom of both stacks.
# Chapter 2 put it there. The cell below lists every dropout module of a model, so you can see
# that nothing is missing and nothing is extra. Each sub-layer has one: two in an encoder layer,
# three in a decoder layer. The embeddings of the two stacks have one each.

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# model = make_model(ModelConfig(100, 100, N=2))
# sites = [name for name, module in model.named_modules() if isinstance(module, nn.Dropout)]
# pd.DataFrame({"dropout module": sites, "p": [model.get_submodule(n).p for n in sites]})

# %% [markdown]
# The paper keeps $P_{drop}$ fixed for the whole run. On a small dataset, a fixed rate pulls two
# ways. Early on the model underfits, and dropout only slows it down. Late in a run the model has
# seen every sentence many times and starts to memorise them, which is exactly what dropout is
# for. Chapter 7's runs on Multi30k show both; the lab notebook, section 5, has them. With a fixed
# rate of 0.3 the model learns much more slowly at the start than at 0.2. Yet at 0.2 its
# validation score stops rising near the end, while the training loss keeps falling.
#
# So the loop can also move dropout during training. Set `TrainConfig.p_drop_final`, and every
# residual and embedding dropout goes in a straight line from the model's `p_drop` at the first
# step to `p_drop_final` at the last. That holds after sinusoids and learned positions alike. The
# dropout on attention weights, if a model has it, is left alone. Like the learning rate, the
# dropout rate depends only on the step number, so a resumed run uses the same rates as one never
# stopped. Like the cooldown, it ties the schedule to `max_steps`, so such a run cannot be
# extended.
#
# Dropout modules keep their rate in a plain attribute, `p`, which is not part of the weights:
# changing it changes nothing in a checkpoint.


# %%
def dropout_rate(step: int, p_start: float, config: TrainConfig) -> float:
    """Residual and embedding dropout for optimizer step `step` (1 to max_steps)."""
    if config.p_drop_final is None:
        return p_start
    progress = (step - 1) / max(1, config.max_steps - 1)
    return p_start + (config.p_drop_final - p_start) * progress


def set_dropout(model: nn.Module, p: float) -> None:
    """Set the rate of every residual and embedding dropout of `model` (not attention dropout)."""
    for module in model.modules():
        if isinstance(module, (SublayerConnection, PositionalEncoding, LearnedPositions)):
            module.dropout.p = p


# %% [markdown]
# Chapter 7's schedule, for example, at five points of its 3,040 steps: from 0.1 up to 0.3.

# %% tags=["active-ipynb"]
# ramp = TrainConfig(max_steps=3040, warmup=500, p_drop_final=0.3)
# {step: round(dropout_rate(step, 0.1, ramp), 3) for step in (1, 760, 1520, 2280, 3040)}


# %% [markdown]
# **Cheaper random numbers for dropout.** To decide which elements to drop, `nn.Dropout` draws one
# random number per element. On a CPU, drawing random numbers is slow next to multiplying
# matrices, so the masks can take a large share of a training step. You can see it in a profile of
# a step (`torch.profiler.profile`); chapter 7 profiles its own.
#
# Yet a mask only asks whether a random number falls below $p$, and sixteen random bits answer
# that to within $1/65536$. So `FastDropout` draws 64-bit random integers, a quarter as many as
# there are elements, and reads each one as four 16-bit numbers. It keeps an element when its
# number is at least $p \cdot 65536$. That is the same distribution as `nn.Dropout`'s, up to
# rounding $p$ to a multiple of $1/65536$. What is kept is scaled by $1/(1-p)$, as usual.
#
# `use_fast_dropout` swaps it in for every `nn.Dropout` of a model. It has no weights, so
# checkpoints are unchanged. Chapter 7's run configuration, `RunConfig`, has an option for it,
# `fast_dropout`, off by default. The CPU recipes of chapters 7 and 8 switch it on; elsewhere,
# measure before you do.


# %%
class FastDropout(nn.Module):
    """Dropout whose mask comes from 16 random bits per element (a quarter of nn.Dropout's
    draws)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p  # a plain attribute, as in nn.Dropout: set_dropout may change it

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        threshold = round(self.p * 65536) - 32768  # int16 numbers below this are dropped
        n = x.numel()
        words = torch.randint(
            -(2**63), 2**63 - 1, ((n + 3) // 4,), dtype=torch.int64, device=x.device
        )
        keep = words.view(torch.int16)[:n].view(x.shape) >= threshold
        return x * keep * (1.0 / (1.0 - self.p))


def use_fast_dropout(model: nn.Module) -> nn.Module:
    """Replace every nn.Dropout inside `model` by FastDropout with the same p (in place)."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Dropout):
                setattr(module, name, FastDropout(child.p))
    return model


# %% tags=["active-ipynb"]
# ones = torch.ones(1_000_000)
# for p in (0.1, 0.3):
#     kept = FastDropout(p)(ones)
#     share = (kept > 0).float().mean()
#     print(f"p = {p}: kept {share:.2f} of the elements, each scaled to {kept.max():.3f}")


# %% [markdown]
# ## 5. The training loop
#
# One function, `train`, runs every training in this book, from the copy task to WMT, with
# `train_step` for each optimizer step. Together they do five things.
#
# * **Gradient accumulation.** The paper's batches hold about 25000 target tokens, and on a laptop
#   that many do not fit in memory at once. So a step may consist of several *micro-batches*. Each
#   is run forward and backward, the gradients add up, and only then does the optimizer step.
#   Each micro-batch's loss is divided by the token count of the *whole step*, so the update is
#   exactly the one a single big batch would give. The scheduler steps together with the
#   optimizer, once per step, never per micro-batch.
# * **Mixed precision.** Under `torch.autocast` with bfloat16, the matrix products run in 16-bit
#   floats. Hardware built for them multiplies these faster than float32: recent GPUs, and CPUs
#   with bfloat16 instructions (Intel's AMX, or the BF16 extension of AVX-512). Weights,
#   optimizer state and the loss stay in float32. The bfloat16 format has float32's range of
#   exponents, so unlike float16 it needs no loss scaling. `precision="fp32"` switches mixed
#   precision off.
#
#   A whole training step gains less than its matrix products do, since not all of it is matrix
#   products. In a small model, converting to and from bfloat16 costs nearly what the faster
#   products save; the wider the model, the more bfloat16 pays. `make bench-copy` measures a
#   training step of chapter 4's copy-task model at three widths (its record, in
#   `benchmarks/results/`, names the machine):
#
#   | width, `d_model` | 64 | 256 | 512 |
#   |---|---|---|---|
#   | bfloat16 step, times as fast as float32 | 1.06 | 1.43 | 1.68 |
#
#   Which precision, and where? A model trains on whichever device its weights are on. Chapters
#   7 to 9 put them on a CUDA GPU if the machine has one, else on Apple's MPS, else on the CPU.
#   The environment variable `ANNOTATED_DEVICE` (`cpu`, `cuda:1`, `mps`) names another.
#   `precision="auto"` then takes bfloat16 only where the hardware computes in it: a CUDA GPU of
#   compute capability 8.0 or later, or a CPU with AVX-512-BF16. Emulated, bfloat16 brings no
#   speed.
#
#   An older CUDA GPU, such as a T4, gets float16 with *loss scaling*. The loss is multiplied by a
#   large factor before the backward pass, so that small gradients do not round to zero in
#   float16's narrow range. The gradients are divided by the same factor before the optimizer
#   step, and the step is skipped if they overflowed. Anything else, MPS included, trains in
#   float32. `"bf16"`, `"fp16"` (CUDA only) and `"fp32"` choose one outright;
#   `annotated/base/devices.py` has the rules.
# * **Data by step number.** The loop asks a `batches(step)` function for the micro-batches of
#   each step. Because the data of step $s$ depends only on $s$, a run resumed from a checkpoint
#   sees exactly the data it would have seen.
# * **Checkpoints.** Every `checkpoint_every` steps, it saves the model, the optimizer's moments,
#   the scheduler, every random-number generator's state, the configurations and the history (and
#   in float16 the loss scale). It writes them to a temporary file, then renames that over the old
#   checkpoint. A rename is atomic, so a process killed at any instant leaves either the old
#   checkpoint or the new one, never half of one. Started again with the same path, `train`
#   resumes. It ends with the very same weights as a run that was never interrupted; the tests
#   kill a run with SIGKILL to check.
# * **A guard.** If the loss becomes NaN or infinite, training stops at once and names the step
#   and micro-batch, rather than silently corrupting the weights.
#
# It returns the history, one row per optimizer step, as a pandas DataFrame. An optional
# `on_step` function sees each row as it is made, and can stop training early by returning True
# (chapter 4 uses it to stop once the model is perfect).

# %%
BatchSource = Callable[[int], Sequence[Batch]]  # optimizer step (from 0) -> its micro-batches


def use_bf16(precision: str, device: torch.device) -> bool:
    """Whether to run under bfloat16 autocast for this precision setting and device."""
    return chosen_precision(precision, device) == "bf16"


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bfloat16 or float16 autocast, or nothing, as `precision` and the hardware say."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(chosen_precision(precision, device))
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def inference(model: nn.Module) -> Iterator[None]:
    """For the block: no dropout and no gradients; the model's train/eval mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def evaluate(
    model: EncoderDecoder, batches: Sequence[Batch], eps_ls: float = 0.0, precision: str = "auto"
) -> float:
    """Loss per target token over `batches`, without dropout or gradients."""
    device = next(model.parameters()).device
    total, tokens = 0.0, 0
    with inference(model):
        for batch in batches:
            batch = batch.to(device)
            with autocast(precision, device):
                logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            total += smoothed_kl(logits, batch.tgt_out, batch.pad, eps_ls).item()
            tokens += batch.n_tokens
    return total / max(tokens, 1)


# %% [markdown]
# And the loop itself, in two parts. `train_step` is one optimizer step, the heart of this
# chapter. The step's micro-batches go through the model, and each one's summed loss is divided by
# the tokens of the *whole* step. So the gradient is a per-token mean, however the step is cut up.
# The gradients accumulate, and then the optimizer and the learning-rate schedule take one step. A
# loss that is not a finite number stops training at once, with a message saying what to try.
#
# The loss it calls, `smoothed_kl` (in `annotated/base/fast_step.py`), computes exactly what
# section 3's `label_smoothing_loss` computes: the same value and the same gradient, as the tests
# check. It is faster because it writes out its gradient, $\mathrm{softmax}(z) - q$, in one pass.
# Autograd would instead differentiate each operation of the loss, one after another. Chapter 7
# profiles the step and explains why that pays. `loss_function` takes any other loss of the same
# signature.
#
# In float16, `scaling` multiplies the loss and divides the gradients back (section 5, mixed
# precision); in bfloat16 and float32 it leaves both alone. The lines with `world` and
# `sum_over_processes` matter only when several processes train one model together. With one
# process they change nothing, and chapter 8, section 9, explains them where it uses them.


# %%
def train_step(
    model: nn.Module,
    micro_batches: Sequence[Batch],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    config: TrainConfig,
    step: int,
    scaling: LossScaling,
    loss_function: Callable[[Tensor, Tensor, int, float], Tensor] = smoothed_kl,
) -> dict:
    """Optimizer step number `step` (from 1) over `micro_batches`: the step's history row.

    `loss_function` is `label_smoothing_loss` by its fast path (chapter 7 profiles both).
    """
    device = next(model.parameters()).device
    world = rank_and_world()[1]
    tokens = round(sum_over_processes([sum(b.n_tokens for b in micro_batches)], device)[0])
    lr = optimizer.param_groups[0]["lr"]  # the rate this step uses
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for index, batch in enumerate(micro_batches):
        with autocast(config.precision, device):
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        loss = loss_function(logits, batch.tgt_out, batch.pad, config.eps_ls)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"the loss is {loss.item()} at optimizer step {step}, micro-batch {index} "
                f"(learning rate {lr:.3g}): training stopped. Lower lr_factor, raise warmup, or "
                "try precision='fp32'; the last checkpoint is intact."
            )
        # Per-token mean over the whole step. With several processes DistributedDataParallel
        # averages their gradients, so each one scales its share up by their number.
        scaling.scale(loss / (tokens / world)).backward()
        total += loss.item()
    total = sum_over_processes([total], device)[0]
    if scaling.unscale(optimizer):  # always, but for a float16 step whose gradients overflowed
        optimizer.step()
    scheduler.step()
    return {"step": step, "loss": total / tokens, "lr": lr, "tokens": tokens}


# %% [markdown]
# `train` runs `train_step` until step `max_steps`, and does the bookkeeping around it. It starts
# from the checkpoint if there is one, or else seeds the random generators. The checkpoint holds
# the weights, the optimizer, the schedule, the random generators' states and the history, so a
# resumed run continues as if never stopped. `train` saves a checkpoint every `checkpoint_every`
# steps and at the end. It moves dropout when `p_drop_final` asks (section 4), and stops early
# when `on_step` returns True. Its lines about `rank` and `world` serve several processes, as
# chapter 8 explains.
#
# Each checkpoint carries both configurations. Loading one into a model or a run with a different
# configuration is refused with a message naming the fields that differ. Otherwise the run would
# fail later with a shape error or, worse, train on silently. The files are plain `torch.save`
# dictionaries, which `annotated/base/checkpoints.py` writes atomically and reads safely (its
# docstring says how). They are read onto the CPU first, so a run saved on a GPU resumes on a
# laptop, and the other way round.


# %%
def train(
    model: EncoderDecoder,
    batches: BatchSource,
    config: TrainConfig,
    checkpoint: str | Path | None = None,
    progress: bool = True,
    on_step: Callable[[dict], bool | None] | None = None,
    extra: dict | None = None,
) -> pd.DataFrame:
    """Train for config.max_steps optimizer steps (resuming from `checkpoint` if it exists).

    `on_step` is called with each step's history row; if it returns True, training stops there.
    `extra` entries are stored in every checkpoint too (a run keeps its decoding settings).
    `model` may be wrapped in DistributedDataParallel; `config.accumulate` then counts the
    micro-batches of one process. While it trains, the checkpoint's folder is locked
    (`files.folder_lock`): a second training into the same folder stops at once and says why.
    """
    device = next(model.parameters()).device
    core = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    rank, world = rank_and_world()
    writes = checkpoint is not None and rank == 0
    with folder_lock(Path(checkpoint).parent) if writes else contextlib.nullcontext():
        optimizer, scheduler = make_optimizer(core, config)
        scaling = LossScaling.for_training(config.precision, device)  # float16 only
        start, history = resume(checkpoint, core, optimizer, scheduler, config, scaling)
        model.train()
        bar = _progress_bar(start, config.max_steps, progress)
        for step in range(start, config.max_steps):
            started = time.perf_counter()
            if config.p_drop_final is not None:
                set_dropout(core, dropout_rate(step + 1, core.config.p_drop, config))
            micro_batches = [batch.to(device) for batch in batches(step)]
            if len(micro_batches) != config.accumulate:
                raise ValueError(
                    f"step {step + 1}: got {len(micro_batches)} micro-batches, "
                    f"TrainConfig.accumulate is {config.accumulate}"
                )
            row = train_step(model, micro_batches, optimizer, scheduler, config, step + 1, scaling)
            history.append({**row, "seconds": time.perf_counter() - started})
            bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.2e}", refresh=False)
            bar.update()  # counted once the step is done, so a run stopped early ends on its steps
            stop = bool(on_step(history[-1])) if on_step is not None else False
            if world > 1:  # all stop together, or the others would wait for the missing one
                stop = sum_over_processes([float(stop)], device)[0] > 0
            done = step + 1
            every = config.checkpoint_every
            if writes and (stop or done == config.max_steps or (every and done % every == 0)):
                state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
                state |= scaling.saved()  # float16's loss scale
                save_training(checkpoint, core, config, done, history, {**state, **(extra or {})})
            if stop:
                break
        bar.close()
    return pd.DataFrame(history, columns=["step", "loss", "lr", "tokens", "seconds"])


def _progress_bar(start: int, steps: int, show: bool) -> tqdm:
    """A calm progress bar on stderr (notebooks keep every update in their output).

    The training loop counts each step on it when the step is done. (Iterating the bar instead
    counts a step only when the next is asked for, so a run that stops early would end one short.)
    """
    return tqdm(
        initial=start,
        total=steps,
        disable=not show,
        file=sys.stderr,
        unit="step",
        mininterval=5.0,
    )


# %% [markdown]
# A first look, on nonsense data: a tiny model, random source and target sentences, 30 steps,
# two micro-batches per step. The loss falls only from "knows nothing" towards "knows the
# token frequencies", since there is nothing else to learn; chapter 4 gives it a real task.

# %% tags=["active-ipynb"]
# def random_pairs(step: int) -> list[Batch]:
#     generator = torch.Generator().manual_seed(step)
#     pairs = []
#     for _ in range(2):  # two micro-batches per optimizer step
#         src = torch.randint(3, 20, (8, 7), generator=generator)
#         words = torch.randint(3, 20, (8, 6), generator=generator)
#         tgt = torch.cat([torch.full((8, 1), specials.bos), words], 1)
#         pairs.append(Batch.build(src, tgt, specials.pad))
#     return pairs
#
#
# toy = make_model(ModelConfig(20, 20, N=1, d_model=32, d_ff=64, h=2))
# toy_config = TrainConfig(max_steps=30, warmup=10, accumulate=2)
# toy_history = train(toy, random_pairs, toy_config, progress=False)

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# # NBVAL_IGNORE_OUTPUT
# # (the loss depends on the hardware's arithmetic: bfloat16 where the CPU has it)
# print(
#     f"loss per token: step 1 {toy_history.loss.iloc[0]:.2f}, "
#     f"step 30 {toy_history.loss.iloc[-1]:.2f}"
# )

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# import math
#
# print("steps:", len(toy_history), " columns:", list(toy_history.columns))
# print("learning rates follow equation 3:", all(
#     math.isclose(lr, rate(s, 32, 10))
#     for s, lr in zip(toy_history.step, toy_history.lr, strict=True)
# ))

# %% [markdown]
# **What we have:** `Batch`, `rate` and `make_optimizer`, `label_smoothing_loss`, the dropout
# schedule and `FastDropout`, `train_step`, and `train` around it with `evaluate`, checkpoints and
# resumption. **Next**, chapter 4 trains a model that must copy its input, and decodes its first
# outputs.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# **3.1 Predict.** With $d_\text{model} = 512$ and 4,000 warmup steps, at which step is the learning
# rate of equation 3 largest, and what is it? What is it at step 16,000?
#
# <details><summary>Answer</summary>
#
# At step 4,000, where the two terms of the min are equal: $512^{-0.5} \cdot 4000^{-0.5} \approx
# 7.0 \times 10^{-4}$. At 16,000 the rate has fallen as $1/\sqrt{step}$ to half of that, about
# $3.5 \times 10^{-4}$.
#
# </details>
#
# **3.2 Implement** equation 3, `my_rate(step, d_model, warmup)`, for steps counted from 1.
#
# **3.3 Implement** the smoothed target distributions, `my_smoothed_targets(target, vocab, pad,
# eps_ls)`: for each target id, $1 - \epsilon_{ls}$ on it, $\epsilon_{ls}$ shared equally by the
# other tokens except the padding token, and an all-zero row where the target is the padding.
#
# **3.4 Modify (after chapter 4).** This one needs chapter 4's copy task, so come back to it once
# you have read chapter 4. There, `train_copy_model(setup)` trains the model that `setup`
# describes. Train the copy task with `eps_ls=0` and with `eps_ls=0.3`. Build each setup as a new
# dictionary, and leave `COPY_SETUP` itself alone:
#
# ```python
# import dataclasses
#
# from annotated.ch04_copy_task import COPY_SETUP, train_copy_model
#
#
# def with_smoothing(eps_ls):
#     train = dataclasses.replace(COPY_SETUP["train"], eps_ls=eps_ls)
#     return {**COPY_SETUP, "train": train}  # a new dictionary: COPY_SETUP is left as it was
#
#
# model_0, history_0, checks_0 = train_copy_model(with_smoothing(0.0))
# model_3, history_3, checks_3 = train_copy_model(with_smoothing(0.3))
# ```
#
# `COPY_SETUP` is a plain dictionary, and `train_copy_model()` uses it when given no setup.
# Assigning `COPY_SETUP["train"] = ...` would change it for every later call in the same kernel,
# chapter 4's own cells included. Which run reaches a lower training loss, which copies better,
# and why are the two questions different?
#
# <details><summary>Answer</summary>
#
# The two losses cannot be compared, which is the point of the question. Each is the KL divergence
# from its own run's targets, so each is 0 at best, but for different predictions. With `eps_ls=0`
# it reaches 0 only as the model grows ever surer of the right token: the loss falls towards 0,
# but the logits must grow without end. With `eps_ls=0.3` the best model puts 0.7 on the right
# token. It spreads the other 0.3 over the rest, which finite logits can match, all but the
# padding token's exact 0.
# Expect the `eps_ls=0` run to print the lower loss, and read nothing into it: a lower number in
# one run says nothing about the other. Which copies better is a question for the exact-match
# accuracy. On a task this easy, expect both to copy (almost) everything. Smoothing changes how
# sure the model is of the top token, not which token is on top. The loss measures how close the
# predictions are to a target distribution, not whether the top token is right. That is why the
# paper finds that smoothing hurts perplexity and yet helps BLEU (section 5.4).
#
# </details>
#
# The checks' cases and the mistakes they recognise are in `annotated/exercises/ch03_training.py`.

# %% tags=["active-ipynb"]
# from annotated.exercises import check  # runs your function against the book's
# from annotated.exercises.ch03_training import exercise_3_2, exercise_3_3  # cases and mistakes

# %% tags=["active-ipynb", "hide-input"]
# def my_rate(step, d_model, warmup):
#     ### BEGIN SOLUTION
#     return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
#     ### END SOLUTION
#
#
# check(exercise_3_2, my_rate)

# %% tags=["active-ipynb", "hide-input"]
# def my_smoothed_targets(target, vocab, pad, eps_ls):
#     ### BEGIN SOLUTION
#     q = torch.full((len(target), vocab), eps_ls / (vocab - 2))
#     q[torch.arange(len(target)), target] = 1.0 - eps_ls
#     q[:, pad] = 0.0
#     q[target == pad] = 0.0
#     return q
#     ### END SOLUTION
#
#
# check(exercise_3_3, my_smoothed_targets)
