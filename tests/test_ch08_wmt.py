"""Chapter 8: plain text from the Moses-tokenized sample, the shared subword vocabulary, the
paper's configurations, shared weights, step sizes, the data-parallel check, and a small real run
on the WMT14 sample."""

import dataclasses

import pytest
import torch

from annotated.base.datasets import WMT14_TOY_PAIRS
from annotated.ch02_model import count_parameters, make_model, table3_parameter_counts
from annotated.ch03_training import label_smoothing_loss, make_optimizer
from annotated.ch05_text import SPECIALS, Subwords, Vocab, make_batch, step_shard
from annotated.ch06_decoding import DecodeConfig
from annotated.ch08_wmt import (
    WMT_PROFILES,
    WMTConfig,
    ddp_check,
    load_wmt_corpus,
    plain_text,
    step_plan,
    train_wmt,
    wmt_profile,
    wmt_scores,
)
from annotated.training.finish import average_snapshots, load_translator

SUBWORD_SPECIALS = Vocab(SPECIALS, {}).specials  # what Subwords gives too (tests/test_ch05_text)


# ---------------------------------------------------------------- text


def test_plain_text_undoes_moses_escapes_and_spacing():
    assert plain_text(["Parliament &apos;s rule , he said ."], "en") == [
        "Parliament's rule, he said."
    ]
    out = plain_text(["&quot; Two soldiers came up to me &quot; , she said ."], "en")[0]
    assert "&quot;" not in out and out.startswith('"Two soldiers') and out.endswith("said.")
    assert plain_text(["Es geht nicht an , dass ..."], "de") == ["Es geht nicht an, dass..."]


def test_base_and_big_profiles_are_the_papers_models_and_recipe():
    base, big = WMT_PROFILES["base"], WMT_PROFILES["big"]
    assert (base.N, base.d_model, base.d_ff, base.h, base.p_drop) == (6, 512, 2048, 8, 0.1)
    assert (big.N, big.d_model, big.d_ff, big.h, big.p_drop) == (6, 1024, 4096, 16, 0.3)
    assert base.p_drop_final is None and big.p_drop_final is None, "the paper's dropout is fixed"
    assert (base.steps, big.steps, base.average_last, big.average_last) == (100_000, 300_000, 5, 20)
    train = base.train_config(base.schedule(steps_per_epoch=5000))
    assert (train.warmup, train.lr_factor, train.eps_ls, train.cooldown) == (4000, 1.0, 0.1, 0)
    assert (train.beta1, train.beta2, train.adam_eps, train.max_steps) == (0.9, 0.98, 1e-9, 100_000)
    assert base.decoding == DecodeConfig(beam=4, alpha=0.6, extra_length=50)
    assert (base.vocab_size, base.tokens_per_step, base.norm_first) == (37000, 25000, False)


@pytest.mark.parametrize(("name", "paper_millions"), [("base", 65), ("big", 213)])
def test_parameter_counts_are_table_3s(name, paper_millions):
    with torch.device("meta"):
        model = make_model(WMT_PROFILES[name].model_config(37000, 37000))
    ours = count_parameters(model)
    # Within 5% of the paper (which says only "about 37000" symbols), and the same as chapter 2's
    # Table 3 row built from its own configuration.
    assert abs(ours / 1e6 - paper_millions) / paper_millions < 0.05
    assert table3_parameter_counts().set_index("Table 3 row").loc[name, "ours (M)"] == round(
        ours / 1e6, 1
    )


def test_all_three_embedding_matrices_are_one_and_move_together():
    config = dataclasses.replace(WMT_PROFILES["smoke"], d_model=16, d_ff=32)
    model = make_model(config.model_config(50, 50))
    shared = model.src_embed[0].lut.weight
    assert model.tgt_embed[0].lut.weight is shared and model.generator.weight is shared
    before = shared.detach().clone()
    batch = make_batch([([5, 6, 7, 3], [8, 9]), ([10, 3], [11, 12, 13])], SUBWORD_SPECIALS)
    optimizer, scheduler = make_optimizer(model, config.train_config(config.schedule(10)))
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    label_smoothing_loss(logits, batch.tgt_out, batch.pad, 0.1).backward()
    optimizer.step()
    assert not torch.equal(shared, before)
    assert model.tgt_embed[0].lut.weight is model.generator.weight is model.src_embed[0].lut.weight


def test_accumulation_makes_steps_of_the_wanted_size():
    base = WMT_PROFILES["base"]
    assert (base.accumulation(1), base.accumulation(8)) == (8, 1)
    assert base.max_tokens * base.accumulation(1) == 25000
    assert WMT_PROFILES["sample"].accumulation(1) == 2
    assert WMTConfig(tokens_per_step=1000, max_tokens=3000).accumulation(1) == 1


