"""Chapter 5: tokens, word and subword vocabularies and their shared interface, token batches,
and the batch plan every trainer uses."""

import dataclasses
import random

import pytest
import torch

from annotated.ch05_text import (
    SPECIALS,
    BatchPlan,
    Subwords,
    Vocab,
    detokenize,
    load_multi30k,
    make_batch,
    padding_fraction,
    step_shard,
    token_batches,
    tokenize,
)

SP = Vocab(SPECIALS, {}).specials  # the ids every vocabulary gives: pad 1, <s> 2, </s> 3


# ---------------------------------------------------------------- tokens and vocabularies


def test_tokenize_splits_punctuation_and_clitics_and_keeps_case():
    assert tokenize(["A man's T-shirt, red."], "en") == [
        ["A", "man", "'s", "T", "-", "shirt", ",", "red", "."]
    ]
    assert tokenize(["Zwei  Hunde."], "de") == [["Zwei", "Hunde", "."]]  # no whitespace tokens


@pytest.mark.parametrize(
    "text",
    [
        "A man's dog isn't small.",
        "A boy in a t-shirt (red) jumps: high!",
        'She says "hello" to them.',
        "Two 3-year-old kids, one with $5.",
    ],
)
def test_detokenize_inverts_tokenize(text):
    assert detokenize(tokenize([text], "en")[0]) == text


def test_vocab_specials_first_min_freq_and_deterministic_order():
    sentences = [["b", "a", "c"], ["a", "b"], ["a", "d"]]
    vocab = Vocab.build(sentences, min_freq=2, language="en")
    assert vocab.tokens == SPECIALS + ("a", "b")  # a (3) before b (2); c and d seen once
    assert vocab.specials == SP and vocab.unk == 0
    assert vocab.encode(["a", "zebra", "b"]) == [4, vocab.unk, 5]
    assert vocab.decode([4, 5]) == ["a", "b"]
    assert Vocab.build(list(reversed(sentences)), 2, language="en").tokens == vocab.tokens
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.build(sentences, 0)


def test_vocab_round_trip_and_refusal_of_other_settings(tmp_path):
    vocab = Vocab.build([["x", "y", "x"]], min_freq=1, language="de")
    path = tmp_path / "vocab.de.json"
    vocab.save(path)
    assert Vocab.load(path, {"min_freq": 1, "language": "de"}) == vocab
    with pytest.raises(ValueError, match="min_freq"):
        Vocab.load(path, {"min_freq": 2, "language": "de"})


@pytest.mark.multi30k
def test_vocabularies_come_from_train_only_and_saved_ones_are_checked(corpus, tmp_path):
    train_en = {t for s in tokenize([en for _, en in corpus.raw["train"]], "en") for t in s}
    assert set(corpus.tgt_vocab.tokens) - set(SPECIALS) <= train_en
    # A word that occurs in the test set but never in training is unknown.
    test_en = {
        t for s in tokenize([en for _, en in corpus.raw["test_2016_flickr"]], "en") for t in s
    }
    assert test_en - train_en and not (test_en - train_en) & set(corpus.tgt_vocab.tokens)
    Vocab.build([["a"]], min_freq=3, language="de", **{"built from": "x"}).save(
        tmp_path / "vocab.de.json"
    )
    with pytest.raises(ValueError, match="other settings"):
        load_multi30k(vocab_dir=tmp_path, splits=("val",))


@pytest.mark.multi30k
def test_round_trip_on_the_validation_references(corpus):
    references = [en for _, en in corpus.raw["val"]]
    same = sum(
        detokenize(tokens) == text
        for tokens, text in zip(tokenize(references, "en"), references, strict=True)
    )
    assert same / len(references) > 0.97


def _sentences() -> list[str]:
    """Varied sentences in two alphabets, enough for a small BPE vocabulary with byte fallback."""
    rng = random.Random(0)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyzäöüß") for _ in range(rng.randint(2, 9)))
        for _ in range(400)
    ]
    fixed = [
        "The cat sat on the mat.",
        "Die Katze saß auf der Matte.",
        "Orlando Bloom und Miranda Kerr lieben sich noch immer.",
        "Parliament's legislative prerogative",
    ]
    return fixed + [
        " ".join(rng.choice(words) for _ in range(8)).capitalize() + "." for _ in range(600)
    ]


TEXTS = _sentences()
VOCAB = 400  # 282 of them are bytes, specials and the characters seen


@pytest.fixture(scope="module")
def subwords():
    return Subwords.build(TEXTS, VOCAB, data="test sentences")


def test_subwords_round_trip_exactly_and_never_give_unk(subwords):
    unseen = ["Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich — 100 %!"]
    for text in TEXTS[:4] + unseen:
        ids = subwords.encode_texts([text])[0]
        assert subwords.unk not in ids, "byte fallback spells unseen characters"
        assert subwords.decode_texts([ids]) == [text]
    assert len(subwords) == VOCAB


