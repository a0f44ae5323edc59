# %% [markdown] slideshow={"slide_type": "slide"}
# # Chapter 1 — Attention
#
# *Paper: section 3.2 (3.2.1 scaled dot-product attention, 3.2.2 multi-head attention, 3.2.3 the
# three places the model uses it).*
#
# Everything else in the Transformer is plumbing around one operation. So we build that operation
# first, and look at it from several sides until it holds no mystery.
#
# Think of attention as a soft dictionary lookup. A dictionary holds keys and values, and a lookup
# takes a query, finds the key equal to it and returns that key's value. Attention does the same
# with vectors, except that nothing has to be *equal*. The query is compared with every key, and
# each comparison becomes a weight between 0 and 1. The weights add up to 1, and the answer is the
# weighted average of the values. A query that resembles one key much more than the others gets, in
# effect, that key's value. A query that resembles several keys a little gets a blend of their
# values.
#
# In this chapter:
#
# 1. equation 1, scaled dot-product attention, from scratch, and a small case you can check by hand;
# 2. why the scores are divided by $\sqrt{d_k}$, measured rather than asserted;
# 3. masks: how a position is stopped from looking at padding or at the future;
# 4. multi-head attention with the paper's $h = 8$, $d_k = d_v = 64$;
# 5. the three ways the model wires attention up, and a check of our code against PyTorch's own.
#
# Later chapters import the model's pieces defined here (`attention`, the masks,
# `MultiHeadAttention`): `from annotated.ch01_attention import attention`. The code that draws this
# chapter's charts lives in `annotated/figures/ch01_attention.py`, and the checks of its exercises
# in `annotated/exercises/ch01_attention.py`. The cells here only call them.

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
import math
from collections.abc import Iterable, Iterator
from typing import Protocol

import pandas as pd
import torch
from torch import Tensor, nn
from torch.nn import functional as F

# %% tags=["active-ipynb"]
# from annotated.figures import use_book_charts
# from annotated.figures.ch01_attention import (
#     all_queries_chart, decoder_masks_chart, heads_chart, one_query_chart, one_query_steps,
#     saturation_chart, vectors_chart,
# )
#
# use_book_charts()  # offline, byte-stable charts (see annotated/figures/__init__.py)
# _ = torch.manual_seed(0)  # every random draw below is repeatable

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. Scaled dot-product attention (section 3.2.1)
#
# Stack the queries as the rows of a matrix $Q$, one row per position that asks. Stack the keys as
# the rows of $K$ and the values as the rows of $V$, one row per position that answers. Queries and
# keys have $d_k$ components; values have $d_v$. The paper's equation 1 is
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V .$$
#
# Read it from the inside out:
#
# * $Q K^\top$ holds every query-key dot product at once: entry $(i, j)$ says how well query $i$
#   matches key $j$. For `len_q` queries and `len_k` keys it is a `len_q × len_k` matrix of
#   *scores*.
# * Dividing by $\sqrt{d_k}$ keeps the scores in a range where the softmax still has a useful
#   gradient (section 2 below measures why).
# * The softmax runs along each row, turning that query's scores into weights that are positive and
#   sum to 1.
# * Multiplying by $V$ gives each query the weighted average of the values.
#
# The paper compares this with *additive* attention, which scores a pair with a small one-layer
# network instead of a dot product. In theory the two cost about the same. In practice the dot
# product wins, in time and in memory, because the whole score matrix is then one matrix
# multiplication: the operation hardware does best.
#
# Our function also takes two optional arguments. A boolean `mask` is True where a query *may* look
# at a key (section 3 of this chapter). A `dropout` module, if given, is applied to the weights. The
# function returns the weights as well as the output, because we will want to draw them.


# %%
def attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    dropout: nn.Module | None = None,
) -> tuple[Tensor, Tensor]:
    """Equation 1: softmax(Q K^T / sqrt(d_k)) V, returning (output, attention weights)."""
    # query (..., len_q, d_k); key (..., len_k, d_k); value (..., len_k, d_v)
    if query.size(-1) != key.size(-1):
        raise ValueError(
            "query and key must have the same last dimension d_k, "
            f"got {query.size(-1)} and {key.size(-1)}"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            "key and value must have the same length (one value per key), "
            f"got {key.size(-2)} and {value.size(-2)}"
        )
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., len_q, len_k)
    if mask is not None:
        check_mask(mask, scores.shape)
        # The most negative finite number, not -inf: a row with nothing to look at then gives a
        # uniform softmax instead of 0/0 = NaN, and the masked_fill below zeroes it.
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # (..., len_q, len_k), each row sums to 1
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights  # (..., len_q, d_v), (..., len_q, len_k)


