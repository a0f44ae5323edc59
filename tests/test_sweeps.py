"""annotated/training/sweeps.py: jobs, their folders and their lines in the record, shared by chapter 9's
Table 3 and the recipe search (benchmarks/bench_recipes.py)."""

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from benchmark_modules import load

from annotated.base.files import LOCK_NAME, FolderInUseError
from annotated.ch09_table3 import BASE, TABLE3_PROFILES
from annotated.training.config import RUNS_DIR
from annotated.training.sweeps import (
    Job,
    config_folder,
    config_identity,
    current_lines,
    read_record,
    read_results,
    recorded_line,
    recorded_step_costs,
    run_jobs,
    updating_record,
)

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def old_digest(config: dict) -> str:
    """A run folder's digest as it was computed before annotated/training/sweeps.py existed: of the JSON of
    `dataclasses.asdict(config)` with sorted keys, which is the JSON of the recorded "config"."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:8]


# ---------------------------------------------------------------- today's records keep their identity


def test_every_table3_line_is_matched_to_its_configuration_and_folder_as_before():
    sweep = TABLE3_PROFILES["full"]
    lines = read_results(sweep.results)
    jobs = {(job.key["variant"], job.key["seed"]): job for job in sweep.jobs()}
    assert len(lines) == len(jobs) == 21
    for line in lines:
        job = jobs[(line["variant"], line["seed"])]
        assert config_identity(job.config) == line["config"], job.name
        assert recorded_line(lines, job) is line, job.name
        slug = line["variant"].replace(" ", "-").replace("_", "")
        expected = f"{slug}-seed{line['seed']}-{old_digest(line['config'])}"
        assert job.folder == RUNS_DIR / "table3" / expected, job.name
    assert current_lines(sweep.jobs(), lines, "make table3") == lines  # every line, in order


def test_every_recipe_line_is_matched_to_its_candidate_and_folder_as_before():
    recipes = load("bench_recipes")
    lines = recipes.own_lines(read_results(recipes.RECORD))
    assert lines, "an empty recipe record"
    for line in lines:
        job = recipes.candidate_job(line["name"])
        assert config_identity(job.config) == line["config"], job.name
        assert recorded_line(lines, job) is line, job.name
        if line["name"] == "run 6":
            assert job.folder == RUNS_DIR / "multi30k-run6"  # where it was trained, as it was
            continue
        slug = "".join(c if c.isalnum() else "-" for c in line["name"]).replace("--", "-")
        assert job.folder == RUNS_DIR / "recipes" / f"{slug}-{old_digest(line['config'])}"


def test_the_identity_is_the_records_json_and_the_folder_follows_every_field(tmp_path):
    identity = config_identity(BASE)
    assert identity == json.loads(json.dumps(identity)) and identity["decoding"]["beam"] == 4
    folder = config_folder(tmp_path, "base", BASE)
    assert folder.name == f"base-{old_digest(identity)}"
    assert config_folder(tmp_path, "base", dataclasses.replace(BASE, warmup=201)) != folder


# ---------------------------------------------------------------- the record and the jobs


def job(tmp_path: Path, name: str, steps: int = 2) -> Job:
    config = dataclasses.replace(BASE, steps=steps)
    return Job(name, {"name": name}, config, config_folder(tmp_path / "runs", name, config))


def fake_measure(calls: list):
    def measure(job: Job) -> dict:
        calls.append(job.name)
        return {**job.key, "config": config_identity(job.config)}

    return measure


def test_lines_go_in_the_jobs_order_after_lines_of_no_job(tmp_path, capsys):
    record, calls = tmp_path / "record.json", []
    record.write_text(json.dumps({"lines": [{"name": "other"}], "kept": 1}))
    jobs = [job(tmp_path, "a"), job(tmp_path, "b")]
    run_jobs(jobs[1:], record, fake_measure(calls), report=lambda line: f"done {line['name']}")
    run_jobs(jobs, record, fake_measure(calls))
    assert calls == ["b", "a"]
    assert [x["name"] for x in read_results(record)] == ["other", "a", "b"]
    assert read_record(record)["kept"] == 1  # what else the record keeps survives
    assert capsys.readouterr().out == "[1/1] b\n    done b\n"  # only the run that reports
    longer = [job(tmp_path, "a", steps=3), jobs[1]]  # another configuration: measured again
    run_jobs(longer, record, fake_measure(calls))
    assert calls[2:] == ["a"] and [x["name"] for x in read_results(record)] == ["other", "a", "b"]
    assert current_lines(longer, read_results(record), "make it") == read_results(record)[1:]


def test_the_record_waits_for_another_writer(tmp_path, held_elsewhere):
    record = tmp_path / "record.json"
    with (
        held_elsewhere(tmp_path),
        pytest.raises(FolderInUseError),
        updating_record(record, patience=0.2) as lines,
    ):
        lines["never"] = True
    with updating_record(record) as lines:  # the other writer has finished
        lines["step costs"] = {"base": 1.0}
    assert read_record(record) == {"lines": [], "step costs": {"base": 1.0}}
    assert (tmp_path / LOCK_NAME).read_text() == ""  # released


def test_step_costs_are_measured_once_and_named_when_missing(tmp_path, capsys):
    record, measured = tmp_path / "record.json", []
    assert recorded_step_costs(record, None, "make table3") is None
    assert "not measured yet: run `make table3`" in capsys.readouterr().out
    costs = recorded_step_costs(record, lambda: measured.append(1) or {"base": 1.0}, "make it")
    assert costs == {"base": 1.0} == read_record(record)["step costs"]
    assert recorded_step_costs(record, lambda: measured.append(1) or {}, "make it") == costs
    assert measured == [1]
