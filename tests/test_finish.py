"""annotated/training/finish.py: a run's finish: its history written and its last snapshots
averaged (on the first process only), the translator a run folder holds (its averaged weights,
else its checkpoint, with the vocabulary beside them), the vocabularies a run folder keeps, and
the final scores it saves and reuses."""

import dataclasses
import json

import pandas as pd
import pytest
import torch
from toy_runs import (
    model_state,
    run_in_progress,
    toy_config,
    toy_corpus,
    word_vocab,
    write_run_folder,
)

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch05_text import Corpus
from annotated.ch06_decoding import DecodeConfig, Translator
from annotated.training import finish
from annotated.training.config import RunConfig, new_model
from annotated.training.finish import (
    Run,
    average_run,
    average_snapshots,
    final_scores,
    finish_run,
    load_translator,
    save_vocabularies,
    saved_scores,
)
from annotated.training.folder import RunFolder
from annotated.training.loop import Trained, save_snapshot


def _random_model(seed=0, vocab=13, N=2):
    torch.manual_seed(seed)
    model = make_model(
        ModelConfig(vocab, vocab, N=N, d_model=32, d_ff=64, h=4, tie_target_embeddings=True)
    )
    return model.eval()


def test_snapshots_keep_the_last_ones_and_average_to_the_mean(tmp_path):
    models = [_random_model(seed) for seed in range(4)]
    for step, model in enumerate(models, start=1):
        save_snapshot(model, RunFolder(tmp_path), step * 10, keep=3)
    kept = sorted((tmp_path / "snapshots").glob("step-*.pt"))
    assert [p.name for p in kept] == ["step-000020.pt", "step-000030.pt", "step-000040.pt"]
    averaged = average_snapshots(kept)
    for name in models[1].state_dict():
        mean = sum(m.state_dict()[name].double() for m in models[1:]) / 3
        torch.testing.assert_close(averaged[name], mean.float())
    other = make_model(ModelConfig(13, 13, N=1, d_model=16, d_ff=32, h=2))
    save_snapshot(other, RunFolder(tmp_path), 50, keep=10)
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
    # scores of the first 100 sentences ($ANNOTATED_SENTENCES) are not the whole set's, and back
    capped = dataclasses.replace(config, val_sentences=100, test_sentences=100)
    assert saved_scores(FakeRun(capped, tmp_path, history)) is None
    saved = json.loads((tmp_path / "scores.json").read_text())
    (tmp_path / "scores.json").write_text(json.dumps({**saved, "sentences": [100, 100]}))
    assert saved_scores(FakeRun(capped, tmp_path, history)) == rows
    assert saved_scores(FakeRun(config, tmp_path, history)) is None


def test_weights_that_do_not_fit_their_own_config_are_refused(tmp_path):
    state = model_state(20, 20)
    state["model_config"]["d_model"] = 32
    path = tmp_path / "averaged.pt"
    torch.save(state, path)
    with pytest.raises(ValueError, match="do not fit the model it describes"):
        load_translator(path)


# ---------------------------------------------------------------- the finish of a run


@pytest.fixture(scope="module")
def corpus():
    return toy_corpus()


def trained_toy(folder, corpus, steps=(10, 20, 30)) -> Trained:
    """What the training stage leaves of a toy run: snapshots of three models (seeded 0, 1, 2) at
    `steps`, the last model's translator, and a history."""
    config = toy_config()
    for seed, step in enumerate(steps):
        model = new_model(dataclasses.replace(config, seed=seed), corpus)
        save_snapshot(model, RunFolder(folder), step, keep=len(steps))
    translator = Translator(model.eval(), corpus.src_vocab, corpus.tgt_vocab, config.decoding)
    history = pd.DataFrame({"step": list(steps), "loss": [3.0, 2.0, 1.0]})
    history[["lr", "tokens", "seconds"]] = 1.0
    return Trained(translator, history, pd.DataFrame(), 3.0)


def test_the_first_process_writes_the_history_and_averages_the_last_snapshots(tmp_path, corpus):
    config = toy_config()  # averages its last 2 snapshots
    trained = trained_toy(tmp_path, corpus)
    run = finish_run(run_in_progress(config, tmp_path, corpus), config.schedule(10), trained, None)
    assert pd.read_csv(tmp_path / "history.csv").equals(trained.history)
    saved = torch.load(tmp_path / "averaged.pt", weights_only=True)
    assert saved["averaged"] == ["step-000020.pt", "step-000030.pt"]
    assert DecodeConfig.from_saved(saved["decoding"]) == config.decoding
    snapshots = [torch.load(tmp_path / "snapshots" / name) for name in saved["averaged"]]
    for name, tensor in saved["model"].items():
        by_hand = (snapshots[0]["model"][name].double() + snapshots[1]["model"][name]) / 2
        torch.testing.assert_close(tensor, by_hand.float(), rtol=0, atol=1e-7)
        assert torch.equal(run.averaged.model.state_dict()[name].cpu(), tensor), name
    assert run.translator is trained.translator and run.history is trained.history


