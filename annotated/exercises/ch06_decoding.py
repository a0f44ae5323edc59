"""Chapter 6's exercises: the cases each check runs, and the plausible wrong answers it names.

6.2 asks for GNMT's length penalty (`length_penalty`), 6.3 for BLEU's clipped n-gram matches of
one sentence, checked against sacreBLEU's own statistics.
"""

from __future__ import annotations

from collections import Counter

import sacrebleu
import torch

from annotated.ch06_decoding import length_penalty
from annotated.exercises import Exercise, Mistake, draw


def _ngram_matches_with(
    hypothesis, reference, n, clip=True, total_from_reference=False, distinct=False
):
    grams = lambda tokens: Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))  # noqa: E731
    mine, theirs = grams(hypothesis), grams(reference)
    if distinct:
        return len(set(mine) & set(theirs)), sum(mine.values())
    matches = sum(min(c, theirs[g]) if clip else (c if g in theirs else 0) for g, c in mine.items())
    return matches, sum((theirs if total_from_reference else mine).values())


def _fresh_sentences(generator: torch.Generator) -> list:
    """A random hypothesis and reference over six words (repeats likely), n from 1 to 3."""
    words = ("a", "dog", "the", "park", "runs", "in")

    def sentence() -> list[str]:
        return [words[draw(generator, 0, 5)] for _ in range(draw(generator, 1, 9))]

    return [((sentence(), sentence(), draw(generator, 1, 3)), {}) for _ in range(3)]


def _sacrebleu_ngram_matches(hypothesis, reference, n):
    bleu = sacrebleu.metrics.BLEU(tokenize="none", force=True, max_ngram_order=max(n, 1))
    result = bleu.corpus_score([" ".join(hypothesis)], [[" ".join(reference)]])
    return result.counts[n - 1], result.totals[n - 1]


exercise_6_2 = Exercise(
    "exercise 6.2 (the length penalty)",
    "my_length_penalty(length, alpha) -> ((5 + length) / 6) ** alpha",
    lambda length, alpha: length_penalty(torch.tensor(float(length)), alpha).item(),
    lambda: [
        ((length, alpha), {})
        for length, alpha in ((1, 0.6), (10, 0.6), (30, 2.5), (7, 0.0), (4, 1.0))
    ],
    (
        Mistake(
            "the denominator (5 + 1)^alpha is missing: lp is 1 for a one-token output.",
            lambda length, alpha: (5.0 + length) ** alpha,
        ),
        Mistake(
            "alpha multiplies instead of being the exponent.",
            lambda length, alpha: alpha * (5.0 + length) / 6.0,
        ),
        Mistake(
            "the 5 is added after dividing: it is (5 + |Y|) / 6, the whole raised to alpha.",
            lambda length, alpha: (5.0 + length / 6.0) ** alpha,
        ),
    ),
    atol=1e-6,
    fresh=lambda generator: [
        ((draw(generator, 1, 60), draw(generator, 1, 30) / 10), {}) for _ in range(3)
    ],
)

exercise_6_3 = Exercise(
    "exercise 6.3 (BLEU's clipped n-gram matches)",
    "my_ngram_matches(hypothesis, reference, n) -> (matches, total)",
    _sacrebleu_ngram_matches,
    lambda: [
        ((["the", "the", "the", "cat"], ["the", "cat", "sat", "on", "the", "mat"], 1), {}),
        ((["the", "the", "the", "cat"], ["the", "cat", "sat", "on", "the", "mat"], 2), {}),
        (
            (
                ["a", "dog", "runs", "in", "the", "park"],
                ["a", "dog", "is", "running", "in", "the", "park"],
                2,
            ),
            {},
        ),
        ((["two", "men", "two", "men"], ["two", "men", "talk"], 2), {}),
        ((["short"], ["a", "much", "longer", "reference"], 1), {}),
    ],
    (
        Mistake(
            "the counts are not clipped: an n-gram counts at most as often as the reference has it "
            "(otherwise 'the the the' scores perfectly against any reference with 'the').",
            lambda h, r, n: _ngram_matches_with(h, r, n, clip=False),
        ),
        Mistake(
            "the total counts the reference's n-grams; precision divides by the hypothesis's.",
            lambda h, r, n: _ngram_matches_with(h, r, n, total_from_reference=True),
        ),
        Mistake(
            "each distinct n-gram is counted once; a repeated n-gram counts as often as it "
            "occurs, up to the reference's count.",
            lambda h, r, n: _ngram_matches_with(h, r, n, distinct=True),
        ),
    ),
    fresh=_fresh_sentences,
)
