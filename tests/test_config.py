"""annotated/training/config.py: a run's configuration (`RunConfig`, the paper's base recipe by
default), the settings it hands on by name, written out, to chapter 2's `ModelConfig` and chapter
3's `TrainConfig` (a setting renamed on their side fails loudly), the recipe's `Schedule`, the
model it makes, and the profiles $ANNOTATED_PROFILE chooses."""

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from toy_runs import toy_corpus

from annotated.ch02_model import ModelConfig
from annotated.ch03_training import FastDropout, SpecialTokens
from annotated.ch05_text import Corpus
from annotated.ch06_decoding import DecodeConfig
from annotated.training.config import (
    PROFILE_ENV,
    SENTENCES_ENV,
    RunConfig,
    Schedule,
    new_model,
    pick_profile,
    profile_name,
    shared_specials,
    smoke_version,
)


def test_run_config_defaults_are_the_papers_base_recipe():
    config = RunConfig()
    model = config.model_config(37000, 37000)
    assert (model.N, model.d_model, model.d_ff, model.h, model.p_drop) == (6, 512, 2048, 8, 0.1)
    assert model.share_embeddings  # one shared BPE vocabulary (section 3.4)
    train = config.train_config(config.schedule(steps_per_epoch=1000))
    assert (train.max_steps, train.warmup, train.lr_factor, train.eps_ls) == (100_000, 4000, 1, 0.1)
    assert config.decoding == DecodeConfig(beam=4, alpha=0.6, extra_length=50)  # section 6.1
    assert not config.fast_dropout


def test_run_config_counts_steps_or_epochs_never_both():
    by_epochs = RunConfig(steps=None, epochs=3, cooldown_epochs=1.0)
    assert by_epochs.train_config(by_epochs.schedule(100)).max_steps == 300
    assert by_epochs.train_config(by_epochs.schedule(100)).cooldown == 100
    with pytest.raises(ValueError, match="either steps or epochs"):
        RunConfig(steps=10, epochs=3)
    with pytest.raises(ValueError, match="either steps or epochs"):
        RunConfig(steps=None)


def _defaults(config_class: type) -> dict:
    return {field.name: field.default for field in dataclasses.fields(config_class)}


def test_a_run_hands_its_settings_on_by_name_with_the_papers_defaults():
    # Each model or schedule setting of a run is chapter 2's or chapter 3's setting of that name:
    # the run's default must be theirs (the paper's), and a changed one must reach the config.
    from annotated.ch03_training import TrainConfig

    run = _defaults(RunConfig)
    for config_class, at_least in ((ModelConfig, 9), (TrainConfig, 7)):
        theirs = _defaults(config_class)
        shared = sorted(set(run) & set(theirs))
        assert len(shared) >= at_least
        assert {name: run[name] for name in shared} == {name: theirs[name] for name in shared}
    changed = RunConfig(N=2, d_k=16, d_v=8, warmup=7, seed=3, precision="fp32", p_drop_final=0.2)
    model, train = changed.model_config(50, 50), changed.train_config(changed.schedule(10))
    assert (model.N, model.d_k, model.d_v) == (2, 16, 8)
    assert (train.warmup, train.seed, train.precision, train.p_drop_final) == (7, 3, "fp32", 0.2)


def _renamed(config_class: type, old: str, new: str) -> type:
    """`config_class` with its setting `old` renamed `new` (a rename on chapter 2's or 3's side)."""
    fields = []
    for field in dataclasses.fields(config_class):
        name = new if field.name == old else field.name
        if field.default is dataclasses.MISSING:
            fields.append((name, field.type))
        else:
            fields.append((name, field.type, dataclasses.field(default=field.default)))
    return dataclasses.make_dataclass(config_class.__name__, fields, frozen=True)


@pytest.mark.parametrize(
    ("class_name", "old", "new"),
    [("ModelConfig", "d_ff", "d_inner"), ("TrainConfig", "eps_ls", "label_smoothing")],
)
def test_a_setting_renamed_on_the_other_side_fails_where_the_run_hands_it_on(
    monkeypatch, class_name, old, new
):
    # Handed on by matching names, a renamed setting would silently keep its default instead.
    from annotated.training import config as module

    monkeypatch.setattr(module, class_name, _renamed(getattr(module, class_name), old, new))
    run = RunConfig()
    with pytest.raises(TypeError, match=f"'{old}'"):
        if class_name == "ModelConfig":
            run.model_config(50, 50)
        else:
            run.train_config(run.schedule(10))


