"""benchmarks/: a record taken on a busy machine never replaces a clean one (common.py), and the
recipe search's candidates, folders and record (bench_recipes.py). The machine's description and
`Timing` are tested in test_machine.py."""

import importlib.util
import json
from pathlib import Path

import pytest
from benchmark_modules import load

from annotated.base import machine

PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "common.py"
spec = importlib.util.spec_from_file_location("benchmarks_common", PATH)
common = importlib.util.module_from_spec(spec)
spec.loader.exec_module(common)


def test_a_busy_record_never_replaces_a_clean_one(tmp_path, monkeypatch, capsys):
    assert common.Timing is machine.Timing and common.describe is machine.describe  # one of each
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    clean = {"minutes": 31.8, "timing": {"busy": False, "why busy": None}}
    busy = {"minutes": 65.7, "timing": {"busy": True, "why busy": "load average 2.10 before"}}
    assert common.write_results("multi30k", clean, quiet=True) == tmp_path / "multi30k.json"
    assert common.write_results("multi30k", busy, quiet=True) == tmp_path / "multi30k.busy.json"
    err = capsys.readouterr().err
    assert (
        "the machine was busy (load average 2.10 before)" in err and "multi30k.json is kept" in err
    )
    written = json.loads((tmp_path / "multi30k.json").read_text())
    assert written.pop("commit") == common.code_commit()  # the code measured, named by its commit
    assert written == clean
    assert json.loads((tmp_path / "multi30k.busy.json").read_text()) == {
        **busy,
        "commit": common.code_commit(),
    }
    # A clean record replaces a clean one; a busy one may replace a record of unknown conditions.
    again = dict(clean, minutes=31.5)
    assert common.write_results("multi30k", again, quiet=True) == tmp_path / "multi30k.json"
    (tmp_path / "old.json").write_text(json.dumps({"minutes": 60}))
    assert common.write_results("old", busy, quiet=True) == tmp_path / "old.json"
    assert "WARNING: the machine was busy" in capsys.readouterr().err


def test_a_record_is_read_as_a_json_object_or_refused(tmp_path):
    # What `make run-book --record`, class-resources and bench-step-profile merge their entry into.
    record = tmp_path / "record.json"
    assert common.read_json_object(record) == {}  # none yet
    record.write_text(json.dumps({"kept": [1, 2]}))
    assert common.read_json_object(record) == {"kept": [1, 2]}
    record.write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a JSON list, not an object"):
        common.read_json_object(record)


def test_each_recipe_candidate_is_run_6_with_only_its_changes():
    import dataclasses

    recipes = load("bench_recipes")
    full = dataclasses.asdict(recipes.RUN6)
    folders = set()
    for name, (changes, why) in recipes.CANDIDATES.items():
        config = dataclasses.asdict(recipes.candidate_config(name))
        changed = {key for key in full if config[key] != full[key]}
        # Candidates train their whole schedule (compared step for step): no time budget.
        expected = set() if name == "run 6" else {*changes, "max_minutes"}
        assert changed == expected, name
        assert why and name not in folders
        folders.add(recipes.candidate_folder(name))
    assert len(folders) == len(recipes.CANDIDATES)
    # Run 6 is chapter 7's recipe before the search, which changed only the depth.
    assert dataclasses.replace(recipes.FULL, N=3) == recipes.RUN6


def test_chapter_7s_long_profile_is_the_candidate_that_was_measured():
    import dataclasses

    from annotated.ch07_multi30k import PROFILES

    recipes = load("bench_recipes")
    measured = recipes.candidate_config("two layers, 40 epochs")
    # The same recipe, with chapter 7's time budget on top (the candidates had none).
    assert dataclasses.replace(PROFILES["long"], max_minutes=None) == measured
    assert PROFILES["long"].max_minutes == PROFILES["full"].max_minutes


def test_a_changed_candidate_trains_in_a_new_folder(monkeypatch):
    recipes = load("bench_recipes")
    before = recipes.candidate_folder("two layers")
    monkeypatch.setitem(recipes.CANDIDATES, "two layers", ({"N": 2, "warmup": 400}, "changed"))
    assert recipes.candidate_folder("two layers") != before


