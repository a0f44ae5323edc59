"""Chapter 7: the Multi30k profiles, a tiny model that overfits, and small real runs."""

import dataclasses
import subprocess
import sys

import pytest
import torch

from annotated.base.files import REPO_ROOT as ROOT
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import TrainConfig, train
from annotated.ch05_text import detokenize, load_multi30k, make_batch
from annotated.ch06_decoding import DecodeConfig, Translator, beam_search
from annotated.ch07_multi30k import PROFILES, length_penalty_sweep, profile_config, train_multi30k
from annotated.training.finish import final_scores, load_translator, saved_scores


@pytest.fixture(scope="module")
def subword_corpus():
    return load_multi30k(vocab_size=8000)


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
    assert (model.N, model.d_model, model.d_ff, model.h, model.d_k) == (2, 256, 1024, 4, 64)
    assert model.tie_target_embeddings and not model.share_embeddings  # two word vocabularies
    subwords = dataclasses.replace(full, vocab_size=8000).model_config(8000, 8000)
    assert subwords.share_embeddings and not subwords.tie_target_embeddings
    assert full.train_config(full.schedule(100)).checkpoint_every == 50


@pytest.mark.slow
@pytest.mark.multi30k
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
    # 100 steps reach a loss near 0.02 (200 reach 0.006 in three times as long)
    config = TrainConfig(max_steps=100, warmup=10, lr_factor=0.2, eps_ls=0.0, precision="fp32")
    history = train(model, lambda step: [batch], config, progress=False)
    assert history.loss.iloc[-1] < 0.05, history.loss.iloc[-1]
    # And it reproduces the training targets.
    translator = Translator(model.eval(), corpus.src_vocab, corpus.tgt_vocab)
    outputs = translator.translate([de for de, _ in corpus.raw["train"][:5]])
    wanted = [detokenize(corpus.tgt_vocab.decode(t)) for _, t in pairs[:5]]
    assert outputs == wanted


@pytest.mark.slow
@pytest.mark.multi30k
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
    loaded = load_translator(folder / "checkpoint.pt")
    assert type(loaded) is Translator and loaded.tgt_vocab == corpus.tgt_vocab
    assert loaded.decoding == load_translator(folder / "averaged.pt").decoding == config.decoding
    alpha = config.decoding.alpha  # the filter's default: the run's own
    assert out[:3] == loaded.translate(lines.split("\n")[:3], beam=2, alpha=alpha)
    scores = final_scores(run)
    assert list(scores["<unk> copied"]).count("yes") == 4  # greedy and beam, val and test
    # Saved scores are reused only for the decoding settings that produced them.
    assert saved_scores(run) == scores.to_dict("records")
    other_decoding = DecodeConfig(config.decoding.beam, alpha + 1)
    other = dataclasses.replace(run, config=dataclasses.replace(config, decoding=other_decoding))
    assert saved_scores(other) is None


@pytest.mark.slow
@pytest.mark.multi30k
def test_subword_run_shares_one_vocabulary_and_matrix_and_has_nothing_to_copy(
    corpus, subword_corpus, tmp_path
):
    config = dataclasses.replace(PROFILES["smoke"], vocab_size=8000, train_pairs=500)
    folder = tmp_path / "subwords"
    run = train_multi30k(config, folder, progress=False, corpus=subword_corpus)
    assert (folder / "subwords.json").exists() and not (folder / "vocab.de.json").exists()
    model = run.translator.model
    assert model.src_embed[0].lut.weight is model.tgt_embed[0].lut.weight is model.generator.weight
    loaded = load_translator(folder / "checkpoint.pt")
    assert loaded.src_vocab == subword_corpus.src_vocab and loaded.tgt_vocab is loaded.src_vocab
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

    monkeypatch.setattr("annotated.ch07_multi30k.evaluate_split", fake)
    table = length_penalty_sweep(None, None, "val", 100, 4, (0.0, 0.6, 2.0))
    assert calls == [("val", 100, 4, 0.0), ("val", 100, 4, 0.6), ("val", 100, 4, 2.0)]
    assert list(table.columns) == ["α", "BLEU", "chrF", "length ratio"]
    assert list(table["BLEU"]) == [30.0, 30.6, 32.0]


