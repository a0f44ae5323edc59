# %% [markdown] slideshow={"slide_type": "slide"}
# # Chapter 6 — Decoding and scoring
#
# *Paper: section 6.1 (beam search, the length penalty, the output length limit, BLEU).*
#
# A trained model gives, for a source sentence and the words written so far, a probability for
# every possible next word. Turning that into a translation is a search, and judging the
# translation is a measurement. Both involve choices that can move the final score by several
# points, and this chapter makes them in the open:
#
# 1. **a cache of keys and values**, so that writing word $t$ costs one position of decoder work
#    instead of $t$;
# 2. **greedy decoding** with that cache, checked against chapter 4's plain decoder;
# 3. **beam search** with the paper's **length penalty**;
# 4. a `Translator` that puts text in and gets text out, and copies a source word where the model
#    writes `<unk>`;
# 5. **sacreBLEU and chrF** with their signatures, and the **tokenized BLEU** that the paper's
#    numbers were computed with.
#
# Everything here works on any model of chapter 2, trained or not. The examples use small
# untrained models, which are enough to check that the search is right. Chapters 7 and 8 use the
# same functions on trained ones.

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
from dataclasses import asdict, dataclass

import sacrebleu
import torch
from sacremoses import MosesTokenizer
from torch import Tensor

from annotated.ch01_attention import MultiHeadAttention, kept_weights, padding_mask, subsequent_mask
from annotated.ch02_model import EncoderDecoder
from annotated.ch03_training import SpecialTokens, inference, pad_sequences
from annotated.ch04_copy_task import until_eos
from annotated.ch05_text import Corpus, Vocabulary

# %% tags=["active-ipynb"]
# import time
#
# import pandas as pd
#
# from annotated.ch02_model import ModelConfig, make_model
# from annotated.ch04_copy_task import greedy_decode
# from annotated.figures import use_book_charts
# from annotated.base.threads import use_fair_threads
#
# use_fair_threads()  # torch's threads: the CPUs this process may use (annotated/base/threads.py)
# use_book_charts()

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. A cache of keys and values
#
# Chapter 4's `greedy_decode` is correct but slow. To choose word $t$ it runs the decoder over the
# whole prefix $y_1 \dots y_{t-1}$ again, so a sentence of $n$ words costs on the order of $n^2$
# position-passes through the decoder. But nothing about the earlier positions changes when a word
# is added: the decoder's self-attention is masked, so position $i$ never sees positions after it.
# Their keys and values in every layer are the same at every step.
#
# So we keep them. A `KeyValueCache` sits beside one attention module. In the decoder's
# self-attention it **grows**: each call projects only the new position's key and value and
# appends them, and the query attends over everything kept so far. In the encoder-decoder
# attention the keys and values are projections of the encoder output. That output does not change
# while a sentence is written, so the cache projects them on the first call and reuses them.
#
# Chapter 1's `MultiHeadAttention` asks its `cache` for the keys and values when it has one.
# Chapter 2's `decode` numbers the new position from the cache's length, so the positional encoding
# stays right. A `DecoderCache` holds one pair of caches per decoder layer.