def test_the_recipe_record_agrees_with_its_candidates_and_its_curves():
    recipes = load("bench_recipes")
    if not recipes.RECORD.exists():
        pytest.skip("no recipe record yet (make bench-recipes)")
    lines = recipes.own_lines(json.loads(recipes.RECORD.read_text())["lines"])
    assert lines, "an empty recipe record"
    for line in lines:
        assert line["name"] in recipes.CANDIDATES, f"{line['name']} is no longer a candidate"
        assert line["config"] == recipes.recorded_config(line["name"]), (
            f"{line['name']} was trained with another configuration"
        )
        curve = line["val BLEU by step"]
        assert curve[-1][0] == line["steps"]
        assert max(bleu for _, bleu in curve) == line["best val BLEU (bare weights)"]
        for threshold in (30, 35):
            reached = [step for step, bleu in curve if bleu >= threshold]
            assert line[f"step of val BLEU {threshold}"] == (reached[0] if reached else None)
        for key in ("test2016 beam", "test2016 greedy", "val beam", "val greedy"):
            assert 0 < line[key] < 100


def test_step_costs_as_avx2_run_fp32_under_avx2_kernels_and_are_kept_apart(tmp_path, monkeypatch):
    recipes = load("bench_recipes")
    with pytest.raises(SystemExit):  # the kernel limits mean nothing to a training run
        recipes.main(["--as-avx2", "--only", "two layers"])
    for key, value in recipes.AS_AVX2.items():  # as if started again with them (no exec here)
        monkeypatch.setenv(key, value)
    seen = {}

    def costs(configs, corpus, steps, rounds):
        seen.update(configs)
        return {"seconds per step": {name: 1.0 + config.N for name, config in configs.items()}}

    monkeypatch.setattr(recipes, "config_step_costs", costs)
    monkeypatch.setattr(recipes.torch, "set_num_threads", lambda n: None)  # keep pytest's threads
    monkeypatch.setattr(recipes, "load_multi30k", lambda *args: None)
    monkeypatch.setattr(recipes, "RECORD", tmp_path / "recipes.json")
    (tmp_path / "recipes.json").write_text(json.dumps({"lines": [], "step costs": {"kept": 1}}))
    assert (
        recipes.main(["--step-costs", "--as-avx2", "--threads", "1", "--only", "two layers"]) == 0
    )
    assert set(seen) == {"run 6", "two layers"}
    assert {config.precision for config in seen.values()} == {"fp32"}
    record = json.loads((tmp_path / "recipes.json").read_text())
    assert record["step costs"] == {"kept": 1}  # the bf16 measurement is not replaced
    avx2 = record["step costs as AVX2"]
    assert avx2["kernels"] == recipes.AS_AVX2 and avx2["precision"] == "fp32"
    assert avx2["steps a minute"] == {"run 6": 15.0, "two layers": 20.0}


def test_each_session_that_trains_a_candidate_is_noted_from_the_step_it_resumed_at(tmp_path):
    import torch

    recipes = load("bench_recipes")
    folder = tmp_path / "candidate"
    recipes.note_session(folder, 300, threads=1, workers=2)  # a fresh start
    folder.mkdir(exist_ok=True)
    torch.save(
        {"model": {}, "model_config": {}, "history": [{}] * 76}, folder / "checkpoint.pt"
    )  # stopped after step 76
    recipes.note_session(folder, 300, threads=2, workers=1)
    torch.save(
        {"model": {}, "model_config": {}, "history": [{}] * 300}, folder / "checkpoint.pt"
    )  # finished
    recipes.note_session(folder, 300, threads=2, workers=1)  # scoring only: not a session
    assert recipes.trained_with(folder, 300) == (
        "steps 1-76: 1 thread(s), 2 worker(s) on the machine; "
        "steps 77-300: 2 thread(s), 1 worker(s) on the machine"
    )
    assert recipes.trained_with(tmp_path / "never", 300) == "not noted"


