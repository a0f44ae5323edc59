"""The run layer shared by chapters 7 and 8: its configuration, snapshots and averaging, and the
scores it saves (old run folders included)."""

import dataclasses
import json

import pandas as pd
import pytest
import torch

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import cooled_rate, rate
from annotated.ch06_decoding import DecodeConfig
from annotated.training.config import PROFILE_ENV, RunConfig, pick_profile, smoke_version
from annotated.training.finish import average_snapshots, saved_scores
from annotated.training.loop import save_snapshot
from annotated.training.plan import PROBE_STEPS, fit_schedule


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
    assert ch09_table3.table3_sweep() == ("class", ch09_table3.TABLE3_PROFILES["full"])
    assert all("class" in names for names in train.task_profiles().values())


def test_the_command_line_takes_every_profile_a_chapter_defines(monkeypatch):
    """`python -m annotated.train multi30k --profile long` (README, chapter 7) must be accepted."""
    from annotated import ch07_multi30k, ch08_wmt, train

    seen = []
    monkeypatch.setattr(train, "run", lambda args: seen.append((args.task, args.profile)) or 0)
    wanted = [("multi30k", p) for p in ch07_multi30k.PROFILES]
    wanted += [("wmt", p) for p in ch08_wmt.WMT_PROFILES]
    for task, profile in wanted:
        assert train.main([task, "--profile", profile]) == 0
    assert seen == wanted and ("multi30k", "long") in seen
    with pytest.raises(SystemExit):  # a profile of the other task is refused
        train.main(["multi30k", "--profile", "sample"])


# ---------------------------------------------------------------- time budgets


def _hour_recipe(**changes):
    """Chapter 7's recipe shape: 20 epochs of 152 steps, cooldown over the second half."""
    fields = dict(
        steps=None,
        epochs=20,
        warmup=500,
        lr_factor=0.358,
        d_model=256,
        cooldown_epochs=10.0,
        p_drop_final=0.3,
        max_minutes=60.0,
        evals_per_epoch=2,
        average_last=5,
    )
    return RunConfig(**{**fields, **changes})


def test_a_budget_that_fits_the_recipe_runs_the_recipe_unchanged():
    config = _hour_recipe()
    plan = fit_schedule(config, 152, seconds_per_step=0.6, probe_seconds=16.0)
    assert not plan.shortened and plan.steps == plan.recipe_steps == 3040
    # The book's run, step for step: the recipe's schedule, with the budget's time limit.
    recipe = config.schedule(152)
    assert plan.schedule(recipe, 60.0) == dataclasses.replace(recipe, limit_seconds=60 * 60 * 1.2)
    assert plan.schedule(recipe, 60.0).train_config(config) == config.train_config(152)
    assert round(plan.steps_per_minute) == 100
    assert "the run is the recipe, unchanged" in plan.describe(config)


def test_a_short_budget_compresses_the_whole_schedule_into_the_steps_that_fit():
    config = _hour_recipe()
    plan = fit_schedule(config, 152, seconds_per_step=1.4, probe_seconds=40.0)
    planned = plan.schedule(config.schedule(152), config.max_minutes)
    train = planned.train_config(config)
    # The steps fit the budget (with the probe's time spent from it)...
    assert plan.shortened and train.max_steps == plan.steps
    assert plan.steps * 1.4 + 40.0 <= 60 * 60
    assert plan.steps * 1.4 + 40.0 >= 0.85 * 60 * 60  # ...and use most of it
    # Steps 10% dearer than the probe measured (seen on a cloud CPU) still finish in time.
    assert plan.steps * 1.4 * 1.1 + 40.0 <= 60 * 60
    # ...the cooldown keeps its share of the run and ends at the new last step...
    assert train.cooldown / train.max_steps == pytest.approx(0.5, abs=0.01)
    assert cooled_rate(train.max_steps, 256, train) == pytest.approx(
        rate(train.max_steps, 256, train.warmup, train.lr_factor) / train.cooldown
    )
    # ...the warmup still fits before it, and the averaged snapshots lie inside it.
    assert (train.warmup, train.lr_factor) == (500, 0.358)
    assert planned.average_last * planned.eval_every <= train.cooldown
    assert planned.average_last == 5 and planned.eval_every == config.schedule(152).eval_every
    assert config == _hour_recipe()  # the configuration is left as it was
    text = plan.describe(config)
    assert f"{plan.steps:,} of the recipe's 3,040 steps" in text
    assert "trains less than its recipe" in text and "lower scores" in text


