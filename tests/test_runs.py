"""annotated/training/runs.py: `train_run`, the spine of a run, through its four stages (configure,
plan, train, finish): a toy run's folder holds what the module says, a finished run is loaded and
not trained again, and one process at a time trains in a folder; then whole runs under a time
budget on Multi30k. (The stages' own tests are in their modules' files: tests/test_config.py,
tests/test_plan.py, tests/test_loop.py, tests/test_finish.py.)"""

import dataclasses
import json

import pytest
import torch
from toy_runs import toy_config, toy_corpus

from annotated.base.files import FolderInUseError
from annotated.ch03_training import cooled_rate
from annotated.ch05_text import BatchPlan
from annotated.training.finish import save_vocabularies
from annotated.training.plan import PROBE_STEPS
from annotated.training.runs import train_run

# ---------------------------------------------------------------- a toy run


def test_a_runs_folder_holds_its_stages_files_and_a_finished_run_is_loaded_not_trained(
    tmp_path, monkeypatch
):
    corpus = toy_corpus()
    config = toy_config(train_pairs=6, max_tokens=20, val_sentences=2)
    save_vocabularies(corpus, tmp_path)
    run = train_run(config, tmp_path, corpus, progress=False)
    first = BatchPlan.build(corpus.ids["train"][:6], config.max_tokens, 1, 1, config.seed)
    every = BatchPlan.build(corpus.ids["train"], config.max_tokens, 1, 1, config.seed)
    assert first.steps_per_epoch < every.steps_per_epoch
    assert run.schedule == config.schedule(first.steps_per_epoch)  # of its first 6 pairs only
    assert run.history.step.tolist() == list(range(1, config.steps + 1))
    assert run.budget is None and run.averaged is not None and run.config == config
    assert {p.name for p in tmp_path.iterdir()} >= {
        "checkpoint.pt",
        "vocab.de.json",
        "vocab.en.json",
        "history.csv",
        "evals.csv",
        "snapshots",
        "averaged.pt",
    }
    assert not (tmp_path / "plan.json").exists()  # no time budget, no plan
    asked = []
    made = BatchPlan.step
    monkeypatch.setattr(BatchPlan, "step", lambda self, *a: asked.append(a) or made(self, *a))
    again = train_run(config, tmp_path, corpus, progress=False)
    assert asked == [] and again.history.equals(run.history)


