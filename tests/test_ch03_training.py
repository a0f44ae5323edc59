"""Chapter 3: batches, equation 3, label smoothing, and the training loop's guarantees."""

import copy
import dataclasses
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import (
    Batch,
    FastDropout,
    TrainConfig,
    dropout_rate,
    evaluate,
    inference,
    label_smoothing_loss,
    make_optimizer,
    pad_sequences,
    rate,
    set_dropout,
    smoothed_targets,
    train,
    use_fast_dropout,
)

PAD, BOS, EOS = 0, 1, 2


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(99)


def tiny_model(**changes) -> nn.Module:
    return make_model(
        ModelConfig(
            **(
                {"src_vocab": 15, "tgt_vocab": 15, "N": 1, "d_model": 32, "d_ff": 64, "h": 2}
                | changes
            )
        )
    )


def random_batch(generator: torch.Generator, size: int = 4) -> Batch:
    lengths = torch.randint(2, 7, (size,), generator=generator).tolist()
    src = pad_sequences(
        [torch.randint(3, 15, (n,), generator=generator).tolist() + [EOS] for n in lengths], PAD
    )
    tgt = pad_sequences(
        [[BOS] + torch.randint(3, 15, (n,), generator=generator).tolist() + [EOS] for n in lengths],
        PAD,
    )
    return Batch.build(src, tgt, PAD)


def source(accumulate: int = 1, size: int = 4):
    def batches(step: int) -> list[Batch]:
        generator = torch.Generator().manual_seed(1000 + step)
        return [random_batch(generator, size) for _ in range(accumulate)]

    return batches


# ---------------------------------------------------------------- batches


def test_batch_shifts_target_and_counts_tokens():
    src = pad_sequences([[5, 6, EOS], [7, EOS]], PAD)
    tgt = pad_sequences([[BOS, 8, 9, 10, EOS], [BOS, 11, EOS]], PAD)
    batch = Batch.build(src, tgt, PAD)
    assert batch.tgt_in.tolist() == [[BOS, 8, 9, 10], [BOS, 11, EOS, PAD]]
    assert batch.tgt_out.tolist() == [[8, 9, 10, EOS], [11, EOS, PAD, PAD]]
    assert batch.n_tokens == 6
    assert batch.src_mask.tolist() == [[[True, True, True]], [[True, True, False]]]
    for row in range(2):
        for i in range(4):
            for j in range(4):
                allowed = j <= i and batch.tgt_in[row, j] != PAD
                assert bool(batch.tgt_mask[row, i, j]) == bool(allowed)


def test_batch_rejects_bad_shapes():
    with pytest.raises(ValueError, match="same batch size"):
        Batch.build(torch.ones(2, 3, dtype=torch.long), torch.ones(3, 4, dtype=torch.long), PAD)
    with pytest.raises(ValueError, match="at least"):
        Batch.build(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 1, dtype=torch.long), PAD)


# ---------------------------------------------------------------- equation 3