def test_a_tiny_budget_shortens_the_warmup_but_keeps_the_peak_rate():
    config = _hour_recipe(epochs=5, cooldown_epochs=2.5, max_minutes=5.0, average_last=2)
    plan = fit_schedule(config, 152, seconds_per_step=0.6, probe_seconds=16.0)
    train = plan.schedule(config.schedule(152), config.max_minutes).train_config(config)
    assert plan.steps < 760 and train.warmup < 500
    assert train.warmup <= train.max_steps - train.cooldown
    peak = rate(train.warmup, 256, train.warmup, train.lr_factor)
    assert peak == pytest.approx(rate(500, 256, 500, 0.358))  # 1.0e-3, the recipe's peak
    assert 1 <= plan.average_last <= 2
    assert plan.average_last * config.schedule(152).eval_every <= train.cooldown


def test_a_recipe_without_cooldown_keeps_its_averaging():
    # chapter 8's sample: the paper's 100,000 steps, of which 20 minutes give a few hundred
    config = _hour_recipe(
        steps=100_000, epochs=None, cooldown_epochs=0.0, warmup=300, max_minutes=20.0
    )
    plan = fit_schedule(config, 56, seconds_per_step=2.2, probe_seconds=60.0)
    assert 450 < plan.steps < 530 and plan.warmup == 300 and plan.average_last == 5
    assert plan.schedule(config.schedule(56), 20.0).train_config(config).cooldown == 0
    assert "no cooldown" in plan.describe(config)


def test_too_little_time_is_refused_with_what_to_do():
    config = _hour_recipe(max_minutes=0.5)
    with pytest.raises(ValueError, match="give about 18 steps.*Give more minutes"):
        fit_schedule(config, 152, seconds_per_step=1.5)
    with pytest.raises(ValueError, match="max_minutes must be positive"):
        _hour_recipe(max_minutes=0.0)


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
    train = run.schedule.train_config(run.config)
    assert last == plan.steps == run.schedule.steps == train.max_steps
    assert run.config == config  # planned, not rewritten
    assert run.history.seconds.sum() + plan.probe_seconds <= config.max_minutes * 60
    assert run.history.lr.iloc[-1] == pytest.approx(
        cooled_rate(last, run.translator.model.config.d_model, train)
    )
    assert train.cooldown > 0 and run.evals.step.max() == last
    averaged = torch.load(tmp_path / "averaged.pt", weights_only=True)["averaged"]
    assert len(averaged) == plan.average_last and averaged[-1] == f"step-{last:06d}.pt"
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
    assert stopped < run.budget.steps and run.budget.stopped_at == stopped
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
    assert int(done.history.step.max()) == run.budget.steps and done.budget.stopped_at is None
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


def test_a_run_begun_before_plans_keeps_its_recipe_and_its_old_limit():
    # Its checkpoint is tied to the recipe's schedule, so nothing is compressed; the budget stays
    # the plain limit it was when the run began (a measured plan's grace would train past it).
    config = _hour_recipe(max_minutes=20.0)
    plan = fit_schedule(config, 152, seconds_per_step=2.0, keep_recipe=True)
    recipe = config.schedule(152)
    assert plan.unplanned and plan.steps == 3040
    assert plan.schedule(recipe, 20.0) == dataclasses.replace(recipe, limit_seconds=20 * 60)
    assert plan.limit_seconds(20.0) == 20 * 60
    assert "begun without a plan" in plan.describe(config)
    measured = fit_schedule(config, 152, seconds_per_step=0.3)
    assert not measured.unplanned and measured.limit_seconds(20.0) == 20 * 60 * 1.2


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
