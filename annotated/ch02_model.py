# %% [markdown] slideshow={"slide_type": "slide"}
# # Chapter 2 — The model
#
# *Paper: sections 3.1 (encoder and decoder stacks), 3.3 (position-wise feed-forward networks),
# 3.4 (embeddings and softmax), 3.5 (positional encoding), and Table 3 (model sizes).*
#
# Chapter 1 gave us attention. This chapter builds everything around it, box by box, in the
# order of the paper's Figure 1. It ends with `make_model`, which returns a complete, untrained
# encoder-decoder with the paper's default sizes.
#
# The big picture first. The **encoder** reads the whole source sentence, and turns each source
# token into a vector that describes the token *in context*. The **decoder** writes the target
# sentence one token at a time. At each step it looks at what it has written so far (masked
# self-attention) and at the encoder's vectors (encoder-decoder attention). From these it
# predicts a probability for every word of the target vocabulary. Both are stacks of $N = 6$
# identical layers. Every layer's input and output have the same width, $d_\text{model} = 512$,
# so layers can be stacked, and wrapped in residual connections, freely.
#
# The code that draws this chapter's charts is in `annotated/figures/ch02_model.py`, and its
# exercises' checks are in `annotated/exercises/ch02_model.py`; the cells here only call them.

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

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import pandas as pd
import torch
from torch import Tensor, nn

from annotated.ch01_attention import KeyValues, MultiHeadAttention

# %% tags=["active-ipynb"]
# from annotated.figures import rounded, use_book_charts
# from annotated.figures.ch02_model import (
#     gradient_chart, gradient_norms_by_layer, positional_chart, similarity_chart,
# )
#
# use_book_charts()  # offline, byte-stable charts (see annotated/figures/__init__.py)
# _ = torch.manual_seed(0)  # every random draw below is repeatable

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. One configuration object
#
# Every size in the model comes from one frozen dataclass, `ModelConfig`. Its defaults are the
# sizes of the paper's base model (Table 3, first row). Being frozen, a configuration cannot
# change under a model built from it; `dataclasses.replace` makes a modified copy instead. The
# method `ModelConfig.big(...)` gives the "big" row of Table 3. An invalid combination fails
# here, at construction, with a message that says what to change, and not later as a shape
# error deep inside a forward pass.
#
# One default differs from the paper. The paper uses one weight matrix for both embeddings and
# the output layer (section 3.4, below), and Table 3's 65M parameters count it that way. That
# sharing needs one vocabulary for both languages, so here it is an option,
# `share_embeddings=True`, off by default.


# %%
@dataclass(frozen=True)
class ModelConfig:
    """Sizes of a Transformer; defaults are the paper's base model (Table 3)."""

    src_vocab: int  # number of source-language tokens, specials included
    tgt_vocab: int  # number of target-language tokens
    N: int = 6  # layers in the encoder, and again in the decoder (section 3.1)
    d_model: int = 512  # width of every layer's input and output (section 3.1)
    d_ff: int = 2048  # inner width of the feed-forward networks (section 3.3)
    h: int = 8  # attention heads (section 3.2.2)
    d_k: int | None = None  # query/key width per head; None means d_model // h
    d_v: int | None = None  # value width per head; None means d_model // h
    p_drop: float = 0.1  # residual and embedding dropout (section 5.4)
    p_attn_drop: float = 0.0  # dropout on attention weights; the paper does not use it
    norm_first: bool = False  # False: the paper's LayerNorm(x + Sublayer(x)); True: pre-norm
    share_embeddings: bool = False  # tie source/target embeddings and the output layer (3.4)
    tie_target_embeddings: bool = False  # tie only the target embedding and the output layer
    max_len: int = 5000  # positions the sinusoid table holds at first; longer inputs extend it
    learned_positions: bool = False  # True: a trained table of max_len positions (Table 3, row E)

    def __post_init__(self) -> None:
        for name in ("src_vocab", "tgt_vocab", "N", "d_model", "d_ff", "h", "max_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelConfig.{name} must be positive, got {getattr(self, name)}")
        if (self.d_k is None or self.d_v is None) and self.d_model % self.h:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by h={self.h}: pick h dividing d_model "
                "(the paper: d_model=512, h=8) or set d_k and d_v explicitly"
            )
        # A frozen dataclass can still fill in its own derived fields here, once.
        per_head = self.d_model // self.h
        object.__setattr__(self, "d_k", per_head if self.d_k is None else self.d_k)
        object.__setattr__(self, "d_v", per_head if self.d_v is None else self.d_v)
        if self.d_k <= 0 or self.d_v <= 0:
            raise ValueError(f"d_k and d_v must be positive, got d_k={self.d_k}, d_v={self.d_v}")
        for name in ("p_drop", "p_attn_drop"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"ModelConfig.{name} must be in [0, 1), got {getattr(self, name)}")
        if self.share_embeddings and self.src_vocab != self.tgt_vocab:
            raise ValueError(
                "share_embeddings needs one vocabulary for both languages "
                "(section 3.4 uses a shared BPE vocabulary), "
                f"got src_vocab={self.src_vocab} and tgt_vocab={self.tgt_vocab}"
            )

    @classmethod
    def big(cls, src_vocab: int, tgt_vocab: int, **changes) -> ModelConfig:
        """The "big" model of Table 3: d_model 1024, d_ff 4096, 16 heads, dropout 0.3."""
        sizes = {"d_model": 1024, "d_ff": 4096, "h": 16, "p_drop": 0.3} | changes
        return cls(src_vocab, tgt_vocab, **sizes)


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# ModelConfig(src_vocab=37000, tgt_vocab=37000)