def test_the_other_processes_write_nothing(tmp_path, corpus):
    config = toy_config()
    other = run_in_progress(config, tmp_path, corpus, writes=False)  # not the first process
    run = finish_run(other, config.schedule(10), trained_toy(tmp_path, corpus), None)
    assert run.averaged is None
    assert not (tmp_path / "history.csv").exists() and not (tmp_path / "averaged.pt").exists()


def test_a_run_without_snapshots_has_no_average(tmp_path, corpus):
    (tmp_path / "elsewhere").mkdir()
    trained = trained_toy(tmp_path / "elsewhere", corpus)
    assert average_run(trained.translator, RunFolder(tmp_path), 5) is None
    assert not (tmp_path / "averaged.pt").exists()


# ---------------------------------------------------------------- a run folder's model


def test_a_run_folder_gives_its_averaged_model_else_its_checkpoint(tmp_path):
    write_run_folder(tmp_path)  # vocabularies, and averaged.pt of a model seeded 0
    averaged = load_translator(tmp_path)
    source, target = len(averaged.src_vocab), len(averaged.tgt_vocab)
    torch.save(model_state(source, target, seed=1), tmp_path / "checkpoint.pt")
    wanted = model_state(source, target, seed=0)["model"]
    for name, tensor in load_translator(tmp_path).model.state_dict().items():
        assert torch.equal(tensor.cpu(), wanted[name]), name
    (tmp_path / "averaged.pt").unlink()
    latest = model_state(source, target, seed=1)["model"]
    for name, tensor in load_translator(tmp_path).model.state_dict().items():
        assert torch.equal(tensor.cpu(), latest[name]), name
    assert averaged.decoding is None  # write_run_folder's model records no decoding settings
    assert not averaged.model.training


def test_a_folder_without_a_model_says_how_to_train_one(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*make train-multi30k"):
        load_translator(tmp_path)


def test_a_run_folder_keeps_one_kind_of_vocabulary_and_refuses_another(tmp_path, corpus):
    save_vocabularies(corpus, tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["vocab.de.json", "vocab.en.json"]
    save_vocabularies(corpus, tmp_path)  # the same vocabularies again: accepted
    other = Corpus(word_vocab(["Ein Baum."], "de"), corpus.tgt_vocab, {}, {})
    with pytest.raises(ValueError, match="vocab.de.json differs from the vocabulary"):
        save_vocabularies(other, tmp_path)
    (tmp_path / "subwords.json").write_text("{}")
    with pytest.raises(ValueError, match="another kind of vocabulary"):
        save_vocabularies(corpus, tmp_path)


# ---------------------------------------------------------------- final scores


def test_final_scores_are_saved_with_their_step_and_decoding_and_reused(
    tmp_path, corpus, monkeypatch
):
    config = toy_config(val_sentences=2, test_sentences=3)
    trained = trained_toy(tmp_path, corpus)
    run = finish_run(run_in_progress(config, tmp_path, corpus), config.schedule(10), trained, None)
    scores = final_scores(run)
    # val, then test2016: the last weights greedy, the averaged greedy, then with <unk> copied,
    # then with the beam (copying too).
    rows = [tuple(row) for row in scores[["split", "weights", "decoding", "<unk> copied"]].values]
    setups = [
        ("last", "greedy", "no"),
        ("average of last 2", "greedy", "no"),
        ("average of last 2", "greedy", "yes"),
        ("average of last 2", "beam 2", "yes"),
    ]
    assert rows == [(split, *setup) for split in ("val", "test_2016_flickr") for setup in setups]
    assert scores["BLEU"].between(0, 100).all()
    saved = json.loads((tmp_path / "scores.json").read_text())
    assert saved["step"] == 30 and DecodeConfig.from_saved(saved["decoding"]) == config.decoding

    def decode(*args, **kwargs):
        raise AssertionError("the saved scores should have been reused")

    monkeypatch.setattr(finish, "evaluate_split", decode)
    assert final_scores(run).equals(scores)
    with pytest.raises(AssertionError, match="reused"):
        final_scores(run, reuse=False)


def test_a_run_with_one_model_is_scored_once_per_decoding(tmp_path, corpus):
    config = toy_config(val_sentences=1, test_sentences=1)
    trained = trained_toy(tmp_path, corpus)
    history, evals = trained.history, trained.evals
    run = Run(config, tmp_path, trained.translator, corpus, history, evals, config.schedule(10))
    scores = final_scores(run, copy_unknowns=False)
    assert (
        scores[["weights", "decoding"]].values.tolist()
        == [
            ["last", "greedy"],
            ["last", "beam 2"],
        ]
        * 2
    )