def test_rate_follows_equation_3_at_chosen_steps():
    assert rate(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert rate(1000, 512, 4000) == pytest.approx(512**-0.5 * 1000 * 4000**-1.5)
    assert rate(4000, 512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert rate(16000, 512, 4000) == pytest.approx(512**-0.5 / math.sqrt(16000))
    assert rate(100, 256, 50, factor=2.0) == pytest.approx(2 * 256**-0.5 * 100**-0.5)


@pytest.mark.parametrize(("d_model", "warmup"), [(512, 4000), (1024, 800)])
def test_rate_peaks_at_warmup(d_model, warmup):
    rates = [rate(step, d_model, warmup) for step in range(1, 4 * warmup)]
    assert rates.index(max(rates)) + 1 == warmup
    with pytest.raises(ValueError):
        rate(0, d_model, warmup)


def test_lambda_lr_gives_equation_3_per_optimizer_step():
    model = tiny_model()
    optimizer, scheduler = make_optimizer(model, TrainConfig(warmup=10))
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    for step in range(1, 31):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(rate(step, 32, 10))
        optimizer.step()
        scheduler.step()


def test_fused_adam_takes_the_same_steps_as_the_unfused_loop():
    torch.manual_seed(0)
    fused_model = tiny_model()
    loop_model = copy.deepcopy(fused_model)
    fused, _ = make_optimizer(fused_model, TrainConfig(warmup=10))
    assert fused.defaults["fused"]
    loop = torch.optim.Adam(loop_model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    start = [p.detach().clone() for p in fused_model.parameters()]
    for step in range(1, 6):
        for optimizer, model in ((fused, fused_model), (loop, loop_model)):
            optimizer.param_groups[0]["lr"] = rate(step, 32, 10)
            torch.manual_seed(step)
            for parameter in model.parameters():
                parameter.grad = torch.randn_like(parameter)
            optimizer.step()
    for a, b in zip(fused_model.parameters(), loop_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert all(not torch.equal(a, b) for a, b in zip(fused_model.parameters(), start, strict=True))


def test_cooldown_falls_linearly_to_the_last_step_and_leaves_earlier_steps_alone():
    config = TrainConfig(max_steps=40, warmup=10, lr_factor=2.0, cooldown=16)
    optimizer, scheduler = make_optimizer(tiny_model(), config)
    lrs = []
    for _ in range(config.max_steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    for step, lr in enumerate(lrs, start=1):
        paper = rate(step, 32, 10, factor=2.0)
        if step <= 24:  # before the last 16 steps: equation 3 unchanged
            assert lr == pytest.approx(paper)
        else:  # 15/16, 14/16, ..., 1/16 of equation 3
            assert lr == pytest.approx(paper * (41 - step) / 16)
    assert lrs[-1] == pytest.approx(rate(40, 32, 10, factor=2.0) / 16)


def test_cooldown_ties_the_schedule_to_the_run_length(tmp_path):
    checkpoint = tmp_path / "run.pt"
    config = TrainConfig(max_steps=3, warmup=2, cooldown=2)
    train(tiny_model(), source(), config, checkpoint=checkpoint, progress=False)
    with pytest.raises(ValueError, match="max_steps: checkpoint 3, now 5"):
        train(
            tiny_model(),
            source(),
            dataclasses.replace(config, max_steps=5),
            checkpoint=checkpoint,
            progress=False,
        )


# ---------------------------------------------------------------- dropout schedule


def test_dropout_rate_moves_linearly_from_p_drop_to_final():
    config = TrainConfig(max_steps=5, warmup=2, p_drop_final=0.5)
    rates = [dropout_rate(step, 0.1, config) for step in range(1, 6)]
    assert rates == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    fixed = TrainConfig(max_steps=5, warmup=2)
    assert [dropout_rate(step, 0.1, fixed) for step in range(1, 6)] == [0.1] * 5


def dropout_rates(model: nn.Module) -> dict[str, list[float]]:
    """The rates of the model's dropout modules, by kind: attention weights or the rest."""
    rates = {"attention": [], "other": []}
    for name, module in model.named_modules():
        if isinstance(module, nn.Dropout):
            rates["attention" if "_attn." in name else "other"].append(module.p)
    return rates


def test_set_dropout_leaves_attention_dropout_alone():
    model = tiny_model(p_drop=0.1, p_attn_drop=0.05)
    before = dropout_rates(model)
    assert len(before["other"]) == 7  # 2 per encoder layer, 3 per decoder layer, 2 embeddings
    assert before["attention"], "the name test must find the attention dropouts"
    set_dropout(model, 0.4)
    after = dropout_rates(model)
    assert after["other"] == [0.4] * 7
    assert after["attention"] == before["attention"]


@pytest.mark.parametrize("learned_positions", [False, True])
def test_set_dropout_reaches_the_embedding_dropout_of_either_kind_of_positions(learned_positions):
    model = tiny_model(p_drop=0.1, learned_positions=learned_positions)
    set_dropout(model, 0.3)
    embedding_dropouts = [
        module.dropout.p
        for module in model.modules()
        if hasattr(module, "dropout") and type(module).__name__.endswith(("Positions", "Encoding"))
    ]
    assert embedding_dropouts == [0.3, 0.3], (
        f"set_dropout left the positions' dropout at {embedding_dropouts} "
        f"(learned_positions={learned_positions})"
    )


def test_training_follows_the_dropout_schedule_step_by_step():
    model = tiny_model(p_drop=0.1, p_attn_drop=0.05)
    config = TrainConfig(max_steps=5, warmup=2, p_drop_final=0.5)
    seen = []
    train(
        model,
        source(),
        config,
        progress=False,
        on_step=lambda row: seen.append(dropout_rates(model)),
    )
    for step, rates in enumerate(seen, start=1):
        assert rates["other"] == pytest.approx([dropout_rate(step, 0.1, config)] * 7)
        assert set(rates["attention"]) == {0.05}
    assert model.config.p_drop == 0.1, "the schedule must not rewrite the model's configuration"


def test_dropout_schedule_resumes_exactly_and_ties_the_run_length(tmp_path):
    config = TrainConfig(max_steps=6, warmup=3, checkpoint_every=0, p_drop_final=0.6)
    straight = tiny_model(p_drop=0.1)
    initial = copy.deepcopy(straight.state_dict())
    train(straight, source(), config, progress=False)
    checkpoint = tmp_path / "run.pt"
    first = tiny_model(p_drop=0.1)
    first.load_state_dict(initial)
    stopped = train(
        first, source(), config, checkpoint, progress=False, on_step=lambda row: row["step"] == 3
    )
    assert len(stopped) == 3
    second = tiny_model(p_drop=0.1)
    history = train(second, source(), config, checkpoint, progress=False)
    assert list(history["step"]) == list(range(1, 7))
    for (name, a), b in zip(
        straight.state_dict().items(), second.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    with pytest.raises(ValueError, match="max_steps: checkpoint 6, now 8"):
        train(
            tiny_model(p_drop=0.1),
            source(),
            dataclasses.replace(config, max_steps=8),
            checkpoint,
            progress=False,
        )


# ---------------------------------------------------------------- label smoothing


def test_smoothed_distribution_sums_to_one_and_spares_pad():
    target = torch.tensor([3, 4, PAD, 9])
    q = smoothed_targets(target, vocab=10, pad=PAD, eps_ls=0.1)
    torch.testing.assert_close(q.sum(-1), torch.tensor([1.0, 1.0, 0.0, 1.0]))
    assert (q[:, PAD] == 0).all() and (q[2] == 0).all()
    assert q[0, 3] == pytest.approx(0.9) and q[0, 5] == pytest.approx(0.1 / 8)


def test_loss_equals_the_formula_computed_directly():
    logits = torch.randn(5, 7, dtype=torch.float64)
    target = torch.tensor([1, 2, 0, 6, 3])
    eps, vocab = 0.2, 7
    expected = 0.0
    for i in range(5):
        if target[i] == PAD:
            continue
        log_p = torch.log_softmax(logits[i], -1)
        for c in range(vocab):
            q = 0.0 if c == PAD else (1 - eps if c == target[i] else eps / (vocab - 2))
            if q > 0:
                expected += q * (math.log(q) - log_p[c].item())
    assert label_smoothing_loss(logits, target, PAD, eps).item() == pytest.approx(
        expected, rel=1e-6
    )


def test_loss_is_finite_when_the_model_gives_probability_zero():
    logits = torch.randn(3, 6)
    logits[:, PAD] = float("-inf")  # probability exactly 0 where the target has no mass
    logits[0, 5] = -1e4  # and practically 0 elsewhere
    loss = label_smoothing_loss(logits, torch.tensor([2, 3, PAD]), PAD, 0.1)
    assert torch.isfinite(loss)
    # The naive formula the original used gives NaN here: 0 * log(0).
    q = smoothed_targets(torch.tensor([2, 3, PAD]), 6, PAD, 0.1)
    assert torch.isnan(
        F.kl_div(logits.log_softmax(-1), q, reduction="sum", log_target=False)
    ) or torch.isnan((q * (q.log() - logits.log_softmax(-1))).sum())


def test_relation_to_torch_cross_entropy_with_label_smoothing():
    logits, target, eps, vocab = torch.randn(8, 12), torch.tensor([3, 4, 5, 6, 7, 8, 0, 0]), 0.1, 12
    real = target != PAD
    theirs = F.cross_entropy(logits, target, ignore_index=PAD, label_smoothing=eps, reduction="sum")
    # PyTorch spreads eps over all classes (target and pad included): cross-entropy = KL + entropy.
    q_pt = (1 - eps) * F.one_hot(target[real], vocab) + eps / vocab
    kl_pt = (torch.xlogy(q_pt, q_pt) - q_pt * logits[real].log_softmax(-1)).sum()
    torch.testing.assert_close(kl_pt - torch.xlogy(q_pt, q_pt).sum(), theirs)
    # Ours spreads eps over the non-target, non-pad classes: the same relation, with our targets.
    ours = label_smoothing_loss(logits, target, PAD, eps)
    q = smoothed_targets(target, vocab, PAD, eps)
    cross_entropy = -(torch.where(q > 0, q * logits.log_softmax(-1), 0.0)).sum()
    torch.testing.assert_close(ours - torch.xlogy(q, q).sum(), cross_entropy)
    assert not torch.isclose(cross_entropy, theirs), (
        "the two spread eps differently, so they differ"
    )
    # Without smoothing both are plain cross-entropy over the non-pad tokens.
    torch.testing.assert_close(
        label_smoothing_loss(logits, target, PAD, 0.0),
        F.cross_entropy(logits, target, ignore_index=PAD, reduction="sum"),
    )


# ---------------------------------------------------------------- the loop


def test_gradient_accumulation_equals_one_big_batch():
    config = TrainConfig(max_steps=1, warmup=1, precision="fp32", eps_ls=0.1)
    parts = source(accumulate=2)(0)
    src = pad_sequences([row[row != PAD].tolist() for b in parts for row in b.src], PAD)
    tgt = pad_sequences(
        [
            torch.cat([b.tgt_in[i, :1], b.tgt_out[i][b.tgt_out[i] != PAD]]).tolist()
            for b in parts
            for i in range(b.src.size(0))
        ],
        PAD,
    )
    whole = Batch.build(src, tgt, PAD)
    assert whole.n_tokens == sum(b.n_tokens for b in parts)
    a, b = tiny_model(p_drop=0.0), tiny_model(p_drop=0.0)
    b.load_state_dict(a.state_dict())

    def gradients_of(model):
        # on_step runs after optimizer.step(); gradients are cleared only at the next step.
        seen = {}
        return seen, lambda row: seen.update(
            {n: p.grad.clone() for n, p in model.named_parameters()}
        )

    grads_a, keep_a = gradients_of(a)
    grads_b, keep_b = gradients_of(b)
    train(
        a,
        lambda step: parts,
        dataclasses.replace(config, accumulate=2),
        progress=False,
        on_step=keep_a,
    )
    train(b, lambda step: [whole], config, progress=False, on_step=keep_b)
    for name, grad in grads_a.items():
        torch.testing.assert_close(grad, grads_b[name], atol=1e-6, rtol=1e-4, msg=name)


def test_scheduler_steps_once_per_optimizer_step_not_per_micro_batch():
    history = train(
        tiny_model(),
        source(accumulate=3),
        TrainConfig(max_steps=12, warmup=5, accumulate=3),
        progress=False,
    )
    assert history["lr"].tolist() == pytest.approx([rate(s, 32, 5) for s in range(1, 13)])
    assert (history["loss"] > 0).all() and list(history["step"]) == list(range(1, 13))


def test_the_progress_bar_ends_on_the_steps_the_run_took(tmp_path, capsys):
    def last_count() -> str:  # what the bar shows last: "done/total"
        return re.findall(r"(\d+/\d+) \[", capsys.readouterr().err)[-1]

    config = TrainConfig(max_steps=6, warmup=3, checkpoint_every=0)
    checkpoint = tmp_path / "run.pt"
    stop_at_4 = lambda row: row["step"] == 4  # noqa: E731
    train(tiny_model(), source(), config, checkpoint, progress=True, on_step=stop_at_4)
    assert last_count() == "4/6"  # stopped early: all 4 of its steps (iterating the bar showed 3)
    train(tiny_model(), source(), config, checkpoint, progress=True)  # resumed to the end
    assert last_count() == "6/6"
    train(tiny_model(), source(), config, progress=True)
    assert last_count() == "6/6"


def test_loop_refuses_the_wrong_number_of_micro_batches():
    with pytest.raises(ValueError, match="accumulate"):
        train(
            tiny_model(),
            source(accumulate=1),
            TrainConfig(max_steps=2, accumulate=2),
            progress=False,
        )


def test_nan_loss_stops_training_with_step_and_batch(tmp_path):
    model = tiny_model()
    checkpoint = tmp_path / "run.pt"
    config = TrainConfig(max_steps=2, warmup=2, checkpoint_every=1)
    train(model, source(), config, checkpoint=checkpoint, progress=False)
    saved = checkpoint.read_bytes()
    healthy = source()

    def poisoned(step: int) -> list[Batch]:
        if step == 2:  # the third optimizer step: a weight turns NaN, as after a diverging update
            with torch.no_grad():
                model.generator.bias[4] = float("nan")
        return healthy(step)

    with pytest.raises(FloatingPointError, match=r"optimizer step 3, micro-batch 0"):
        train(
            model,
            poisoned,
            dataclasses.replace(config, max_steps=4),
            checkpoint=checkpoint,
            progress=False,
        )
    assert checkpoint.read_bytes() == saved, (
        "a failed step must not overwrite the last good checkpoint"
    )


def test_evaluate_restores_mode_and_needs_no_gradients():
    model = tiny_model().train()
    batches = source()(0)
    loss = evaluate(model, batches)
    assert model.training and loss > 0
    with torch.no_grad():
        assert evaluate(model, batches) == pytest.approx(loss)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"warmup": 0}, "warmup"),
        ({"eps_ls": 1.0}, "eps_ls"),
        ({"eps_ls": -0.1}, "eps_ls"),
        ({"accumulate": 0}, "accumulate"),
        ({"precision": "fp8"}, "precision"),
        ({"beta2": 1.0}, "betas"),
        ({"max_steps": 0}, "max_steps"),
        ({"cooldown": -1}, "cooldown"),
        ({"max_steps": 10, "cooldown": 11}, "cooldown"),
        ({"p_drop_final": 1.0}, "p_drop_final"),
        ({"p_drop_final": -0.1}, "p_drop_final"),
    ],
)
def test_invalid_training_configurations_fail_clearly(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**changes)


# ---------------------------------------------------------------- checkpoints


def test_resumed_run_equals_uninterrupted_run_in_process(tmp_path):
    config = TrainConfig(max_steps=8, warmup=3, checkpoint_every=3)
    straight = tiny_model()
    initial = {k: v.clone() for k, v in straight.state_dict().items()}
    train(straight, source(), config, progress=False)
    checkpoint = tmp_path / "run.pt"
    first = tiny_model()
    first.load_state_dict(initial)
    train(
        first,
        source(),
        dataclasses.replace(config, max_steps=5),
        checkpoint=checkpoint,
        progress=False,
    )
    torch.manual_seed(12345)  # a different global RNG state: the checkpoint must restore it
    second = tiny_model()
    history = train(second, source(), config, checkpoint=checkpoint, progress=False)
    assert list(history["step"]) == list(range(1, 9))
    for (name, a), b in zip(
        straight.state_dict().items(), second.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


# ---------------------------------------------------------------- fast dropout (section 4)


def test_fast_dropout_distribution_and_scaling():
    torch.manual_seed(0)
    layer = FastDropout(0.1)
    x = torch.ones(1_000_003)
    y = layer(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.002  # binomial sd is 0.0003
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.9))
    layer.eval()
    assert layer(x) is x
    assert FastDropout(0.0)(x) is x
    with pytest.raises(ValueError):
        FastDropout(1.0)
    layer.train()
    layer.p = 0.5  # chapter 3's set_dropout changes the rate during training
    assert abs((layer(x) != 0).float().mean().item() - 0.5) < 0.002


def test_use_fast_dropout_swaps_every_dropout_and_keeps_the_weights():
    model = make_model(ModelConfig(11, 12, N=1, d_model=16, d_ff=32, h=2, p_drop=0.2))
    keys = list(model.state_dict())
    use_fast_dropout(model)
    kinds = {type(m) for m in model.modules()}
    assert torch.nn.Dropout not in kinds and FastDropout in kinds
    assert list(model.state_dict()) == keys
    assert all(m.p == 0.2 for m in model.modules() if isinstance(m, FastDropout))


def test_inference_switches_off_dropout_and_gradients_and_restores_the_mode():
    model = make_model(ModelConfig(11, 12, N=1, d_model=16, d_ff=32, h=2, p_drop=0.5)).train()
    x = torch.randint(0, 11, (2, 5))
    mask = torch.ones(2, 1, 5, dtype=torch.bool)
    with inference(model):
        assert not model.training and not torch.is_grad_enabled()
        first, second = model.encode(x, mask), model.encode(x, mask)
        assert torch.equal(first, second)  # no dropout
    assert model.training and torch.is_grad_enabled()
    with pytest.raises(RuntimeError), inference(model.eval()):
        raise RuntimeError("a failure inside the block")
    assert not model.training  # restored to eval, the mode it was in