# %%
@dataclass
class KeyValueCache:
    """The keys and values one attention module has projected so far, for incremental decoding.

    grow=True (decoder self-attention): each call appends its new positions' keys and values.
    grow=False (encoder-decoder attention): the first call projects the encoder output, later
    calls reuse it.
    """

    grow: bool
    k: Tensor | None = None  # (batch, h, positions, d_k)
    v: Tensor | None = None  # (batch, h, positions, d_v)

    @property
    def length(self) -> int:
        """How many key positions are cached."""
        return 0 if self.k is None else self.k.size(2)

    def keys_values(
        self, attention: MultiHeadAttention, key: Tensor, value: Tensor
    ) -> tuple[Tensor, Tensor]:
        """What `attention` attends over: the cached keys and values, updated for this call."""
        if self.grow or self.k is None:
            k, v = attention.project_keys_values(key, value)
            if self.grow and self.k is not None:
                k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
            self.k, self.v = k, v
        return self.k, self.v

    def select(self, rows: Tensor) -> None:
        """Keep only the given batch rows, in that order (beam search reorders its hypotheses)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)


class DecoderCache:
    """One (self-attention, encoder-decoder attention) pair of caches per decoder layer."""

    def __init__(self, model: EncoderDecoder) -> None:
        self.layers = [
            (KeyValueCache(grow=True), KeyValueCache(grow=False)) for _ in model.decoder.layers
        ]

    def __getitem__(self, layer: int) -> tuple[KeyValueCache, KeyValueCache]:
        return self.layers[layer]

    @property
    def length(self) -> int:
        """Target positions decoded so far."""
        return self.layers[0][0].length

    def select(self, rows: Tensor, source_too: bool = True) -> None:
        """Keep only the given batch rows of every cache (of the self-attention ones only,
        if asked)."""
        for own, source in self.layers:
            own.select(rows)
            if source_too:
                source.select(rows)


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Greedy decoding, one position a step
#
# With the cache, each step feeds the decoder only the newest token. Two more savings come from
# decoding many sentences at once. A batch of sentences costs little more per step than one,
# because the products just grow a dimension. And a sentence that has written `</s>` leaves the
# batch: its rows of the cache, the encoder output and the mask are dropped. The last steps, when
# only the longest sentences are still going, then cost only what those need.


# %%
def greedy_decode_cached(
    model: EncoderDecoder, src: Tensor, src_mask: Tensor, specials: SpecialTokens, max_len: int
) -> Tensor:
    """Chapter 4's greedy decoding with a key/value cache:
    (batch, src_len) -> (batch, <= max_len)."""
    with inference(model):
        memory = model.encode(src, src_mask)
        cache = DecoderCache(model)
        out = torch.full((src.size(0), max_len), specials.pad, dtype=torch.long, device=src.device)
        active = torch.arange(src.size(0), device=src.device)  # rows still being decoded
        newest = torch.full((src.size(0), 1), specials.bos, dtype=torch.long, device=src.device)
        length = 0
        for length in range(1, max_len + 1):
            # Only the newest token goes in; the cache holds what came before.
            states = model.decode(memory, src_mask, newest, None, cache)  # (active, 1, d_model)
            next_token = model.generator(states[:, -1]).argmax(dim=-1)  # (active,)
            out[active, length - 1] = next_token
            ended = next_token == specials.eos
            if ended.any():
                # Finished sentences leave the batch: later steps compute only the others.
                keep = (~ended).nonzero().squeeze(1)
                if keep.numel() == 0:
                    break
                active, next_token = active[keep], next_token[keep]
                memory, src_mask = memory.index_select(0, keep), src_mask.index_select(0, keep)
                cache.select(keep)
            newest = next_token.unsqueeze(1)
        return out[:, :length]


# %% [markdown]
# Is it the same decoder? An untrained model is a good test, since its choices are close calls
# that any slip in the cache would flip. Chapter 4's decoder and the cached one, on 16 random
# source sentences of a small model:

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# _ = torch.manual_seed(0)
# toy = make_model(ModelConfig(50, 50, N=2, d_model=64, d_ff=128, h=4)).double()
# toy_specials = SpecialTokens(pad=0, bos=1, eos=2)
# toy_src = torch.randint(3, 50, (16, 12))
# toy_mask = padding_mask(toy_src, toy_specials.pad)
# plain = until_eos(greedy_decode(toy, toy_src, toy_mask, toy_specials, 30), toy_specials)
# cached = until_eos(greedy_decode_cached(toy, toy_src, toy_mask, toy_specials, 30), toy_specials)
# print("the same output for every sentence:", plain == cached)
# print("positions passed through the decoder for one 30-token output:",
#       f"{sum(range(1, 31))} without the cache, 30 with it")

# %% [markdown]
# The drawing below shows the first six steps of one of these sentences. An untrained model's
# words are noise, so they are named by their ids. Compare it with chapter 4's picture, where every
# row was computed in full. Here only the newest token of each row passes through the decoder, and
# the grey boxes are read back from the cache.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# from annotated.figures.ch04_copy_task import decoding_steps
#
# toy_words = ["<pad>", "<s>", "</s>"] + [f"w{i}" for i in range(3, 50)]
# shown = next(out for out in cached if not {toy_specials.pad, toy_specials.bos} & set(out[:6]))
# decoding_steps([toy_words[t] for t in shown[:6]], cached=True)

# %% [markdown]
# The check above runs in double precision. That makes a disagreement practically impossible, but
# it does not make the two computations identical: the cached and the plain decoder add the same
# numbers in a different order. In float32, whose last bit is $2^{29}$ times (more than half a
# billion times) coarser than float64's, that difference can flip a close call to the other word.
# The test suite checks the float32 decoders on other random models.
#
# How much time the cache saves depends on the machine. The cell below times both decoders in
# float32 on the same 16 sentences, for up to 60 tokens each. This untrained model never writes
# `</s>` within those tokens (the cell asserts it). So both decoders take every step for every
# sentence, and the difference is the cache's alone. A trained model's sentences end at different
# lengths, and there the cached decoder saves more. It drops each finished sentence from the batch,
# while chapter 4's decoder keeps computing that row, as padding, until the last sentence ends. On
# your machine:

# %% tags=["active-ipynb"]
# # NBVAL_IGNORE_OUTPUT
# toy = toy.float()
# for name, decode in (("chapter 4", greedy_decode), ("cached", greedy_decode_cached)):
#     started = time.perf_counter()
#     out = decode(toy, toy_src, toy_mask, toy_specials, 60)
#     seconds = time.perf_counter() - started
#     written = until_eos(out, toy_specials)
#     assert all(len(sentence) == 60 for sentence in written), "a sentence ended early"
#     print(f"{name}: {seconds:.2f} s for 16 sentences of 60 tokens")


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Beam search and the length penalty (section 6.1)
#
# Greedy decoding commits to the most probable word at each step, and a word that looks best now can
# lead into a sentence that is worse overall. **Beam search** keeps the $k$ best partial
# translations (the *beam*) instead of one. At each step every hypothesis in the beam is extended by
# every word, each extension is scored by the sum of its words' log-probabilities, and the best $k$
# that have not ended are kept. An extension that ends with `</s>` is set aside as a finished
# candidate only if it ranks among the best $k$ extensions of its step. One ranked lower is dropped
# like any other. A sentence is done when $k$ candidates have finished (or the length limit is
# reached), and its translation is the best finished candidate.
#
# Dropping a low-ranked ending is a heuristic, not a proof that it could never win. A hypothesis's
# score only falls as it grows, so an ending dropped early can still score above every candidate
# that finishes later. The paper's own search (tensor2tensor's) looks wider. At each step it:
#
# 1. ranks the $2k$ best extensions;
# 2. keeps alive the best $k$ of them that have not ended;
# 3. sets aside every ending among all $2k$, keeping the best $k$ finished so far;
# 4. stops only when no live hypothesis, even at the longest length allowed, could beat them.
#
# Ours is the simpler rule. It does less work and stops sooner, and the price is that now and then
# it misses the best-scoring sentence.
#
# Sums of log-probabilities favour short outputs, since every extra word makes the sum more
# negative. The **length penalty** of Wu et al. (2016) corrects for this. The paper uses it with a
# beam of 4 (section 6.1). A finished candidate $Y$ of $|Y|$ tokens, for the source $X$, is
# ranked by its sum of log-probabilities divided by $\mathrm{lp}(Y)$:
#
# $$\frac{\log P(Y \mid X)}{\mathrm{lp}(Y)}, \qquad \mathrm{lp}(Y) = \frac{(5 + |Y|)^\alpha}{(5 + 1)^\alpha}.$$
#
# The exponent $\alpha$ sets how strongly length is rewarded. With $\alpha = 0$,
# $\mathrm{lp}(Y) = 1$ for every length, and the penalty is off. A larger $\alpha$ divides a longer
# candidate's (more negative) sum by more, so longer candidates move up the ranking. The paper uses $\alpha = 0.6$,
# chosen on WMT's development set; chapter 7 chooses its own for Multi30k.
#
# Our beam search is batched: `batch × k` hypotheses go through the decoder together, with the
# key/value cache of section 1. When the beam is reordered (a hypothesis is continued twice, another
# is dropped), the caches are reordered the same way. With $k = 1$ it is exactly greedy decoding,
# which the tests check.


# %%
def length_penalty(length: Tensor, alpha: float) -> Tensor:
    """GNMT's lp(Y) = ((5 + |Y|) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_mask: Tensor,
    specials: SpecialTokens,
    max_len: int,
    beam: int = 4,
    alpha: float = 0.6,
    trace: list | None = None,
) -> Tensor:
    """Batched beam search: (batch, src_len) -> (batch, <= max_len) best ids, </s> included, padded.

    `trace`, a list, receives the first sentence's search as it goes (for `beam_winner` and
    `beam_tree`): for each step, its 2k best candidates as a tuple of `BeamCandidate`, best first.
    """
    if beam < 1:
        raise ValueError(f"beam must be at least 1, got {beam}")
    batch, device = src.size(0), src.device
    with inference(model):
        # `beam` rows per sentence: (batch * beam, src_len, d_model), rows b*beam ... b*beam+k-1.
        memory = model.encode(src, src_mask).repeat_interleave(beam, dim=0)
        src_mask = src_mask.repeat_interleave(beam, dim=0)
        cache = DecoderCache(model)
        ys = torch.full((batch * beam, 1), specials.bos, dtype=torch.long, device=device)
        # Each live hypothesis's sum of log-probabilities; at the start one per sentence is live.
        scores = torch.full((batch, beam), -math.inf, device=device)
        scores[:, 0] = 0.0
        best_score = torch.full((batch,), -math.inf, device=device)  # best finished, penalized
        best: list[list[int]] = [[] for _ in range(batch)]  # its tokens
        finished = torch.zeros(batch, dtype=torch.long, device=device)  # candidates set aside
        rows = torch.arange(batch, device=device).unsqueeze(1) * beam  # first row of each sentence
        for step in range(1, max_len + 1):
            tracing = trace is not None and bool(finished[0] < beam)
            states = model.decode(memory, src_mask, ys[:, -1:], None, cache)
            top_scores, origin, token = _extend(scores, model.generator(states[:, -1]), beam)
            ends = (token == specials.eos) | (step == max_len)  # out of room: all live ones end
            # Set aside those that ended within the best k (a heuristic: one ranked lower is lost).
            ranked = torch.arange(ends.size(1), device=device) < beam
            finishing = ends & ranked & (finished < beam).unsqueeze(1) & torch.isfinite(top_scores)
            if finishing.any():
                lp = length_penalty(torch.tensor(float(step), device=device), alpha)
                penalized = top_scores / lp
                for b, j in finishing.nonzero().tolist():
                    finished[b] += 1
                    if penalized[b, j] > best_score[b]:
                        best_score[b] = penalized[b, j]
                        best[b] = ys[rows[b, 0] + origin[b, j], 1:].tolist() + [token[b, j].item()]
            done = finished >= beam
            # The k best candidates that did not end continue.
            keep_scores, keep = top_scores.masked_fill(ends, -math.inf).topk(beam, dim=-1)
            if tracing:  # the first sentence's step, and its survivors in their new beam order
                kept = [] if done[0] else keep[0, keep_scores[0].isfinite()].tolist()
                trace.append(_traced_step(ys, top_scores, origin, token, finishing, kept))
            if done.all():
                break
            scores = keep_scores
            chosen_rows = (rows + origin.gather(1, keep)).view(-1)  # (batch*k,) rows that continue
            ys = torch.cat([ys.index_select(0, chosen_rows), token.gather(1, keep).view(-1, 1)], 1)
            cache.select(chosen_rows, source_too=False)  # a sentence's rows share its source
        return pad_sequences(best, specials.pad).to(device)


