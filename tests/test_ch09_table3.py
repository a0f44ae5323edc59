"""Chapter 9: Table 3's variants at our scale, the resumable record, and how results are read."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from annotated import ch09_table3 as ch09
from annotated.base.files import LOCK_NAME
from annotated.ch02_model import TABLE3_PARAMETERS, count_parameters, make_model
from annotated.ch05_text import BatchPlan
from annotated.ch09_table3 import (
    BASE,
    PAPER_BASE,
    VARIANTS,
    Table3Sweep,
    comparison,
    noise_band,
    run_table3,
    table3_frame,
    verdict,
)
from annotated.figures import ch09_table3 as figures
from annotated.training.sweeps import config_identity, read_record, read_results, updating_record

PAPER_MD = Path(__file__).resolve().parents[2] / "shared" / "PAPER.md"
VOCAB = (800, 600)  # source and target vocabulary sizes for counting parameters


def variant(name: str) -> ch09.Variant:
    return next(v for v in VARIANTS if v.name == name)


def parameters(config) -> int:
    with torch.device("meta"):
        return count_parameters(make_model(config.model_config(*VOCAB)))


# ---------------------------------------------------------------- the variants


def test_each_variant_changes_only_what_it_names():
    assert len({v.name for v in VARIANTS}) == len(VARIANTS)
    rows = [v.row for v in VARIANTS]
    assert rows == sorted(rows, key=["base", *"ABCDE"].index)  # base, then A to E
    base = dataclasses.asdict(BASE)
    for v in VARIANTS:
        changed = dataclasses.asdict(v.config(BASE, seed=0))
        assert {k for k in base if base[k] != changed[k]} == set(v.changes), v.name
        assert v.config(BASE, seed=7).seed == 7


def test_row_a_keeps_the_computation_of_the_base():
    # d_k = d_v = d_model / h: the projections keep their shapes, so the parameter count is equal.
    base = BASE.model_config(*VOCAB)
    for v in VARIANTS:
        if v.row == "A":
            config = v.config(BASE, 0)
            model = config.model_config(*VOCAB)
            assert model.h * model.d_k == model.h * model.d_v == base.d_model, v.name
            assert parameters(config) == parameters(BASE), v.name
    assert sorted(v.changes["h"] for v in VARIANTS if v.row == "A") == [1, 4, 16, 32]


def test_row_b_removes_exactly_the_query_and_key_widths():
    for name, d_k in (("d_k 8", 8), ("d_k 16", 16)):
        config = variant(name).config(BASE, 0)
        shrink = 32 - d_k
        # 3N attention blocks (encoder self, decoder self, decoder-source), each losing h * shrink
        # columns of W^Q and W^K and their biases.
        lost = 3 * BASE.N * 2 * (BASE.d_model * BASE.h * shrink + BASE.h * shrink)
        assert parameters(BASE) - parameters(config) == lost
        assert config.model_config(*VOCAB).d_v == 32  # values keep their width


def test_row_c_keeps_the_papers_ratios_to_the_base():
    paper_base = {"N": 6, "d_model": 512, "d_ff": 2048}
    for v in VARIANTS:
        if v.row != "C":
            continue
        key = next(k for k in ("N", "d_model", "d_ff") if k in v.changes)
        paper_value = int(v.paper.setting.split()[-1])
        ours = v.changes[key] / getattr(BASE, key)
        assert ours == paper_value / paper_base[key], v.name
        if key == "d_model":  # eight heads of d_model / 8, as the paper's lines
            assert v.changes["d_k"] == v.changes["d_v"] == v.changes["d_model"] // 8


def test_paper_numbers_agree_with_chapter_2s_parameter_table():
    counts = {row.split(") ")[-1].replace("=", " "): m for row, (_, m) in TABLE3_PARAMETERS.items()}
    assert PAPER_BASE.params_millions == counts["base"]
    for v in VARIANTS:
        if v.row != "base" and v.paper.params_millions is not None:
            assert counts[v.paper.setting] == v.paper.params_millions, v.name


@pytest.mark.skipif(not PAPER_MD.exists(), reason="the paper's fact sheet is not beside the repo")
def test_paper_numbers_are_the_papers_table_3():
    table = {}
    for line in PAPER_MD.read_text().split("## Table 3")[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 13 and cells[0] in {"base", "(A)", "(B)", "(C)", "(D)", "(E)"}:
            table.setdefault(cells[0], []).append((float(cells[10]), float(cells[11])))
    assert table["base"] == [(PAPER_BASE.ppl, PAPER_BASE.bleu)]
    for letter in "ABCDE":
        ours = [(v.paper.ppl, v.paper.bleu) for v in VARIANTS if v.row == letter]
        papers = table[f"({letter})"]
        assert all(pair in papers for pair in ours), letter
        assert sorted(ours, key=papers.index) == ours, f"row {letter} is not in the paper's order"
    # Every line of rows A to E is re-run (the big model is not a variation of one setting).
    for letter in "ABCDE":
        assert set(table[f"({letter})"]) == {
            (v.paper.ppl, v.paper.bleu) for v in VARIANTS if v.row == letter
        }, f"row {letter} misses a line of the paper's"


@pytest.mark.multi30k
def test_the_budget_is_what_the_chapter_says(corpus):
    steps_per_epoch = BatchPlan.build(corpus.ids["train"], BASE.max_tokens).steps_per_epoch
    assert steps_per_epoch == 294 and round(BASE.steps / steps_per_epoch, 1) == 2.4
    train = BASE.train_config(BASE.schedule(steps_per_epoch))
    assert (train.max_steps, train.warmup, train.cooldown) == (700, 200, 300)
    peak = BASE.lr_factor * BASE.d_model**-0.5 * BASE.warmup**-0.5  # equation 3 at step = warmup
    assert peak == pytest.approx(2.0e-3, rel=0.01)
    assert BASE.precision == "fp32" and BASE.average_last == 1 and BASE.norm_first


# ---------------------------------------------------------------- the record


def tiny_sweep(tmp_path: Path, **changes) -> Table3Sweep:
    settings = {"train_pairs": 200, "steps": 2, "val_sentences": 4, **changes}
    base = dataclasses.replace(ch09.TABLE3_PROFILES["smoke"].base, **settings)
    variants = (variant("base"), variant("h 1"))
    return Table3Sweep(base, variants, (0, 1), tmp_path / "table3.json", tmp_path / "runs")


def fake_measure(calls: list):
    def measure(job, corpus):
        calls.append((job.key["variant"], job.key["seed"]))
        return {**job.key, "config": config_identity(job.config)}

    return measure


def folder(sweep: Table3Sweep, name: str, seed: int) -> Path:
    return sweep.job(variant(name), seed).folder


def test_run_table3_measures_only_what_is_missing_or_changed(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ch09, "measure", fake_measure(calls))
    sweep = tiny_sweep(tmp_path)
    run_table3(sweep, corpus=object(), progress=False)
    assert calls == [("base", 0), ("base", 1), ("h 1", 0)]
    run_table3(sweep, corpus=object(), progress=False)
    assert len(calls) == 3  # all recorded: nothing trained again
    changed = dataclasses.replace(sweep, base=dataclasses.replace(sweep.base, steps=3))
    run_table3(changed, corpus=object(), progress=False)
    assert calls[3:] == [("base", 0), ("base", 1), ("h 1", 0)]  # another budget: measured again
    assert [line["config"]["steps"] for line in read_results(sweep.results)] == [3, 3, 3]


def test_a_stopped_run_keeps_every_finished_line(tmp_path, monkeypatch):
    calls = []
    measure = fake_measure(calls)

    def stopped_at_the_third(job, corpus):
        if len(calls) == 2:
            raise KeyboardInterrupt
        return measure(job, corpus)

    monkeypatch.setattr(ch09, "measure", stopped_at_the_third)
    sweep = tiny_sweep(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_table3(sweep, corpus=object(), progress=False)
    assert [(x["variant"], x["seed"]) for x in read_results(sweep.results)] == [
        ("base", 0),
        ("base", 1),
    ]
    monkeypatch.setattr(ch09, "measure", measure)
    run_table3(sweep, corpus=object(), progress=False)
    assert calls == [("base", 0), ("base", 1), ("h 1", 0)]


def test_each_configuration_has_its_own_run_folder(tmp_path):
    sweep = tiny_sweep(tmp_path)
    folders = {job.folder for job in sweep.jobs()}
    assert len(folders) == len(sweep.jobs())
    longer = dataclasses.replace(sweep, base=dataclasses.replace(sweep.base, steps=3))
    assert folder(longer, "h 1", 0) != folder(sweep, "h 1", 0)
    assert folder(sweep, "h 1", 0) == folder(tiny_sweep(tmp_path), "h 1", 0)
    assert folder(sweep, "d_k 8", 0).name.startswith("dk-8-seed0-")


def test_the_chapter_reads_only_lines_of_the_current_sweep_and_names_the_missing(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(ch09, "measure", fake_measure([]))
    old = tiny_sweep(tmp_path, steps=3)
    run_table3(old, corpus=object(), progress=False)  # a record of an older budget
    sweep = tiny_sweep(tmp_path)
    run_table3(
        dataclasses.replace(sweep, variants=sweep.variants[1:]), corpus=object(), progress=False
    )
    lines = ch09.recorded_lines(sweep, train=False)
    assert [(x["variant"], x["config"]["steps"]) for x in lines] == [("h 1", 2)]
    out = capsys.readouterr().out
    assert "2 of 3 lines are not measured yet: run `make table3`" in out
    assert "missing: base (seed 0), base (seed 1)" in out


def test_workers_pass_over_lines_claimed_by_a_live_process_and_take_over_dead_claims(
    tmp_path, monkeypatch, capsys, held_elsewhere
):
    calls = []
    monkeypatch.setattr(ch09, "measure", fake_measure(calls))
    sweep = tiny_sweep(tmp_path)
    live = folder(sweep, "base", 1)
    dead = folder(sweep, "h 1", 0)
    with held_elsewhere(dead) as killed:  # a worker killed in the middle of its line
        killed.kill()
        killed.wait(timeout=60)
    with held_elsewhere(live):  # another worker, training base seed 1
        run_table3(sweep, corpus=object(), progress=False)
        assert calls == [("base", 0), ("h 1", 0)]  # base seed 1 belongs to the live worker
        assert f"taking over the lock left by process {killed.pid}" in capsys.readouterr().out
        assert (dead / LOCK_NAME).read_text() == ""  # released when the line is recorded
        with updating_record(sweep.results) as record:  # other keys of the record survive
            record["step costs"] = {"base": 1.0}
    run_table3(sweep, corpus=object(), progress=False)  # the other worker stopped: its line is free
    assert calls[-1] == ("base", 1)
    assert [(x["variant"], x["seed"]) for x in read_results(sweep.results)] == [
        ("base", 0),
        ("base", 1),
        ("h 1", 0),
    ]
    assert read_record(sweep.results)["step costs"] == {"base": 1.0}


def test_a_damaged_record_is_refused_with_what_to_do(tmp_path):
    path = tmp_path / "table3.json"
    path.write_text('{"lines": [')
    with pytest.raises(ValueError, match="not a sweep's record.*move it away"):
        read_results(path)
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not a sweep's record"):
        read_results(path)


@pytest.mark.slow
@pytest.mark.multi30k
def test_a_real_line_is_trained_measured_and_recorded(tmp_path, corpus):
    sweep = tiny_sweep(tmp_path)
    lines = run_table3(
        dataclasses.replace(sweep, variants=sweep.variants[:1], base_seeds=(0,)), corpus, False
    )
    (line,) = lines
    config = sweep.base
    assert line["steps"] == 2 and line["config"] == json.loads(
        json.dumps(dataclasses.asdict(config))
    )
    assert (line["row"], line["variant"], line["seed"]) == ("base", "base", 0)
    assert line["parameters"] == parameters_for(corpus, config)
    assert 1 < line["val PPL"] < len(corpus.tgt_vocab)  # better than nothing, worse than sure
    # The perplexity is exp of chapter 3's loss on the same sentences: computed independently.
    model = make_model(config.model_config(len(corpus.src_vocab), len(corpus.tgt_vocab)))
    run = folder(sweep, "base", 0)
    assert run.parent == tmp_path / "runs" and run.name.startswith("base-seed0-")
    assert (run / LOCK_NAME).read_text() == ""  # the claim ends with the line
    saved = torch.load(run / "checkpoint.pt", weights_only=True)
    model.load_state_dict(saved["model"])
    expected = independent_perplexity(model, corpus, config.val_sentences)
    assert line["val PPL"] == pytest.approx(expected, rel=1e-3)
    assert 0 <= line["val BLEU"] <= 100 and line["machine"]
    assert len(line["timing"]["load average before"]) == 3 and "busy" in line["timing"]


@pytest.mark.slow
@pytest.mark.multi30k
def test_step_costs_time_every_variant_against_the_base(tmp_path, corpus):
    sweep = dataclasses.replace(tiny_sweep(tmp_path), cost_steps=3, cost_rounds=2)
    costs = ch09.step_costs(sweep, corpus)
    assert set(costs["seconds per step"]) == {"base", "h 1"}
    assert costs["relative to base"]["base"] == 1.0
    assert all(value > 0 for value in costs["seconds per step"].values())
    # The record rounds seconds to 4 decimals and the ratio (of the unrounded medians) to 3: on
    # steps of a few hundredths of a second the rounded seconds bound the ratio, no closer.
    h, base = costs["seconds per step"]["h 1"], costs["seconds per step"]["base"]
    low, high = (h - 5e-5) / (base + 5e-5), (h + 5e-5) / (base - 5e-5)
    assert low - 5e-4 <= costs["relative to base"]["h 1"] <= high + 5e-4
    assert (costs["steps"], costs["rounds"]) == (3, 2) and costs["machine"]
    assert costs["timing"]["threads"] == torch.get_num_threads()


def parameters_for(corpus, config) -> int:
    return count_parameters(
        make_model(config.model_config(len(corpus.src_vocab), len(corpus.tgt_vocab)))
    )


def independent_perplexity(model, corpus, limit) -> float:
    specials = corpus.tgt_vocab.specials
    total, tokens = 0.0, 0
    model.eval()
    with torch.no_grad():
        for src_ids, tgt_ids in corpus.ids["val"][:limit]:  # one sentence at a time, no padding
            src = torch.tensor([src_ids])
            tgt = torch.tensor([[specials.bos, *tgt_ids, specials.eos]])
            logits = model(src, tgt[:, :-1], torch.ones(1, 1, src.size(1), dtype=torch.bool),
                           torch.ones(1, tgt.size(1) - 1, tgt.size(1) - 1, dtype=torch.bool).tril())  # fmt: skip
            total += torch.nn.functional.cross_entropy(
                logits[0], tgt[0, 1:], reduction="sum"
            ).item()
            tokens += tgt.size(1) - 1
    return math.exp(total / tokens)


# ---------------------------------------------------------------- reading the results


def line(
    name: str, seed: int = 0, bleu: float = 30.0, ppl: float = 10.0, minutes: float = 5.0
) -> dict:
    v = variant(name)
    return {"row": v.row, "variant": name, "seed": seed, "parameters": 1_000_000, "steps": 700,
            "train minutes": minutes, "val PPL": ppl, "val BLEU": bleu, "val BLEU beam 4": bleu + 1,
            "val BLEU by step": [[350, bleu / 2], [700, bleu]]}  # fmt: skip


BASE_LINES = [line("base", 0, 30.0, 10.0), line("base", 1, 30.5, 10.1), line("base", 2, 29.5, 9.9)]


def test_the_noise_band_is_two_standard_deviations_of_the_seeds():
    band = noise_band(BASE_LINES)
    assert ch09.BLEU == "val BLEU beam 4"  # the paper's Table 3 is scored with beam search
    assert band.loc[ch09.BLEU, "mean"] == pytest.approx(31.0)
    assert band.loc[ch09.BLEU, "std"] == pytest.approx(0.5)  # sample std of 30.5, 31, 31.5
    assert band.loc[ch09.BLEU, "band"] == pytest.approx(1.0)
    assert band.loc["val PPL", "seeds"] == 3
    with pytest.raises(ValueError, match="2 seeds or more"):
        noise_band(BASE_LINES[:1])


def test_comparison_reads_directions_against_the_band_and_the_paper():
    lines = BASE_LINES + [
        line("h 1", bleu=27.0, ppl=12.0),  # paper: worse on both
        line("eps_ls 0", bleu=30.4, ppl=9.0),  # paper: PPL better, BLEU worse
        line("learned positions", bleu=32.0, ppl=10.05),  # paper: same on both
        line("P_drop 0", bleu=31.5, ppl=9.5),  # paper: worse on both
    ]
    table = comparison(lines).set_index("variant")
    assert table.loc["h 1", "Δ BLEU"] == pytest.approx(-3.0)
    assert table.loc["h 1", "Δ PPL %"] == pytest.approx(20.0)
    assert table.loc["h 1", ["BLEU: verdict", "PPL %: verdict"]].tolist() == ["agrees", "agrees"]
    assert table.loc["eps_ls 0", "BLEU: ours"] == "within noise"
    assert table.loc["eps_ls 0", "BLEU: verdict"] == "too small to tell here"
    assert table.loc["eps_ls 0", "PPL %: paper"] == "better"
    assert table.loc["eps_ls 0", "PPL %: verdict"] == "agrees"
    assert table.loc["learned positions", "BLEU: verdict"] == "differs (paper: no change)"
    assert table.loc["learned positions", "PPL %: verdict"] == "agrees"  # 0.5%: within a 2% band
    assert table.loc["P_drop 0", ["BLEU: verdict", "PPL %: verdict"]].tolist() == ["disagrees"] * 2


@pytest.mark.parametrize(
    ("ours", "paper", "expected"),
    [("better", "better", "agrees"), ("worse", "better", "disagrees"),
     ("within noise", "same", "agrees"), ("within noise", "worse", "too small to tell here"),
     ("better", "same", "differs (paper: no change)")],
)  # fmt: skip
def test_verdicts(ours, paper, expected):
    assert verdict(ours, paper) == expected


def test_our_table_gives_the_base_as_mean_and_spread_beside_the_paper():
    table = table3_frame(BASE_LINES + [line("d_k 8", bleu=28.0)]).set_index("row")
    assert table.loc["base", "val BLEU"] == "30.0 ± 0.5"
    assert table.loc["base", "ours"] == "base (3 seeds)"
    assert table.loc["B", "val BLEU"] == "28.0"
    assert table.loc["B", ["paper line", "paper BLEU", "paper params (M)"]].tolist() == [
        "d_k 16",
        25.1,
        58,
    ]


def test_charts_are_byte_stable_and_show_every_line():
    lines = BASE_LINES + [line("h 1", bleu=27.0, ppl=12.0), line("N 4", bleu=31.0, minutes=7.0)]
    costs = {"relative to base": {"base": 1.0, "h 1": 1.2, "N 4": 1.3}}
    charts = (figures.change_chart, figures.curves_chart, lambda x: figures.price_chart(x, costs))
    for chart in charts:
        first, second = chart(lines).to_json(), chart(lines).to_json()
        assert first == second
    points = figures.change_points(lines)
    assert set(points.line) == {"A: h 1", "C: N 4", "base: seed 0", "base: seed 1", "base: seed 2"}
    assert set(points.who) == {figures.OURS, figures.PAPERS, "base seeds"}


def test_make_table3_runs_the_profile_named_and_fails_with_a_message(monkeypatch, capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_table3.py"
    spec = importlib.util.spec_from_file_location("bench_table3", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seen = []
    monkeypatch.setattr(bench, "run_table3", lambda sweep: seen.append(sweep) or [])
    threads = torch.get_num_threads()
    try:
        assert bench.main(["--profile", "smoke", "--threads", "1"]) == 0
        assert seen == [ch09.TABLE3_PROFILES["smoke"]] and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)  # the setting is global to the process

    def damaged(sweep):
        raise ValueError("table3.json is not a Table 3 record")

    monkeypatch.setattr(bench, "run_table3", damaged)
    assert bench.main(["--profile", "smoke"]) == 2
    assert "table3: table3.json is not a Table 3 record" in capsys.readouterr().err


def test_make_table3_prices_the_steps_only_once_every_line_is_recorded(tmp_path, monkeypatch):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_table3.py"
    spec = importlib.util.spec_from_file_location("bench_table3", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sweep = tiny_sweep(tmp_path)
    monkeypatch.setattr(bench, "table3_sweep", lambda name: ("smoke", sweep))
    monkeypatch.setattr(bench, "load_multi30k", lambda *args: None)
    priced = []
    monkeypatch.setattr(bench, "step_costs", lambda sweep, corpus: priced.append(1) or {"base": 1})
    calls = []
    measure = fake_measure(calls)
    first = [measure(job, None) for job in sweep.jobs()[:2]]
    monkeypatch.setattr(bench, "run_table3", lambda sweep: first)  # a worker still trains "h 1"
    assert bench.main([]) == 0 and priced == []
    everything = first + [measure(sweep.job(variant("h 1"), 0), None)]
    monkeypatch.setattr(bench, "run_table3", lambda sweep: everything)
    assert bench.main([]) == 0 and priced == [1]
    assert read_record(sweep.results)["step costs"] == {"base": 1}
    assert bench.main([]) == 0 and priced == [1]  # measured once
    assert bench.main(["--step-costs"]) == 0 and priced == [1, 1]  # unless asked again
