"""annotated/training/folder.py: a run's folder names every file of the layout the book has always
written, gives its best model (the averaged weights, else the checkpoint) and asks once whether
this process writes; a folder written in that layout loads and resumes; and a run in progress
says what it does only where it writes."""

import json
import shutil

import pytest
import torch
from toy_runs import run_in_progress, toy_config, toy_corpus, write_run_folder

from annotated.base import distributed
from annotated.ch05_text import BatchPlan
from annotated.training.finish import final_scores, load_translator, save_vocabularies
from annotated.training.folder import RunFolder, folder_name
from annotated.training.runs import train_run

# A run folder's files as the book wrote them before `RunFolder` named them (written out here,
# not taken from the class, so that a renamed file fails this test): a toy run of six steps, two
# an epoch, which evaluates every epoch and averages its last two snapshots, with a time budget
# and its scores.
LAYOUT = {
    "checkpoint.pt",
    "averaged.pt",
    "history.csv",
    "evals.csv",
    "plan.json",
    "scores.json",
    "vocab.de.json",
    "vocab.en.json",
    "snapshots/step-000004.pt",
    "snapshots/step-000006.pt",
}
PLAN_FIELDS = [  # plan.json's fields, in the order the plan has always written them
    "budget_minutes",
    "seconds_per_step",
    "probe_seconds",
    "recipe_steps",
    "steps",
    "warmup",
    "lr_factor",
    "cooldown_epochs",
    "average_last",
    "steps_per_epoch",
    "machine",
    "load_average",
    "stopped_at",
    "unplanned",
    "first_epoch_extra",
    "probe_batches",
]


def test_a_folder_names_each_file_of_the_layout(tmp_path):
    files = RunFolder(tmp_path)
    named = [files.checkpoint, files.averaged, files.history, files.evals, files.plan]
    named += [files.scores, files.subwords, files.vocab("de"), files.vocab("en"), files.snapshot(3)]
    assert [path.relative_to(tmp_path).as_posix() for path in named] == [
        "checkpoint.pt",
        "averaged.pt",
        "history.csv",
        "evals.csv",
        "plan.json",
        "scores.json",
        "subwords.json",
        "vocab.de.json",
        "vocab.en.json",
        "snapshots/step-000003.pt",
    ]
    assert RunFolder(str(tmp_path)).path == tmp_path  # a string is taken for its path
    assert folder_name("multi30k", "full") == "multi30k-full"


def test_the_snapshots_are_in_step_order_and_the_best_model_is_the_average_else_the_checkpoint(
    tmp_path,
):
    files = RunFolder(tmp_path)
    assert files.snapshots() == [] and files.best_model() == files.checkpoint
    (tmp_path / "snapshots").mkdir()
    for step in (120, 9, 30):
        files.snapshot(step).write_bytes(b"")
    (tmp_path / "snapshots" / "notes.txt").write_text("not a snapshot")
    assert [path.name for path in files.snapshots()] == [
        "step-000009.pt",
        "step-000030.pt",
        "step-000120.pt",
    ]
    files.checkpoint.write_bytes(b"")
    assert files.best_model() == files.checkpoint
    files.averaged.write_bytes(b"")
    assert files.best_model() == files.averaged


def test_whether_a_process_writes_is_asked_once_from_its_rank(monkeypatch):
    assert RunFolder("run").writes  # one process: the first
    monkeypatch.setattr(distributed, "rank_and_world", lambda: (1, 2))
    later = RunFolder("run")
    assert not later.writes and RunFolder("run", writes=True).writes
    monkeypatch.setattr(distributed, "rank_and_world", lambda: (0, 2))
    assert not later.writes  # made as the second process, it stays so
    assert RunFolder("run").writes


def test_a_run_in_progress_says_what_it_does_only_where_it_writes(tmp_path):
    corpus, config = toy_corpus(), toy_config()
    run = run_in_progress(config, tmp_path, corpus)
    assert not run.says  # toy runs are quiet
    run.progress = True
    assert run.says
    other = run_in_progress(config, tmp_path, corpus, writes=False)
    other.progress = True
    assert not other.says
    assert run.recipe == config.schedule(run.batches.steps_per_epoch)


# ---------------------------------------------------------------- the layout, old and new


def test_a_run_writes_the_layout_the_book_has_always_written(tmp_path):
    corpus = toy_corpus()
    config = toy_config(val_sentences=2, test_sentences=2, max_minutes=30.0)
    save_vocabularies(corpus, tmp_path)
    final_scores(train_run(config, tmp_path, corpus, progress=False))
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert written - {"in-use.lock"} == LAYOUT
    assert list(json.loads((tmp_path / "plan.json").read_text())) == PLAN_FIELDS
    # scores.json says which step, decoding and sentences its scores are of ("sentences" since
    # $ANNOTATED_SENTENCES: folders without it scored their recipe's, and still load)
    saved = json.loads((tmp_path / "scores.json").read_text())
    assert set(saved) == {"scores", "step", "decoding", "sentences"}
    assert saved["sentences"] == [2, 2]


def test_a_folder_in_that_layout_loads_and_resumes(tmp_path, monkeypatch):
    # A toy run (two steps an epoch) stopped after four of its eight steps, its files copied by
    # their names alone into a folder no code of this version wrote.
    corpus = toy_corpus()
    config = toy_config(val_sentences=2, steps=8)
    save_vocabularies(corpus, tmp_path / "first")
    stopped = train_run(toy_config(val_sentences=2, steps=4), tmp_path / "first", corpus, False)
    old = tmp_path / "old"
    (old / "snapshots").mkdir(parents=True)
    names = ["checkpoint.pt", "averaged.pt", "history.csv", "evals.csv", "vocab.de.json"]
    names += ["vocab.en.json", "snapshots/step-000002.pt", "snapshots/step-000004.pt"]
    for name in names:
        shutil.copy(tmp_path / "first" / name, old / name)
    # It loads: its averaged model and its word vocabularies...
    loaded = load_translator(old)
    for name, tensor in stopped.averaged.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor.cpu()), name
    # ...and resumes from its checkpoint, training only the steps it had not.
    asked = []
    made = BatchPlan.step
    monkeypatch.setattr(BatchPlan, "step", lambda self, *a: asked.append(a[0]) or made(self, *a))
    resumed = train_run(config, old, corpus, progress=False)
    assert asked == [4, 5, 6, 7]  # chapter 3 counts steps from 0: the run's steps 5 to 8
    assert resumed.history.step.tolist() == list(range(1, 9))
    assert resumed.evals.step.tolist() == [2, 4, 6, 8]
    assert [path.name for path in RunFolder(old).snapshots()] == [
        "step-000006.pt",
        "step-000008.pt",
    ]


def test_a_folder_given_for_a_checkpoint_gives_its_best_model(tmp_path):
    write_run_folder(tmp_path)  # vocabularies and averaged.pt
    assert load_translator(tmp_path).model is not None
    (tmp_path / "averaged.pt").rename(tmp_path / "elsewhere.pt")
    with pytest.raises(FileNotFoundError, match="checkpoint.pt"):
        load_translator(tmp_path)