def _extend(scores: Tensor, logits: Tensor, beam: int) -> tuple[Tensor, Tensor, Tensor]:
    """Every hypothesis extended by every word, and the 2k best extensions of each sentence.

    scores (batch, k) are the beam's sums so far, logits (batch * k, V) the model's next-word
    scores. Returns the extensions' sums, the beam position each extends and the word it adds,
    each (batch, 2k), best first.
    """
    batch, vocab = scores.size(0), logits.size(-1)
    log_probs = logits.float().log_softmax(dim=-1).view(batch, beam, vocab)
    candidates = (scores.unsqueeze(-1) + log_probs).view(batch, -1)  # (batch, k * V)
    # 2k candidates are enough: at most k of them can end with </s>.
    top_scores, top_index = candidates.topk(min(2 * beam, candidates.size(1)), dim=-1)
    return top_scores, top_index // vocab, top_index % vocab


# %% [markdown]
# How strongly the penalty pulls: $\mathrm{lp}$ for a few values of $\alpha$. Where the curve is
# steep, a longer candidate can afford a more negative sum and still win. The chart's code is in
# `annotated/figures/ch06_decoding.py`.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# from annotated.figures.ch06_decoding import penalty_chart  # the chart's code
#
# penalty_chart()

# %% [markdown]
# A beam of one keeps one hypothesis, so it must be greedy decoding, whatever $\alpha$ is. The toy
# model of section 2 checks it. A wider beam may end elsewhere: it looks for the output with the
# best penalized score, which greedy decoding need not find.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# toy = toy.double()
# beam_one = until_eos(
#     beam_search(toy, toy_src, toy_mask, toy_specials, 30, beam=1, alpha=0.6), toy_specials
# )
# beam_four = until_eos(
#     beam_search(toy, toy_src, toy_mask, toy_specials, 30, beam=4, alpha=0.6), toy_specials
# )
# print("beam 1 equals greedy decoding:", beam_one == cached)

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# # NBVAL_IGNORE_OUTPUT
# # (how many close calls a random model makes depends on its random weights)
# differ = sum(a != b for a, b in zip(beam_four, cached))
# print("beam 4 chose another output than greedy for", differ, "of 16 sentences")

