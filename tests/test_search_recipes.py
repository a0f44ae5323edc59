"""benchmarks/search_recipes.py: the second search for chapter 7's recipe. Its candidates are the
full profile with only their changes, the screen reads no test set, the finalists are chosen by
validation alone, each finalist's seeds give its band, every line names its machine and commit,
and `--parallel` starts workers that share the list."""

import dataclasses
import json
import types
from pathlib import Path

import pandas as pd
import pytest
from benchmark_modules import load

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import rate
from annotated.ch07_multi30k import FULL
from annotated.training.folder import RunFolder
from annotated.training.sweeps import config_identity

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def search():
    return load("search_recipes")


def test_each_candidate_is_the_full_profile_with_only_its_changes(search):
    base = dataclasses.asdict(dataclasses.replace(FULL, max_minutes=None))
    for name, (changes, why) in search.CANDIDATES.items():
        config = dataclasses.asdict(search.candidate_config(name))
        differ = {key for key in base if config[key] != base[key]}
        assert differ == set(changes) - {k for k, v in changes.items() if base[k] == v}, name
        assert why, name
    assert dataclasses.asdict(search.candidate_config("full", seed=2))["seed"] == 2


def test_the_grid_holds_three_vocabularies_on_three_schedules_stretched_as_long_is(search):
    from annotated.ch07_multi30k import PROFILES

    grid = {
        (c.vocab_size, c.epochs, c.cooldown_epochs)
        for name in search.CANDIDATES
        if (c := search.candidate_config(name)).vocab_size is not None
    }
    for size in (8000, 10000, 16000):
        for epochs in (20, 30, 40):
            assert (size, epochs, epochs / 2) in grid
    long = PROFILES["long"]  # the words' 40 epochs are the profile `long`, budget aside
    assert search.candidate_config("full, 40 epochs") == dataclasses.replace(long, max_minutes=None)


@pytest.mark.parametrize(("name", "peak"), [
    ("subwords 10k, 40 epochs, peak 7e-4", 7e-4),
    ("subwords 10k, 40 epochs, peak 1.4e-3", 1.4e-3),
    ("subwords 10k, 40 epochs, width 512", 1.0e-3),
    ("subwords 10k, 40 epochs, width 384", 1.0e-3),
    ("full", 1.0e-3),
])  # fmt: skip
def test_a_candidates_peak_rate_is_the_one_its_name_gives_by_equation_3(search, name, peak):
    config = search.candidate_config(name)
    top = rate(config.warmup, config.d_model, config.warmup, config.lr_factor)
    assert top == pytest.approx(peak, rel=2e-3), name
    assert (
        max(rate(s, config.d_model, config.warmup, config.lr_factor) for s in range(1, 3000)) == top
    )


def fake_run(config, folder):
    """What train_multi30k returns, as far as `measure` reads it."""
    evals = pd.DataFrame({"step": [5, 10], "epoch": [0.5, 1.0], "val BLEU": [20.0, 31.5]})
    history = pd.DataFrame({"step": range(1, 11), "seconds": [0.6] * 10})
    vocab = [0] * 7
    corpus = types.SimpleNamespace(src_vocab=vocab, tgt_vocab=vocab)
    return types.SimpleNamespace(
        averaged="averaged", translator="last", corpus=corpus, evals=evals, history=history,
        schedule=types.SimpleNamespace(steps_per_epoch=10), folder=folder, config=config,
    )  # fmt: skip


@pytest.fixture
def faked(search, monkeypatch, tmp_path):
    """The search with training and decoding faked: each split's BLEU is given by `scores`."""
    read = []
    scores = {}

    def evaluate(translator, corpus, split, *, limit, beam, alpha, copy_unknowns=True):
        assert translator == "averaged" and limit is None  # every sentence of the split
        read.append(split)
        return {"BLEU": scores.get((translator, split, beam), 30.0)}, []

    monkeypatch.setattr(search, "train_multi30k", lambda c, f, progress: fake_run(c, f))
    monkeypatch.setattr(search, "evaluate_split", evaluate)
    monkeypatch.setattr(search.torch, "set_num_threads", lambda n: None)
    monkeypatch.setattr(search, "use_fair_threads", lambda: None)
    monkeypatch.setattr(search, "training_device", lambda: search.torch.device("cpu"))
    monkeypatch.setenv("ANNOTATED_COMMIT", "abc123")
    record = tmp_path / "recipes.json"
    record.write_text(json.dumps({"lines": [{"name": "run 6"}], "step costs": {"kept": 1}}))
    common = ["--record", str(record), "--runs", str(tmp_path / "runs"), "--threads", "1"]
    return types.SimpleNamespace(read=read, scores=scores, record=record, args=common)