def test_the_search_trains_only_missing_candidates_and_keeps_the_others_lines(
    tmp_path, monkeypatch, capsys
):
    from annotated.training.sweeps import config_identity

    recipes = load("bench_recipes")
    trained = []

    def measure(job, threads, workers):
        trained.append((job.name, workers))
        return {"name": job.name, "config": config_identity(job.config), "test2016 beam": 1.0,
                "test2016 greedy": 1.0, "step of val BLEU 35": None}  # fmt: skip

    monkeypatch.setattr(recipes, "measure", measure)
    monkeypatch.setattr(recipes, "RUNS_DIR", tmp_path / "runs")
    monkeypatch.setattr(recipes, "RECORD", tmp_path / "recipes.json")
    monkeypatch.setattr(recipes.torch, "set_num_threads", lambda n: None)  # keep pytest's threads
    (tmp_path / "recipes.json").write_text(json.dumps({"lines": [{"name": "earlier"}]}))
    only = ["--threads", "1", "--workers", "2", "--only", "two layers", "dropout from 0"]
    assert recipes.main(only) == 0 and recipes.main(only) == 0  # the second finds both recorded
    assert trained == [("two layers", 2), ("dropout from 0", 2)]
    lines = json.loads((tmp_path / "recipes.json").read_text())["lines"]
    assert [line["name"] for line in lines] == ["earlier", "two layers", "dropout from 0"]
    assert "[1/2] two layers\n    test2016 beam 1.0" in capsys.readouterr().out
    assert recipes.candidate_folder("two layers").parent == tmp_path / "runs" / "recipes"


def test_the_starting_point_runs_with_the_environment_it_had(monkeypatch, tmp_path):
    """`--against` runs an older checkout without the oneDNN cache that importing the book sets:
    an older checkout that does not set it ran with oneDNN's default, and so it must be timed."""
    import subprocess

    bench = load("bench_multi30k")
    seen = []
    answer = json.dumps({"target tokens/s": {"ours": 2.0, "nn.Transformer": 1.0}})

    def run(command, env=None, **kwargs):
        if command[0] == "git":
            return subprocess.CompletedProcess(command, 0, stdout="abc\n")
        seen.append((env["PYTHONPATH"], env.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY")))
        return subprocess.CompletedProcess(command, 0, stdout=answer + "\n")

    monkeypatch.setattr(bench.subprocess, "run", run)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16384")
    args = type("Args", (), {"steps": 2})()
    monkeypatch.setattr(bench.annotated, "ONEDNN_CACHE_FROM_BOOK", True)
    record = bench.starting_point(tmp_path, args)
    assert [capacity for _, capacity in seen] == [None] * 4  # each side's import decides
    assert [path for path, _ in seen].count(str(tmp_path.resolve())) == 2
    assert record["speedup"] == 1.0
    seen.clear()
    monkeypatch.setattr(bench.annotated, "ONEDNN_CACHE_FROM_BOOK", False)  # the reader's choice
    bench.starting_point(tmp_path, args)
    assert [capacity for _, capacity in seen] == ["16384"] * 4


@pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")
def test_the_gpu_benchmark_checks_run_here_on_the_cpu(monkeypatch):
    """bench_gpu.py's checks, on the CPU in place of a GPU (this machine may have none): the
    code runs, fused and plain attention agree, and the three losses are timed."""
    import torch

    bench = load("bench_gpu")
    monkeypatch.setattr(bench, "CUDA", torch.device("cpu"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    rows = bench.attention_check()
    assert len(rows) == 6 and not any(row["any NaN"] for row in rows)
    assert max(max(r["output"], r["input gradient"], r["W_q gradient"]) for r in rows) < 1e-5
    loss = bench.loss_check(tokens=40, vocab=30, repeats=1)
    assert loss["float32: relative value difference"] < 1e-6
    assert len(loss["ms per forward and backward (bf16 logits)"]) == 3
    assert bench.fast_step.block_rows(torch.empty(300, 3)) == bench.fast_step.ROWS  # restored


def test_the_gpu_benchmark_says_it_needs_a_gpu(monkeypatch):
    import torch

    bench = load("bench_gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("sys.argv", ["bench_gpu.py", "--no-train"])
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench.main()