# %% [markdown] slideshow={"slide_type": "slide"}
# ### The search drawn as a tree
#
# `beam_search(..., trace=[])` records the first sentence's search as it goes. At each step it
# keeps the $2k$ best extensions of the beam, each a `BeamCandidate`. A candidate holds its words,
# the hypothesis it extends and its summed log-probability. It also says what became of it: kept
# for the next step, set aside as a finished candidate (it ended with `</s>`), or dropped.
#
# The hypotheses kept do not depend on $\alpha$: the length penalty only ranks the finished
# candidates at the end. So one search shows what each $\alpha$ would choose, and `beam_winner`
# picks it, ranking the finished candidates exactly as `beam_search` does.


# %%
@dataclass(frozen=True)
class BeamCandidate:
    """One of the 2k best extensions of a sentence's beam at one step of a traced search."""

    tokens: tuple[int, ...]  # the hypothesis it extends, then the word it adds (<s> left out)
    parent: int  # the position in the beam of the hypothesis it extends
    score: float  # the sum of its words' log-probabilities
    finished: bool  # it ended within the best k (with </s>, or at the length limit): set aside
    kept: int | None  # its position in the next step's beam, if it goes on


def _traced_step(
    ys: Tensor, score: Tensor, origin: Tensor, token: Tensor, finishing: Tensor, kept: list[int]
) -> tuple[BeamCandidate, ...]:
    """The first sentence's candidates at one step, as `beam_search(trace=...)` records them.

    `ys` holds the beam's hypotheses (the first sentence's in rows 0 to k - 1), the (batch, 2k)
    tensors its candidates; `kept` lists the candidates that go on, in their new beam order.
    """
    position = {j: p for p, j in enumerate(kept)}
    columns = zip(*(t[0].tolist() for t in (origin, token, score, finishing)), strict=True)
    return tuple(
        BeamCandidate((*ys[parent, 1:].tolist(), word), parent, total, ended, position.get(j))
        for j, (parent, word, total, ended) in enumerate(columns)
        if math.isfinite(total)  # topk sorts: the infinite ones (dead hypotheses) come last
    )


def beam_winner(trace: Sequence[Sequence[BeamCandidate]], alpha: float) -> BeamCandidate:
    """The finished candidate of a traced search that `beam_search` returns for this alpha.

    It has the best length-penalized score, computed as the search computes it (so that a close
    call falls the same way), and is the first of them on a tie, as in the search.
    """
    finished = [c for step in trace for c in step if c.finished]
    penalized = [
        float(torch.tensor(c.score) / length_penalty(torch.tensor(float(len(c.tokens))), alpha))
        for c in finished
    ]
    return finished[max(range(len(finished)), key=lambda i: (penalized[i], -i))]


# %% [markdown]
# `beam_tree` draws a trace, one row per step from the top. Each row shows the $2k$ best
# extensions of the beam, best first from the left, with their summed log-probabilities. It marks
# those kept for the next step, those that ended with `</s>` (finished candidates) and those
# dropped, and it outlines each $\alpha$'s winner. Here the beam holds 3 hypotheses and the output
# at most 8 tokens. The sentence comes from another untrained model, seeded so that the two choices
# differ. The assertion checks that the trace's winner for $\alpha = 2.5$ is the search's output.