# %% [markdown]
# The printout holds the paper's base sizes. `d_k` and `d_v` were left as `None`, and the
# configuration has filled them in as $d_\text{model} / h = 64$.
#
# ### The map of this chapter
#
# Here is where the chapter is going: the paper's Figure 1, drawn from the model this chapter
# builds, at the paper's base sizes. The function `architecture` (in
# `annotated/figures/ch02_model.py`) walks a built model's modules and draws what it finds. It
# draws one layer of each stack, with the count $N$ beside it, and each sub-layer with its
# residual path and normalization. On each arrow it writes the shape of the tensor, for $B$
# sentences of $S$ source and $T$ target tokens. Each section below draws the map again: the
# parts built so far in full, and the new one outlined in red.

# %% tags=["active-ipynb"]
# from annotated.figures.ch02_model import architecture, architecture_of
#
# paper = architecture_of(ModelConfig(src_vocab=37000, tgt_vocab=37000, share_embeddings=True))
# architecture(paper)


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Sub-layers, residual connections and layer normalization (section 3.1)
#
# Each encoder layer has two *sub-layers*: multi-head self-attention, then a feed-forward
# network. Each decoder layer has three: masked self-attention, attention over the encoder's
# output, and a feed-forward network. Around **every** sub-layer the paper puts the same
# wrapper: a residual connection followed by layer normalization,
#
# $$\text{output} = \mathrm{LayerNorm}\big(x + \mathrm{Dropout}(\mathrm{Sublayer}(x))\big),$$
#
# with dropout on the sub-layer's output before it is added (section 5.4, $P_{drop} = 0.1$).
#
# *Why a residual?* A *residual connection* adds a sub-layer's input to its output. The sum
# $x + \mathrm{Sublayer}(x)$ lets each sub-layer learn a correction to its input, instead of a
# whole new representation. It also gives gradients a direct path through the stack.
#
# *Why layer normalization?* Layer normalization (Ba et al., 2016, *Layer Normalization*) works
# on one position's vector $x$ of $d_\text{model}$ numbers. It subtracts their mean $\mu$ and
# divides by their standard deviation. Then two learned vectors, $\gamma$ and $\beta$, let the
# model rescale and shift each component:
#
# $$\mathrm{LayerNorm}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta,
# \qquad \mu = \frac{1}{d_\text{model}} \sum_i x_i, \quad
# \sigma^2 = \frac{1}{d_\text{model}} \sum_i (x_i - \mu)^2 .$$
#
# The statistics come from the vector itself, never from other sentences in the batch, so the
# layer behaves the same in training and in translation, for any batch size. Why normalize at
# all? In a deep residual stack each layer adds its output to a running sum, and the scale of
# that sum could drift from layer to layer. Normalizing hands every sub-layer inputs of the same
# scale, whatever the layers below did. The small $\epsilon = 10^{-5}$ keeps a constant vector
# from dividing by zero. Here is the layer written from the formula, with the parameter names
# PyTorch uses (`weight` for $\gamma$, `bias` for $\beta$):


# %%
class LayerNorm(nn.Module):
    """Layer normalization (Ba et al., 2016) over the last dimension, written from its formula."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma: starts as "no rescaling"
        self.bias = nn.Parameter(torch.zeros(d_model))  # beta: starts as "no shift"
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        """(..., d_model) -> (..., d_model): each vector to mean 0 and variance 1,
        then gamma, beta."""
        if x.size(-1) != self.weight.size(0):
            raise ValueError(
                f"LayerNorm({self.weight.size(0)}) got vectors of width {x.size(-1)}: "
                "its size must be the last dimension of the input"
            )
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        variance = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # biased: divided by d_model
        return self.weight * (x - mean) / torch.sqrt(variance + self.eps) + self.bias


# %% [markdown]
# PyTorch's `nn.LayerNorm` shares no code with ours. We give both the same random gain and shift
# (they load into each other, since the names match) and compare them in float64:

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# generator = torch.Generator().manual_seed(0)  # leaves the later cells' random draws alone
# ours, theirs = LayerNorm(512).double(), nn.LayerNorm(512).double()
# with torch.no_grad():
#     theirs.weight.normal_(generator=generator)
#     theirs.bias.normal_(generator=generator)
# ours.load_state_dict(theirs.state_dict())
# x = 3.0 + 5.0 * torch.randn(2, 10, 512, dtype=torch.float64, generator=generator)
# gap = (ours(x) - theirs(x)).abs().max().item()
# assert gap < 1e-12, gap
# print("largest difference from nn.LayerNorm: below 1e-12")

# %% [markdown]
# A gap below $10^{-12}$ is float64 rounding: the two layers compute the same function. The
# model itself uses `nn.LayerNorm`, which does the work in one fused kernel instead of several
# separate operations.
#
# Harvard NLP's Annotated Transformer (the 2018 post, and its 2022 revision alike) writes its
# own layer norm, and it computes a slightly different function. It takes the standard
# deviation with $d_\text{model} - 1$ in the denominator, and adds $\epsilon$ to that deviation,
# outside the square root.
#
# ### Post-norm (the paper) and pre-norm (an option)
#
# The wrapper above normalizes *after* the residual sum, an arrangement called **post-norm**.
# Many later implementations normalize *before* the sub-layer instead, and leave the sum itself
# alone: $x + \mathrm{Dropout}(\mathrm{Sublayer}(\mathrm{LayerNorm}(x)))$. They then add one
# final LayerNorm at the top of each stack. This arrangement is **pre-norm**.
# Pre-norm is known to train more stably without a careful *warmup*, a learning rate that starts
# small and grows over the first steps (chapter 3). Post-norm is what the paper describes and
# measured.
#
# Here the book differs from the Annotated Transformer, which is pre-norm (a docstring in its
# code says the norm comes first to keep the code simple). This book follows the paper:
# post-norm is the default, and pre-norm is an option, `norm_first=True`. Section 7 shows what
# the choice changes: the gradients that each arrangement sends to each layer of a new model.
# Chapters 8 and 9 train with pre-norm, and say why.


# %%
class SublayerConnection(nn.Module):
    """Residual connection and layer norm around one sub-layer: post-norm (paper) or pre-norm."""

    def __init__(self, d_model: int, p_drop: float, norm_first: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(p_drop)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer) -> Tensor:
        """x (batch, len, d_model) -> (batch, len, d_model); `sublayer` maps x to the same shape."""
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


# %% [markdown]
# In the map, the wrapper is every "Add & Norm" box, with the path that carries $x$ around its
# sub-layer. The attention boxes are chapter 1's `MultiHeadAttention`.

# %% tags=["active-ipynb"]
# architecture(paper, built=["attention", "residual"], highlight=["residual"])


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. The position-wise feed-forward network (section 3.3)
#
# Attention mixes information *between* positions; after it, each position is processed on its
# own by the same small two-layer network, equation 2:
#
# $$\mathrm{FFN}(x) = \max(0,\ x W_1 + b_1)\, W_2 + b_2 .$$
#
# It widens each vector from $d_\text{model} = 512$ to $d_{ff} = 2048$, applies a ReLU, and
# narrows it back. "Position-wise" means that every position uses the same weights; each layer
# has its own. The paper notes that this is the same as two convolutions with kernel size 1.
# About two thirds of each encoder layer's parameters live here.


# %%
class PositionwiseFeedForward(nn.Module):
    """Equation 2: FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """(batch, len, d_model) -> (batch, len, d_ff) -> (batch, len, d_model)."""
        return self.w_2(self.w_1(x).relu())


