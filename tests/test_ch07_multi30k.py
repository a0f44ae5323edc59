"""Chapter 5: tokens, vocabularies, token batches, fast dropout, cached and beam decoding, scoring,
the translate filter, and small real runs on Multi30k."""

import dataclasses
import itertools
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import SpecialTokens, TrainConfig, train
from annotated.ch04_copy_task import greedy_decode, until_eos
from annotated.ch05_multi30k import (
    PROFILES,
    SPECIALS,
    FastDropout,
    Multi30kConfig,
    Subwords,
    SubwordTranslator,
    Translator,
    Vocab,
    average_snapshots,
    beam_search,
    detokenize,
    final_scores,
    greedy_decode_cached,
    length_penalty,
    length_penalty_sweep,
    load_corpus,
    make_batch,
    padding_fraction,
    profile_config,
    save_snapshot,
    saved_scores,
    score,
    token_batches,
    tokenize,
    train_multi30k,
    use_fast_dropout,
)
from annotated.datasets import DATA_DIR_ENV, available_offline

ROOT = Path(__file__).resolve().parent.parent
SP = SpecialTokens(pad=1, bos=2, eos=3)  # the ids Vocab gives: <unk> 0, <pad> 1, <s> 2, </s> 3


needs_data = pytest.mark.skipif(
    not available_offline("multi30k", "train.de.gz"),
    reason=f"no local Multi30k copy: set {DATA_DIR_ENV} (CI points it at ../shared/data)",
)


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(PROFILES["full"])


@pytest.fixture(scope="module")
def subword_corpus():
    return load_corpus(dataclasses.replace(PROFILES["full"], vocab_size=8000))


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


@needs_data
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
        load_corpus(PROFILES["full"], tmp_path, splits=("val",))


@needs_data
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
        ids = subwords.encode([text])[0]
        assert subwords.unk not in ids, "byte fallback spells unseen characters"
        assert subwords.decode([ids]) == [text]
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


# ---------------------------------------------------------------- fast dropout


def test_fast_dropout_distribution_and_scaling():
    torch.manual_seed(0)
    layer = FastDropout(0.1)
    x = torch.ones(1_000_003)
    y = layer(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.002  # binomial sd is 0.0003
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.9))
    layer.eval()
    assert layer(x) is x
    assert FastDropout(0.0)(x) is x
    with pytest.raises(ValueError):
        FastDropout(1.0)
    layer.train()
    layer.p = 0.5  # chapter 3's set_dropout changes the rate during training
    assert abs((layer(x) != 0).float().mean().item() - 0.5) < 0.002


def test_use_fast_dropout_swaps_every_dropout_and_keeps_the_weights():
    model = make_model(ModelConfig(11, 12, N=1, d_model=16, d_ff=32, h=2, p_drop=0.2))
    keys = list(model.state_dict())
    use_fast_dropout(model)
    kinds = {type(m) for m in model.modules()}
    assert torch.nn.Dropout not in kinds and FastDropout in kinds
    assert list(model.state_dict()) == keys
    assert all(m.p == 0.2 for m in model.modules() if isinstance(m, FastDropout))


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
    cache = model.empty_cache()
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
    src_vocab = Vocab(SPECIALS + ("Hund", "Katze"), {})
    tgt_vocab = Vocab(SPECIALS + ("dog", "cat"), {})
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


def test_snapshots_keep_the_last_ones_and_average_to_the_mean(tmp_path):
    models = [_random_model(seed) for seed in range(4)]
    for step, model in enumerate(models, start=1):
        save_snapshot(model, tmp_path, step * 10, keep=3)
    kept = sorted((tmp_path / "snapshots").glob("step-*.pt"))
    assert [p.name for p in kept] == ["step-000020.pt", "step-000030.pt", "step-000040.pt"]
    averaged = average_snapshots(kept)
    for name in models[1].state_dict():
        mean = sum(m.state_dict()[name].double() for m in models[1:]) / 3
        torch.testing.assert_close(averaged[name], mean.float())
    other = make_model(ModelConfig(13, 13, N=1, d_model=16, d_ff=32, h=2))
    save_snapshot(other, tmp_path, 50, keep=10)
    with pytest.raises(ValueError, match="different models"):
        average_snapshots(sorted((tmp_path / "snapshots").glob("step-*.pt")))


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


# ---------------------------------------------------------------- profiles and real runs


def test_profiles_and_environment(monkeypatch):
    monkeypatch.setenv("ANNOTATED_PROFILE", "smoke")
    assert profile_config() == ("smoke", PROFILES["smoke"])
    assert profile_config("full")[1] == PROFILES["full"]
    monkeypatch.setenv("ANNOTATED_PROFILE", "huge")
    with pytest.raises(ValueError, match="smoke"):
        profile_config()
    full = PROFILES["full"]
    model = full.model_config(8000, 6000)
    assert (model.N, model.d_model, model.d_ff, model.h, model.d_k) == (3, 256, 1024, 4, 64)
    assert model.tie_target_embeddings and not model.share_embeddings  # two word vocabularies
    subwords = dataclasses.replace(full, vocab_size=8000).model_config(8000, 8000)
    assert subwords.share_embeddings and not subwords.tie_target_embeddings
    assert full.train_config(100).checkpoint_every == 50


