"""Chapter 6: the key/value cache, cached greedy decoding, beam search and the length penalty,
the translator and its copying of unknown words, and scoring."""

import itertools

import pytest
import torch

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch04_copy_task import greedy_decode, until_eos
from annotated.ch05_text import SPECIALS, Vocab, detokenize, tokenize
from annotated.ch06_decoding import (
    DecodeConfig,
    DecoderCache,
    Translator,
    beam_search,
    beam_winner,
    greedy_decode_cached,
    length_penalty,
    paper_tokens,
    score,
    tokenized_bleu,
)

SP = Vocab(SPECIALS, {}).specials  # the ids every vocabulary gives: pad 1, <s> 2, </s> 3


# ---------------------------------------------------------------- decoding


def _random_model(seed=0, vocab=13, N=2):
    torch.manual_seed(seed)
    model = make_model(
        ModelConfig(vocab, vocab, N=N, d_model=32, d_ff=64, h=4, tie_target_embeddings=True)
    )
    return model.eval()


def _sources(seed=0, batch=5, vocab=13):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (batch, 9), generator=generator)
    for row, length in enumerate([9, 5, 7, 3, 8][:batch]):
        src[row, length - 1] = SP.eos
        src[row, length:] = SP.pad
    return src, (src != SP.pad).unsqueeze(-2)