def test_a_second_process_is_refused_a_folder_the_first_trains_in(tmp_path, held_elsewhere):
    # Refused before any stage writes: with a time budget the plan would write plan.json first.
    corpus = toy_corpus()
    with held_elsewhere(tmp_path), pytest.raises(FolderInUseError):
        train_run(toy_config(max_minutes=5.0), tmp_path, corpus, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in-use.lock"]


# ---------------------------------------------------------------- time budgets


class _Clock:
    """A stand-in for chapter 3's `time` module: every optimizer step takes `cost(step)` seconds."""

    def __init__(self, cost):
        self.calls, self.cost = 0, cost

    def perf_counter(self) -> float:
        # the loop reads the clock twice a step: before it, and after it
        step, self.calls = self.calls // 2, self.calls + 1
        return float(sum(self.cost(s) for s in range(step))) + (
            self.cost(step) if self.calls % 2 == 0 else 0.0
        )


def _budget_run_config():
    from annotated.ch07_multi30k import PROFILES

    # The smoke model, four epochs (about 180 steps), a two-minute budget.
    return dataclasses.replace(PROFILES["smoke"], epochs=4, cooldown_epochs=2.0, evals_per_epoch=2)


@pytest.mark.slow
@pytest.mark.multi30k
def test_a_budgeted_run_plans_and_finishes_its_schedule_inside_the_budget(
    corpus, tmp_path, monkeypatch, capsys
):
    from annotated import ch03_training
    from annotated.ch07_multi30k import train_multi30k

    config = _budget_run_config()
    monkeypatch.setattr(ch03_training, "time", _Clock(lambda step: 1.0))
    run = train_multi30k(config, tmp_path, progress=True, corpus=corpus)
    plan = run.budget
    assert plan.shortened and plan.seconds_per_step == 1.0 and plan.first_epoch_extra == 0.0
    assert plan.probe_seconds == 2 * PROBE_STEPS  # its batches twice, at a second a step
    assert "of the recipe's" in capsys.readouterr().out
    last = int(run.history.step.max())
    train = run.config.train_config(run.schedule)
    assert last == run.schedule.steps == train.max_steps and plan.schedule == run.schedule
    assert run.config == config  # planned, not rewritten
    assert run.history.seconds.sum() + plan.probe_seconds <= config.max_minutes * 60
    assert run.history.lr.iloc[-1] == pytest.approx(
        cooled_rate(last, run.translator.model.config.d_model, train)
    )
    assert train.cooldown > 0 and run.evals.step.max() == last
    averaged = torch.load(tmp_path / "averaged.pt", weights_only=True)["averaged"]
    assert len(averaged) == plan.schedule.average_last and averaged[-1] == f"step-{last:06d}.pt"
    assert json.loads((tmp_path / "plan.json").read_text())["steps"] == last
    # Run again, on a machine ten times faster: the plan made at the start is kept.
    monkeypatch.setattr(ch03_training, "time", _Clock(lambda step: 0.1))
    again = train_multi30k(config, tmp_path, progress=True, corpus=corpus)
    assert "plan kept" in capsys.readouterr().out
    assert again.budget == plan and again.history.equals(run.history)


@pytest.mark.slow
@pytest.mark.multi30k
def test_a_time_limit_never_ends_a_schedule_silently(corpus, tmp_path, monkeypatch, capsys):
    from annotated import ch03_training
    from annotated.ch07_multi30k import train_multi30k

    config = _budget_run_config()
    # The machine is three times slower once the plan is made (the probe trains its batches twice).
    probe = 2 * PROBE_STEPS
    monkeypatch.setattr(ch03_training, "time", _Clock(lambda step: 1.0 if step < probe else 3.0))
    run = train_multi30k(config, tmp_path, progress=False, corpus=corpus)
    stopped = int(run.history.step.max())
    assert stopped < run.budget.schedule.steps and run.budget.stopped_at == stopped
    assert run.history.seconds.sum() >= config.max_minutes * 60 * 1.2
    said = capsys.readouterr().out
    assert "TIME LIMIT" in said and "did not finish" in said and f"{stopped:,}" in said
    assert json.loads((tmp_path / "plan.json").read_text())["stopped_at"] == stopped
    # Loading the stopped run says it again.
    train_multi30k(config, tmp_path, progress=False, corpus=corpus)
    assert "TIME LIMIT" in capsys.readouterr().out
    # A larger budget resumes it and finishes the same plan.
    longer = dataclasses.replace(config, max_minutes=60.0)
    done = train_multi30k(longer, tmp_path, progress=False, corpus=corpus)
    assert int(done.history.step.max()) == run.budget.schedule.steps
    assert done.budget.stopped_at is None
    assert "TIME LIMIT" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.multi30k
def test_a_budget_that_fits_trains_the_same_model_as_no_budget(corpus, tmp_path):
    from annotated.ch07_multi30k import PROFILES, train_multi30k

    # The probe trains a throwaway model first; the run must not feel it (same seed, same draws).
    smoke = PROFILES["smoke"]
    free = train_multi30k(
        dataclasses.replace(smoke, max_minutes=None), tmp_path / "free", False, corpus
    )
    planned = train_multi30k(
        dataclasses.replace(smoke, max_minutes=600.0), tmp_path / "planned", False, corpus
    )
    assert free.budget is None and not planned.budget.shortened
    assert planned.history.loss.tolist() == free.history.loss.tolist()
    assert not (tmp_path / "free" / "plan.json").exists()