# %% [markdown]
# With it, every box inside the two stacks exists:

# %% tags=["active-ipynb"]
# architecture(paper, built=["attention", "residual", "feed_forward"], highlight=["feed_forward"])


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. Encoder and decoder layers, and their stacks (section 3.1)
#
# With the wrapper and the two kinds of sub-layer in hand, a layer is a few lines. The lambdas
# fix the other arguments of each attention, so the wrapper sees a function of $x$ alone. Note
# the decoder's second attention: its queries come from the decoder ($x$), and its keys and
# values from the encoder's output (`memory`), as chapter 1's table of the three uses said.


# %%
class EncoderLayer(nn.Module):
    """Self-attention, then feed-forward, each inside a SublayerConnection."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = _attention_for(config)
        self.feed_forward = PositionwiseFeedForward(config.d_model, config.d_ff)
        self.sublayers = nn.ModuleList(
            SublayerConnection(config.d_model, config.p_drop, config.norm_first) for _ in range(2)
        )

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """x (batch, src_len, d_model), src_mask (batch, 1, src_len)
        -> (batch, src_len, d_model)."""
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.sublayers[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, then feed-forward."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = _attention_for(config)
        self.src_attn = _attention_for(config)
        self.feed_forward = PositionwiseFeedForward(config.d_model, config.d_ff)
        self.sublayers = nn.ModuleList(
            SublayerConnection(config.d_model, config.p_drop, config.norm_first) for _ in range(3)
        )

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        tgt_mask: Tensor | None,
        cache: tuple[KeyValues, KeyValues] | None = None,
    ) -> Tensor:
        """x (batch, tgt_len, d_model), memory (batch, src_len, d_model)
        -> (batch, tgt_len, d_model).

        `cache` (chapter 6): the keys and values of this layer's two attentions from earlier steps.
        """
        own, source = cache if cache is not None else (None, None)
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, tgt_mask, own))
        x = self.sublayers[1](x, lambda y: self.src_attn(y, memory, memory, src_mask, source))
        return self.sublayers[2](x, self.feed_forward)


def _attention_for(config: ModelConfig) -> MultiHeadAttention:
    return MultiHeadAttention(config.d_model, config.h, config.d_k, config.d_v, config.p_attn_drop)


class DecoderState(Protocol):
    """What `EncoderDecoder.decode` needs of a cache (chapter 6's `DecoderCache`)."""

    length: int  # target positions already cached

    def __getitem__(self, layer: int) -> tuple[KeyValues, KeyValues]: ...


class Encoder(nn.Module):
    """N encoder layers; with pre-norm, a final LayerNorm (post-norm layers end normalized
    already)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.N))
        self.norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class Decoder(nn.Module):
    """N decoder layers, each attending to the same encoder output; final LayerNorm with
    pre-norm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.N))
        self.norm = nn.LayerNorm(config.d_model) if config.norm_first else nn.Identity()

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        tgt_mask: Tensor | None,
        cache: Sequence[tuple[KeyValues, KeyValues]] | None = None,
    ) -> Tensor:
        for index, layer in enumerate(self.layers):
            x = layer(x, memory, src_mask, tgt_mask, None if cache is None else cache[index])
        return self.norm(x)


# %% [markdown]
# The stacks, and the encoder's output (`memory`) that every decoder layer's second attention
# reads:

# %% tags=["active-ipynb"]
# architecture(paper, built=["attention", "residual", "feed_forward", "stacks"], highlight=["stacks"])


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. Embeddings and the output layer (section 3.4)
#
# Tokens enter as integer ids, and a learned embedding table turns each id into a vector of width
# $d_\text{model}$. The paper then multiplies those vectors by $\sqrt{d_\text{model}}$
# ($\approx 22.6$). The paper gives no reason. What the factor does is a matter of scale.
#
# The table starts small, because `make_model` (section 7) initializes it the Xavier way: each
# entry is drawn from a range that narrows as the matrix grows. An embedding table has one row
# per word of the vocabulary, so at the paper's sizes a word's vector is tiny. The positional
# encodings added next are sines and cosines, far larger. The factor lifts the words more than
# twenty-fold, from a whisper under the positions to a clear signal. They are still smaller
# than the positions at the start (section 6 measures both), and training then sets the
# balance. With shared weights the same matrix is also the output layer, where small entries
# suit, so the factor lets one matrix serve both ends.
#
# At the other end, a linear layer maps the decoder's output to one score per target word, its
# *logit*, and a softmax over the logits gives the next-token distribution. Our model returns the
# logits and leaves the softmax to the loss (chapter 3). That is faster, and numerically safer
# than taking the logarithm of a probability that has rounded to 0.
#
# **Weight sharing.** The paper uses one matrix for three jobs: the source embedding, the target
# embedding and the output layer. That needs one vocabulary for both languages. The paper's
# vocabulary of about 37000 tokens is indeed shared between English and German: it is made of
# byte-pair pieces, subwords that both languages use (chapter 5 builds them). Sharing saves two
# $V \times d_\text{model}$ matrices, about 38M parameters for the base model. It also makes
# sense: a word's input vector and the direction that predicts it are the same thing, seen from
# the two ends. Here sharing is an option, `share_embeddings=True`; with a separate vocabulary
# for each language, like chapter 5's word vocabularies, the source cannot share. The target
# embedding and the output layer still can: `tie_target_embeddings=True`.


# %%
class Embeddings(nn.Module):
    """Token ids -> vectors, scaled by sqrt(d_model) (section 3.4)."""

    def __init__(self, vocab: int, d_model: int) -> None:
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens: Tensor) -> Tensor:
        """(batch, len) int -> (batch, len, d_model)."""
        return self.lut(tokens) * self.scale


# %% [markdown]
# The ends of the model: the embeddings below and the output layer above, with the dashed lines
# joining the three roles of the one shared matrix.

# %% tags=["active-ipynb"]
# architecture(
#     paper,
#     built=["attention", "residual", "feed_forward", "stacks", "embeddings", "output"],
#     highlight=["embeddings", "output"],
# )


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. Positional encoding (section 3.5)
#
# Attention itself is blind to order: shuffle the keys and values together, and every query
# gets the same answer. The model can learn word order only because something that depends on
# the position is added to each embedding, at the bottom of both stacks. The paper uses fixed
# sinusoids:
#
# $$PE_{(pos,\,2i)} = \sin\!\big(pos / 10000^{2i/d_\text{model}}\big), \qquad
#   PE_{(pos,\,2i+1)} = \cos\!\big(pos / 10000^{2i/d_\text{model}}\big).$$
#
# Each pair of dimensions $(2i, 2i+1)$ holds a sine and a cosine of the position at one
# frequency. The wavelengths form a geometric progression, from $2\pi$ in the first pair,
# which changes quickly, to $10000 \cdot 2\pi$ in the last, which hardly changes over a
# sentence. Read along a row, the encoding is like the hands of many clocks running at
# different speeds. Dropout follows the encoding (section 5.4).
#
# The paper also tried learned position embeddings, and found nearly identical results (Table 3,
# row E). Sinusoids need no training, and unlike a learned table they are defined for every
# position. Section 3.5 hopes this lets the model read sentences longer than any it trained
# on. Our module keeps a precomputed table of `ModelConfig.max_len` rows, for speed, and
# computes more rows when a longer input arrives, so the model accepts any length. The end of
# this section looks at the encodings past the table. The learned alternative is here too, as
# `LearnedPositions`: a trained table of `max_len` vectors, chosen with
# `ModelConfig.learned_positions`, for chapter 9 to measure.


# %%
def sinusoidal_table(max_len: int, d_model: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """(max_len, d_model) positional encodings of section 3.5 (computed in float64)."""
    if d_model % 2:
        raise ValueError(
            f"the sinusoidal encoding pairs dimensions, so d_model must be even, got {d_model}"
        )
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    # One frequency per (sin, cos) pair of dimensions: (d_model/2,)
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table.to(dtype)


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encodings to its input, then applies dropout; any length."""

    def __init__(self, d_model: int, p_drop: float, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p_drop)
        # A buffer moves with .to(device) but is not trained; not persistent, since it is
        # recomputed.
        self.register_buffer("table", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """(batch, len, d_model) -> (batch, len, d_model); x's first position is position
        `start`."""
        end = start + x.size(1)
        if end > self.table.size(0):
            # Past the table: compute a longer one (doubling, so that decoding one position at a
            # time does not recompute it at every step). Its first rows are the old table's.
            rows = max(end, 2 * self.table.size(0))
            self.table = sinusoidal_table(rows, self.table.size(1)).to(self.table)
        return self.dropout(x + self.table[start:end])


class LearnedPositions(nn.Module):
    """Table 3's row E: a trained vector per position, added to the input, then dropout."""

    def __init__(self, d_model: int, p_drop: float, max_len: int) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p_drop)
        self.table = nn.Embedding(max_len, d_model)  # (max_len, d_model), trained like any weight

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """(batch, len, d_model) -> (batch, len, d_model); x's first position is position
        `start`."""
        end = start + x.size(1)
        if end > self.table.num_embeddings:
            raise ValueError(
                f"position {end - 1} is past the {self.table.num_embeddings} learned positions: "
                "a learned table has no row for it. Build the model with a larger max_len "
                "(and train it), or use the sinusoids, which are defined for every position"
            )
        return self.dropout(x + self.table.weight[start:end])


# %% [markdown]
# The chart shows the first 100 positions (rows) and 64 dimensions (columns). The columns on
# the left oscillate fast, and those on the right drift slowly. No two rows are alike, so every
# position has a signature of its own.

# %% tags=["active-ipynb"]
# positional_chart()

