# %% [markdown] slideshow={"slide_type": "slide"}
# # Chapter 0 — Preface
#
# *Paper: sections 1 and 2 (why the paper mattered), section 4 and Table 1 (why self-attention).*
#
# This book rebuilds the Transformer of Vaswani et al., *Attention Is All You Need* (NeurIPS 2017,
# arXiv 1706.03762). It goes from the paper's first equation to a model that translates German
# into English, and it trains that model for real. Each chapter puts the paper's ideas in plain
# words next to the code that implements them. It cites the paper's section numbers, so you can
# read the two side by side. And it ends each idea with something you can check: an assertion, a
# table or a chart.
#
# ## How to use this book
#
# | you want to | do this |
# |---|---|
# | read | open the HTML site: `make site` builds it in `_build/html/` from the saved notebooks; it works offline, from a laptop or any web server |
# | run and change the code | `make book` once, then `make lab`, and open a chapter in `notebooks/` |
# | check everything still works | `make test`: the unit tests, and every notebook re-executed with each cell's output compared with its saved one. Progress-bar times, memory addresses and thread counts are masked. Cells marked `NBVAL_IGNORE_OUTPUT` are not compared: timings, trained weights, and what depends on the machine. Chapters 7 to 9 train only their tiny `smoke` profile there, and their training cells are not compared |
# | reuse the code | `from annotated.ch02_model import make_model`: every chapter is an importable module |
#
# Each chapter exists twice. The source is `annotated/chNN_topic.py`, a plain Python file that
# Jupytext reads as a notebook. Its twin, `notebooks/chNN_topic.ipynb`, is generated from it and
# saved *with* its outputs. Edit the `.py`; `make notebooks` regenerates the notebook, and `make book`
# re-executes whichever chapters changed. Everything runs on a laptop CPU; a GPU is optional.
#
# ## The chapters
#
# | chapter | paper | what you build |
# |---|---|---|
# | 0 Preface | §1, §2, §4, Table 1 | why attention instead of recurrence, measured |
# | 1 Attention | §3.2 | scaled dot-product attention, masks, multi-head attention |
# | 2 Model | §3.1, §3.3–3.5, Table 3 | the full encoder-decoder, `make_model`, parameter counts |
# | 3 Training | §5 | batches and masks, the learning-rate schedule, label smoothing, the training loop |
# | 4 Copy task | — | a first model trained end to end, and greedy decoding |
# | 5 From text to batches | §5.1 | Multi30k sentences, spaCy tokens, word vocabularies, shared BPE subwords, batches by token count |
# | 6 Decoding and scoring | §6.1 | a key/value cache, beam search with a length penalty, the `Translator`, BLEU and chrF |
# | 7 Multi30k | §3.2, §5.2–5.4, §6.1 | German→English trained in an hour on a laptop CPU: the recipe, the run, checkpoint averaging, scores, attention maps |
# | 8 WMT 2014 | §3.4, §5, §6.1, Tables 2–3 | the paper's recipe end to end: shared embeddings, 25,000-token steps, multi-GPU training with `torchrun`, Table 2 |
# | 9 Table 3 at Multi30k scale | §6.2, Table 3 | every row of the paper's model variations trained on Multi30k, with a noise band from three seeds |
# | 10 Conclusion | §7, Tables 1–2 | what the book built, and where to go next |
# | 11 Appendix: Lab notebook | — | the history of the Multi30k runs: what was tried, and what it changed |
#
# Chapters build on each other: chapter 2 imports chapter 1's attention, chapter 3 imports
# chapter 2's model, and so on. Nothing is defined twice.

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

import pandas as pd
import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from annotated.ch01_attention import attention