def check_mask(mask: Tensor, scores_shape: torch.Size) -> None:
    """Raise a ValueError unless `mask` is boolean and broadcasts to the scores' shape."""
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != scores_shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} (..., len_q, len_k)"
        )


# %% [markdown] slideshow={"slide_type": "slide"}
# ### A case small enough to check by hand
#
# Take three keys along the axes of a 2-d plane, values that are easy to recognise, and one query
# that points mostly along the first key. With $d_k = 2$ the scores are the dot products divided by
# $\sqrt 2$. The weights are their softmax, and the output is the weighted average of the values.

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# # float64 here and in every table below: the printed digits are then the same on any machine.
# keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
# values = torch.tensor([[10.0, 0.0], [0.0, 10.0], [-10.0, -10.0]], dtype=torch.float64)
# query = torch.tensor([[2.0, 1.0]], dtype=torch.float64)
# output, weights = attention(query, keys, values)
#
# scores = (query @ keys.T) / math.sqrt(2)
# by_hand = scores.exp() / scores.exp().sum()
# assert torch.allclose(weights, by_hand)
# pd.DataFrame(
#     {
#         "key": ["(1, 0)", "(0, 1)", "(-1, 0)"],
#         "score q·k/√2": scores[0].numpy().round(4),
#         "weight": weights[0].numpy().round(4),
#     }
# )

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# print("output =", output[0].numpy().round(4), "  (mostly the first value, a third of the second)")

# %% [markdown] slideshow={"slide_type": "slide"}
# ### Drawn as a flow
#
# Here is the same equation as a picture, in the spirit of the paper's Figure 2 (left). The book
# draws it from the code: `attention_flow` runs our `attention` on the tensors it is given, and
# labels each arrow with the shape that really flows along it. The cell gives it a batch of
# sentences with a mask, and more keys than queries, so that every shape on the arrows can be told
# apart.

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# from annotated.figures.ch01_attention import attention_flow
#
# attention_flow(
#     torch.zeros(2, 5, 64), torch.zeros(2, 7, 64), torch.zeros(2, 7, 64),
#     mask=torch.ones(2, 1, 7, dtype=torch.bool),
# )

# %% [markdown] slideshow={"slide_type": "slide"}
# ### One sentence, step by step
#
# Numbers make it concrete. Take the six words *a dog chases the red ball*. Give each word a query,
# a key and a value of only four numbers, written by hand so that each number means something. A key
# says what a word offers: being an animal, a thing, an action or an article. A query says what a
# word is looking for, along the same four lines. The verb *chases* looks for an animal and a thing,
# *red* looks for a thing, and *dog* and *ball* look for the action. A value is what a word hands
# over when it is attended to: here, just which content word it is (articles hand over nothing).
#
# In a trained model nobody chooses what the numbers mean. Learned matrices ($W^Q$, $W^K$, $W^V$)
# compute the three vectors from the word, as section 4 below shows (the paper's section 3.2.2).
# Chapter 7 repeats this walk with a trained model's own numbers.


# %%
WALK_WORDS = ["a", "dog", "chases", "the", "red", "ball"]
WALK_FEATURES = ["animal", "thing", "action", "article"]  # what the query and key numbers mean
WALK_CONTENT = ["dog", "ball", "chasing", "red"]  # what the value numbers mean


def walk_example() -> tuple[list[str], Tensor, Tensor, Tensor]:
    """The sentence of the walk and its hand-made queries, keys and values (float64, d_k = 4)."""
    query = [[0, 0, 0, 0], [0, 0, 2, 0], [2, 2, 0, 0], [0, 0, 0, 0], [0, 2, 0, 0], [0, 0, 2, 0]]
    key = [[0, 0, 0, 2], [2, 0, 0, 0], [0, 0, 2, 0], [0, 0, 0, 2], [0, 1, 0, 0], [0, 2, 0, 0]]
    value = [[0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]]
    as_tensor = lambda rows: torch.tensor(rows, dtype=torch.float64)  # noqa: E731
    return list(WALK_WORDS), as_tensor(query), as_tensor(key), as_tensor(value)


# %% tags=["active-ipynb"]
# words, Q, K, V = walk_example()
# vectors_chart(words, Q, K, V)