# %% tags=["active-ipynb"]
# from annotated.figures.ch06_decoding import beam_tree
#
# _ = torch.manual_seed(15)
# tree_toy = make_model(ModelConfig(50, 50, N=2, d_model=64, d_ff=128, h=4)).double()
# tree_src = torch.randint(3, 50, (1, 12))
# trace = []
# tree_mask = padding_mask(tree_src, 0)
# best = beam_search(tree_toy, tree_src, tree_mask, toy_specials, 8, beam=3, alpha=2.5, trace=trace)
# assert best[0].tolist() == list(beam_winner(trace, 2.5).tokens)
# beam_tree(trace, toy_words, alphas=(0.0, 2.5))

# %% [markdown]
# An untrained model spreads its probability over all 50 symbols, so every word costs a few units
# of log-probability. Without a penalty the short candidates win: with $\alpha = 0$ the best is the
# two-token candidate that ended at step 2. With $\alpha = 2.5$ the penalty divides a candidate of
# 2 tokens by $((5 + 2) / 6)^{2.5} \approx 1.5$ but one of 7 tokens by
# $((5 + 7) / 6)^{2.5} \approx 5.7$. So the seven-token candidate wins. A trained model puts most
# of its probability on a few words, and the penalty then decides between close calls. Chapter 7
# draws the same tree for a real sentence.


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. From text to text: the translator
#
# `decode_ids` runs either search over many sentences. It sorts them by length and decodes them in
# batches whose padded source tokens, times the beam, stay within `batch_tokens` (similar lengths
# again waste less). Then it puts the outputs back in input order and cuts each at `</s>` (chapter
# 4's `until_eos`).
#
# Its settings are one `DecodeConfig`: the beam (1 is greedy), $\alpha$, the length limit and the
# batch size. The paper (section 6.1) lets an output grow to its input's length plus 50 tokens.
# Here the limit is set per batch: an output may run to the batch's longest source plus
# `extra_length` tokens (50 by default). Sorting by length keeps each source close to the longest
# one of its batch. A training run saves its `DecodeConfig` with its checkpoints, so the model is
# later decoded the way it was scored.
#
# A `Translator` is a model with its two vocabularies: text in, text out. It is written against
# chapter 5's `Vocabulary` interface only, so the same class serves words and subwords. It calls
# `split` and `encode` on the source, decodes, then calls `decode` on the ids and `join` on the
# tokens. An empty input line gives an empty output line. `load_translator` (in
# `annotated/training/finish.py`) reads a run folder, or one of its checkpoints, and finds the
# vocabularies saved beside it. It reads the checkpoint with `weights_only=True`, so the file may
# hold only tensors, numbers and strings. A file that is not a checkpoint, or one crafted to run
# code when it is unpickled, is refused with a message and never executed. The file is read onto
# the CPU first, so a model trained on a GPU loads on a laptop, and the other way round.
#
# The command-line filter `python -m annotated.translate` is a thin wrapper around the two. It keeps
# exactly one output line per input line, whatever the input holds: a line of broken UTF-8, an
# enormous line, or a line whose decoding fails. Its `--help` says what each gives.
#
# **Unknown words.** A word vocabulary cannot spell a word it does not have, so where the model is
# unsure it writes `<unk>`, typically for a name, a number or a rare noun. Such words are often the
# same in both languages ("Giants", "3", "Mercedes"). The classic remedy is therefore to copy the
# source word the model was looking at (Luong et al., 2015; Jean et al., 2015).
#
# `copy_unknowns` runs the model once more over the source and the output, keeping the last
# layer's encoder-decoder attention. Then it replaces each `<unk>` by the source
# word that this attention, averaged over the heads, weighs most. It changes nothing else in the
# output, and chapter 7 measures what it is worth. A subword vocabulary never writes `<unk>`
# (`can_copy_unknowns` is false), so it has nothing to copy.


# %%
@dataclass(frozen=True)
class DecodeConfig:
    """How to decode: the search, its length penalty, the length limit and the batch size."""

    beam: int = 1  # hypotheses kept (1: greedy decoding); the paper used 4
    alpha: float = 0.6  # the length penalty's exponent (section 6.1); 0 switches it off
    extra_length: int = 50  # outputs may reach the batch's longest source plus this many tokens
    batch_tokens: int = 4000  # source tokens (times the beam) decoded together

    def __post_init__(self) -> None:
        if self.beam < 1 or self.extra_length < 1 or self.batch_tokens < 1:
            raise ValueError(f"beam, extra_length and batch_tokens must be positive: {self}")

    @classmethod
    def from_saved(cls, saved: dict) -> DecodeConfig:
        """The settings a checkpoint recorded (older ones recorded only beam and alpha)."""
        return cls(**{key: saved[key] for key in asdict(cls()) if key in saved})


