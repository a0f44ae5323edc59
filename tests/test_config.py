"""annotated/training/config.py: a run's configuration (`RunConfig`, the paper's base recipe by
default), the settings it passes on by name to chapter 2's `ModelConfig` and chapter 3's
`TrainConfig`, the recipe's `Schedule`, the model it makes, and the profiles
$ANNOTATED_PROFILE chooses."""

import dataclasses

import pytest

from annotated.ch02_model import ModelConfig
from annotated.ch06_decoding import DecodeConfig
from annotated.training.config import PROFILE_ENV, RunConfig, pick_profile, smoke_version


def test_run_config_defaults_are_the_papers_base_recipe():
    config = RunConfig()
    model = config.model_config(37000, 37000)
    assert (model.N, model.d_model, model.d_ff, model.h, model.p_drop) == (6, 512, 2048, 8, 0.1)
    assert model.share_embeddings  # one shared BPE vocabulary (section 3.4)
    train = config.train_config(steps_per_epoch=1000)
    assert (train.max_steps, train.warmup, train.lr_factor, train.eps_ls) == (100_000, 4000, 1, 0.1)
    assert config.decoding == DecodeConfig(beam=4, alpha=0.6, extra_length=50)  # section 6.1
    assert not config.fast_dropout


def test_run_config_counts_steps_or_epochs_never_both():
    by_epochs = RunConfig(steps=None, epochs=3, cooldown_epochs=1.0)
    assert by_epochs.train_config(100).max_steps == 300
    assert by_epochs.train_config(100).cooldown == 100
    with pytest.raises(ValueError, match="either steps or epochs"):
        RunConfig(steps=10, epochs=3)
    with pytest.raises(ValueError, match="either steps or epochs"):
        RunConfig(steps=None)


def test_a_run_passes_its_settings_on_by_name_with_the_papers_defaults():
    # Each model or schedule setting of a run is chapter 2's or chapter 3's setting of that name:
    # the run's default must be theirs (the paper's), and a changed one must reach the config.
    from annotated.ch03_training import TrainConfig

    run = RunConfig()
    for config_class, at_least in ((ModelConfig, 9), (TrainConfig, 6)):
        shared = run.shared_settings(config_class)
        defaults = {field.name: field.default for field in dataclasses.fields(config_class)}
        assert len(shared) >= at_least
        assert shared == {name: defaults[name] for name in shared}, config_class.__name__
    changed = RunConfig(N=2, d_k=16, d_v=8, warmup=7, seed=3, precision="fp32", p_drop_final=0.2)
    model, train = changed.model_config(50, 50), changed.train_config(10)
    assert (model.N, model.d_k, model.d_v) == (2, 16, 8)
    assert (train.warmup, train.seed, train.precision, train.p_drop_final) == (7, 3, "fp32", 0.2)


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


def test_one_class_profile_serves_every_chapter_and_command(monkeypatch):
    """A class server sets ANNOTATED_PROFILE=class once, for every chapter a student opens."""
    from annotated import ch07_multi30k, ch08_wmt, ch09_table3, train

    monkeypatch.setenv(PROFILE_ENV, "class")
    assert ch07_multi30k.profile_config()[0] == "class"
    assert ch08_wmt.wmt_profile() == ("class", ch08_wmt.WMT_PROFILES["smoke"])
    assert ch09_table3.table3_sweep() == ("class", ch09_table3.TABLE3_PROFILES["full"])
    assert all("class" in names for names in train.task_profiles().values())