def test_the_screen_reads_the_validation_set_alone_and_names_machine_and_commit(search, faked):
    only = ["--only", "full", "subwords 10k, 40 epochs"]
    assert search.main([*faked.args, *only]) == 0
    assert set(faked.read) == {"val"}  # greedy and beam, twice: no test set
    lines = json.loads(faked.record.read_text())["lines"]
    assert [x["name"] for x in lines] == ["run 6", "full", "subwords 10k, 40 epochs"]
    for line in lines[1:]:
        assert line["stage"] == "screen" and line["search"] == "subwords" and line["seed"] == 0
        assert not any(key.startswith("test") for key in line)
        assert line["commit"] == "abc123" and line["machine"] and line["device"] == "cpu"
        assert line["config"] == config_identity(search.candidate_config(line["name"]))
        assert (
            line["best val BLEU (bare weights)"] == 31.5 and line["epoch of best val BLEU"] == 1.0
        )
    faked.read.clear()
    assert search.main([*faked.args, *only]) == 0 and faked.read == []  # recorded: nothing again


def test_the_records_subword_lines_are_todays_candidates_scored_as_measure_writes_them(search):
    lines = [x for x in json.loads(search.RECORD.read_text())["lines"] if "search" in x]
    if not lines:
        pytest.skip("no line of this search in benchmarks/results/recipes.json yet")
    for line in lines:
        name = line["name"]
        assert line["search"] == search.SEARCH and name in search.CANDIDATES, name
        config = search.candidate_config(name, line["seed"])
        assert line["config"] == config_identity(config), f"{name} trained another configuration"
        assert line["changes"] == search.CANDIDATES[name][0]
        curve = line["val BLEU by step"]
        assert curve[-1][0] == line["steps"] == line["steps per epoch"] * config.epochs, name
        assert max(bleu for _, bleu in curve) == line["best val BLEU (bare weights)"], name
        keys = {"val beam", "val greedy"} | (
            {"test2016 beam", "test2016 greedy"} if line["stage"] == "finalist" else set()
        )
        assert keys <= set(line) and all(0 < line[key] < 100 for key in keys), name
        if line["stage"] == "screen":
            assert not any(key.startswith("test") for key in line), f"{name}: a screen read test"


def test_finalists_are_chosen_by_validation_alone_and_their_seeds_give_a_band(search, faked):
    names = ["full", "subwords 8k, 20 epochs", "subwords 10k, 40 epochs"]
    val = {"full": 38.0, "subwords 8k, 20 epochs": 36.0, "subwords 10k, 40 epochs": 41.0}
    for name in names:  # a screen with its own validation scores
        faked.scores.clear()
        faked.scores.update({("averaged", "val", b): val[name] for b in (1, 4)})
        search.main([*faked.args, "--only", name])
    faked.read.clear()
    faked.scores.clear()
    faked.scores.update({("averaged", "test_2016_flickr", 4): 42.5, ("averaged", "val", 4): 40.0})
    assert search.main([*faked.args, "--stage", "finalists", "--finalists", "2"]) == 0
    record = json.loads(faked.record.read_text())
    finalists = [x for x in record["lines"] if x.get("stage") == "finalist"]
    assert [(x["name"], x["seed"]) for x in finalists] == [
        ("subwords 10k, 40 epochs", 0), ("subwords 10k, 40 epochs", 1),
        ("subwords 10k, 40 epochs", 2), ("full", 0), ("full", 1), ("full", 2),
    ]  # fmt: skip
    assert faked.read.count("test_2016_flickr") == 2 * 6  # greedy and beam, once a seed
    band = record["search 2: finalists"]["full"]
    assert band["test2016 beam"] == {"mean": 42.5, "lowest": 42.5, "highest": 42.5}
    assert band["seeds"] == [0, 1, 2] and record["step costs"] == {"kept": 1}
    seeds = {x["machine"] for x in finalists}  # the section names where its seeds were measured
    assert record["search 2: finalists"]["machine"] == "; ".join(sorted(seeds))
    # A finalist's seed 0 is its screen's run, scored once more: the same folder.
    screen = search.job("full", "screen", 0, Path("r"))
    assert search.job("full", "finalist", 0, Path("r")).folder == screen.folder
    assert search.job("full", "finalist", 1, Path("r")).folder != screen.folder