def decode_ids(
    model: EncoderDecoder,
    sources: Sequence[list[int]],
    specials_src: SpecialTokens,
    specials_tgt: SpecialTokens,
    decoding: DecodeConfig = DecodeConfig(),
) -> list[list[int]]:
    """Target ids for each source id list (ending in </s>), decoded in length-sorted batches."""
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    results: list[list[int]] = [[] for _ in sources]
    beam, start = decoding.beam, 0
    while start < len(order):
        # Grow the batch while its padded size (times the beam) stays within the budget.
        end = start + 1
        while (
            end < len(order)
            and (end + 1 - start) * len(sources[order[end]]) * beam <= decoding.batch_tokens
        ):
            end += 1
        chunk = order[start:end]
        src = pad_sequences([sources[i] for i in chunk], specials_src.pad).to(device)
        src_mask = padding_mask(src, specials_src.pad)
        max_len = src.size(1) + decoding.extra_length
        if beam == 1:
            out = greedy_decode_cached(model, src, src_mask, specials_tgt, max_len)
        else:
            out = beam_search(model, src, src_mask, specials_tgt, max_len, beam, decoding.alpha)
        for i, ids in zip(chunk, until_eos(out, specials_tgt), strict=True):
            results[i] = ids
        start = end
    return results


@dataclass
class Translator:
    """A trained model with its vocabularies: source text in, target text out."""

    model: EncoderDecoder
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary
    # The decoding of the run that trained the model, when its checkpoint records one; the
    # translate filter uses it unless told otherwise. Its extra_length and batch size always apply.
    decoding: DecodeConfig | None = None

    def translate(
        self,
        sentences: Sequence[str],
        beam: int = 1,
        alpha: float = 0.6,
        copy_unknowns: bool = True,
    ) -> list[str]:
        """One translation per sentence (greedy unless a beam is given); empty lines stay empty."""
        texts = [s.strip() for s in sentences]
        wanted = [i for i, text in enumerate(texts) if text]
        words = self.src_vocab.split([texts[i] for i in wanted])
        eos = self.src_vocab.specials.eos
        sources = [self.src_vocab.encode(w) + [eos] for w in words]
        settings = self.decoding or DecodeConfig()
        settings = DecodeConfig(beam, alpha, settings.extra_length, settings.batch_tokens)
        outputs = decode_ids(
            self.model, sources, self.src_vocab.specials, self.tgt_vocab.specials, settings
        )
        tokens = [self.tgt_vocab.decode(ids) for ids in outputs]
        if copy_unknowns and self.tgt_vocab.can_copy_unknowns:
            tokens = self.copy_unknowns(words, sources, outputs, tokens)
        translations = [""] * len(texts)
        for i, output in zip(wanted, tokens, strict=True):
            translations[i] = self.tgt_vocab.join(output)
        return translations

    def source_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each source text, ending in </s>, as the encoder reads them."""
        eos = self.src_vocab.specials.eos
        return [ids + [eos] for ids in self.src_vocab.encode_texts(texts)]

    def copy_unknowns(
        self,
        words: Sequence[list[str]],
        sources: Sequence[list[int]],
        outputs: Sequence[list[int]],
        tokens: list[list[str]],
    ) -> list[list[str]]:
        """Replace each output <unk> by the source word the last layer's source attention
        favours."""
        unk, specials = self.tgt_vocab.unk, self.tgt_vocab.specials
        todo = [i for i, ids in enumerate(outputs) if unk in ids]
        if not todo:
            return tokens
        device = next(self.model.parameters()).device
        src = pad_sequences([sources[i] for i in todo], self.src_vocab.specials.pad).to(device)
        tgt = pad_sequences([[specials.bos, *outputs[i]] for i in todo], specials.pad).to(device)
        src_mask = padding_mask(src, self.src_vocab.specials.pad)
        last = self.model.decoder.layers[-1].src_attn
        with kept_weights([last]) as (attention,), inference(self.model):
            self.model(src, tgt, src_mask, subsequent_mask(tgt.size(1)).to(device))
            weights = attention.weights.mean(dim=1)  # (sentences, tgt_len, src_len), heads averaged
        tokens = [list(t) for t in tokens]
        for row, i in enumerate(todo):
            for position, token in enumerate(outputs[i]):
                if token == unk:
                    # Query `position` reads the token before and predicted this one; look only at
                    # real words (not </s>).
                    best = int(weights[row, position, : len(words[i])].argmax())
                    tokens[i][position] = words[i][best]
        return tokens


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. Scoring: BLEU and chrF
#
# **BLEU** (Papineni et al., 2002) compares the output's word n-grams, its runs of $n$ words in a
# row, with the reference's. For each $n$ from 1 to 4 it computes a precision: the share of the
# output's n-grams that also occur in the reference. BLEU is the geometric mean of the four
# precisions, times a **brevity penalty** for outputs shorter than the references, on a scale of 0
# to 100. It is computed over the whole test set at once, not averaged over sentences.
#
# **chrF** (Popović, 2015) counts character n-grams instead, also over the whole test set. By
# sacreBLEU's default, $n$ runs from 1 to 6 and spaces are left out. For each $n$ it computes a
# precision, as BLEU does, and a recall: the share of the reference's n-grams that the output has.
# It averages the six precisions into $P$ and the six recalls into $R$, and combines the two into
# an F-score:
#
# $$\mathrm{chrF} = (1 + \beta^2)\,\frac{P \cdot R}{\beta^2 P + R}, \qquad \beta = 2.$$
#
# With $\beta = 2$, recall weighs more than precision. chrF has no brevity penalty, since an output
# that is too short already loses recall. Counting characters, it is kinder to a word with the
# right stem and the wrong ending.
#
# BLEU numbers are only comparable when computed the same way: the same references, the same
# tokenization of both sides, cased or not. The sacreBLEU library (Post, 2018) fixes all of these
# choices. With every score it gives a **signature**: a short line that names each choice, and the
# library's version, so that a reader can tell whether two scores were computed alike. We score
# plain output text (decoded subwords, or detokenized words) against the untouched reference text,
# with sacreBLEU's defaults, and print the signature with every score.


# %%
def score(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Corpus BLEU and chrF of plain-text hypotheses against raw references, with signatures.

    "length ratio" is the outputs' length over the references' (in BLEU's tokens); below 1, BLEU's
    brevity penalty takes its share.
    """
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    result = bleu.corpus_score(list(hypotheses), [list(references)])
    return {
        "BLEU": round(result.score, 2),
        "chrF": round(chrf.corpus_score(list(hypotheses), [list(references)]).score, 2),
        "length ratio": round(result.sys_len / max(result.ref_len, 1), 3),
        "BLEU signature": str(bleu.get_signature()),
        "chrF signature": str(chrf.get_signature()),
    }


