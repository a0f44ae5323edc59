"""The run layer shared by chapters 7 and 8: its configuration, snapshots and averaging, and the
scores it saves (old run folders included)."""

import dataclasses
import json

import pandas as pd
import pytest
import torch

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch06_decoding import DecodeConfig
from annotated.runs import (
    PROFILE_ENV,
    RunConfig,
    average_snapshots,
    pick_profile,
    save_snapshot,
    saved_scores,
)


def _random_model(seed=0, vocab=13, N=2):
    torch.manual_seed(seed)
    model = make_model(
        ModelConfig(vocab, vocab, N=N, d_model=32, d_ff=64, h=4, tie_target_embeddings=True)
    )
    return model.eval()


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


def test_decode_config_reads_what_older_checkpoints_recorded():
    assert DecodeConfig.from_saved({"beam": 4, "alpha": 2.5}) == DecodeConfig(4, 2.5, 50, 4000)
    full = {"beam": 2, "alpha": 0.6, "extra_length": 10, "batch_tokens": 99, "unknown": 1}
    assert DecodeConfig.from_saved(full) == DecodeConfig(2, 0.6, 10, 99)
    with pytest.raises(ValueError, match="positive"):
        DecodeConfig(beam=0)


def test_saved_scores_of_an_older_run_folder_are_reused(tmp_path):
    # scores.json as runs before DecodeConfig wrote it: only beam and alpha recorded.
    rows = [{"split": "val", "weights": "last", "decoding": "greedy", "<unk> copied": "no"}]
    (tmp_path / "scores.json").write_text(
        json.dumps({"scores": rows, "step": 30, "decoding": {"beam": 4, "alpha": 2.5}})
    )
    config = RunConfig(decoding=DecodeConfig(beam=4, alpha=2.5))
    history = pd.DataFrame({"step": [10, 20, 30]})

    @dataclasses.dataclass
    class FakeRun:
        config: RunConfig
        folder: object
        history: pd.DataFrame

    assert saved_scores(FakeRun(config, tmp_path, history)) == rows
    other = dataclasses.replace(config, decoding=DecodeConfig(beam=4, alpha=0.6))
    assert saved_scores(FakeRun(other, tmp_path, history)) is None
    assert saved_scores(FakeRun(config, tmp_path, pd.DataFrame({"step": [40]}))) is None


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


def test_one_class_profile_serves_every_chapter_and_command(monkeypatch):
    """A class server sets ANNOTATED_PROFILE=class once, for every chapter a student opens."""
    from annotated import ch07_multi30k, ch08_wmt, ch09_table3, train

    monkeypatch.setenv(PROFILE_ENV, "class")
    assert ch07_multi30k.profile_config()[0] == "class"
    assert ch08_wmt.wmt_profile() == ("class", ch08_wmt.WMT_PROFILES["smoke"])
    assert ch09_table3.table3_plan() == ("class", ch09_table3.TABLE3_PROFILES["full"])
    assert all("class" in names for names in train.PROFILES.values())
