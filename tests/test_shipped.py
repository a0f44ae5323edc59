"""The model the book ships (annotated/model/): it is chapter 7's run, chapter 7 shows its scores as
the benchmark recorded them, and its `shipped` profile loads it instead of training."""

import json
import re
from pathlib import Path

import pytest

from annotated.base.files import runs_dir
from annotated.ch07_multi30k import PROFILES, SHIPPED, profile_config
from annotated.training.shipped import SHIPPED_DIR, SHIPPED_HISTORY, read_tensors, shipped_identity

ROOT = Path(__file__).resolve().parent.parent
RUN = runs_dir() / "multi30k-full"
RECORD = json.loads((ROOT / "benchmarks" / "results" / "shipped.json").read_text("utf-8"))


def chapter_7_printed(code: str) -> str:
    """What the cell of chapter 7's saved notebook whose code holds `code` printed and showed."""
    notebook = json.loads((ROOT / "notebooks" / "ch07_multi30k.ipynb").read_text("utf-8"))
    for cell in notebook["cells"]:
        if code in "".join(cell["source"]):
            return "".join(
                "".join(output.get("data", {}).get("text/plain", output.get("text", "")))
                for output in cell.get("outputs", [])
            )
    raise AssertionError(f"chapter 7's notebook has no cell with {code!r}")


def test_chapter_7_prints_the_shipped_models_scores_as_the_benchmark_recorded_them():
    printed = chapter_7_printed("shipped_scores = final_scores(shipped)")
    shipped = RECORD["forms"]["quantized (shipped)"]
    assert printed.startswith("weights: shipped (average of last 5, quantized)\n"), printed
    for decoding in ("greedy", "beam 4"):
        found = re.search(rf"test_2016_flickr\s+{decoding}\s+yes\s+([\d.]+)\s", printed)
        assert found, f"no test2016 {decoding} row for the shipped model in:\n{printed}"
        assert float(found.group(1)) == shipped[decoding]["BLEU"], (
            "chapter 7's saved output and benchmarks/results/shipped.json disagree: re-run "
            "`make bench-shipped` and re-execute chapter 7 on one machine"
        )
    assert RECORD["sentences"] == 1000  # the whole test set, not a sample


def test_the_shipped_model_is_the_one_chapter_7_reports():
    assert shipped_identity()["folder"] == "multi30k-full"
    assert RECORD["run"] == "multi30k-full"


def shipped_test_scores() -> tuple[float, float]:
    """The shipped run's own test2016 BLEU (averaged, <unk> copied): beam 4, greedy."""
    scores = json.loads((SHIPPED_DIR / "model.json").read_text("utf-8"))["run"]["scores"]
    found = {
        row["decoding"]: row["BLEU"]
        for row in scores
        if row["split"] == "test_2016_flickr"
        and row["weights"].startswith("average")
        and row["<unk> copied"] == "yes"
    }
    return found["beam 4"], found["greedy"]


def recorded_makings() -> list[dict]:
    return json.loads((ROOT / "benchmarks" / "results" / "ch07-notebook-runs.json").read_text())[
        "runs"
    ]


def test_the_shipped_model_is_a_run_chapter_7_names():
    """The shipped run is the one chapter 7's notebook shows, or one of its earlier makings kept in
    ch07-notebook-runs.json (chapter 7 then says that the shipped model is another run of its
    recipe, not the one it shows: a retrained notebook need not re-ship)."""
    beam, greedy = shipped_test_scores()
    text = chapter_7_printed("final_scores(run)\n")
    shown = re.search(r"test_2016_flickr\s+average of last \d+\s+beam 4\s+yes\s+([\d.]+)", text)
    assert shown, "chapter 7's saved notebook has no test2016 beam row"
    earlier = [
        r
        for r in recorded_makings()
        if (r["test2016_bleu_beam"], r["test2016_bleu_greedy"]) == (beam, greedy)
    ]
    if float(shown.group(1)) != beam:
        assert earlier, (
            f"the shipped model scored {beam} / {greedy}, neither chapter 7's run nor a making in "
            "ch07-notebook-runs.json: run `make try-model` after retraining"
        )
        prose = (ROOT / "annotated" / "ch07_multi30k.py").read_text("utf-8")
        assert "ships** is another run of this recipe" in prose, (
            "chapter 7 must say that the shipped model is another run of its recipe, not its own"
        )


@pytest.mark.skipif(not (RUN / "averaged.pt").exists(), reason=f"no trained run in {RUN}")
def test_the_shipped_history_is_the_runs():
    if any(
        (r["test2016_bleu_beam"], r["test2016_bleu_greedy"]) == shipped_test_scores()
        for r in recorded_makings()
    ):
        pytest.skip("the shipped model is an earlier making of chapter 7's run, recorded as such")
    for name in SHIPPED_HISTORY:
        assert (SHIPPED_DIR / name).read_bytes() == (RUN / name).read_bytes(), (
            f"annotated/model/{name} is not {RUN / name}: run `make try-model` after retraining"
        )


def test_the_shipped_profile_is_the_recipe_the_model_was_trained_by(monkeypatch):
    assert profile_config(SHIPPED) == (SHIPPED, PROFILES["full"])
    monkeypatch.setenv("ANNOTATED_PROFILE", SHIPPED)
    assert profile_config()[0] == SHIPPED
    monkeypatch.setenv("ANNOTATED_PROFILE", "shiped")
    with pytest.raises(ValueError, match="choose one of"):
        profile_config()


@pytest.mark.slow
@pytest.mark.multi30k
def test_the_shipped_run_scores_as_one_model_named_for_what_it_is(tmp_path):
    from annotated.training.finish import _scored_setups
    from annotated.training.shipped import load_shipped_run

    run = load_shipped_run(PROFILES["full"], tmp_path / "multi30k-shipped")
    assert run.shipped and run.averaged is run.translator
    assert int(run.history.step.max()) == run.schedule.steps == 3040
    assert sorted(p.name for p in run.folder.iterdir()) == ["vocab.de.json", "vocab.en.json"]
    assert len(run.corpus.src_vocab) == run.translator.model.config.src_vocab
    names = [
        (weights, decoding, copied) for weights, _, decoding, _, copied in _scored_setups(run, True)
    ]
    assert names == [
        ("shipped (average of last 5, quantized)", "greedy", False),
        ("shipped (average of last 5, quantized)", "greedy", True),
        ("shipped (average of last 5, quantized)", "beam 4", True),
    ]


def test_a_changed_model_bin_is_refused(tmp_path):
    for path in (SHIPPED_DIR / "model.bin", SHIPPED_DIR / "model.json"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    data = bytearray((tmp_path / "model.bin").read_bytes())
    data[100] ^= 1
    (tmp_path / "model.bin").write_bytes(bytes(data))
    with pytest.raises(ValueError, match="export again"):
        read_tensors(tmp_path)