def test_cached_decoder_states_equal_the_full_decoder():
    model = _random_model()
    src, src_mask = _sources()
    tgt = torch.randint(4, 13, (5, 6))
    memory = model.encode(src, src_mask)
    full = model.decode(memory, src_mask, tgt, torch.ones(1, 6, 6, dtype=torch.bool).tril())
    cache = DecoderCache(model)
    steps = [model.decode(memory, src_mask, tgt[:, i : i + 1], None, cache) for i in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_greedy_equals_uncached_greedy_exactly(seed):
    model = _random_model(seed)
    src, src_mask = _sources(seed)
    ours = greedy_decode_cached(model, src, src_mask, SP, max_len=12)
    reference = greedy_decode(model, src, src_mask, SP, max_len=12)
    assert torch.equal(ours, reference)
    # One sentence at a time gives the same sentences as the batch.
    for row in range(src.size(0)):
        alone = greedy_decode_cached(model, src[row : row + 1], src_mask[row : row + 1], SP, 12)
        assert until_eos(alone, SP) == until_eos(ours[row : row + 1], SP)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_of_one_is_greedy(seed):
    model = _random_model(seed)
    src, src_mask = _sources(seed)
    greedy = until_eos(greedy_decode_cached(model, src, src_mask, SP, 12), SP)
    for alpha in (0.0, 0.6):
        beam = until_eos(beam_search(model, src, src_mask, SP, 12, beam=1, alpha=alpha), SP)
        assert beam == greedy


def _sequence_log_prob(model, src, src_mask, tokens):
    tgt = torch.tensor([[SP.bos, *tokens]])
    with torch.no_grad():
        logits = model(
            src, tgt[:, :-1], src_mask, torch.ones(1, len(tokens), len(tokens)).bool().tril()
        )
    log_p = logits.log_softmax(-1)[0]
    return sum(log_p[i, t].item() for i, t in enumerate(tokens))


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_exhaustive_best(alpha):
    # Vocabulary of 6 (4 specials + 2 words), outputs of at most 3 tokens: few enough to list all.
    # A model is free to put probability on <unk>, <pad> and <s>, so every id is a possible output.
    model = _random_model(seed=3, vocab=6, N=1)
    src, src_mask = torch.tensor([[4, 5, 4, SP.eos]]), torch.ones(1, 1, 4, dtype=torch.bool)
    max_len = 3
    candidates = []
    for length in range(1, max_len + 1):
        for body in itertools.product(range(6), repeat=length - 1):
            if SP.eos in body:
                continue
            ends = [(*body, SP.eos)] if length < max_len else [(*body, t) for t in range(6)]
            candidates += ends
    best = max(
        candidates,
        key=lambda c: (
            _sequence_log_prob(model, src, src_mask, list(c))
            / length_penalty(torch.tensor(float(len(c))), alpha).item()
        ),
    )
    found = beam_search(model, src, src_mask, SP, max_len, beam=64, alpha=alpha)[0].tolist()
    assert found[: len(best)] == list(best)


def test_length_penalty_formula():
    assert length_penalty(torch.tensor(1.0), 0.6).item() == pytest.approx(1.0)
    assert length_penalty(torch.tensor(10.0), 0.6).item() == pytest.approx((15 / 6) ** 0.6)
    assert length_penalty(torch.tensor(10.0), 0.0).item() == 1.0


def test_copy_unknowns_replaces_only_unk_with_source_words():
    src_vocab = Vocab(SPECIALS + ("Hund", "Katze"), {"language": "de"})
    tgt_vocab = Vocab(SPECIALS + ("dog", "cat"), {"language": "en"})
    model = _random_model(seed=4, vocab=6, N=1)
    with torch.no_grad():  # a model that always answers <unk>, until the length limit
        model.generator.bias.fill_(-50.0)
        model.generator.bias[tgt_vocab.unk] = 50.0
    translator = Translator(model, src_vocab, tgt_vocab)
    sentence = "Ein Hund jagt Katze"
    bare = translator.translate([sentence], copy_unknowns=False)[0]
    assert set(bare.split()) == {"<unk>"}
    copied = translator.translate([sentence])[0].split()
    assert len(copied) == len(bare.split()) and set(copied) <= {"Ein", "Hund", "jagt", "Katze"}


# ---------------------------------------------------------------- scoring


def test_score_perfect_and_signature():
    references = ["A dog runs on the grass.", "Two men talk."]
    perfect = score(references, references)
    assert perfect["BLEU"] == pytest.approx(100.0) and perfect["chrF"] == pytest.approx(100.0)
    assert "case:mixed" in perfect["BLEU signature"] and "tok:13a" in perfect["BLEU signature"]
    assert perfect["length ratio"] == 1.0
    short = score(["A dog runs.", "Two men talk."], references)  # 4 + 4 tokens against 7 + 4
    assert short["length ratio"] == pytest.approx(8 / 11, abs=1e-3)
    # Our detokenizer matters: scoring the token-joined text of a hyphenated word loses points.
    hyphen = ["A girl in a t-shirt sits on a long wooden bench."]
    joined = " ".join(tokenize(hyphen, "en")[0])
    assert score([joined], hyphen)["BLEU"] < score([detokenize(joined.split())], hyphen)["BLEU"]


def test_paper_tokens_split_compounds_as_tensor2tensor_did():
    assert paper_tokens(["Ein Rotwein-Glas, bitte."]) == [
        "Ein Rotwein ##AT##-##AT## Glas , bitte ."
    ]
    same = ["Der Hund-Besitzer schläft."]
    assert tokenized_bleu(same, same)["tokenized BLEU"] == pytest.approx(100.0)
    # Getting the compound's parts right earns the split-off hyphen's n-grams too.
    wrong = tokenized_bleu(["Der Katzen-Besitzer schläft."], same)["tokenized BLEU"]
    assert 0 < wrong < 100


def test_decode_config_limits_the_output_length():
    model = _random_model(seed=4, vocab=6, N=1)
    vocab = Vocab(SPECIALS + ("Hund", "Katze"), {"language": "de"})
    with torch.no_grad():  # never </s>: every output runs to its length limit
        model.generator.bias.fill_(-50.0)
        model.generator.bias[4] = 50.0
    short = Translator(model, vocab, vocab, DecodeConfig(extra_length=2))
    long = Translator(model, vocab, vocab, DecodeConfig(extra_length=7))
    # The source "Hund Katze" is 3 ids with </s>, so outputs get 3 + extra_length tokens.
    assert len(short.translate(["Hund Katze"])[0].split()) == 5
    assert len(long.translate(["Hund Katze"], beam=2)[0].split()) == 10


def test_decode_config_reads_what_older_checkpoints_recorded():
    assert DecodeConfig.from_saved({"beam": 4, "alpha": 2.5}) == DecodeConfig(4, 2.5, 50, 4000)
    full = {"beam": 2, "alpha": 0.6, "extra_length": 10, "batch_tokens": 99, "unknown": 1}
    assert DecodeConfig.from_saved(full) == DecodeConfig(2, 0.6, 10, 99)
    with pytest.raises(ValueError, match="positive"):
        DecodeConfig(beam=0)


# ---------------------------------------------------------------- the traced search (beam_tree)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.5])
def test_a_traced_search_is_the_same_search_and_its_trace_names_each_alphas_winner(alpha):
    model = _random_model(seed=3).double()
    src, src_mask = _sources(seed=3)
    trace = []
    traced = beam_search(model, src, src_mask, SP, 8, beam=3, alpha=alpha, trace=trace)
    assert torch.equal(traced, beam_search(model, src, src_mask, SP, 8, beam=3, alpha=alpha))
    assert [len(step[0].tokens) for step in trace] == list(range(1, len(trace) + 1))
    for step in trace:  # at most 2k candidates, best first, at most k of them kept
        scores = [c.score for c in step]
        assert len(step) <= 6 and scores == sorted(scores, reverse=True)
        kept = [c.kept for c in step if c.kept is not None]
        assert sorted(kept) == list(range(len(kept)))
        assert not any(c.finished and c.kept is not None for c in step)
    candidates = [c for step in trace for c in step if c.finished]
    assert len(candidates) >= 3  # the search ends when k candidates finished (or at max_len)
    winner = beam_winner(trace, alpha)
    assert winner.finished and winner in candidates
    assert list(winner.tokens) == traced[0].tolist()[: len(winner.tokens)]
    for c in candidates:  # each candidate's tokens carry its summed log-probability
        tokens = list(c.tokens)
        assert _sequence_log_prob(model, src[:1], src_mask[:1], tokens) == pytest.approx(c.score)


def test_each_candidate_extends_the_hypothesis_its_parent_names():
    model = _random_model(seed=5)
    src, src_mask = _sources(seed=5, batch=1)
    trace = []
    beam_search(model, src, src_mask, SP, 10, beam=4, alpha=0.6, trace=trace)
    for before, step in itertools.pairwise(trace):
        beam = {c.kept: c.tokens for c in before if c.kept is not None}
        assert all(c.tokens[:-1] == beam[c.parent] for c in step)


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_the_traces_winner_is_the_hypothesis_beam_search_returns(seed):
    # float32 models, narrow and wide beams, outputs that end with </s> or at the length limit:
    # the winner read from the trace is, token for token, what the search returned.
    model = _random_model(seed, vocab=6)
    src, src_mask = _sources(seed, vocab=6)
    winners = {}
    for beam, alpha in itertools.product((1, 2, 3, 5), (0.0, 0.6, 2.5)):
        trace = []
        out = beam_search(model, src, src_mask, SP, 12, beam=beam, alpha=alpha, trace=trace)
        winner = winners[beam, alpha] = beam_winner(trace, alpha).tokens
        assert out[0, : len(winner)].tolist() == list(winner)  # </s> included, if it ended so
        assert (out[0, len(winner) :] == SP.pad).all()  # and padding after it
    # Here the length penalty changes the choice, so a winner that ignored alpha would fail.
    assert any(winners[beam, 0.0] != winners[beam, 2.5] for beam in (2, 3, 5))