# %% [markdown]
# Now section 5's question, measured at the paper's sizes. How large is a word's vector, as
# `make_model` initializes it, next to the encoding of its position? We measure both as a root
# mean square (RMS) of entries: over the whole embedding table for the words, and over the first
# 512 positions for the encodings.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# rms = lambda x: float(x.pow(2).mean().sqrt())  # noqa: E731
# lut = nn.init.xavier_uniform_(torch.empty(37000, 512), generator=torch.Generator().manual_seed(0))
# word, scaled = rms(lut), rms(lut) * Embeddings(1, 512).scale  # as make_model initializes it
# position = rms(PositionalEncoding(512, 0.0).table[:512])
# print(f"a word's vector: RMS {word:.4f}, times sqrt(512): {scaled:.2f}")
# print(f"a position's encoding: RMS {position:.2f}, {position / scaled:.0f} times the scaled word")

# %% [markdown]
# Unscaled, a word's vector would be almost invisible beside its position's encoding. Even
# after the factor $\sqrt{512}$, the position is still the larger of the two, four times the
# word, as the second line says. So at the start the first layer sees mostly where a token is,
# and a little of which token it is.

# %% [markdown] slideshow={"slide_type": "slide"}
# ### Checking the claim that $PE_{pos+k}$ is a linear function of $PE_{pos}$
#
# The paper chose sinusoids because, it says, they should make it easy to attend by *relative*
# position. The reason is that for any fixed offset $k$, $PE_{pos+k}$ is a linear function of
# $PE_{pos}$. The angle-addition formulas show why. For one frequency $\omega$,
#
# $$\begin{pmatrix}\sin\omega(pos+k)\\ \cos\omega(pos+k)\end{pmatrix}
#   = \begin{pmatrix}\cos\omega k & \sin\omega k\\ -\sin\omega k & \cos\omega k\end{pmatrix}
#     \begin{pmatrix}\sin\omega\, pos\\ \cos\omega\, pos\end{pmatrix},$$
#
# a rotation that depends on $k$ but not on $pos$. Stack one such $2\times 2$ rotation per
# frequency, and you get a matrix $M_k$ with $PE_{pos+k} = M_k\, PE_{pos}$ for **every**
# position.
#
# We check this in two ways. The first builds $M_k$ from the formula. The second *fits* an $M_k$
# by least squares to the even positions $0, 2, \dots, 19998$, without the formula, and tests it
# on the odd positions, which the fit never saw. The fit needs a long stretch of positions: the
# slowest sinusoids barely move over a few hundred of them, and only a long stretch pins every
# rotation down.


# %%
def rotation_for_offset(k: int, d_model: int) -> Tensor:
    """The block-diagonal matrix M_k with PE(pos + k) = M_k PE(pos), from the angle-addition
    formulas."""
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    cos, sin = torch.cos(k * frequency), torch.sin(k * frequency)
    even, odd = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    M[even, even], M[even, odd] = cos, sin
    M[odd, even], M[odd, odd] = -sin, cos
    return M


def linear_offset_check(offsets: list[int], d_model: int = 64, span: int = 20_000) -> pd.DataFrame:
    """Largest error of PE(pos+k) = M_k PE(pos), with M_k from the formula and fitted by least
    squares."""
    # Float64 throughout, so the errors show the mathematics rather than float32 rounding.
    table = sinusoidal_table(span + max(offsets), d_model, torch.float64)
    fit, held_out = torch.arange(0, span, 2), torch.arange(1, span, 2)  # even / odd positions
    rows = []
    for k in offsets:
        analytic = rotation_for_offset(k, d_model)
        error_formula = (table[k : span + k] - table[:span] @ analytic.T).abs().max().item()
        # Solve table[fit] @ X = table[fit + k] for X = M_k^T, then test on positions never fitted.
        fitted_t = torch.linalg.lstsq(table[fit], table[fit + k]).solution
        error_fit = (table[held_out + k] - table[held_out] @ fitted_t).abs().max().item()
        rows.append(
            {
                "offset k": k,
                "max error, M_k from the formula": _below(error_formula, 1e-9),
                "max error, M_k fitted (held-out positions)": _below(error_fit, 1e-9),
            }
        )
    return pd.DataFrame(rows)


def _below(error: float, bound: float) -> str:
    """'below 1e-09' when the error is rounding noise, else the error itself (a real failure)."""
    # The noise's exact size depends on the CPU and the linear-algebra library, so only the bound
    # is printed: the same text on every machine.
    return f"below {bound:.0e}" if error < bound else f"{error:.1e} (too large!)"


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# linear_offset_check([1, 5, 20, 100])

# %% [markdown]
# Both errors are at the level of double-precision rounding, so a fixed linear map really does
# shift every position by $k$. The exact error, about $10^{-12}$, depends on the CPU and its
# linear-algebra library, so the table prints only the bound. Whether a trained model exploits
# this is another matter, but the mechanism is there for attention to use.
#
# ### Past the end of the table
#
# A model trained on sentences of at most a few dozen words will one day be handed a longer one.
# Learned position embeddings (Table 3, row E) have no row for a position never trained, so such
# a model must refuse or truncate. Sinusoids have a value at every position, which is why our
# `PositionalEncoding` simply computes more rows when it needs them. But is an encoding at
# position 50,000 anything the model could make sense of?
#
# The rotation above says what stays the same. The dot product of two encodings,
# $PE_{p} \cdot PE_{p+k} = \sum_i \cos(\omega_i k)$, depends on the distance $k$ and not on
# where the pair sits. Take the encodings at positions 10 and 13, three apart. Their dot
# product is the same as that of the pair at positions 50,000 and 50,003.
#
# A trained head, though, first passes positions through its learned $W^Q$ and $W^K$. It keeps
# this property exactly only if those matrices respect the rotations, and nothing in training
# forces that. So this is what the encoding offers a head, not a promise about what every head
# does with it. We measure the dot products for pairs far beyond the table this module
# precomputes. (The table holds 5,000 rows by default; the book's runs set `max_len` to 512.)