# %% [markdown]
# Follow the verb. The query of *chases* is $(2, 2, 0, 0)$: it wants an animal and a thing. Its dot
# product with a key measures how much of that the key offers. Dividing by $\sqrt{d_k} = 2$ gives
# the scores, and the softmax turns them into weights:
#
# | keys | dot product | score | weight |
# |---|---|---|---|
# | *dog*, *ball* | 4 | 2 | 0.36 each |
# | *red* (half a thing) | 2 | 1 | 0.13 |
# | *a*, *chases*, *the* | 0 | 0 | 0.05 each |
#
# Nothing gets a weight of exactly zero: the softmax never rules a key out, it only makes it small.
# The chart draws the same three steps for every key.

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# steps = one_query_steps(words, Q, K, V, WALK_WORDS.index("chases"))
# one_query_chart(steps, "chases")

# %% [markdown]
# The output is the weighted sum of the values: each value scaled by its weight, then added up.
# The table has one column per value number; the output of *chases* is each column's total.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# print(steps.to_string(index=False))
# print("output for 'chases' (the column totals):", steps.iloc[:, 4:].sum().round(2).tolist())

# %% [markdown]
# After this one step of attention, the verb's vector carries $(0.36, 0.36, 0.05, 0.13)$: mostly
# *dog* and *ball*, a little *red*. It now knows which two nouns it relates, which on its own it
# could not. It does not yet know which one does the chasing, since *dog* and *ball* count equally
# here. Roles come from word order, which attention alone cannot see; chapter 2 adds positions. The
# article *a* looks for nothing, since its query is zero. So all its scores are 0, its weights are
# all 1/6, and it receives the plain average of the values.
#
# All six queries are computed at once, as three matrix operations: the score matrix
# $QK^\top/\sqrt{d_k}$ (one row per query), its softmax row by row, and the product with $V$. Row 3
# of each matrix is the walk above.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# all_queries_chart(words, Q, K, V)


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Why divide by $\sqrt{d_k}$?
#
# Footnote 4 of the paper gives the reason in one line of statistics. Suppose the components of $q$
# and $k$ are independent, with mean 0 and variance 1. Then $q \cdot k = \sum_{i=1}^{d_k} q_i k_i$
# is a sum of $d_k$ independent terms, each of variance 1. So it has mean 0 and **variance $d_k$**.
# With $d_k = 64$ the scores typically land around $\pm 8$, and with $d_k = 512$ around $\pm 23$.
#
# Large scores are a problem for the softmax, not for the dot product. A softmax over scores that
# differ by tens puts almost all the weight on the largest one: it *saturates*. A saturated softmax
# has almost no gradient: nudging any score changes nothing, so the layer learns slowly or not at
# all. Dividing by $\sqrt{d_k}$ brings the variance back to 1, whatever $d_k$ is.
#
# Let us measure both halves of that argument instead of trusting it. First the variance:


# %%
def dot_product_spread(d_ks: list[int], samples: int = 20_000, seed: int = 0) -> pd.DataFrame:
    """Measure the variance of q·k for random unit-variance q, k, before and after scaling."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for d_k in d_ks:
        q = torch.randn(samples, d_k, generator=generator, dtype=torch.float64)
        k = torch.randn(samples, d_k, generator=generator, dtype=torch.float64)
        dots = (q * k).sum(dim=-1)
        rows.append(
            {
                "d_k": d_k,
                "variance of q·k (measured)": round(dots.var().item(), 2),
                "variance predicted (= d_k)": d_k,
                "variance of q·k / sqrt(d_k)": round((dots / math.sqrt(d_k)).var().item(), 3),
            }
        )
    return pd.DataFrame(rows)


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# dot_product_spread([4, 16, 64, 256, 1024])

# %% [markdown]
# The measured variance tracks $d_k$, and after scaling it sits near 1 for every $d_k$.
#
# Now the consequence. For each $d_k$ we draw one query and 16 random keys. We take the softmax of
# their scores, once with the scaling and once without, and record two things. The first is the
# largest weight, where 1.0 means the softmax has picked a single key. The second is the size of the
# softmax's gradient with respect to its input scores: how much learning signal flows back through
# it. We average both over many draws.


# %%
def softmax_saturation(
    d_ks: list[int], keys: int = 16, draws: int = 2_000, seed: int = 0
) -> pd.DataFrame:
    """Largest softmax weight and gradient size, with and without dividing the scores by
    sqrt(d_k)."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for d_k in d_ks:
        q = torch.randn(draws, 1, d_k, generator=generator, dtype=torch.float64)
        k = torch.randn(draws, keys, d_k, generator=generator, dtype=torch.float64)
        upstream = torch.randn(draws, 1, keys, generator=generator, dtype=torch.float64)
        raw = q @ k.transpose(-2, -1)  # (draws, 1, keys)
        for scaling, divisor in (("scaled by 1/sqrt(d_k)", math.sqrt(d_k)), ("unscaled", 1.0)):
            scores = (raw / divisor).requires_grad_()
            weights = scores.softmax(dim=-1)
            # The gradient a random upstream signal sends back to the scores.
            (grad,) = torch.autograd.grad((weights * upstream).sum(), scores)
            rows.append(
                {
                    "d_k": d_k,
                    "scores": scaling,
                    "largest weight": weights.max(dim=-1).values.mean().item(),
                    "gradient norm": grad.norm(dim=-1).mean().item(),
                }
            )
    return pd.DataFrame(rows)


# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# saturation = softmax_saturation([1, 4, 16, 64, 256, 1024])
# saturation_chart(saturation)

# %% [markdown]
# Unscaled, the largest weight climbs towards 1 as $d_k$ grows, and the gradient falls. Scaled, both
# curves stay flat: the softmax behaves the same at every width. The table below picks out the
# paper's $d_k = 64$. There an unscaled softmax already gives most of its weight to one key, and
# passes back to its scores about half the gradient of the scaled one. This is the reason
# section 3.2.1 gives for the scaling: large dot products push the softmax into a region where its
# gradient is tiny.
#
# The gradient column is taken at the softmax's input, the scores, because that is where saturation
# acts. It is not the gradient that reaches the projections $W^Q$ and $W^K$. Those sit before the
# division by $\sqrt{d_k}$, so the chain rule divides their gradient by $\sqrt{d_k}$ as well. That
# is a fixed factor, the same for every query at every step, and a larger step for those weights
# would make up for it. Chapter 3's optimizer, Adam, makes up for it by itself, since it sizes each
# parameter's step by that parameter's own recent gradients. Saturation cannot be made up for in
# this way: it varies from query to query, and a saturated query sends almost no gradient back to
# any of its scores. Keeping the softmax out of saturation is what the scaling is for.

# %% tags=["active-ipynb"]
# saturation[saturation.d_k == 64].round(3)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Masks: what a position may not look at
#
# Two kinds of position must be hidden from attention.
#
# * **Padding.** Sentences in a batch have different lengths, so the short ones are filled up with a
#   pad token. Pads carry no meaning, so no query should give them weight. A *padding mask* has
#   shape `(batch, 1, len_k)`: one row per sentence, broadcast over every query.
# * **The future.** The decoder produces the output one token at a time, each from the tokens before
#   it: the model is *auto-regressive* (the paper's section 3). In training we feed it the whole
#   target sentence at once, for speed, so we must stop position $i$ from peeking at positions
#   $j > i$. A *subsequent mask* is the lower-triangular matrix that allows $j \le i$ only. The
#   paper implements it (section 3.2.3) by setting the forbidden scores to $-\infty$ before the
#   softmax, so that their weights become exactly 0. We use the most negative finite number instead,
#   with the same effect.
#
# In this book a mask is a boolean tensor with **True where attention is allowed**. Masks combine
# with `&`: a decoder position may look at a key if the key is not padding *and* not in the future.


# %%
def subsequent_mask(size: int) -> Tensor:
    """(1, size, size) bool: position i may attend to positions j <= i only."""
    return torch.ones(1, size, size, dtype=torch.bool).tril()


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """(batch, 1, len) bool: True at real tokens, False at padding."""
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be (batch, len), got shape {tuple(tokens.shape)}")
    return (tokens != pad_id).unsqueeze(-2)


# %% [markdown]
# Here is a target sentence of six positions, the last two of them padding. The decoder's mask is
# the subsequent mask *and* the padding mask. The rows of the pad positions still allow the real
# tokens: a pad *query* computes something harmless, and chapter 3's loss ignores pad positions.

# %% tags=["active-ipynb"]
# PAD = 0
# target = torch.tensor([[5, 8, 3, 9, PAD, PAD]])
# words = ["<s>", "ein", "Hund", "läuft", "<pad>", "<pad>"]
# future = subsequent_mask(target.size(1))
# pads = padding_mask(target, PAD)
# decoder_masks_chart(future, pads, words)