def test_the_smoke_version_of_a_profile_is_its_recipe_on_a_tiny_model():
    recipe = RunConfig(vocab_size=None, warmup=500, decoding=DecodeConfig(beam=4, alpha=2.5))
    smoke = smoke_version(recipe, train_pairs=100, warmup=5)
    model = smoke.model_config(40, 40)
    assert (model.N, model.d_model, model.d_ff, model.h) == (1, 32, 64, 2)
    assert smoke.decoding == DecodeConfig(beam=2, alpha=2.5)  # the recipe's length penalty
    assert (smoke.train_pairs, smoke.warmup, smoke.vocab_size) == (100, 5, None)


def test_pick_profile_reads_the_environment_once(monkeypatch):
    profiles = {"full": RunConfig(), "smoke": RunConfig(N=1)}
    monkeypatch.delenv("ANNOTATED_PROFILE", raising=False)
    assert pick_profile(profiles, None, "full")[0] == "full"
    monkeypatch.setenv("ANNOTATED_PROFILE", "smoke")
    assert pick_profile(profiles, None, "full") == ("smoke", profiles["smoke"])
    assert pick_profile(profiles, "full", "full")[0] == "full"  # a name given wins
    monkeypatch.setenv("ANNOTATED_PROFILE", "huge")
    with pytest.raises(
        ValueError, match=r"ANNOTATED_PROFILE='huge': choose one of \['full', 'smoke'\]"
    ):
        pick_profile(profiles, None, "full")


def test_a_sentence_cap_scores_fewer_sentences_and_never_more(monkeypatch):
    # $ANNOTATED_SENTENCES: a quick look (or a test's run of chapter 7) scores the first n only.
    profiles = {"full": RunConfig(), "smoke": RunConfig(val_sentences=40, test_sentences=30)}
    monkeypatch.delenv(SENTENCES_ENV, raising=False)
    assert pick_profile(profiles, "full", "full")[1] is profiles["full"]
    monkeypatch.setenv(SENTENCES_ENV, "100")
    full = pick_profile(profiles, "full", "full")[1]
    assert (full.val_sentences, full.test_sentences) == (100, 100)
    assert full == dataclasses.replace(profiles["full"], val_sentences=100, test_sentences=100)
    smoke = pick_profile(profiles, "smoke", "full")[1]
    assert (smoke.val_sentences, smoke.test_sentences) == (40, 30), "a cap never scores more"
    for wrong in ("0", "-5", "ten", "2.5"):
        monkeypatch.setenv(SENTENCES_ENV, wrong)
        with pytest.raises(ValueError, match="ANNOTATED_SENTENCES=.*give a whole number"):
            pick_profile(profiles, "full", "full")


def test_one_class_profile_serves_every_chapter_and_command(monkeypatch):
    """A class server sets ANNOTATED_PROFILE=class once, for every chapter a student opens."""
    from annotated import ch07_multi30k, ch08_wmt, ch09_table3, train

    monkeypatch.setenv(PROFILE_ENV, "class")
    assert ch07_multi30k.profile_config()[0] == "class"
    assert ch08_wmt.wmt_profile() == ("class", ch08_wmt.WMT_PROFILES["smoke"])
    assert ch09_table3.table3_sweep() == ("class", ch09_table3.TABLE3_PROFILES["full"])
    assert all("class" in names for names in train.task_profiles().values())


# ---------------------------------------------------------------- what a configuration makes


def test_the_recipes_schedule_counts_its_steps_evaluations_and_cooldown_in_epochs():
    config = RunConfig(steps=None, epochs=3, evals_per_epoch=4, cooldown_epochs=0.5, warmup=7)
    schedule = config.schedule(steps_per_epoch=10)
    assert schedule == Schedule(
        steps=30,
        warmup=7,
        lr_factor=1.0,
        cooldown=5,
        average_last=5,
        steps_per_epoch=10,
        eval_every=2,  # ten steps an epoch, four evaluations: every second step, rounded down
        limit_seconds=None,
    )
    assert config.schedule(steps_per_epoch=3).eval_every == 1  # never every 0 steps
    assert (
        RunConfig(steps=40).schedule(steps_per_epoch=10).steps == 40
    )  # steps, whatever the epochs