def test_ranking_uses_beam_and_greedy_and_ignores_other_searches(search):
    lines = [
        {"search": "subwords", "stage": "screen", "name": "a", "val beam": 40.0, "val greedy": 36.0},
        {"search": "subwords", "stage": "screen", "name": "b", "val beam": 39.0, "val greedy": 38.0},
        {"search": "subwords", "stage": "finalist", "name": "c", "val beam": 50.0, "val greedy": 50.0},
        {"name": "run 6", "val beam": 60.0, "val greedy": 60.0},
    ]  # fmt: skip
    assert search.finalist_names(lines, 2) == ["b", "a"]
    assert search.bands(lines, ["b"]) == {}  # no seeds yet: no band


def test_finalists_need_a_screen_first(search, faked):
    with pytest.raises(SystemExit, match="run --stage screen first"):
        search.main([*faked.args, "--stage", "finalists"])


def test_parallel_starts_workers_of_one_thread_that_do_not_start_more(
    search, tmp_path, monkeypatch
):
    started = []

    class Worker:
        def __init__(self, command, stdout, stderr):
            started.append(command)

        def wait(self):
            return 0

    monkeypatch.setattr(search.subprocess, "Popen", Worker)
    monkeypatch.setattr(search.time, "sleep", lambda s: None)
    argv = ["--parallel", "3", "--record", str(tmp_path / "r.json"), "--runs", str(tmp_path)]
    assert search.main([*argv, "--only", "full", "full, 40 epochs", "subwords 8k, 20 epochs"]) == 0
    assert len(started) == 3
    for command in started:
        assert command[command.index("--parallel") + 1] == "1" and command.count("--parallel") == 1
        assert command[command.index("--threads") + 1] == "1"
        assert command[command.index("--workers-sharing") + 1] == "3"
    started.clear()  # never more workers than runs to train
    assert search.main([*argv, "--only", "full", "full, 40 epochs"]) == 0 and len(started) == 2


def test_bad_arguments_are_refused_in_one_line(search):
    with pytest.raises(SystemExit):
        search.parse(["--smoke"])  # toy models must not land in the book's record
    with pytest.raises(SystemExit):
        search.parse(["--parallel", "0"])


def test_the_commit_is_named_by_the_environment_or_by_git(search, monkeypatch):
    monkeypatch.setenv("ANNOTATED_COMMIT", "0123abc")
    assert search.commit() == "0123abc"
    monkeypatch.delenv("ANNOTATED_COMMIT")
    head = search.commit()  # benchmarks/common.py's, which every record's commit comes from
    assert len(head.split()[0]) == 40 or head.startswith("unknown")


def test_epoch_costs_train_each_candidate_on_its_own_vocabulary(search, monkeypatch):
    corpora = {}

    def load(size, min_freq):
        corpora[size] = types.SimpleNamespace(size=size)
        return corpora[size]

    seen = {}

    def costs(configs, corpus, steps, rounds):
        seen.update({name: corpus[name].size for name in configs})
        return {"seconds per step": {name: 1.0 for name in configs}, "machine": "m"}

    monkeypatch.setattr(search, "load_multi30k", load)
    monkeypatch.setattr(search, "config_step_costs", costs)
    monkeypatch.setattr(
        search, "_steps_per_epoch", lambda c, corpus: 150 + (corpus.size or 0) // 1000
    )
    result = search.epoch_costs(["subwords 16k, 20 epochs"], smoke=False)
    assert seen == {"full": None, "subwords 16k, 20 epochs": 16000}
    assert result["minutes per epoch"] == {"full": 2.5, "subwords 16k, 20 epochs": 2.77}
    assert result["epochs in 60 training minutes"]["full"] == 24.0