# %% [markdown]
# Now attention with that mask: whatever the scores, the weights above the diagonal and in the pad
# columns are exactly zero. Each row still sums to 1 over the keys it may see.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# x = torch.randn(1, 6, 4, dtype=torch.float64)
# _, weights = attention(x, x, x, mask=future & pads)
# pd.DataFrame(weights[0].numpy().round(3), index=words, columns=words)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. Multi-head attention (section 3.2.2)
#
# One attention over the full $d_\text{model} = 512$-wide vectors gives each query one weighted
# average, and an average blurs. Suppose a word needs to look at its verb *and* at its article. A
# single set of weights then has to split its attention between them. The paper's answer is to run
# $h$ smaller attentions side by side, each in its own learned projection of the input, and to
# concatenate what they find:
#
# $$\mathrm{MultiHead}(Q, K, V) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\, W^O,
# \qquad \mathrm{head}_i = \mathrm{Attention}(Q W_i^Q,\ K W_i^K,\ V W_i^V)$$
#
# with $W_i^Q, W_i^K \in \mathbb{R}^{d_\text{model} \times d_k}$,
# $W_i^V \in \mathbb{R}^{d_\text{model} \times d_v}$ and
# $W^O \in \mathbb{R}^{h d_v \times d_\text{model}}$. The paper uses $h = 8$ heads and
# $d_k = d_v = d_\text{model} / h = 64$, so the eight heads together are exactly as wide as
# one full head. They cost about the same as single-head attention, in parameters and in
# multiplications, but the model gets eight separate weightings.
#
# Two implementation notes:
#
# * The $h$ matrices $W_i^Q$ side by side form one $d_\text{model} \times h d_k$ matrix, so one
#   `nn.Linear` computes all heads' queries in a single product. We then *reshape* its output into
#   `(batch, h, len, d_k)`, and our `attention` runs on all heads at once, because it only looks at
#   the last two dimensions. The same holds for keys and values.
# * The projections have biases, as in PyTorch's `nn.MultiheadAttention`; the equations above leave
#   them out, and they change nothing of substance. By default $d_k$ and $d_v$ are
#   $d_\text{model} / h$, but they can be set apart from it. Table 3's row (B) needs that; its row
#   (A) changes $h$ and keeps $d_k = d_v = d_\text{model} / h$.
#
# One argument is here for later. A decoder that writes one word at a time would project the keys
# and values of its whole prefix again at every step. Chapter 6 builds a `KeyValueCache` that keeps
# them. Passed as `cache`, it hands `forward` the keys and values of earlier steps, and projects
# only the new ones (with `project_keys_values`). Until then `cache` is `None` and can be ignored.
#
# And one switch for speed. When nobody asks for the weights (`keep_weights`, below) and there is no
# dropout on them, `forward` hands equation 1 to PyTorch's `F.scaled_dot_product_attention`. That
# function computes the same thing in one *fused kernel*: a single routine that does both products
# and the softmax together, and never stores the weights. Section 6 checks that the two routes
# agree. The fused route is not always the faster one, so `fused_attention_pays` chooses: the fused
# kernel on GPUs, and on a CPU in float32 and float64. In bfloat16 on a CPU, the 16-bit format
# chapter 7 trains in (chapter 3 introduces it), our `attention` runs instead: there the fused
# kernel was several times slower. Our `attention` is two plain matrix products, and some recent
# CPUs have a matrix unit that multiplies bfloat16 matrices very fast (Intel's AMX is one).
# Chapter 7 measures where a training step's time goes.


# %%
def fused_attention_pays(query: Tensor) -> bool:
    """Whether `F.scaled_dot_product_attention` beats `attention` for queries like these.

    On GPUs the fused kernels are PyTorch's fast path. On a CPU in float32, a forward and backward
    pass through the fused kernel at chapter 7's sentence lengths took less time than `attention`.
    In bfloat16 on a CPU it took several times as long: `attention` is two plain matrix products,
    which a CPU's bfloat16 matrix unit (Intel's AMX is one) computes very fast. The machine and
    PyTorch version it was measured with are in benchmarks/README.md, "Where the step's time went".
    """
    return query.device.type != "cpu" or query.dtype in (torch.float32, torch.float64)


class KeyValues(Protocol):
    """What a `cache` offers attention: the keys and values to attend over (see chapter 6)."""

    def keys_values(
        self, attention: MultiHeadAttention, key: Tensor, value: Tensor
    ) -> tuple[Tensor, Tensor]: ...