def test_subwords_use_the_specials_of_the_word_vocabulary(subwords):
    pieces = [subwords.processor.id_to_piece(i) for i in range(4)]
    assert pieces == list(SPECIALS)
    assert (subwords.unk, *dataclasses.astuple(subwords.specials)) == (0, 1, 2, 3)


def test_subwords_are_deterministic_saved_and_refused_with_other_settings(subwords, tmp_path):
    assert Subwords.build(TEXTS, VOCAB, data="test sentences") == subwords
    path = tmp_path / "subwords.json"
    subwords.save(path)
    assert Subwords.load(path, subwords.settings) == subwords
    with pytest.raises(ValueError, match="built with"):
        Subwords.load(path, {**subwords.settings, "vocab_size": 37000})


# ---------------------------------------------------------------- batching


def _pairs(lengths):
    return [([5] * s, [6] * t) for s, t in lengths]


def test_token_batches_cover_every_pair_once_within_budget():
    rng = torch.Generator().manual_seed(0)
    # Like real pairs, a source's length goes with its target's (here within 3 tokens).
    tgt = torch.randint(4, 30, (500,), generator=rng)
    src = tgt + torch.randint(-3, 4, (500,), generator=rng)
    pairs = _pairs(zip(src.tolist(), tgt.tolist(), strict=True))
    batches = token_batches(pairs, max_tokens=200, seed=1)
    assert sorted(i for b in batches for i in b) == list(range(500))
    for batch in batches:
        src = max(len(pairs[i][0]) for i in batch)
        tgt = max(len(pairs[i][1]) + 1 for i in batch)
        assert len(batch) * max(src, tgt) <= 200
    assert padding_fraction(pairs, batches) < 0.1  # sorting keeps the padding small
    with pytest.raises(ValueError, match="max_tokens"):
        token_batches(_pairs([(300, 2)]), max_tokens=200)


def test_padding_fraction_by_hand_and_make_batch():
    pairs = _pairs([(2, 1), (4, 3)])
    # Sources: 2 + 4 real of 2 * 4 slots; targets (+1 each): 2 + 4 real of 2 * 4 slots.
    assert padding_fraction(pairs, [[0, 1]]) == pytest.approx(1 - 12 / 16)
    batch = make_batch(pairs, SP)
    assert batch.tgt_in[0].tolist() == [SP.bos, 6, SP.eos, SP.pad]  # </s> read, nothing predicted
    assert batch.tgt_out[0].tolist() == [6, SP.eos, SP.pad, SP.pad]
    assert batch.n_tokens == 2 + 4


# ---------------------------------------------------------------- one interface, two vocabularies


def test_both_vocabularies_offer_the_same_text_interface(subwords):
    words = Vocab.build(tokenize(["A dog runs .", "A man's dog sleeps ."], "en"), 1, language="en")
    text = "A man's dog runs."
    for vocab in (words, subwords):
        ids = vocab.encode_texts([text])[0]
        assert ids == vocab.encode(vocab.split([text])[0])
        assert vocab.decode_texts([ids]) == [vocab.join(vocab.decode(ids))]
    assert words.decode_texts(words.encode_texts([text])) == [text]  # every word is known here
    assert subwords.decode_texts(subwords.encode_texts([text])) == [text]  # always exact
    assert words.can_copy_unknowns and not subwords.can_copy_unknowns
    assert words.encode_texts(["A zebra runs."])[0][1] == words.unk


# ---------------------------------------------------------------- the batch plan


def test_batch_plan_is_a_function_of_the_step_and_shares_it_between_processes():
    pairs = _pairs([(n % 13 + 2, n % 11 + 1) for n in range(300)])
    plan = BatchPlan.build(pairs, max_tokens=60, accumulate=2, world=2, seed=3)
    assert plan.steps_per_epoch == len(plan.batches) // 4
    step = plan.steps_per_epoch + 1  # in the second epoch
    shares = [plan.step(step, SP, rank, 2) for rank in (0, 1)]
    assert [len(share) for share in shares] == [2, 2]
    group = step_shard(len(plan.batches), step, 4, 3)
    assert sorted(
        step_shard(len(plan.batches), step, 4, 3, rank, 2)[0] for rank in (0, 1)
    ) == sorted(group[:2])
    again = plan.step(step, SP, 0, 2)
    assert all(a.src.equal(b.src) for a, b in zip(again, shares[0], strict=True))
    # Epochs visit the batches in different orders; every batch once per epoch.
    epoch = [b for s in range(plan.steps_per_epoch) for b in step_shard(len(plan.batches), s, 4, 3)]
    assert len(set(epoch)) == len(epoch) == plan.steps_per_epoch * 4
    assert step_shard(len(plan.batches), 0, 4, 3) != step_shard(
        len(plan.batches), plan.steps_per_epoch, 4, 3
    )
    with pytest.raises(ValueError, match="lower accumulate or max_tokens"):
        BatchPlan.build(pairs[:3], max_tokens=60, accumulate=8)