def test_an_averaging_candidate_scores_its_runs_folder_and_trains_nothing_of_its_own(
    search, faked, monkeypatch
):
    trained, averages = [], []

    def train(config, folder, progress):
        trained.append((config, folder))
        return fake_run(config, folder)

    monkeypatch.setattr(search, "train_multi30k", train)
    monkeypatch.setattr(search, "averaged", lambda run, last: averages.append(last) or "averaged")
    recipe, more = "subwords 10k, 40 epochs", "subwords 10k, 40 epochs, last 20 averaged"
    assert search.main([*faked.args, "--only", recipe, more]) == 0
    (first, folder), (second, again) = trained
    assert folder == again and first == second == search.candidate_config(recipe)  # one run
    assert averages == [20]  # in memory: the folder's own average stays the recipe's 5
    line = json.loads(faked.record.read_text())["lines"][-1]
    assert line["name"] == more and line["scores the run of"] == recipe
    assert line["config"] == config_identity(dataclasses.replace(first, average_last=20))
    assert (
        search.job(more, "finalist", 2, Path("r")).folder
        == search.job(recipe, "finalist", 2, Path("r")).folder
    )


@pytest.mark.slow
def test_a_smoke_averaging_candidate_averages_more_snapshots_and_leaves_the_folders_own(
    search, tmp_path, monkeypatch
):
    monkeypatch.setattr(search.torch, "set_num_threads", lambda n: None)
    record = tmp_path / "recipes.json"
    argv = ["--smoke", "--record", str(record), "--runs", str(tmp_path), "--threads", "1"]
    recipe, more = "subwords 10k, 40 epochs", "subwords 10k, 40 epochs, last 10 averaged"
    assert search.main([*argv, "--only", recipe, more]) == 0
    lines = {x["name"]: x for x in json.loads(record.read_text())["lines"]}
    assert lines[recipe]["val BLEU by step"] == lines[more]["val BLEU by step"]  # one training
    folder = search.job(recipe, "screen", 0, tmp_path, smoke=True).folder
    saved = search.torch.load(folder / "averaged.pt", weights_only=False)
    assert len(saved["averaged"]) == 1  # the folder's average is still the smoke recipe's own
    run = search.train_multi30k(search.candidate_config(recipe, smoke=True), folder, progress=False)
    kept = search.kept_snapshots(folder)
    assert kept[-1].name == saved["averaged"][0] and len(kept) <= len(run.evals) < 10
    model = search.averaged(run, 10).model
    expected = search.average_snapshots(kept)  # all the run kept, though 10 were asked for
    for name, tensor in model.state_dict().items():
        assert search.torch.equal(tensor, expected[name].to(tensor.dtype)), name


def test_snapshots_are_kept_while_the_recipe_prunes_them(search, tmp_path):
    """The loop saves a snapshot and prunes all but the last, as fast as a machine can: each is
    kept the moment it is written, whatever the speed."""
    folder, save = tmp_path / "run", search.training_loop.save_snapshot
    model = make_model(ModelConfig(7, 7, N=1, d_model=16, d_ff=32, h=2))
    folder.mkdir()
    with search.keeping_snapshots(folder):
        for step in range(1, 6):  # as the loop's StepHook calls it, through the module
            search.training_loop.save_snapshot(model, RunFolder(folder), step, 1)
    assert search.training_loop.save_snapshot is save  # the recipe's own again
    assert [p.name for p in (folder / "snapshots").iterdir()] == ["step-000005.pt"]
    kept = search.kept_snapshots(folder)
    assert [search.torch.load(p, weights_only=False)["step"] for p in kept] == [1, 2, 3, 4, 5]
    save(model, RunFolder(folder), 6, 1)  # outside: written, not linked
    assert not (folder / "kept-snapshots" / "step-000006.pt").exists()
    assert [p.name for p in search.kept_snapshots(folder)][-2:] == [
        "step-000005.pt",
        "step-000006.pt",
    ]