class MultiHeadAttention(nn.Module):
    """Multi-head attention (section 3.2.2): h scaled dot-product attentions in parallel."""

    def __init__(
        self,
        d_model: int,
        h: int,
        d_k: int | None = None,
        d_v: int | None = None,
        p_drop: float = 0.0,
    ) -> None:
        super().__init__()
        if d_model <= 0 or h <= 0:
            raise ValueError(f"d_model and h must be positive, got d_model={d_model}, h={h}")
        if (d_k is None or d_v is None) and d_model % h != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by h={h}: choose h dividing d_model, "
                "or give d_k and d_v explicitly"
            )
        self.d_model, self.h = d_model, h
        self.d_k = d_k if d_k is not None else d_model // h
        self.d_v = d_v if d_v is not None else d_model // h
        self.w_q = nn.Linear(d_model, h * self.d_k)  # all heads' W_i^Q side by side
        self.w_k = nn.Linear(d_model, h * self.d_k)
        self.w_v = nn.Linear(d_model, h * self.d_v)
        self.w_o = nn.Linear(h * self.d_v, d_model)  # W^O
        self.dropout = nn.Dropout(p_drop) if p_drop > 0 else None
        # Set keep_weights to True to have the last forward's weights in .weights (for drawing).
        self.keep_weights = False
        self.weights: Tensor | None = None

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: Tensor | None = None,
        cache: KeyValues | None = None,
    ) -> Tensor:
        """query (batch, len_q, d_model), key/value (batch, len_k, d_model)
        -> (batch, len_q, d_model).

        `cache` (chapter 6's incremental decoding) supplies the keys and values of earlier calls.
        """
        self._check_inputs(query, key, value, mask)
        batch, len_q = query.size(0), query.size(1)
        # Project, then split the last dimension into heads: (batch, h, len, d_k or d_v).
        q = self.w_q(query).view(batch, len_q, self.h, self.d_k).transpose(1, 2)
        if cache is None:
            k, v = self.project_keys_values(key, value)
        else:
            k, v = cache.keys_values(self, key, value)  # (batch, h, every position so far, d)
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head: (batch, 1, len_q or 1, len_k)
        if fused_attention_pays(q) and not self.keep_weights and self.dropout is None:
            # The same equation 1 in PyTorch's fused kernel, which keeps no weights (see below).
            if mask is not None:
                check_mask(mask, torch.Size((batch, self.h, len_q, k.size(-2))))
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            heads, weights = attention(q, k, v, mask, self.dropout)  # (batch, h, len_q, d_v)
            if self.keep_weights:
                self.weights = weights.detach()
        # Concat(head_1, ..., head_h): back to (batch, len_q, h * d_v), then W^O.
        concat = heads.transpose(1, 2).reshape(batch, len_q, self.h * self.d_v)
        return self.w_o(concat)

    def project_keys_values(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """key/value (batch, len_k, d_model)
        -> K (batch, h, len_k, d_k) and V (batch, h, len_k, d_v)."""
        batch, len_k = key.size(0), key.size(1)
        k = self.w_k(key).view(batch, len_k, self.h, self.d_k).transpose(1, 2)
        v = self.w_v(value).view(batch, len_k, self.h, self.d_v).transpose(1, 2)
        return k, v

    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            if tensor.dim() != 3 or tensor.size(-1) != self.d_model:
                raise ValueError(
                    f"{name} must be (batch, len, d_model={self.d_model}), "
                    f"got shape {tuple(tensor.shape)}"
                )
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                "key and value must have the same batch size and length, "
                f"got {tuple(key.shape)} and {tuple(value.shape)}"
            )
        if query.size(0) != key.size(0):
            raise ValueError(f"query and key batch sizes differ: {query.size(0)} and {key.size(0)}")
        if mask is not None and mask.dim() != 3:
            raise ValueError(
                "mask must be (batch, len_q or 1, len_k) with True = may attend, "
                f"got shape {tuple(mask.shape)}"
            )


# %% [markdown]
# Shapes are where multi-head attention code usually goes wrong. So let us follow one batch of two
# sentences through the paper's configuration. Each sentence has 10 queries, from a decoder, and 7
# keys, from an encoder.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# mha = MultiHeadAttention(d_model=512, h=8)
# mha.keep_weights = True
# decoder_states, encoder_states = torch.randn(2, 10, 512), torch.randn(2, 7, 512)
# out = mha(decoder_states, encoder_states, encoder_states)
# print("d_k = d_v =", mha.d_k)
# print("output          ", tuple(out.shape), "  (batch, len_q, d_model)")
# print("weights per head", tuple(mha.weights.shape), "  (batch, h, len_q, len_k)")
# print("parameters      ", sum(p.numel() for p in mha.parameters()), " = 4 × (512 × 512 + 512)")

# %% [markdown]
# The parameter count is that of four full $512 \times 512$ projections with their biases: what
# single-head attention would need. Splitting into heads costs no parameters.
#
# Here is the module drawn: `multi_head_flow` reads the sizes from its linear maps, so a module with
# other sizes gives another drawing.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# from annotated.figures.ch01_attention import multi_head_flow
#
# multi_head_flow(mha, len_q=10, len_k=7)  # the lengths the cell above ran