@pytest.mark.parametrize("world", [2, 3])
def test_processes_share_out_each_steps_batches_without_overlap(world):
    per_step, n_batches = 2 * world, 50
    steps_per_epoch = n_batches // per_step
    seen = []
    for step in range(2 * steps_per_epoch):
        single = step_shard(n_batches, step, per_step, seed=7)
        shards = [step_shard(n_batches, step, per_step, 7, rank, world) for rank in range(world)]
        assert sorted(b for shard in shards for b in shard) == sorted(single)
        assert all(len(shard) == per_step // world for shard in shards)
        seen.append(single)
    first_epoch = [b for step in seen[:steps_per_epoch] for b in step]
    assert len(first_epoch) == len(set(first_epoch)) == steps_per_epoch * per_step


def test_profiles_follow_the_environment(monkeypatch):
    monkeypatch.setenv("ANNOTATED_PROFILE", "smoke")
    assert wmt_profile()[0] == "smoke"
    monkeypatch.delenv("ANNOTATED_PROFILE")
    assert wmt_profile()[0] == "sample"
    with pytest.raises(ValueError, match="choose one of"):
        wmt_profile("huge")


# ---------------------------------------------------------------- data parallelism


@pytest.mark.slow
def test_two_gloo_processes_under_torchrun_take_the_same_steps_as_one(tmp_path):
    check = ddp_check(tmp_path, steps=4, processes=2)
    assert check["matches"], check
    assert check["max parameter difference"] < 1e-8
    # What ran, as the processes report it: this machine has no GPU.
    assert (check["backend"], check["device"], check["processes"]) == ("gloo", "cpu", 2)


# ---------------------------------------------------------------- the sample


@pytest.fixture(scope="module")
def smoke_corpus():
    return load_wmt_corpus(WMT_PROFILES["smoke"])


def test_the_sample_is_read_as_plain_aligned_text(smoke_corpus):
    assert {split: len(pairs) for split, pairs in smoke_corpus.raw.items() if split != "train"} == {
        "val": WMT14_TOY_PAIRS["val"],
        "test": WMT14_TOY_PAIRS["test"],
    }
    assert (
        0.99 * WMT14_TOY_PAIRS["train"] < len(smoke_corpus.raw["train"]) <= WMT14_TOY_PAIRS["train"]
    )
    texts = [t for pair in smoke_corpus.raw["train"] for t in pair]
    assert not any("&apos;" in t or "&quot;" in t for t in texts)
    # Moses put a space before every comma; a handful of lines start with one.
    assert sum(" ," in t for t in texts) < 0.001 * len(texts)
    ids = [i for pair in smoke_corpus.ids["test"] for side in pair for i in side]
    assert smoke_corpus.src_vocab.unk not in ids


def test_step_plan_reports_the_step_size(smoke_corpus):
    config = WMT_PROFILES["smoke"]
    one, two = step_plan(config, smoke_corpus, 1), step_plan(config, smoke_corpus, 2)
    assert one["accumulate (per process)"] == 2 and two["accumulate (per process)"] == 1
    assert one["steps per epoch"] == two["steps per epoch"]
    assert 0 < one["target tokens per step"] <= config.tokens_per_step


@pytest.mark.slow
def test_smoke_run_trains_averages_scores_and_resumes(smoke_corpus, tmp_path):
    config = dataclasses.replace(WMT_PROFILES["smoke"], evals_per_epoch=10)  # evaluate often
    run = train_wmt(config, tmp_path / "run", progress=False, corpus=smoke_corpus)
    assert int(run.history.step.max()) == config.steps
    snapshots = sorted((tmp_path / "run" / "snapshots").glob("step-*.pt"))
    assert len(snapshots) == config.average_last == 2
    averaged = torch.load(tmp_path / "run" / "averaged.pt", weights_only=False)["model"]
    mean = average_snapshots(snapshots)
    saved = [torch.load(p, weights_only=False)["model"] for p in snapshots]
    for name, tensor in averaged.items():
        by_hand = sum(s[name].double() for s in saved) / len(saved)
        assert torch.allclose(tensor.double(), by_hand, atol=1e-6) and torch.equal(
            tensor, mean[name]
        )
    scores = wmt_scores(run)
    assert set(scores.split) == {"val", "test"}
    assert scores["BLEU signature"][0].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "tokenized BLEU" in scores.columns
    translator = load_translator(tmp_path / "run" / "averaged.pt")
    assert isinstance(translator.src_vocab, Subwords), "subwords.json in the folder decides"
    assert translator.tgt_vocab is translator.src_vocab
    # The checkpoint carries the run's decoding (the paper's alpha 0.6, not chapter 7's 2.5), so
    # `python -m annotated.translate` uses it for a WMT model without being told.
    assert (
        translator.decoding == config.decoding == DecodeConfig(beam=config.decoding.beam, alpha=0.6)
    )
    latest = load_translator(tmp_path / "run" / "checkpoint.pt")
    assert latest.decoding == translator.decoding
    assert translator.translate(["", "A house.", ""])[0::2] == ["", ""]
    again = train_wmt(config, tmp_path / "run", progress=False, corpus=smoke_corpus)
    assert again.history.equals(run.history), "a finished run is loaded, not trained again"