# %% [markdown]
# Four made-up outputs for two references show what the scores reward. The first is the
# references word for word. The second says the same with other words. The third has the right
# words in another order. The fourth drops one word from the first, so the brevity penalty
# applies.

# %% tags=["active-ipynb"] slideshow={"slide_type": "slide"}
# references = ["A man in a blue shirt is sleeping on a bench.", "Two dogs play in the snow."]
# outputs = {
#     "exact": references,
#     "paraphrase": [
#         "A guy wearing a blue shirt sleeps on a bench.",
#         "Two dogs are playing in snow.",
#     ],
#     "scrambled": ["On a bench a man is sleeping in a blue shirt.", "In the snow two dogs play."],
#     "a word short": ["A man in a blue shirt is sleeping on a bench.", "Two dogs play in snow."],
# }
# scored = pd.DataFrame(
#     {name: score(hypotheses, references) for name, hypotheses in outputs.items()}
# ).T
# scored[["BLEU", "chrF", "length ratio"]]

# %% [markdown]
# BLEU punishes the paraphrase and the scrambled order about equally, since both break the
# reference's longer n-grams. The chrF score, counting character n-grams, sees that the scrambled
# output has every word right. The output one word short loses to the brevity penalty (length
# ratio 0.947) as well as to its missing n-grams. The paraphrase is a token shorter than the
# reference too, so it pays the same penalty on top of its broken n-grams.
#
# The signatures record the choices behind the numbers, one field each:
#
# | field | the choice |
# |---|---|
# | `nrefs:1` | one reference a sentence |
# | `case:mixed` | cased: "Dog" and "dog" differ |
# | `eff` | effective order: drop n-gram orders too long for a sentence (chrF yes, BLEU no) |
# | `tok:13a` | BLEU's tokenizer, WMT's standard one |
# | `smooth:exp` | how BLEU replaces a precision of zero (it matters for single sentences) |
# | `nc:6`, `nw:0`, `space:no` | chrF: characters up to 6-grams, no word n-grams, no spaces |
# | `version` | the sacreBLEU release |

# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# print(scored["BLEU signature"].iloc[0])
# print(scored["chrF signature"].iloc[0])

# %% [markdown] slideshow={"slide_type": "slide"}
# **The paper's BLEU.** On WMT English→German the paper reports 27.3 for its base model and 28.4
# for its big one. Those scores, in its Table 2, were not computed with sacreBLEU, which did not
# exist yet. They follow the recipe of the authors' tensor2tensor library, its script
# `get_ende_bleu.sh`:
#
# 1. Moses-tokenize the output and the references;
# 2. split every hyphenated compound so that its hyphen becomes a token of its own ("Rotwein-Glas"
#    becomes "Rotwein ##AT##-##AT## Glas");
# 3. run Moses' `multi-bleu.perl` on those tokens.
#
# `tokenized_bleu` does the same with sacremoses and sacreBLEU (told to tokenize no
# further). It is a different measurement from sacreBLEU's. The two must never be compared with
# each other, only each with itself. Chapter 8 reports both for its WMT run.


# %%
def paper_tokens(texts: Sequence[str], language: str = "de") -> list[str]:
    """Moses-tokenized text with hyphenated compounds split, as the paper's BLEU saw it."""
    tokenizer = MosesTokenizer(lang=language)
    return [
        " ".join(tokenizer.tokenize(text, escape=False, aggressive_dash_splits=True)).replace(
            "@-@", "##AT##-##AT##"
        )
        for text in texts
    ]


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """The paper-style BLEU: on paper_tokens, with no further tokenizing by sacreBLEU."""
    bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    result = bleu.corpus_score(paper_tokens(hypotheses), [paper_tokens(references)])
    return {"tokenized BLEU": round(result.score, 2)}


# %% tags=["active-ipynb"] slideshow={"slide_type": "-"}
# german_reference = ["Er trinkt ein Glas Rotwein-Schorle im Straßen-Café."]
# german_output = ["Er trinkt ein Glas Weißwein-Schorle im Café."]
# print("tokens the paper's BLEU compares:", paper_tokens(german_output)[0])
# print(f"sacreBLEU {score(german_output, german_reference)['BLEU']}, "
#       f"tokenized BLEU {tokenized_bleu(german_output, german_reference)['tokenized BLEU']}")