def test_chapter_3s_configuration_trains_the_schedule_with_the_runs_other_settings():
    config = RunConfig(warmup=4000, lr_factor=1.0, eps_ls=0.2, seed=5, precision="fp32")
    planned = Schedule(
        steps=50,
        warmup=7,
        lr_factor=0.5,
        cooldown=5,
        average_last=2,
        steps_per_epoch=10,
        eval_every=3,
        limit_seconds=60.0,
    )
    train = config.train_config(planned)
    # The schedule's, where a budget may have planned them...
    assert (train.max_steps, train.warmup, train.lr_factor, train.cooldown) == (50, 7, 0.5, 5)
    assert train.checkpoint_every == 3  # a checkpoint at each evaluation
    # ...and the run's own for the rest.
    assert (train.eps_ls, train.seed, train.precision) == (0.2, 5, "fp32")


@pytest.mark.parametrize(
    ("vocab_size", "shared", "tied"), [(None, False, True), (8000, True, False)]
)
def test_one_shared_vocabulary_shares_all_three_matrices_and_two_tie_only_the_target(
    vocab_size, shared, tied
):
    model = RunConfig(vocab_size=vocab_size, N=2).model_config(50, 50)
    assert (model.share_embeddings, model.tie_target_embeddings) == (shared, tied)
    assert (model.src_vocab, model.tgt_vocab, model.N, model.max_len) == (50, 50, 2, 512)
    # What the corpus is decides over the configuration's vocab_size (new_model passes it).
    assert not RunConfig(vocab_size=8000).model_config(50, 60, shared=False).share_embeddings


def test_a_runs_model_is_seeded_and_sized_for_its_corpus():
    corpus = toy_corpus()
    config = RunConfig(vocab_size=None, N=1, d_model=16, d_ff=32, h=2, seed=3)
    model, again = new_model(config, corpus), new_model(config, corpus)
    assert (model.config.src_vocab, model.config.tgt_vocab) == (
        len(corpus.src_vocab),
        len(corpus.tgt_vocab),
    )
    assert model.config.tie_target_embeddings and not model.config.share_embeddings
    for (name, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    other = new_model(dataclasses.replace(config, seed=4), corpus)
    assert not torch.equal(other.generator.weight, model.generator.weight)
    shared = Corpus(corpus.tgt_vocab, corpus.tgt_vocab, {}, {})  # one vocabulary for both sides
    assert new_model(config, shared).config.share_embeddings


def test_fast_dropout_replaces_every_dropout_of_the_runs_model():
    corpus = toy_corpus()
    config = RunConfig(vocab_size=None, N=1, d_model=16, d_ff=32, h=2, fast_dropout=True)
    layers = list(new_model(config, corpus).modules())
    assert any(isinstance(layer, FastDropout) for layer in layers)
    assert not any(isinstance(layer, torch.nn.Dropout) for layer in layers)
    plain = new_model(dataclasses.replace(config, fast_dropout=False), corpus)
    assert not any(isinstance(layer, FastDropout) for layer in plain.modules())


def test_the_two_vocabularies_must_agree_on_the_special_tokens():
    ids = SpecialTokens(pad=1, bos=2, eos=3)
    agreed = SimpleNamespace(
        src_vocab=SimpleNamespace(specials=ids), tgt_vocab=SimpleNamespace(specials=ids)
    )
    assert shared_specials(agreed) == ids
    other = SimpleNamespace(specials=SpecialTokens(pad=0, bos=2, eos=3))
    with pytest.raises(ValueError, match="must give the specials the same ids"):
        shared_specials(SimpleNamespace(src_vocab=other, tgt_vocab=SimpleNamespace(specials=ids)))


def test_the_profile_is_the_environments_else_the_chapters(monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    assert profile_name("full") == "full"
    monkeypatch.setenv(PROFILE_ENV, "")  # set but empty: as if unset
    assert profile_name("full") == "full"
    monkeypatch.setenv(PROFILE_ENV, "smoke")
    assert profile_name("full") == "smoke"
