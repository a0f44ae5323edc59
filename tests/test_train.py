"""annotated/train.py: `python -m annotated.train multi30k|wmt` on bad input (each refused in one
line, exit status 2, nothing trained), the profiles and the budget it takes, and chapter 8's WMT
run planned alike in two processes under torchrun."""

import json
import os
import subprocess
import sys

import pytest
from command_line import ROOT, cli, run_module

from annotated.base.datasets import DATA_DIR_ENV
from annotated.train import main as train_main

# The tests of the command in this process that were slow-marked where they stood
# (the tools' test file, now tests/test_book.py) still are: `make unit` leaves them to `make test`.


def train_cli(*args: str) -> subprocess.CompletedProcess:
    """`python -m annotated.train args`, in this process (`cli`), its output text."""
    result = cli(train_main, *args)
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    return result


@pytest.mark.slow
def test_train_refuses_a_run_dir_that_is_a_file(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    result = train_cli("multi30k", "--run-dir", str(path))
    assert result.returncode == 2 and "is a file; give a folder" in result.stderr
    assert path.read_text() == "mine"


@pytest.mark.slow
def test_train_with_an_unknown_profile_in_the_environment_says_which_exist(tmp_path, monkeypatch):
    monkeypatch.setenv("ANNOTATED_PROFILE", "fast")
    result = train_cli("multi30k", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    assert (
        "ANNOTATED_PROFILE='fast': choose one of ['class', 'full', 'long', 'smoke']"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_train_refuses_the_shipped_profile_in_one_line_and_trains_nothing(tmp_path, monkeypatch):
    """ANNOTATED_PROFILE=shipped (chapter 7's way to load the book's model) would otherwise train
    the full recipe into multi30k-shipped: refused before anything starts."""
    from annotated import ch07_multi30k

    trained = []

    def train_multi30k(config, folder, *args, **kw):
        trained.append(folder)
        raise ValueError(f"started training into {folder}")

    monkeypatch.setattr(ch07_multi30k, "train_multi30k", train_multi30k)
    monkeypatch.setenv("ANNOTATED_PROFILE", "shipped")
    result = train_cli("multi30k", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and not trained and not (tmp_path / "run").exists()
    said = result.stderr.strip().splitlines()
    assert len(said) == 1 and "needs no training" in said[0] and "chapter 7 loads it" in said[0]
    assert result.stdout == ""


@pytest.mark.slow
def test_train_with_a_missing_data_folder_says_where_to_put_it(tmp_path):
    # A process of its own: the exit status and message `python -m` gives, nothing else printed.
    env = {**os.environ, DATA_DIR_ENV: str(tmp_path / "nowhere"), "ANNOTATED_PROFILE": "smoke"}
    result = run_module("annotated.train", "multi30k", "--run-dir", str(tmp_path / "run"), env=env)
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 2 and result.stderr.startswith("train: ")
    assert "nowhere" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_train_refuses_a_profile_of_the_other_task():
    result = train_cli("multi30k", "--profile", "sample")  # chapter 8's WMT sample
    assert result.returncode == 2
    assert "multi30k has the profiles full, long, class, smoke" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("value", ["0", "-5", "abc", "inf", "nan", ""])
def test_train_refuses_a_budget_that_is_not_a_positive_number_of_minutes(tmp_path, value):
    result = train_cli("multi30k", "--minutes", value, "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "positive number of minutes or 'none'" in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_budget_option_sets_or_removes_the_profiles_budget():
    from annotated.ch07_multi30k import PROFILES
    from annotated.train import budget_minutes, with_budget

    full = PROFILES["full"]
    given = lambda text: with_budget(full, type("Args", (), {"minutes": text})())  # noqa: E731
    assert given(False) is full  # no --minutes: the profile's 60
    assert given(budget_minutes("30")).max_minutes == 30.0
    assert given(budget_minutes(" None ")).max_minutes is None


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


@pytest.mark.slow
def test_the_train_command_plans_a_budget_alike_in_every_process_and_scores_once(tmp_path):
    # `python -m annotated.train wmt` as two gloo processes: both probe, plan with the mean of their
    # times and train the same steps; the first then scores the run (one process's training is
    # tests/test_ch08_wmt.py's test_smoke_run_trains_averages_scores_and_resumes, in one process).
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", "annotated.train", "wmt", "--profile", "smoke", "--minutes", "5"]
    command += ["--run-dir", str(tmp_path)]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["steps"] == plan["recipe_steps"] == 6  # five minutes hold the smoke recipe
    assert result.stdout.count("plan: 5 training minutes") == 1  # said once, by the first process
    assert "the run is the recipe, unchanged" in result.stdout
    assert result.stdout.count(f"{tmp_path}: 6 steps") == 1
    assert result.stdout.count("nrefs:1|case:mixed|eff:no|tok:13a") == 1
    assert "tokenized BLEU" in result.stdout and "test set:" in result.stdout