# %% [markdown]
# Here the tokenized BLEU is the lower of the two, though its n-gram precisions combine to the
# higher value (42.3 against 38.3 before any penalty). Splitting the hyphens turns the reference's
# "Rotwein-Schorle" and "Straßen-Café" into three tokens each. So the reference becomes two tokens
# longer than the output (12 against 10), and BLEU's brevity penalty takes more than the extra
# matches gave. Where an output gets its compounds right, each split-off hyphen is an easy extra
# match, and the tokenized score tends to be the higher one. Which is higher is a property of the
# output, not of the metrics.
#
# Finally, `evaluate_split` is what the training chapters call: translate the first `limit`
# source sentences of a split with the decoding asked for, and score them against their references.


# %%
def evaluate_split(
    translator: Translator,
    corpus: Corpus,
    split: str,
    *,
    limit: int | None,
    beam: int,
    alpha: float,
    copy_unknowns: bool = True,
) -> tuple[dict, list[str]]:
    """Scores and translations of a split's first `limit` sentences (all when None).

    The decoding settings are named at every call (`beam=1, alpha=0.0`), never read by position.
    """
    pairs = corpus.raw[split][:limit]
    hypotheses = translator.translate([source for source, _ in pairs], beam, alpha, copy_unknowns)
    return score(hypotheses, [target for _, target in pairs]), hypotheses


# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# **6.1 Predict.** A beam of 4 and greedy decoding give two outputs for the same sentence. Can the
# beam's output have a *lower* sum of log-probabilities than greedy's? Can it, with $\alpha = 0$?
#
# <details><summary>Answer</summary>
#
# Yes in both cases. With $\alpha > 0$ the beam ranks by the penalized score, so it may prefer a
# longer output with a lower sum. Even with $\alpha = 0$ the beam is a heuristic. It keeps only 4
# prefixes at each step, and the greedy prefix can be among those dropped: it may look worse early,
# though it would have ended better. This is rare, and a wider beam makes it rarer, but only an
# exhaustive search rules it out.
#
# </details>
#
# **6.2 Implement** the length penalty of section 3, `my_length_penalty(length, alpha)` for a
# plain number `length`: $((5 + |Y|)/6)^\alpha$.
#
# **6.3 Implement** BLEU's clipped n-gram matches for one sentence, `my_ngram_matches(hypothesis,
# reference, n)`, where both are lists of tokens. Return `(matches, total)`: `total` is the number
# of n-grams in the hypothesis, and `matches` the number of them found in the reference. Each
# n-gram counts at most as often as the reference has it; that is the clipping. The check compares
# your function with sacreBLEU's own statistics.
#
# **6.4 Modify (after chapter 7).** This one needs a trained German→English model, so come back
# to it once you have run chapter 7. Any profile will do; its class profile,
# `ANNOTATED_PROFILE=class`, trains one in a lecture's slot. Then load the run chapter 7 trained.
# `default_checkpoint` finds it as `python -m annotated.translate` does: the run of the longest
# profile in your runs folder (long, then full, class, smoke). `train_multi30k` loads a finished
# run without training it again, and would resume an unfinished one. Without a run of your own,
# take the trained model that ships with the book (`load_shipped_run`, chapter 7's `shipped`
# profile):
#
# ```python
# from annotated.ch07_multi30k import SHIPPED, profile_config, train_multi30k
# from annotated.training.config import RUNS_DIR
# from annotated.training.shipped import load_shipped_run
# from annotated.translate import default_checkpoint
# checkpoint = default_checkpoint()  # runs/multi30k-<profile>/averaged.pt (or checkpoint.pt)
# if checkpoint.exists():
#     folder = checkpoint.parent
#     profile, config = profile_config(folder.name.removeprefix("multi30k-"))
#     run = train_multi30k(config, folder)
# else:  # the book's own model: nothing to train
#     profile, config = profile_config(SHIPPED)
#     run = load_shipped_run(config, RUNS_DIR / "multi30k-shipped")
# ```
#
# With that `run`, score the validation set greedily with `evaluate_split(run.translator,
# run.corpus, "val", limit=None, beam=1, alpha=0.0, copy_unknowns=...)`, once with `False` and
# once with `True`. Which sentences change? Look at three of them: is the copied word right?
#
# <details><summary>Answer</summary>
#
# Only sentences where the model wrote `<unk>` change, and only at those tokens. Copies are right
# when the word is the same in both languages (names, numbers, brands). They are wrong for
# ordinary German words, which get copied untranslated. Chapter 7's scores show the net effect on
# BLEU.
#
# </details>
#
# The checks' cases and the mistakes they recognise are in `annotated/exercises/ch06_decoding.py`.

# %% tags=["active-ipynb"]
# from collections import Counter
#
# from annotated.exercises import check  # runs your function against the book's
# from annotated.exercises.ch06_decoding import exercise_6_2, exercise_6_3  # cases and mistakes

# %% tags=["active-ipynb", "hide-input"]
# def my_length_penalty(length, alpha):
#     ### BEGIN SOLUTION
#     return ((5 + length) / 6) ** alpha
#     ### END SOLUTION
#
#
# check(exercise_6_2, my_length_penalty)

# %% tags=["active-ipynb", "hide-input"]
# def my_ngram_matches(hypothesis, reference, n):
#     ### BEGIN SOLUTION
#     def ngrams(tokens):
#         return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
#
#     mine, theirs = ngrams(hypothesis), ngrams(reference)
#     return sum(min(count, theirs[gram]) for gram, count in mine.items()), sum(mine.values())
#     ### END SOLUTION
#
#
# check(exercise_6_3, my_ngram_matches)