def test_an_averaging_candidate_refuses_a_run_that_kept_too_few_snapshots(search, tmp_path):
    folder = tmp_path / "run"
    (folder / "snapshots").mkdir(parents=True)
    (folder / "snapshots" / "step-000010.pt").write_text("")
    run = types.SimpleNamespace(folder=folder, evals=pd.DataFrame({"step": range(80)}))
    with pytest.raises(SystemExit, match="holds 1 snapshots, not the last 10"):
        search.averaged(run, 10)


@pytest.mark.slow
def test_a_smoke_screen_trains_and_scores_a_subword_candidate(search, tmp_path, monkeypatch):
    monkeypatch.setattr(search.torch, "set_num_threads", lambda n: None)
    record = tmp_path / "recipes.json"
    argv = ["--smoke", "--record", str(record), "--runs", str(tmp_path), "--threads", "1"]
    assert search.main([*argv, "--only", "subwords 8k, 20 epochs"]) == 0
    (line,) = json.loads(record.read_text())["lines"]
    assert line["vocabulary"][0] == line["vocabulary"][1] <= 800  # one shared vocabulary
    assert line["steps"] == line["steps per epoch"] > 0 and line["val BLEU by step"]
    assert {"val beam", "val greedy"} <= set(line) and "test2016 beam" not in line


def test_collect_keeps_the_curve_of_every_run_begun_finished_or_not(search, tmp_path, monkeypatch):
    monkeypatch.setenv("ANNOTATED_COMMIT", "abc123")
    runs = tmp_path / "runs"
    argv = ["--runs", str(runs), "--record", str(tmp_path / "r.json"), "--only"]
    names = ["full", "subwords 10k, 40 epochs", "subwords 8k, 20 epochs"]
    stopped, finished = (search.job(n, "screen", 0, runs) for n in names[:2])
    for one in (stopped, finished):
        one.folder.mkdir(parents=True)
        pd.DataFrame({"step": [5, 10], "epoch": [0.5, 1.0], "val BLEU": [3.0, 7.5]}).to_csv(
            one.folder / "evals.csv", index=False
        )
    (finished.folder / "history.csv").write_text("step\n1\n")
    assert search.main([*argv, *names, "--collect", str(tmp_path / "partial.json")]) == 0
    partial = json.loads((tmp_path / "partial.json").read_text())
    assert partial["commit"] == "abc123" and partial["machine"]
    assert set(partial["runs"]) == {stopped.name, finished.name}  # the third never began
    assert partial["runs"][stopped.name]["finished"] is False
    assert partial["runs"][finished.name]["finished"] is True
    assert partial["runs"][finished.name]["epochs of the recipe"] == 40
    assert partial["runs"][stopped.name]["val BLEU by epoch"] == [[0.5, 3.0], [1.0, 7.5]]
    assert partial["runs"][stopped.name]["best val BLEU (bare weights)"] == 7.5


def test_an_hour_trains_in_chapter_7s_budget_and_reads_no_test_set(search, faked):
    trained = []

    def train(config, folder, progress):
        trained.append(config)
        run = fake_run(config, folder)
        run.budget = types.SimpleNamespace(recipe_steps=6800, seconds_per_step=1.2)
        return run

    search.train_multi30k = train
    assert search.main([*faked.args, "--hour", "subwords 10k, 40 epochs"]) == 0
    assert trained[0].max_minutes == FULL.max_minutes == 60  # the budget chapter 7 plans with
    assert set(faked.read) == {"val"}
    record = json.loads(faked.record.read_text())
    (line,) = record["search 2: an hour"].values()
    assert line["recipe steps"] == 6800 and line["planned steps a minute"] == 50.0
    assert line["steps"] == 10 and line["epochs"] == 1.0 and line["commit"] == "abc123"