@needs_data
def test_tiny_model_overfits_fifty_pairs(corpus, tmp_path):
    pairs = corpus.ids["train"][:50]
    specials = corpus.tgt_vocab.specials
    torch.manual_seed(0)
    model = make_model(
        ModelConfig(
            len(corpus.src_vocab), len(corpus.tgt_vocab), N=1, d_model=64, d_ff=128, h=4, p_drop=0.0
        )
    )
    batch = make_batch(pairs, specials)
    config = TrainConfig(max_steps=200, warmup=20, lr_factor=0.2, eps_ls=0.0, precision="fp32")
    history = train(model, lambda step: [batch], config, progress=False)
    assert history.loss.iloc[-1] < 0.05, history.loss.iloc[-1]
    # And it reproduces the training targets.
    translator = Translator(model.eval(), corpus.src_vocab, corpus.tgt_vocab)
    outputs = translator.translate([de for de, _ in corpus.raw["train"][:5]])
    wanted = [detokenize(corpus.tgt_vocab.decode(t)) for _, t in pairs[:5]]
    assert outputs == wanted


@needs_data
def test_smoke_run_trains_resumes_and_translates(corpus, tmp_path):
    config = PROFILES["smoke"]
    folder = tmp_path / "run"
    run = train_multi30k(config, folder, progress=False, corpus=corpus)
    for name in ("checkpoint.pt", "vocab.de.json", "vocab.en.json", "history.csv", "evals.csv"):
        assert (folder / name).exists(), name
    assert not (folder / "subwords.json").exists()
    model = run.translator.model
    assert model.generator.weight is model.tgt_embed[0].lut.weight
    assert model.src_embed[0].lut.weight is not model.tgt_embed[0].lut.weight
    assert (folder / "averaged.pt").exists() and run.averaged is not None
    assert run.history.step.max() == run.evals.step.max()
    assert len(run.evals) == config.epochs * config.evals_per_epoch
    # Running again loads the finished run without another step.
    again = train_multi30k(config, folder, progress=False, corpus=corpus)
    assert again.history.equals(run.history)
    for first, second in zip(
        run.translator.model.parameters(), again.translator.model.parameters(), strict=True
    ):
        assert torch.equal(first, second)
    # The command-line filter: one line out per line in, empty lines kept.
    lines = "Ein Hund rennt.\n\nZwei Männer sitzen auf einer Bank.\n"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "annotated.translate",
            "--checkpoint",
            str(folder / "checkpoint.pt"),
            "--beam",
            "2",
        ],
        input=lines,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    out = result.stdout.split("\n")
    assert len(out) == 4 and out[1] == "" and out[3] == ""
    loaded = Translator.load(folder / "checkpoint.pt")
    assert type(loaded) is Translator and loaded.tgt_vocab == corpus.tgt_vocab
    decoding = {"beam": config.beam, "alpha": config.length_penalty}
    assert loaded.decoding == Translator.load(folder / "averaged.pt").decoding == decoding
    alpha = Multi30kConfig.length_penalty  # the filter's default
    assert out[:3] == loaded.translate(lines.split("\n")[:3], beam=2, alpha=alpha)
    scores = final_scores(run)
    assert list(scores["<unk> copied"]).count("yes") == 4  # greedy and beam, val and test
    # Saved scores are reused only for the decoding settings that produced them.
    assert saved_scores(run) == scores.to_dict("records")
    other = dataclasses.replace(run, config=dataclasses.replace(config, length_penalty=alpha + 1))
    assert saved_scores(other) is None


@needs_data
def test_subword_run_shares_one_vocabulary_and_matrix_and_has_nothing_to_copy(
    corpus, subword_corpus, tmp_path
):
    config = dataclasses.replace(PROFILES["smoke"], vocab_size=8000, train_pairs=500)
    folder = tmp_path / "subwords"
    run = train_multi30k(config, folder, progress=False, corpus=subword_corpus)
    assert (folder / "subwords.json").exists() and not (folder / "vocab.de.json").exists()
    model = run.translator.model
    assert model.src_embed[0].lut.weight is model.tgt_embed[0].lut.weight is model.generator.weight
    loaded = Translator.load(folder / "checkpoint.pt")
    assert isinstance(loaded, SubwordTranslator) and loaded.src_vocab == subword_corpus.src_vocab
    german = subword_corpus.raw["val"][0][0]
    assert loaded.translate(["", german]) == run.translator.translate(["", german])
    scores = final_scores(run)  # a subword model never writes <unk>: no copy rows
    assert set(scores["<unk> copied"]) == {"no"} and len(scores) == 6
    with pytest.raises(ValueError, match="another kind of vocabulary"):  # words in its folder
        train_multi30k(PROFILES["smoke"], folder, progress=False, corpus=corpus)


def test_length_penalty_sweep_decodes_once_per_alpha(monkeypatch):
    calls = []

    def fake(translator, corpus, split, limit, beam, alpha):
        calls.append((split, limit, beam, alpha))
        return {"BLEU": 30 + alpha, "chrF": 50.0, "length ratio": 0.9 + alpha / 10}, []

    monkeypatch.setattr("annotated.ch05_multi30k.evaluate_split", fake)
    table = length_penalty_sweep(None, None, "val", 100, 4, (0.0, 0.6, 2.0))
    assert calls == [("val", 100, 4, 0.0), ("val", 100, 4, 0.6), ("val", 100, 4, 2.0)]
    assert list(table.columns) == ["α", "BLEU", "chrF", "length ratio"]
    assert list(table["BLEU"]) == [30.0, 30.6, 32.0]


def test_translate_cli_without_a_checkpoint_says_what_to_do(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "annotated.translate", "--checkpoint", str(tmp_path / "none.pt")],
        input="Hallo\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert "make train-multi30k" in result.stderr and result.stdout == ""
