"""annotated/training/loop.py: a run's training stage. Chapter 3's `train` on the run's schedule,
resumed from the run's checkpoint exactly where it stopped; after each step `StepHook` scores the
validation set when an evaluation is due (every `eval_every` steps, at the last step, when time is
up), writing a line of evals.csv and a snapshot, on the first process only; and a run whose time
is spent trains no more. A toy corpus (tests/toy_runs.py) trains in seconds."""

import dataclasses

import pandas as pd
import pytest
import torch
from toy_runs import run_in_progress, toy_config, toy_corpus

from annotated.ch05_text import BatchPlan
from annotated.ch06_decoding import Translator
from annotated.training.config import Schedule, new_model
from annotated.training.folder import RunFolder
from annotated.training.loop import (
    EVAL_COLUMNS,
    HISTORY_COLUMNS,
    StepHook,
    read_csv,
    saved_history,
    train_schedule,
)


@pytest.fixture(scope="module")
def corpus():
    return toy_corpus()


def schedule(steps: int = 6, eval_every: int = 3, **changes) -> Schedule:
    fields = dict(warmup=2, lr_factor=1.0, cooldown=0, average_last=2, steps_per_epoch=4)
    return Schedule(steps=steps, eval_every=eval_every, **{**fields, **changes})


class Asked:
    """The run's batches, noting the step of each request (which steps were trained)."""

    def __init__(self, plan: BatchPlan):
        self.plan, self.steps = plan, []

    @property
    def steps_per_epoch(self) -> int:
        return self.plan.steps_per_epoch

    def step(self, step, *args):
        self.steps.append(step)
        return self.plan.step(step, *args)


def train_toy(folder, corpus, plan: Schedule, asked: list | None = None):
    """The training stage of a toy run: a fresh model (seeded), the corpus's batches; the steps
    whose batches it asked for go to `asked`."""
    config = toy_config()
    folder.mkdir(parents=True, exist_ok=True)
    batches = Asked(BatchPlan.build(corpus.ids["train"], config.max_tokens, 1, 1, config.seed))
    trained = train_schedule(run_in_progress(config, folder, corpus, batches), plan)
    if asked is not None:
        asked += batches.steps
    return trained


# ---------------------------------------------------------------- the training stage


def test_a_stopped_run_resumes_to_the_very_steps_and_weights_of_an_unstopped_one(tmp_path, corpus):
    straight_steps, resumed_steps = [], []
    straight = train_toy(tmp_path / "straight", corpus, schedule(steps=6), straight_steps)
    assert straight.history.step.tolist() == [1, 2, 3, 4, 5, 6]
    assert straight.history.loss.notna().all()
    assert straight.evals.step.tolist() == [3, 6]  # every third step, the last one among them
    kept = sorted(p.name for p in (tmp_path / "straight" / "snapshots").iterdir())
    assert kept == ["step-000003.pt", "step-000006.pt"]  # average_last snapshots
    # The same run stopped after three steps, then started again in a fresh model.
    train_toy(tmp_path / "resumed", corpus, schedule(steps=3))
    resumed = train_toy(tmp_path / "resumed", corpus, schedule(steps=6), resumed_steps)
    assert resumed_steps == straight_steps[3:]  # only the last three steps trained again
    assert resumed.history.step.tolist() == [1, 2, 3, 4, 5, 6]
    assert resumed.history.loss.tolist() == straight.history.loss.tolist()
    assert resumed.history.lr.tolist() == straight.history.lr.tolist()
    for (name, a), b in zip(
        straight.translator.model.state_dict().items(),
        resumed.translator.model.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b), name
    assert resumed.evals.step.tolist() == [3, 6]
    assert resumed.evals["val BLEU"].tolist() == straight.evals["val BLEU"].tolist()
    assert not resumed.translator.model.training  # left ready to translate


def test_a_run_whose_time_is_spent_loads_its_checkpoint_and_trains_no_more(tmp_path, corpus):
    first = train_toy(tmp_path, corpus, schedule(steps=3))
    spent = first.seconds
    later = train_toy(tmp_path, corpus, schedule(steps=6, limit_seconds=spent / 2))
    assert later.history.step.tolist() == [1, 2, 3]  # the checkpoint's history, no step more
    assert saved_history(tmp_path / "checkpoint.pt").step.tolist() == [1, 2, 3]
    assert later.seconds == pytest.approx(spent)
    for (name, a), b in zip(
        first.translator.model.state_dict().items(),
        later.translator.model.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b), name  # the checkpoint's weights, not a fresh model's