# %% [markdown]
# What several heads buy shows on the walk's sentence from section 1. A second head, with queries
# and keys of its own, can look for something else at the same time. The one drawn below looks at
# the previous word: each word attends to the word just before it. Heads of trained models often
# learn this pattern once positions are part of the input (chapter 2).
#
# We build this head by hand too. Its keys are the words' positions, one-hot, so $d_k = 6$. Each
# query asks for the position just before its own: it holds a 12 there and 0 elsewhere. That key
# then scores $12/\sqrt 6 \approx 4.9$ and every other key scores 0. The softmax turns these scores
# into the following weights:
#
# | queries | weight on the word before | on each other word |
# |---|---|---|
# | the last five words | 0.96 | 0.01 |
# | *a*, the first word | — | 0.17 |
#
# The first word's query is zero, so it spreads its weight evenly over all six words. Each head
# gives every word its own weighted sum of the values; the model concatenates the heads' sums, and
# $W^O$ mixes them.


# %%
def walk_heads() -> list[tuple[str, Tensor]]:
    """Two heads on the walk's sentence: (what the head does, its attention weights).

    The first is the walk's own head, which matches what a word looks for with what the others
    are. The second has other queries and keys: its keys are the words' positions (one-hot), and
    each query scores the position just before its own 12/sqrt(6), the rest 0, so it gives the
    previous word 0.96 of its weight (the first word, with a zero query, spreads it evenly).
    """
    words, query, key, value = walk_example()
    n = len(words)
    positions = torch.eye(n, dtype=torch.float64)
    previous = torch.zeros(n, n, dtype=torch.float64)
    for i in range(1, n):
        previous[i, i - 1] = 12.0
    _, first = attention(query, key, value)
    _, second = attention(previous, positions, value)
    return [("head 1: the walk's (by meaning)", first), ("head 2: the word before", second)]


# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# heads_chart(WALK_WORDS, walk_heads())

# %% [markdown]
# Later chapters draw the weights of a trained model's attention modules. The context manager
# `kept_weights` switches `keep_weights` on for the given modules while a block runs. It switches
# them off again afterwards, whatever happens inside the block, because the weights of a long
# sentence in every layer take memory.


# %%
@contextlib.contextmanager
def kept_weights(modules: Iterable[MultiHeadAttention]) -> Iterator[list[MultiHeadAttention]]:
    """Inside the block each module keeps its last weights in `.weights`; cleared on exit."""
    modules = list(modules)
    for module in modules:
        module.keep_weights = True
    try:
        yield modules
    finally:
        for module in modules:
            module.keep_weights, module.weights = False, None


# %% [markdown]
# ## 5. The three uses of attention (section 3.2.3)
#
# The same module is wired up in three ways. Only two things change: where $Q$, $K$ and $V$ come
# from, and which mask applies.
#
# | where | queries from | keys and values from | mask |
# |---|---|---|---|
# | encoder self-attention | the encoder layer below | the same | padding of the source |
# | decoder self-attention (masked) | the decoder layer below | the same | padding *and* future of the target |
# | encoder-decoder attention | the same decoder layer's masked self-attention sub-layer | the encoder's output | padding of the source |
#
# In self-attention, every position of a sequence looks at every allowed position of the same
# sequence. In encoder-decoder attention, every target position looks at the whole source sentence:
# this is how information crosses from the German to the English. Chapter 2 builds the layers that
# use these three wirings.
#
# ## 6. Checking ourselves against PyTorch
#
# PyTorch ships a fused kernel for equation 1, `torch.nn.functional.scaled_dot_product_attention`,
# and a complete multi-head module, `nn.MultiheadAttention`. Neither shares code with ours, so
# agreement is real evidence. Mind the masks: PyTorch's boolean `attn_mask` means what ours means
# (True = may attend), but `nn.MultiheadAttention`'s boolean masks mean the opposite. The test
# suite, `tests/test_ch01_attention.py`, checks many more cases; here is one of each, and our module
# through the fused kernel as well.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# import torch.nn.functional as F
#
# q, k, v = torch.randn(2, 8, 5, 64), torch.randn(2, 8, 7, 64), torch.randn(2, 8, 7, 64)
# keep = torch.rand(2, 1, 5, 7) > 0.3
# keep[..., 0] = True  # every query can see at least one key
# ours, _ = attention(q, k, v, mask=keep)
# theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
# gap = (ours - theirs).abs().max().item()
# assert gap < 1e-5, gap
# print("largest difference from F.scaled_dot_product_attention: below 1e-5")
#
# reference = nn.MultiheadAttention(512, 8, batch_first=True).eval()
# with torch.no_grad():
#     reference.in_proj_weight.copy_(torch.cat([mha.w_q.weight, mha.w_k.weight, mha.w_v.weight]))
#     reference.in_proj_bias.copy_(torch.cat([mha.w_q.bias, mha.w_k.bias, mha.w_v.bias]))
#     reference.out_proj.weight.copy_(mha.w_o.weight)
#     reference.out_proj.bias.copy_(mha.w_o.bias)
#     theirs, _ = reference(decoder_states, encoder_states, encoder_states)
#     ours = mha(decoder_states, encoder_states, encoder_states)
# gap = (ours - theirs).abs().max().item()
# assert gap < 1e-5, gap
# print("largest difference from nn.MultiheadAttention:         below 1e-5")
#
# mha.keep_weights = False  # no weights wanted: the module takes the fused kernel
# with torch.no_grad():
#     fused = mha(decoder_states, encoder_states, encoder_states)
# gap = (fused - ours).abs().max().item()
# assert gap < 1e-5, gap
# print("the module through the fused kernel and through `attention`: below 1e-5 apart")