def test_the_class_profile_is_the_recipe_cut_to_fifteen_minutes(monkeypatch):
    monkeypatch.setenv("ANNOTATED_PROFILE", "class")
    name, config = profile_config()
    full = PROFILES["full"]
    assert name == "class" and config.N == 2 and config.epochs == 5
    # The same code path and model as the full recipe: words, warmup then cooldown, rising
    # dropout, beam.
    same = (
        "N",
        "vocab_size",
        "min_freq",
        "max_tokens",
        "d_model",
        "d_ff",
        "h",
        "norm_first",
        "lr_factor",
    )
    assert all(getattr(config, field) == getattr(full, field) for field in same)
    assert config.p_drop_final is not None and config.cooldown_epochs > 0
    assert config.decoding == full.decoding
    train = config.train_config(config.schedule(steps_per_epoch=152))
    assert train.max_steps == 760 and train.cooldown == 380 and train.warmup < train.max_steps


# ---------------------------------------------------------------- chapter 1's walk, learned


def _small_translator(norm_first: bool) -> Translator:
    from annotated.ch05_text import Vocab, tokenize, vocab_settings

    def vocab(sentences, language):
        settings = {k: v for k, v in vocab_settings(language, 1).items() if k != "min_freq"}
        return Vocab.build(tokenize(sentences, language), 1, **settings)

    src = vocab(["Ein Hund rennt über die Wiese .", "Zwei Männer sitzen."], "de")
    tgt = vocab(["A dog runs across the meadow .", "Two men sit."], "en")
    torch.manual_seed(0)
    config = ModelConfig(len(src), len(tgt), N=2, d_model=32, d_ff=64, h=4, norm_first=norm_first)
    return Translator(make_model(config).double(), src, tgt, DecodeConfig(beam=3))


@pytest.mark.parametrize("norm_first", [False, True])
def test_the_learned_walk_recomputes_the_heads_own_weights(norm_first):
    from annotated.ch07_multi30k import learned_head

    translator = _small_translator(norm_first)
    sentence = "Ein Hund rennt über die Wiese ."
    for layer in (0, 1):
        words, head, q, k, v, kept = learned_head(translator, sentence, layer=layer)
        assert words == ["Ein", "Hund", "rennt", "über", "die", "Wiese", ".", "</s>"]
        assert q.shape == k.shape == v.shape == (8, 8)  # n words, d_k = 32 / 4
        ours = torch.softmax(q @ k.T / 8**0.5, dim=-1)
        assert torch.allclose(ours, kept, atol=1e-6), (layer, head)
        # The sharpest head by default; any head on request.
        sharpness = [
            -(w * w.log()).sum(-1).mean()
            for w in (learned_head(translator, sentence, layer, h)[5] for h in range(4))
        ]
        assert head == min(range(4), key=lambda h: sharpness[h])


def test_the_traced_search_of_a_sentence_is_the_translators_search():
    from annotated.ch06_decoding import beam_winner
    from annotated.ch07_multi30k import traced_search

    translator = _small_translator(norm_first=False)
    sentence = "Zwei Männer sitzen."
    trace, words = traced_search(translator, sentence, beam=3)
    assert len(words) == len(translator.tgt_vocab) and words[3] == "</s>"
    winner = [words[t] for t in beam_winner(trace, 0.6).tokens]
    src = torch.tensor(translator.source_ids([sentence]))
    out = beam_search(
        translator.model,
        src,
        torch.ones(1, 1, src.size(1), dtype=torch.bool),
        translator.tgt_vocab.specials,
        src.size(1) + 10,
        beam=3,
        alpha=0.6,
    )
    assert winner == translator.tgt_vocab.labels(out[0].tolist())[: len(winner)]
