"""Wrong answers written apart from the exercises' own lists of mistakes, as students write them,
against the checks' general diagnoses (annotated/exercises/diagnoses.py).

Each answer below is wrong in one way, and `words` is what the check's line must say to name it
(None: no diagnosis is expected to name it; its line still says where the values differ). At
least 80% of the suite must be named, no line may show two numbers that look equal, and every
answer must be rejected.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from annotated.ch05_text import SPECIALS
from annotated.exercises import Exercise, check, numbers
from annotated.exercises.ch01_attention import exercise_1_2, exercise_1_3
from annotated.exercises.ch02_model import exercise_2_2, exercise_2_3
from annotated.exercises.ch03_training import exercise_3_2, exercise_3_3
from annotated.exercises.ch04_copy_task import exercise_4_2
from annotated.exercises.ch05_text import exercise_5_2, exercise_5_3
from annotated.exercises.ch06_decoding import exercise_6_2, exercise_6_3
from annotated.exercises.ch07_multi30k import exercise_7_2
from annotated.exercises.ch08_wmt import exercise_8_2
from annotated.exercises.ch09_table3 import exercise_9_2


@dataclass(frozen=True)
class Wrong:
    name: str
    exercise: Exercise
    answer: Any
    words: str | None  # what the line must say; None: not expected to be named


def _attention(q, k, v, mask=None, fill=float("-inf"), dtype=None, by_multiplying=False):
    if dtype is not None:
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores * mask if by_multiplying else scores.masked_fill(~mask, fill)
    return scores.softmax(-1) @ v


def _layer_norm(x, w, b, eps=1e-5, dim=-1, affine=True):
    mean = x.mean(dim, keepdim=True)
    var = ((x - mean) ** 2).mean(dim, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    return w * y + b if affine else y


def _table(max_len, d_model, dtype=torch.float64, start=0, rows=None):
    pos = torch.arange(start, start + (rows or max_len), dtype=torch.float64).unsqueeze(1)
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    out = torch.zeros(pos.size(0), d_model, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return out.to(dtype)


def _smoothed(target, vocab, pad, eps, dtype=torch.float32):
    q = torch.full((len(target), vocab), eps / (vocab - 2), dtype=dtype)
    q[torch.arange(len(target)), target] = 1 - eps
    q[:, pad] = 0
    q[target == pad] = 0
    return q


def _until(ids, specials, cut=0):
    out = []
    for row in ids.tolist():
        end = row.index(specials.eos) if specials.eos in row else len(row)
        out.append([t for t in row[: max(0, end - cut)] if t != specials.pad])
    return out


def _vocab(sentences, min_freq):
    counts = Counter(t for s in sentences for t in s)
    kept = sorted((t for t, n in counts.items() if n >= min_freq), key=lambda t: (-counts[t], t))
    return SPECIALS + tuple(t for t in kept if t not in SPECIALS)


def _padding(pairs, batches):
    slots = real = 0
    for batch in batches:
        for lengths in ([len(pairs[i][0]) for i in batch], [len(pairs[i][1]) + 1 for i in batch]):
            slots += len(batch) * max(lengths)
            real += sum(lengths)
    return real / slots


def _grams(hypothesis, reference, n):
    def count(tokens):
        return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))

    mine, theirs = count(hypothesis), count(reference)
    return sum(min(c, theirs[g]) for g, c in mine.items()), sum(mine.values())


def _cross_entropy_sum(logits, targets, pad):
    return torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=pad, reduction="sum"
    )


SUITE = [
    # 1.2 attention
    Wrong("mask filled with 0", exercise_1_2, lambda q, k, v, mask=None: _attention(q, k, v, mask, fill=0.0), "only where the mask hides positions"),
    Wrong("mask multiplied in", exercise_1_2, lambda q, k, v, mask=None: _attention(q, k, v, mask, by_multiplying=True), "only where the mask hides positions"),
    Wrong("in float32", exercise_1_2, lambda q, k, v, mask=None: _attention(q, k, v, mask, dtype=torch.float32), "your output is float32, the book's float64"),
    Wrong("output transposed", exercise_1_2, lambda q, k, v, mask=None: _attention(q, k, v, mask).transpose(-2, -1), "dimensions 1 and 2 swapped"),
    Wrong("squeezed", exercise_1_2, lambda q, k, v, mask=None: _attention(q, k, v, mask).squeeze(), "a dimension of size 1 is missing"),
    # 1.3 the subsequent mask
    Wrong("floats, not bools", exercise_1_3, lambda size: torch.ones(1, size, size).tril(), "your output is float32, the book's bool"),
    Wrong("one too large", exercise_1_3, lambda size: torch.ones(1, size + 1, size + 1, dtype=torch.bool).tril(), "off by one"),
    # 2.2 layer normalization
    Wrong("no epsilon", exercise_2_2, lambda x, w, b, eps=1e-5: _layer_norm(x, w, b, 0.0), "epsilon"),
    Wrong("in float32", exercise_2_2, lambda x, w, b, eps=1e-5: _layer_norm(x.float(), w.float(), b.float(), eps), "your output is float32, the book's float64"),
    Wrong("over dimension 0", exercise_2_2, lambda x, w, b, eps=1e-5: _layer_norm(x, w, b, eps, dim=0), "normalized over dimension 0"),
    Wrong("no gain and shift", exercise_2_2, lambda x, w, b, eps=1e-5: _layer_norm(x, w, b, eps, affine=False), None),
    # 2.3 the sinusoidal table
    Wrong("in float32", exercise_2_3, lambda n, d: _table(n, d, torch.float32), "your output is float32, the book's float64"),
    Wrong("transposed", exercise_2_3, lambda n, d: _table(n, d).T, "dimensions 0 and 1 swapped"),
    Wrong("one row too many", exercise_2_3, lambda n, d: _table(n, d, rows=n + 1), "off by one"),
    Wrong("positions from 1", exercise_2_3, lambda n, d: _table(n, d, start=1), None),
    # 3.2 the learning rate
    Wrong("divided by d_model", exercise_3_2, lambda s, d, w: d**-1 * min(s**-0.5, s * w**-1.5), "divided by sqrt(512)"),
    Wrong("times sqrt(d_model)", exercise_3_2, lambda s, d, w: d**0.5 * min(s**-0.5, s * w**-1.5), "times 512"),
    Wrong("warmup one more", exercise_3_2, lambda s, d, w: d**-0.5 * min(s**-0.5, s * (w + 1) ** -1.5), "off by one"),
    # 3.3 smoothed targets
    Wrong("a batch dimension", exercise_3_3, lambda t, v, p, e: _smoothed(t, v, p, e).unsqueeze(0), "a dimension of size 1 is extra"),
    Wrong("transposed", exercise_3_3, lambda t, v, p, e: _smoothed(t, v, p, e).T, "dimensions 0 and 1 swapped"),
    # 4.2 until </s>
    Wrong("cut one early", exercise_4_2, lambda ids, s: _until(ids, s, cut=1), "off by one"),
    # 5.2 the vocabulary
    Wrong("min_freq - 1", exercise_5_2, lambda s, m: _vocab(s, m - 1), "off by one"),
    # 5.3 padding
    Wrong("real share", exercise_5_3, _padding, "1 minus the book's"),
    Wrong("a percentage", exercise_5_3, lambda p, b: 100 * (1 - _padding(p, b)), "times 100"),
    # 6.2 the length penalty
    Wrong("length + 1", exercise_6_2, lambda length, a: ((6.0 + length) / 6.0) ** a, "off by one"),
    Wrong("divided by 5", exercise_6_2, lambda length, a: ((5.0 + length) / 5.0) ** a, "a 5 where the book has 6"),
    Wrong("a tensor", exercise_6_2, lambda length, a: torch.tensor((5.0 + length) / 6.0) ** a, "the book returns a number"),
    Wrong("alpha fixed", exercise_6_2, lambda length, a: ((5.0 + length) / 6.0) ** 0.6, None),
    # 6.3 clipped n-gram matches
    Wrong("n - 1 grams", exercise_6_3, lambda h, r, n: _grams(h, r, max(n - 1, 1)), "off by one"),
    Wrong("total first", exercise_6_3, lambda h, r, n: tuple(reversed(_grams(h, r, n))), "reverse order"),
    # 7.2 checkpoint averaging
    Wrong("divided by one more", exercise_7_2, lambda states: {k: sum(s[k] for s in states) / (len(states) + 1) for k in states[0]}, "divided by 2"),
    Wrong("in bfloat16", exercise_7_2, lambda states: {k: sum(s[k].bfloat16() for s in states) / len(states) for k in states[0]}, "your output is bfloat16, the book's float32"),
    Wrong("the median", exercise_7_2, lambda states: {k: torch.stack([s[k] for s in states]).median(0).values for k in states[0]}, None),
    # 8.2 micro-batches
    Wrong("rounded up", exercise_8_2, lambda t, m, p: max(1, math.ceil(t / (m * p))), "off by one"),
    # 9.2 perplexity
    Wrong("a tensor", exercise_9_2, lambda logits, targets, pad: (_cross_entropy_sum(logits, targets, pad) / (targets != pad).sum()).exp(), "the book returns a number"),
    Wrong("the summed loss", exercise_9_2, lambda logits, targets, pad: math.exp(_cross_entropy_sum(logits, targets, pad).item()), None),
]  # fmt: skip


def line_for(wrong: Wrong, capsys) -> str:
    assert not check(wrong.exercise, wrong.answer), f"{wrong.name}: accepted"
    return capsys.readouterr().out.strip()


def named(wrong: Wrong, line: str) -> bool:
    return wrong.words is not None and wrong.words in line


@pytest.mark.parametrize("wrong", SUITE, ids=lambda w: f"{w.exercise.name.split()[1]} {w.name}")
def test_each_wrong_answer_is_rejected_and_named_as_expected(wrong, capsys):
    line = line_for(wrong, capsys)
    for mistake in wrong.exercise.mistakes:  # written apart from the book's list
        assert mistake.hint not in line, f"{wrong.name} is one of the book's own mistakes"
    if wrong.words is not None:
        assert named(wrong, line), f"{wrong.name}: the line does not say {wrong.words!r}:\n{line}"
    assert not _equal_looking(line), f"{wrong.name}: two numbers that look equal:\n{line}"


def test_the_suite_covers_every_exercise_and_80_percent_are_named(capsys):
    exercises = {w.exercise.name for w in SUITE}
    assert len(SUITE) >= 30 and len(exercises) == 14
    lines = [line_for(w, capsys) for w in SUITE]
    share = sum(named(w, line) for w, line in zip(SUITE, lines, strict=True)) / len(SUITE)
    assert share >= 0.8, f"only {share:.0%} of the wrong answers are named"


def _equal_looking(line: str) -> bool:
    """ "you have X, the book X" with the same X."""
    number = r"(-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
    return any(a == b for a, b in re.findall(rf"you have {number},? the book {number}", line))


def test_numbers_show_the_digits_that_differ_and_the_difference():
    assert (
        numbers(4.41, 4.41000001) == "you have 4.41, the book 4.41000001 (a difference of 1.0e-08)"
    )
    assert numbers(1.116, -0.7407) == "you have 1.116, the book -0.7407"
    assert _equal_looking("at index (2, 10) you have 4.41, the book 4.41.")
    assert not _equal_looking(numbers(4.41, 4.41000001))


# ---------------------------------------------------------------- each diagnosis on its own


def _general(got, expected, args=(), kwargs=None, reference=None, atol=1e-9):
    from annotated.exercises.diagnoses import general

    found = general(
        reference or (lambda *a, **k: expected), args, kwargs or {}, got, expected, atol
    )
    return found or ""


def test_a_device_is_said_before_any_value():
    from annotated.exercises import compare

    line = compare(torch.zeros(2, 3, device="meta"), torch.zeros(2, 3), 1e-6)
    assert line.startswith("your output is on meta, the book's on cpu")


def test_a_constant_factor_is_named_only_when_the_ratio_is_one_constant():
    expected = torch.randn(4, 8, dtype=torch.float64)
    assert "divided by sqrt(8)" in _general(expected / math.sqrt(8), expected, (expected,))
    assert "times 3 everywhere" in _general(3 * expected, expected)
    noisy = expected * (1 + 0.1 * torch.rand(4, 8, dtype=torch.float64))
    assert _general(noisy, expected) == ""  # not one constant: no factor is claimed


def test_a_transpose_and_a_missing_dimension_are_told_apart_from_other_shapes():
    expected = torch.randn(3, 5, dtype=torch.float64)
    assert "dimensions 0 and 1 swapped" in _general(expected.T.contiguous(), expected)
    assert "dimension of size 1 is extra" in _general(expected.unsqueeze(0), expected)
    assert _general(torch.randn(5, 3, dtype=torch.float64), expected) == ""


def test_a_mask_diagnosis_needs_the_difference_confined_to_rows_with_hidden_positions():
    mask = torch.tensor([[[True, False]], [[True, True]]])  # sentence 0 hides a position
    expected = torch.randn(2, 3, 4, dtype=torch.float64)
    confined = expected.clone()
    confined[0] += 1
    assert "only where the mask hides positions" in _general(confined, expected, (mask,))
    everywhere = expected + 1
    assert "mask" not in _general(everywhere, expected, (mask,))


def test_close_is_said_only_between_1e_7_and_1e_4():
    expected = torch.ones(3, dtype=torch.float64)
    assert "close, but not equal" in _general(expected * (1 + 1e-5), expected)
    assert "close" not in _general(expected * (1 + 1e-2), expected)