# %% [markdown]
# The three comparisons need not be bit-for-bit equal: the kernels add the same products in other
# orders, and 32-bit floats round differently along the way. A 32-bit float keeps about seven
# significant digits, so gaps of about $10^{-7}$ are ordinary. Their exact size depends on the CPU
# or GPU, on how many threads run and on which kernel PyTorch picks. So the cell asserts a bound
# instead of printing the number: anything below $10^{-5}$ is rounding. A real mistake, such as a
# missing $\sqrt{d_k}$ or a mask read the wrong way round, shows up as differences of order 1.
#
# **What we have:** `attention`, `subsequent_mask`, `padding_mask` and `MultiHeadAttention`, each
# checked against an independent implementation. **Next**, chapter 2 surrounds multi-head attention
# with the rest of Figure 1 of the paper: feed-forward layers, residual connections, layer
# normalization, embeddings and positional encodings. It then assembles the full encoder-decoder.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# **1.1 Predict.** Every key is the same vector, and the values are the rows of a 4 × 2 matrix $V$.
# What does `attention` return for any query, and why does the query not matter?
#
# <details><summary>Answer</summary>
#
# The mean of the four value rows. Equal keys give every position the same score
# $q \cdot k / \sqrt{d_k}$, whatever $q$ is, and a softmax of equal numbers is uniform: each weight
# is 1/4. A query can only prefer a position whose key differs from the others.
#
# </details>
#
# **1.2 Implement** scaled dot-product attention, equation 1.
# `my_attention(query, key, value, mask=None)` returns $\mathrm{softmax}(QK^\top/\sqrt{d_k})\,V$;
# where `mask` is given, it is False at the positions a query may not attend to. The check compares
# it with `attention` above on random inputs, with and without masks, and names the likely mistake
# if it finds one.
#
# **1.3 Implement** `my_subsequent_mask(size)`: the `(1, size, size)` boolean mask that lets
# position $i$ attend to positions $j \le i$ only.
#
# **1.4 Modify.** Build `MultiHeadAttention(d_model=512, h=1)` and count its parameters. Then `h=8`,
# and `h=512`. Predict the three numbers before you run it, and explain.
#
# <details><summary>Answer</summary>
#
# The same for all three: 1,050,624, which is $4 \times (512 \times 512 + 512)$. The heads split the
# columns of each projection among themselves ($d_k = 512 / h$). So more heads cost no parameters,
# only a different grouping of the same products (section 3.2.2).
#
# </details>

# %% tags=["active-ipynb"]
# from annotated.exercises import check  # runs your function against the book's
# from annotated.exercises.ch01_attention import exercise_1_2, exercise_1_3

# %% tags=["active-ipynb", "hide-input"]
# def my_attention(query, key, value, mask=None):
#     ### BEGIN SOLUTION
#     scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
#     if mask is not None:
#         scores = scores.masked_fill(~mask, float("-inf"))
#     return scores.softmax(dim=-1) @ value
#     ### END SOLUTION
#
#
# check(exercise_1_2, my_attention)

# %% tags=["active-ipynb", "hide-input"]
# def my_subsequent_mask(size):
#     ### BEGIN SOLUTION
#     return torch.ones(1, size, size, dtype=torch.bool).tril()
#     ### END SOLUTION
#
#
# check(exercise_1_3, my_subsequent_mask)