# %% tags=["active-ipynb"]
# from annotated.figures import use_book_charts
#
# use_book_charts()

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Why the paper mattered (sections 1 and 2)
#
# In 2017 the best translation systems were *recurrent*. A recurrent network (an RNN, usually an
# LSTM) reads a sentence one token at a time. Its state after token $t$ is computed from its state
# after token $t-1$, and that chain is the problem. To process position 50 you must first finish
# positions 1 to 49. So the work along a sentence cannot be spread over the thousands of arithmetic
# units of a GPU. Only the work *across* the sentences of a batch can, and memory limits how large
# a batch may be. The chain also makes long-range dependencies hard to learn: information from the
# first word must survive every step in between to reach the last.
#
# Convolutional models (the Extended Neural GPU, ByteNet, ConvS2S) removed the chain: every
# position is computed at once. But a convolution sees only a small window. Relating two distant
# positions therefore takes a stack of layers, and the number of layers grows with the distance:
# linearly for ConvS2S, logarithmically for ByteNet.
#
# The Transformer's proposal is to use **attention alone**. In one layer, every position looks
# directly at every other position. Any two positions are then one step apart, and all positions
# are computed in parallel. Section 2 also names the price, which we paraphrase here as a loss of
# resolution. Each position receives an average of the positions it attends to, weighted by
# attention, and an average blurs detail. Multi-head attention (chapter 1) is the paper's remedy.
#
# ## Why self-attention (section 4, Table 1)
#
# Section 4 compares layer types on three counts, for a sequence of $n$ vectors of width $d$:
#
# * **complexity per layer**: how much arithmetic one layer does;
# * **sequential operations**: how many steps must happen one after another (the rest can run in parallel);
# * **maximum path length**: how many steps a signal needs to travel between the two most
#   distant positions; shorter paths make long-range dependencies easier to learn.
#
# Table 1 of the paper ($k$ is a convolution's kernel size, $r$ the neighbourhood of a
# restricted self-attention):

# %%
TABLE_1 = pd.DataFrame(
    [
        ("self-attention", "O(n² · d)", "O(1)", "O(1)"),
        ("recurrent", "O(n · d²)", "O(n)", "O(n)"),
        ("convolutional", "O(k · n · d²)", "O(1)", "O(log_k(n))"),
        ("self-attention (restricted)", "O(r · n · d)", "O(1)", "O(n/r)"),
    ],
    columns=["layer type", "complexity per layer", "sequential operations", "maximum path length"],
)

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# TABLE_1

# %% [markdown]
# Self-attention costs $n^2 d$: a dot product of width $d$ for every pair of positions. A recurrent
# layer costs $n d^2$: a $d \times d$ matrix product at each of $n$ steps. So self-attention is
# *cheaper* whenever $n < d$. That is the usual case in translation, where sentences have tens of
# tokens and the paper's $d = 512$. For very long sequences the $n^2$ term wins, which is why the
# paper also lists a restricted variant.
#
# ### Measuring it
#
# Big-O notation hides constants, so let us count. Below are two layers. One is a recurrent layer,
# $h_t = \tanh(x_t W + h_{t-1} U)$. The other is the self-attention of chapter 1, with queries, keys
# and values all equal to the input, as Table 1 assumes. We run each on one sequence and let
# PyTorch do the counting. Its `FlopCounterMode` counts the floating-point operations (FLOPs) of
# every matrix product, and a small dispatch hook counts the matrix products themselves. In the
# recurrent layer each product needs the previous one's result, so their number is the length of
# the sequential chain. The chart's drawing code is in `annotated/figures/ch00_preface.py`.


# %%
def recurrent_layer(x: Tensor, W: Tensor, U: Tensor) -> Tensor:
    """A plain RNN over (len, d) inputs: h_t = tanh(x_t W + h_{t-1} U), returns (len, d)."""
    projected = x @ W  # all inputs at once: this part is parallel
    h = torch.zeros(1, x.size(1), dtype=x.dtype)
    states = []
    for t in range(x.size(0)):  # this loop is the sequential chain
        h = torch.tanh(projected[t : t + 1] + h @ U)
        states.append(h)
    return torch.cat(states)


class _MatmulCounter(TorchDispatchMode):
    """Counts the matrix products PyTorch executes inside a `with` block."""

    PRODUCTS = {"mm", "bmm", "addmm", "baddbmm", "matmul"}

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in self.PRODUCTS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def count_operations(lengths: list[int], d: int = 512, seed: int = 0) -> pd.DataFrame:
    """FLOPs and matrix products of one recurrent and one self-attention layer per sequence
    length."""
    generator = torch.Generator().manual_seed(seed)
    W, U = (torch.randn(d, d, generator=generator) / d**0.5 for _ in range(2))
    rows = []
    for n in lengths:
        x = torch.randn(n, d, generator=generator)
        layers = {
            "recurrent": lambda x=x: recurrent_layer(x, W, U),
            "self-attention": lambda x=x: attention(x, x, x)[0],
        }
        for layer, run in layers.items():
            with FlopCounterMode(display=False) as flops, _MatmulCounter() as products:
                run()
            rows.append(
                {
                    "n": n,
                    "layer": layer,
                    "FLOPs": flops.get_total_flops(),
                    "matrix products in sequence": products.count,
                }
            )
    return pd.DataFrame(rows)


# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# from annotated.figures.ch00_preface import operations_chart  # its drawing code
#
# D = 512
# operations = count_operations([8, 32, 128, 512, 2048], d=D)
# operations_chart(operations, D)

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# operations.pivot(index="n", columns="layer", values=["FLOPs", "matrix products in sequence"])

# %% [markdown]
# Table 1 states orders of growth only, so it has no constants to compare with. The counts supply
# the constants, and they grow as the table's first two columns predict:
#
# * **Arithmetic.** The recurrent layer does $4 n d^2$ operations: $2nd^2$ for the input
#   projection and $2nd^2$ for the recurrence. Self-attention does $4 n^2 d$: $2n^2 d$ for the
#   scores $QK^\top$ and $2n^2 d$ for weighting the values. The curves cross at $n = d = 512$, and
#   below that self-attention is the cheaper operation. This count leaves out the four
#   projections that a real attention sub-layer wraps around the operation; exercise 0.1 counts
#   them.
# * **Matrix products in a row.** Self-attention runs **2** whatever the length: the scores, then
#   the weighted sum. The recurrent layer runs $n + 1$: one for all inputs at once, then one per
#   position, each waiting for the last.
#
# The second point is the one that changed the field. Two products over a whole batch of
# sentences keep a GPU busy; 2049 small products in a row do not. The same chain sets the maximum
# path length. Information from the first token of a recurrent layer's input reaches the last
# output only through $n - 1$ intermediate states, while self-attention connects the two directly.
#
# **Where the book goes next.** Chapter 1 builds attention, the operation measured here, from
# scratch, and explains the $\sqrt{d_k}$ in its formula.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# Every chapter ends with exercises like these. A "predict" question hides its answer until you
# open it. A "modify" exercise asks you to change one thing and explain what happens. A "discuss"
# question, in the last chapters, has more than one good answer, and one of them is folded beneath
# it. An "implement" exercise, in chapters 1 to 9, asks you to write a function the chapter built.
# A check, `check(exercise, your_function)`, then runs your function against the book's own and
# names the likely mistake when they differ. For a class, `make student` writes the notebooks
# with the solutions taken out.
#
# **0.1 Predict.** For sentences of $n = 50$ tokens and $d = 512$, which does more arithmetic,
# self-attention as measured above or the recurrent layer, and by roughly how much?
#
# <details><summary>Answer</summary>
#
# The recurrent layer, by about $d / n \approx 10$ times. Its cost grows as $n \cdot d^2$,
# self-attention's as $n^2 \cdot d$, and their ratio is $d / n$. Most sentences in translation are
# shorter than $d$, which is why the paper's section 4 calls self-attention cheaper in the usual
# case. That compares the operations, as Table 1 does. The Transformer's attention sub-layer also
# has four $d \times d$ projections ($W^Q$, $W^K$, $W^V$, $W^O$ of chapter 1). They add $8 n d^2$,
# twice the whole recurrent layer's $4 n d^2$. So the sub-layer does about 2.1 times the recurrent
# layer's arithmetic. What it gains in return is the parallelism of the second point.
#
# </details>
#
# **0.2 Predict.** How many matrix products does the recurrent layer need, one after another, for a
# sentence of 100 tokens? Self-attention?
#
# <details><summary>Answer</summary>
#
# 101 for the recurrent layer (one for all inputs, then one per position, each waiting for the one
# before). Self-attention needs 2, whatever the length.
#
# </details>
#
# **0.3 Modify.** Run `count_operations` with $d = 64$ instead of 512. Where do the two curves cross
# now, and what does that say about small models on long inputs?
#
# <details><summary>Answer</summary>
#
# At $n = d = 64$. With a small width, sentences longer than 64 tokens already make self-attention
# the more expensive layer in arithmetic. It still needs only two products in a row.
#
# </details>