# %%
def position_similarity(
    anchors: Sequence[int], offsets: range = range(-40, 41), d_model: int = 64
) -> pd.DataFrame:
    """PE(p) . PE(p + k), divided by d_model / 2, for each anchor position p and offset k."""
    if min(anchors) + min(offsets) < 0:
        raise ValueError("every anchor plus the most negative offset must be a position (>= 0)")
    rows = []
    for p in anchors:
        # float64: at position 50,000 the float32 rounding of the angles alone would blur the curve.
        table = sinusoidal_table(p + max(offsets) + 1, d_model, dtype=torch.float64)
        for k in offsets:
            dot = (table[p] @ table[p + k]).item() / (d_model / 2)
            rows.append({"anchor p": f"p = {p:,}", "offset k": k, "similarity": dot})
    return pd.DataFrame(rows)


# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# similarity = position_similarity([50, 600, 5_000, 50_000])
# spread = similarity.groupby("offset k")["similarity"].agg(lambda s: s.max() - s.min()).max()
# assert spread < 1e-9, spread
# print("largest difference between the four curves: below 1e-9")
# similarity_chart(similarity)

# %% [markdown]
# The four curves lie on top of one another; the chart draws them dashed so that you can see
# there are four. So nothing in the encoding itself stops a model from reading longer inputs.
# And `make_model` accepts them: a model built with `max_len=4` runs on a sentence of 12 tokens
# (the tests check it).
#
# What the encoding cannot promise is that the *trained weights* carry over. A model has also
# learned from the absolute encodings it saw. The slow sinusoids (the right half of the heatmap)
# take values at position 500 that no sentence of 40 words ever produced. In practice,
# Transformers with sinusoids degrade on inputs much longer than their training data. Later
# work moved the position information into the attention scores themselves, to do better:
# relative position representations, and rotary embeddings.
#
# The book's translation filter, `python -m annotated.translate` (chapter 6; `--help` lists its
# options), accepts long sentences up to a limit that you can raise, `--max-tokens`. It leaves a
# longer line untranslated, with a warning, rather than spend minutes on it.
#
# With the positions, the map is complete:

# %% tags=["active-ipynb"]
# architecture(paper, highlight=["positions"])

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 7. The full model
#
# Now the assembly, following Figure 1 from bottom to top. Embed and position-encode the source,
# and run the encoder. Embed and position-encode the target, and run the decoder, with the
# encoder's output as `memory`. Project to logits. `encode` and `decode` are separate methods,
# because a translation runs the encoder once and the decoder once per generated token
# (chapter 4).


