"""Chapter 5's exercises: the cases each check runs, and the plausible wrong answers it names.

5.2 asks for a word vocabulary's tokens (`Vocab.build`), 5.3 for the padding share of a batch
plan (`padding_fraction`).
"""

from __future__ import annotations

from collections import Counter

import torch

from annotated.ch05_text import SPECIALS, Vocab, padding_fraction
from annotated.exercises import Exercise, Mistake, draw


def _cases_vocabulary() -> list:
    text = ["a b c a", "b a d", "c c a e", "e d"]
    tied = ["zeta alpha", "alpha zeta", "mid"]
    return [
        (([s.split() for s in text], 2), {}),
        (([s.split() for s in text], 1), {}),
        (([s.split() for s in tied], 1), {}),
        (([s.split() for s in text], 5), {}),
    ]


def _fresh_vocabulary(generator: torch.Generator) -> list:
    """Random sentences over a random small word list (ties and rare words likely)."""
    words = [f"w{draw(generator, 0, 99)}" for _ in range(8)]
    sentences = [
        [words[draw(generator, 0, 7)] for _ in range(draw(generator, 1, 6))] for _ in range(5)
    ]
    return [((sentences, draw(generator, 1, 3)), {}) for _ in range(2)]


def _fresh_padding(generator: torch.Generator) -> list:
    """Random sentence lengths, cut into random consecutive batches."""
    cases = []
    for _ in range(3):
        count = draw(generator, 1, 8)
        pairs = [([5] * draw(generator, 1, 9), [6] * draw(generator, 1, 9)) for _ in range(count)]
        batches, start = [], 0
        while start < count:
            end = min(count, start + draw(generator, 1, 3))
            batches.append(list(range(start, end)))
            start = end
        cases.append(((pairs, batches), {}))
    return cases


def _vocabulary_with(
    sentences, min_freq, strictly_more=False, ties="alphabetical", specials=True, once=False
):
    counts = Counter(
        token for sentence in sentences for token in (set(sentence) if once else sentence)
    )
    kept = [t for t, n in counts.items() if (n > min_freq if strictly_more else n >= min_freq)]
    if ties == "alphabetical":
        kept.sort(key=lambda t: (-counts[t], t))
    elif ties == "first seen":
        kept.sort(key=lambda t: -counts[t])
    else:
        kept.sort()
    return (SPECIALS if specials else ()) + tuple(kept)


exercise_5_2 = Exercise(
    "exercise 5.2 (a word vocabulary)",
    "my_vocabulary(sentences, min_freq) -> tuple of tokens, the specials first",
    lambda sentences, min_freq: Vocab.build(sentences, min_freq).tokens,
    _cases_vocabulary,
    (
        Mistake(
            "tokens seen exactly min_freq times are left out: keep those seen *at least* min_freq times.",
            lambda s, m: _vocabulary_with(s, m, strictly_more=True),
        ),
        Mistake(
            "equally frequent tokens keep the order they were first seen in; break ties "
            "alphabetically, so the same data always gives the same ids.",
            lambda s, m: _vocabulary_with(s, m, ties="first seen"),
        ),
        Mistake(
            "the tokens are in alphabetical order; the most frequent come first.",
            lambda s, m: _vocabulary_with(s, m, ties="alphabet only"),
        ),
        Mistake(
            "the specials are missing: <unk>, <pad>, <s> and </s> come first, in that order.",
            lambda s, m: _vocabulary_with(s, m, specials=False),
        ),
        Mistake(
            "each word is counted once per sentence; count every time it occurs.",
            lambda s, m: _vocabulary_with(s, m, once=True),
        ),
    ),
    fresh=_fresh_vocabulary,
)


def _padding_with(pairs, batches, target_extra=1, sides=("src", "tgt")):
    slots = real = 0
    for batch in batches:
        lengths = {
            "src": [len(pairs[i][0]) for i in batch],
            "tgt": [len(pairs[i][1]) + target_extra for i in batch],
        }
        for side in sides:
            slots += len(batch) * max(lengths[side])
            real += sum(lengths[side])
    return 1 - real / slots


exercise_5_3 = Exercise(
    "exercise 5.3 (the padding of a batch plan)",
    "my_padding_fraction(pairs, batches) -> float in [0, 1)",
    padding_fraction,
    lambda: [
        (([([5] * s, [6] * t) for s, t in ((2, 1), (4, 3))], [[0, 1]]), {}),
        (([([5] * s, [6] * t) for s, t in ((3, 3), (3, 1), (7, 2), (1, 6))], [[0, 1], [2, 3]]), {}),
        (([([5] * s, [6] * t) for s, t in ((4, 4), (4, 4))], [[0], [1]]), {}),
    ],
    (
        Mistake(
            "the target's extra token is missing: each target is padded with <s> or </s> around it, "
            "one slot more than its ids.",
            lambda p, b: _padding_with(p, b, target_extra=0),
        ),
        Mistake(
            "only the targets are counted; the sources are padded too.",
            lambda p, b: _padding_with(p, b, sides=("tgt",)),
        ),
        Mistake(
            "only the sources are counted; the targets are padded too.",
            lambda p, b: _padding_with(p, b, sides=("src",)),
        ),
    ),
    fresh=_fresh_padding,
)