def test_before_its_first_checkpoint_a_run_has_an_empty_history_and_no_evaluations(tmp_path):
    history = saved_history(tmp_path / "checkpoint.pt")
    assert list(history.columns) == list(HISTORY_COLUMNS) and history.empty
    evals = read_csv(tmp_path / "evals.csv", EVAL_COLUMNS)
    assert list(evals.columns) == list(EVAL_COLUMNS) and evals.empty


# ---------------------------------------------------------------- after each step


def hook_that_records(plan: Schedule, folder, monkeypatch, rank=0, seconds=0.0):
    """A StepHook of process `rank` (of two) whose evaluations are recorded instead of run."""
    files = RunFolder(folder, writes=rank == 0)
    hook = StepHook(plan, files, None, None, val_sentences=None, seconds=seconds, progress=False)
    evaluated = []
    monkeypatch.setattr(hook, "evaluate", evaluated.append)
    return hook, evaluated


def test_an_evaluation_is_due_every_eval_every_steps_at_the_last_and_when_time_is_up(
    tmp_path, monkeypatch
):
    hook, evaluated = hook_that_records(schedule(steps=5, eval_every=2), tmp_path, monkeypatch)
    stops = [hook({"step": step, "seconds": 1.0}) for step in range(1, 6)]
    assert evaluated == [2, 4, 5] and stops == [False] * 5 and hook.seconds == 5.0
    # Three seconds a step against a budget of eight, with two already spent before a restart:
    # step 2 reaches it, is evaluated (its time is up) and stops the run.
    plan = schedule(steps=10, eval_every=4, limit_seconds=8.0)
    hook, evaluated = hook_that_records(plan, tmp_path, monkeypatch, seconds=2.0)
    stops = [hook({"step": step, "seconds": 3.0}) for step in (1, 2)]
    assert stops == [False, True] and evaluated == [2]


def test_only_the_first_process_evaluates_but_every_process_stops_in_time(tmp_path, monkeypatch):
    plan = schedule(steps=4, eval_every=1, limit_seconds=2.0)
    hook, evaluated = hook_that_records(plan, tmp_path, monkeypatch, rank=1)
    assert [hook({"step": step, "seconds": 1.0}) for step in (1, 2)] == [False, True]
    assert evaluated == []


def test_an_evaluation_writes_its_line_and_snapshot_and_a_resumed_run_replaces_later_lines(
    tmp_path, corpus
):
    config = toy_config()
    model = new_model(config, corpus).eval()
    translator = Translator(model, corpus.src_vocab, corpus.tgt_vocab, config.decoding)
    # evals.csv as a run that got to step 6 left it; its checkpoint was of step 2.
    lines = {"step": [2, 4, 6], "epoch": [0.5, 1.0, 1.5], "train minutes": [1.0, 2.0, 3.0]}
    pd.DataFrame({**lines, "val BLEU": [1.0, 2.0, 3.0]}).to_csv(tmp_path / "evals.csv", index=False)
    plan = schedule(steps=8, eval_every=2, steps_per_epoch=4)
    hook = StepHook(
        plan, RunFolder(tmp_path), translator, corpus, val_sentences=2, seconds=90.0, progress=False
    )
    hook.evaluate(4)
    evals = pd.read_csv(tmp_path / "evals.csv")
    assert evals.step.tolist() == [2, 4]  # step 6 was of the run before the restart
    assert evals.iloc[1][["epoch", "train minutes"]].tolist() == [1.0, 1.5]
    assert 0.0 <= evals["val BLEU"].iloc[1] <= 100.0
    snapshot = torch.load(tmp_path / "snapshots" / "step-000004.pt", weights_only=True)
    assert snapshot["step"] == 4
    assert snapshot["model_config"] == dataclasses.asdict(model.config)
    assert all(torch.equal(snapshot["model"][k], v) for k, v in model.state_dict().items())