# %%
class EncoderDecoder(nn.Module):
    """The Transformer of Figure 1: embeddings, encoder, decoder and the output projection."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        positions = LearnedPositions if config.learned_positions else PositionalEncoding
        self.src_embed = nn.Sequential(
            Embeddings(config.src_vocab, config.d_model),
            positions(config.d_model, config.p_drop, config.max_len),
        )
        self.tgt_embed = nn.Sequential(
            Embeddings(config.tgt_vocab, config.d_model),
            positions(config.d_model, config.p_drop, config.max_len),
        )
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        self.generator = nn.Linear(config.d_model, config.tgt_vocab)  # the pre-softmax projection

    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """src (batch, src_len) ids -> memory (batch, src_len, d_model)."""
        return self.encoder(self.src_embed(src), src_mask)

    def decode(
        self,
        memory: Tensor,
        src_mask: Tensor,
        tgt: Tensor,
        tgt_mask: Tensor | None,
        cache: DecoderState | None = None,
    ) -> Tensor:
        """tgt (batch, tgt_len) ids -> decoder states (batch, tgt_len, d_model).

        With a `cache` (chapter 6's `DecoderCache`), tgt holds only the positions after the
        `cache.length` ones already cached, and they are numbered from there.
        """
        embed, position = self.tgt_embed
        start = 0 if cache is None else cache.length
        return self.decoder(position(embed(tgt), start), memory, src_mask, tgt_mask, cache)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
        """Logits (batch, tgt_len, tgt_vocab) for the token after each target position."""
        if src.size(0) != tgt.size(0):
            raise ValueError(f"src and tgt batch sizes differ: {src.size(0)} and {tgt.size(0)}")
        return self.generator(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))


def make_model(config: ModelConfig) -> EncoderDecoder:
    """Build a Transformer from `config`, initialized with Xavier-uniform weight matrices."""
    model = EncoderDecoder(config)
    # The paper does not state an initialization; Xavier/Glorot uniform for every matrix (and
    # PyTorch's defaults for biases and norms) is the common choice and trains well.
    for parameter in model.parameters():
        if parameter.dim() > 1:
            nn.init.xavier_uniform_(parameter)
    if config.share_embeddings or config.tie_target_embeddings:
        # One matrix, three roles (section 3.4): the assignment makes them the same Parameter.
        # With two vocabularies only the target-side pair can share (chapter 7).
        shared = model.tgt_embed[0].lut.weight
        model.generator.weight = shared
        if config.share_embeddings:
            model.src_embed[0].lut.weight = shared
    return model


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, counting a shared matrix once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# %% [markdown]
# ### Model sizes against Table 3
#
# Table 3 lists the parameter count of each variant the authors trained. We rebuild every row
# that has a count, and count our own. Each uses shared embeddings and a shared vocabulary of
# 37000 tokens, a size that section 5.1 gives only roughly. The models are built on PyTorch's `meta`
# device, which records shapes without allocating memory, so even the 213M-parameter big model
# costs nothing.

# %%
TABLE3_PARAMETERS = {
    # row: (changes to the base configuration, parameters in millions as printed in Table 3)
    "base": ({}, 65),
    "(B) d_k=16": ({"d_k": 16}, 58),
    "(B) d_k=32": ({"d_k": 32}, 60),
    "(C) N=2": ({"N": 2}, 36),
    "(C) N=4": ({"N": 4}, 50),
    "(C) N=8": ({"N": 8}, 80),
    "(C) d_model=256": ({"d_model": 256, "d_k": 32, "d_v": 32}, 28),
    "(C) d_model=1024": ({"d_model": 1024, "d_k": 128, "d_v": 128}, 168),
    "(C) d_ff=1024": ({"d_ff": 1024}, 53),
    "(C) d_ff=4096": ({"d_ff": 4096}, 90),
    "big": ({"d_model": 1024, "d_ff": 4096, "h": 16, "p_drop": 0.3}, 213),
}


def table3_parameter_counts(vocab: int = 37000) -> pd.DataFrame:
    """Our parameter count for each Table 3 row that lists one, beside the paper's."""
    rows = []
    for row, (changes, paper_millions) in TABLE3_PARAMETERS.items():
        config = replace(ModelConfig(vocab, vocab, share_embeddings=True), **changes)
        with torch.device("meta"):
            ours = count_parameters(make_model(config))
        sizes = {name: getattr(config, name) for name in ("N", "d_model", "d_ff", "h", "d_k")}
        rows.append(
            {
                "Table 3 row": row,
                **sizes,
                "ours (M)": round(ours / 1e6, 1),
                "paper (M)": paper_millions,
                "difference": f"{100 * (ours / 1e6 - paper_millions) / paper_millions:+.1f}%",
            }
        )
    return pd.DataFrame(rows)


# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# table3_parameter_counts()

# %% [markdown]
# Every row but one comes out *below* the paper, by 2 to 6%. Only `big` is above, by 0.6%. The
# vocabulary explains most of the shortfall. The paper only says "about 37000", and every
# token of a shared vocabulary brings $d_\text{model} + 1$ parameters: its row of the one
# shared matrix, and its bias in the output layer. So each thousand tokens add, at each width:
#
# | $d_\text{model}$ | parameters added by a thousand more tokens |
# |---|---|
# | 256 | 0.26M |
# | 512 | 0.5M |
# | 1024 | 1M |
#
# With 41000 tokens (`table3_parameter_counts(41000)`), every row but `big` lands within half a
# million of the paper's count. That is as close as a table printed in whole millions can show.
# No vocabulary fits `big` as well: 41000 puts it 5M above, because Table 3 disagrees with
# itself. Its $d_\text{model} = 1024$ row and `big` differ only in $d_{ff}$, 2048 against 4096;
# their heads split the same width in two ways, which changes no count. Widening the
# feed-forward networks of all 12 layers adds 50.4M parameters, yet the two printed counts
# differ by 45M.
#
# The layers themselves do not depend on the vocabulary, and they match the formula exactly.
# Per encoder layer, counting attention, the feed-forward network and two layer norms, that is
#
# $$4(d_\text{model}^2 + d_\text{model}) + 2 d_\text{model} d_{ff} + d_{ff} + d_\text{model}
# + 4 d_\text{model},$$
#
# which the tests check.
#
# ### A forward pass of an untrained model
#
# A small model (two layers, a toy vocabulary of 11 tokens) runs on a batch of two sentences,
# one of them padded. The output has one row of 11 logits per target position, and softmax
# turns each row into a distribution over the next token. Untrained, those distributions are
# arbitrary, but they are not flat. A flat row would give each of the 11 tokens the same small
# share. Instead, the printout below shows each row putting more than half its probability on one
# token, and which token that is has nothing to do with the input yet. Chapter 3 builds what it
# takes to train such a model, and chapter 4 trains a first one on a real task.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# from annotated.ch01_attention import padding_mask, subsequent_mask
#
# PAD = 0
# tiny = make_model(ModelConfig(src_vocab=11, tgt_vocab=11, N=2)).eval().requires_grad_(False)
# src = torch.tensor([[1, 5, 7, 3, 2], [1, 4, 2, PAD, PAD]])
# tgt = torch.tensor([[1, 6, 8, 9], [1, 3, PAD, PAD]])
# src_mask = padding_mask(src, PAD)  # (batch, 1, src_len)
# tgt_mask = padding_mask(tgt, PAD) & subsequent_mask(tgt.size(1))  # (batch, tgt_len, tgt_len)
# logits = tiny(src, tgt, src_mask, tgt_mask)  # no gradients: the weights do not ask for them
# probabilities = logits.softmax(dim=-1)
# print("logits:", tuple(logits.shape), " (batch, tgt_len, tgt_vocab)")
# print("each row sums to 1:", torch.allclose(probabilities.sum(-1), torch.ones(2, 4)))
# top = probabilities.max(dim=-1).values  # each row's most likely token's probability
# print(f"each row's largest probability: from {top.min():.2f} to {top.max():.2f}")

# %% [markdown]
# The decoder cannot cheat: changing a *later* target token leaves the logits of *earlier*
# positions untouched, because the subsequent mask hides the future. Both lines below print
# `True`. (The tests check the same for the encoder's padding: the values at pad positions never
# matter.)

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# changed = tgt.clone()
# changed[0, 3] = 10  # change the last target token of sentence 0
# with torch.no_grad():
#     again = tiny(src, changed, src_mask, padding_mask(changed, PAD) & subsequent_mask(4))
# print("positions 0-2 unchanged:", torch.equal(logits[0, :3], again[0, :3]))
# print("position 3 changed:     ", not torch.equal(logits[0, 3], again[0, 3]))

# %% [markdown]
# ### Post-norm against pre-norm, measured
#
# Section 2 said pre-norm is easier to train, and one way to see why needs no training. We
# send a gradient back through a freshly initialized encoder, with a fixed random direction
# standing in for the loss. Then we measure how large the gradient is at each layer's
# parameters: its *norm*, the square root of the sum of its squared entries. We use a 12-layer
# stack so that the trend is easy to see, average over five random initializations, and switch
# dropout off. The measurement, `gradient_norms_by_layer`, sits with its chart in
# `annotated/figures/ch02_model.py`.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# norms = gradient_norms_by_layer(N=12)
# gradient_chart(norms)

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# # three significant digits: what the comparison needs, and the same on every machine
# rounded(norms.pivot(index="layer", columns="arrangement", values="gradient norm")).astype(int)

# %% [markdown]
# The chart draws the norms on a log scale, and the table gives them to three digits. Two
# differences show. **Post-norm** sends the larger gradient to every layer, and nearly the
# same to each. Its top layers (nearest the output) get about a quarter more than its bottom
# ones. With **pre-norm**, the gradient shrinks from the bottom to the top. At the bottom layer
# it is close to post-norm's; at the top it is about a third of it. The reason is that each
# pre-norm layer adds a small correction to a residual stream that keeps growing. Only the
# final LayerNorm sees the total, so each layer's own influence is diluted.
#
# This matters because large gradients at the layers next to the output, at the very start of
# training, make post-norm unstable with a large learning rate. Xiong et al. (2020, *On Layer
# Normalization in the Transformer Architecture*) analyse exactly this. It is one reason the
# paper's post-norm model needs chapter 3's learning-rate warmup, and why pre-norm became the
# usual choice for deep stacks. We keep the paper's arrangement as the default, with its
# schedule.
#
# The map shows the difference too. Here is a pre-norm model with two layers a side and two
# vocabularies, drawn from the model `make_model` builds. Each sub-layer has a LayerNorm before
# it, and the residual path joins at a plain addition (⊕). A final LayerNorm sits on top of each
# stack, and only the target embedding is shared with the output layer.

# %% tags=["active-ipynb"]
# pre_norm = ModelConfig(
#     8000, 6000, N=2, d_model=256, d_ff=1024, h=4, norm_first=True, tie_target_embeddings=True
# )
# architecture(make_model(pre_norm))

# %% [markdown]
#
# **What we have:** `ModelConfig`, `LayerNorm` from its formula, every box of Figure 1, and
# `make_model`, with its parameter counts set beside Table 3's. `tests/test_ch02_model.py`
# checks the model's layers against `nn.TransformerEncoderLayer` and
# `nn.TransformerDecoderLayer`. **Next**, chapter 3 builds what teaching the model takes: batches
# and masks, the optimizer and its schedule, and label smoothing; chapter 4 trains it.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# **2.1 Predict.** A post-norm encoder layer gets an input whose every vector is multiplied by 100.
# What happens to the layer's output, roughly? And a pre-norm layer's?
#
# <details><summary>Answer</summary>
#
# Post-norm: the output keeps its usual size, but not its content. The output is
# LayerNorm(x + Sublayer(x)), and the normalization removes the overall scale of the sum. But
# the self-attention sub-layer sees the large x first. Queries and keys each grow 100-fold, so
# the scores grow about 10,000-fold and the softmax saturates (chapter 1's lesson on
# $\sqrt{d_k}$). Each position then copies the value of the one position it matches best,
# instead of a blend. What gets normalized is x plus that hard pick.
#
# Pre-norm: the sub-layer sees LayerNorm(x), which the scaling does not change, so the
# sub-layer's output is the same as before. But the layer's output is x + Sublayer(LayerNorm(x)).
# The large x passes through the residual path unnormalized and dominates it, and the
# sub-layer's contribution is now relatively tiny.
#
# </details>
#
# **2.2 Implement** layer normalization as a function, `my_layer_norm(x, weight, bias, eps=1e-5)`,
# over the last dimension (section 2's formula).
#
# **2.3 Implement** the sinusoidal table of section 3.5, `my_sinusoidal_table(max_len, d_model)`:
# a `(max_len, d_model)` float64 tensor with $PE_{(pos, 2i)} = \sin(pos / 10000^{2i/d_\text{model}})$
# and $PE_{(pos, 2i+1)} = \cos(pos / 10000^{2i/d_\text{model}})$.
#
# **2.4 Modify.** Build the base model with `share_embeddings=True` and with `False` for a shared
# vocabulary of 37,000, and count the parameters of each. Explain the difference exactly.
#
# <details><summary>Answer</summary>
#
# 37,000 × 512 × 2 = 37,888,000 more without sharing. The source embedding, the target
# embedding and the output layer's weight are three matrices instead of one. (The output layer's
# 37,000 biases exist either way.)
#
# </details>
# %% tags=["active-ipynb"]
# from annotated.exercises import check  # runs your function against the book's
# from annotated.exercises.ch02_model import exercise_2_2, exercise_2_3

# %% tags=["active-ipynb", "hide-input"]
# def my_layer_norm(x, weight, bias, eps=1e-5):
#     ### BEGIN SOLUTION
#     mean = x.mean(dim=-1, keepdim=True)
#     variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
#     return weight * (x - mean) / torch.sqrt(variance + eps) + bias
#     ### END SOLUTION
#
#
# check(exercise_2_2, my_layer_norm)

# %% tags=["active-ipynb", "hide-input"]
# def my_sinusoidal_table(max_len, d_model):
#     ### BEGIN SOLUTION
#     position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
#     angle = position / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
#     return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)
#     ### END SOLUTION
#
#
# check(exercise_2_3, my_sinusoidal_table)
