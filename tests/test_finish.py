"""annotated/training/finish.py: a run's finish: its history written and its last snapshots
averaged (on the first process only), the translator a run folder holds (its averaged weights,
else its checkpoint, with the vocabulary beside them), the vocabularies a run folder keeps, and
the final scores it saves and reuses."""

import dataclasses
import json

import pandas as pd
import pytest
import torch
from toy_runs import model_state

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch06_decoding import DecodeConfig
from annotated.training.config import RunConfig
from annotated.training.finish import average_snapshots, load_translator, saved_scores
from annotated.training.loop import save_snapshot


def _random_model(seed=0, vocab=13, N=2):
    torch.manual_seed(seed)
    model = make_model(
        ModelConfig(vocab, vocab, N=N, d_model=32, d_ff=64, h=4, tie_target_embeddings=True)
    )
    return model.eval()


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


def test_weights_that_do_not_fit_their_own_config_are_refused(tmp_path):
    state = model_state(20, 20)
    state["model_config"]["d_model"] = 32
    path = tmp_path / "averaged.pt"
    torch.save(state, path)
    with pytest.raises(ValueError, match="do not fit the model it describes"):
        load_translator(path)
