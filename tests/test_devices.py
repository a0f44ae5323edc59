"""annotated/base/devices.py: the training device and precision on every machine a reader may have,
float16's loss scaling, and checkpoints that load on any device.

This machine has only a CPU: the GPUs and Apple's MPS are pretended (`machine`), by replacing the
few torch functions that the choices ask.
"""

import ast
import contextlib
import dataclasses
from pathlib import Path

import pytest
import torch

import annotated.base.devices as devices
from annotated.base.checkpoints import read_checkpoint
from annotated.base.devices import (
    DEVICE_ENV,
    LossScaling,
    available_devices,
    chosen_precision,
    training_device,
)
from annotated.ch02_model import ModelConfig, make_model
from annotated.ch03_training import (
    Batch,
    TrainConfig,
    autocast,
    make_optimizer,
    pad_sequences,
    train,
    train_step,
    use_bf16,
)
from annotated.ch08_wmt import setup_distributed
from annotated.training.finish import average_snapshots
from annotated.training.folder import RunFolder
from annotated.training.loop import save_snapshot

PACKAGE = Path(__file__).resolve().parent.parent / "annotated"
PAD, BOS, EOS = 0, 1, 2
CPU = torch.device("cpu")


@pytest.fixture
def machine(monkeypatch):
    """pretend(gpus, capability, current, mps, cpu_bf16): a machine with these, as torch sees it.

    `torch.cuda.is_bf16_supported` answers yes on every pretended GPU, as current PyTorch does
    on a T4, where bfloat16 is only emulated: the choice must not trust it.
    """

    def pretend(gpus=0, capability=(8, 0), current=0, mps=False, cpu_bf16=False):
        monkeypatch.delenv(DEVICE_ENV, raising=False)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: gpus > 0)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: cpu_bf16, raising=False)

    return pretend


# ---------------------------------------------------------------- which device, which precision


def test_a_gpu_with_bf16_arithmetic_trains_in_bf16_without_a_scaler(machine):
    machine(gpus=1, capability=(8, 0))
    device = training_device()
    assert device == torch.device("cuda", 0)
    assert chosen_precision("auto", device) == "bf16" and use_bf16("auto", device)
    assert autocast("auto", device).fast_dtype == torch.bfloat16
    assert LossScaling.for_training("auto", device).scaler is None


def test_an_older_gpu_trains_in_fp16_with_a_scaler_not_in_emulated_bf16(machine):
    machine(gpus=1, capability=(7, 5))  # a T4: torch.cuda.is_bf16_supported() says True
    device = training_device()
    assert chosen_precision("auto", device) == "fp16"
    assert not use_bf16("auto", device)
    assert autocast("auto", device).fast_dtype == torch.float16
    scaler = LossScaling.for_training("auto", device).scaler
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled()


def test_apples_mps_is_chosen_before_the_cpu_and_trains_in_fp32(machine):
    machine(mps=True, cpu_bf16=True)
    device = training_device()
    assert device == torch.device("mps")
    assert chosen_precision("auto", device) == "fp32"
    assert isinstance(autocast("auto", device), contextlib.nullcontext)
    assert LossScaling.for_training("auto", device).scaler is None


def test_several_processes_on_a_mac_train_on_the_cpu(machine, monkeypatch):
    # chapter 8's processes add up their numbers through gloo, which takes CPU tensors
    machine(mps=True)
    monkeypatch.setattr(devices, "rank_and_world", lambda: (1, 2))
    assert training_device() == CPU


@pytest.mark.parametrize(("cpu_bf16", "expected"), [(True, "bf16"), (False, "fp32")])
def test_the_cpu_trains_in_bf16_only_where_it_has_bf16_instructions(machine, cpu_bf16, expected):
    machine(cpu_bf16=cpu_bf16)
    assert training_device() == CPU
    assert chosen_precision("auto", CPU) == expected
    assert LossScaling.for_training("auto", CPU).scaler is None


def test_each_process_trains_on_the_gpu_it_set(machine):
    machine(gpus=2, current=1)  # chapter 8: torch.cuda.set_device(LOCAL_RANK) in process 1
    assert training_device() == torch.device("cuda", 1)


@pytest.mark.parametrize(
    ("named", "expected"),
    [("cpu", "cpu"), (" cpu ", "cpu"), ("cuda", "cuda:1"), ("cuda:0", "cuda:0"), ("mps", "mps")],
)
def test_annotated_device_overrides_the_choice(machine, monkeypatch, named, expected):
    machine(gpus=2, current=1, mps=True)
    monkeypatch.setenv(DEVICE_ENV, named)
    assert training_device() == torch.device(expected)


@pytest.mark.parametrize(
    ("named", "gpus", "has"),
    [
        ("cuda:1", 1, "cuda:0, cpu"),
        ("cuda", 0, "cpu"),
        ("mps", 0, "cpu"),
        ("gpu", 1, "cuda:0, cpu"),
    ],
)
def test_a_device_the_machine_lacks_is_refused_with_what_it_has(
    machine, monkeypatch, named, gpus, has
):
    machine(gpus=gpus)
    monkeypatch.setenv(DEVICE_ENV, named)
    with pytest.raises(ValueError) as error:
        training_device()
    message = str(error.value)
    assert f"{DEVICE_ENV}={named!r} is not a device this machine has; it has {has}." in message
    assert f"Set {DEVICE_ENV} to one of these, or unset it" in message
    assert available_devices() == has.split(", ")


@pytest.mark.parametrize(
    ("gpus", "capability", "cpu_bf16", "precision", "expected"),
    [
        (1, (8, 0), False, "fp32", "fp32"),
        (1, (8, 0), False, "fp16", "fp16"),
        (1, (7, 5), False, "bf16", "bf16"),
        (1, (7, 5), False, "fp32", "fp32"),
        (0, None, True, "fp32", "fp32"),
        (0, None, False, "bf16", "bf16"),
    ],
)
def test_a_named_precision_overrides_auto(machine, gpus, capability, cpu_bf16, precision, expected):
    machine(gpus=gpus, capability=capability, cpu_bf16=cpu_bf16)
    device = training_device()
    assert chosen_precision(precision, device) == expected
    scaler = LossScaling.for_training(precision, device).scaler
    assert (scaler is not None) == (expected == "fp16")


@pytest.mark.parametrize("device", [CPU, torch.device("mps")])
def test_fp16_off_cuda_is_refused_before_training_starts(machine, tmp_path, device):
    machine(cpu_bf16=True, mps=True)
    with pytest.raises(ValueError, match=rf"precision='fp16'.* is for CUDA GPUs; .* on {device}"):
        chosen_precision("fp16", device)
    checkpoint = tmp_path / "run.pt"
    with pytest.raises(ValueError, match="precision='fp16'"):
        train(tiny_model(), source(), fp16_config(), checkpoint=checkpoint, progress=False)
    assert not checkpoint.exists()


def test_an_unknown_precision_is_refused():
    with pytest.raises(ValueError, match="precision must be one of auto, bf16, fp16, fp32"):
        chosen_precision("fp8", CPU)
    assert TrainConfig(precision="fp16").precision == "fp16"


# ---------------------------------------------------------------- float16's loss scaling


def tiny_model():
    torch.manual_seed(3)
    return make_model(ModelConfig(15, 15, N=1, d_model=32, d_ff=64, h=2, p_drop=0.0))


def source():
    def batches(step: int) -> list[Batch]:
        generator = torch.Generator().manual_seed(1000 + step)
        rows = [torch.randint(3, 15, (n,), generator=generator).tolist() for n in (3, 5, 4)]
        src = pad_sequences([row + [EOS] for row in rows], PAD)
        return [Batch.build(src, pad_sequences([[BOS, *row, EOS] for row in rows], PAD), PAD)]

    return batches


def fp16_config(**changes) -> TrainConfig:
    return TrainConfig(**{"max_steps": 3, "warmup": 2, "precision": "fp16", **changes})


def cpu_scaling(monkeypatch, **settings) -> list[LossScaling]:
    """Make `train` scale its loss with a CPU GradScaler (as it would in float16 on a GPU),
    computing in float32; the list receives each training's LossScaling."""
    made = []

    def for_training(precision: str, device: torch.device) -> LossScaling:
        made.append(LossScaling(torch.amp.GradScaler("cpu", **settings)))
        return made[-1]

    monkeypatch.setattr(LossScaling, "for_training", for_training)
    monkeypatch.setattr(devices, "chosen_precision", lambda precision, device: "fp32")
    monkeypatch.setattr("annotated.ch03_training.chosen_precision", devices.chosen_precision)
    return made


def test_loss_scaling_gives_the_same_steps_as_none(monkeypatch):
    # A power-of-two factor multiplies and divides exactly: the weights must be the very same.
    plain = tiny_model()
    train(plain, source(), fp16_config(precision="fp32"), progress=False)
    made = cpu_scaling(monkeypatch, init_scale=2.0**12, growth_interval=2)
    scaled = tiny_model()
    train(scaled, source(), fp16_config(), progress=False)
    assert made[0].scaler.get_scale() == 2.0**13  # doubled after two steps without an overflow
    for (name, a), b in zip(plain.state_dict().items(), scaled.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_a_step_whose_scaled_gradients_overflow_is_skipped_and_the_scale_halved():
    model = tiny_model()
    config = fp16_config(precision="fp32")  # float32 arithmetic, scaled as in float16
    optimizer, scheduler = make_optimizer(model, config)
    scaling = LossScaling(torch.amp.GradScaler("cpu", init_scale=2.0**8))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    batch = source()(0)
    train_step(model, batch, optimizer, scheduler, config, 1, scaling)
    assert scaling.scaler.get_scale() == 2.0**8
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
    moved = {name: p.detach().clone() for name, p in model.named_parameters()}
    # One gradient overflows, as a float16 one does when the factor has grown too large.
    overflow = model.generator.weight.register_hook(lambda grad: torch.full_like(grad, torch.inf))
    row = train_step(model, batch, optimizer, scheduler, config, 2, scaling)
    overflow.remove()
    assert scaling.scaler.get_scale() == 2.0**7
    assert all(torch.equal(moved[n], p) for n, p in model.named_parameters()), "step skipped"
    assert row["step"] == 2 and scheduler.last_epoch == 2  # the schedule still moves on
    train_step(model, batch, optimizer, scheduler, config, 3, scaling)
    assert any(not torch.equal(moved[n], p) for n, p in model.named_parameters())


def test_a_checkpoint_keeps_the_loss_scale_and_a_resumed_run_goes_on_with_it(tmp_path, monkeypatch):
    made = cpu_scaling(monkeypatch, init_scale=2.0**12, growth_interval=2)
    straight = tiny_model()
    train(straight, source(), fp16_config(max_steps=5), progress=False)
    checkpoint = tmp_path / "run.pt"
    train(tiny_model(), source(), fp16_config(), checkpoint=checkpoint, progress=False)
    saved = read_checkpoint(checkpoint)["scaler"]
    assert saved == made[1].scaler.state_dict() and saved["scale"] == 2.0**13
    resumed = tiny_model()
    train(resumed, source(), fp16_config(max_steps=5), checkpoint=checkpoint, progress=False)
    assert made[2].scaler.state_dict() == made[0].scaler.state_dict()
    for (name, a), b in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_a_checkpoint_from_before_loss_scaling_resumes_with_a_new_scaler(tmp_path, monkeypatch):
    checkpoint = tmp_path / "run.pt"
    config = fp16_config(precision="fp32")  # the saved run's configuration
    train(tiny_model(), source(), config, checkpoint=checkpoint, progress=False)
    assert "scaler" not in read_checkpoint(checkpoint)
    made = cpu_scaling(monkeypatch, init_scale=2.0**5)
    config = dataclasses.replace(config, max_steps=4)
    history = train(tiny_model(), source(), config, checkpoint=checkpoint, progress=False)
    assert list(history.step) == [1, 2, 3, 4]
    assert made[0].scaler.get_scale() == 2.0**5  # as new, one step taken
    assert read_checkpoint(checkpoint)["scaler"] == made[0].scaler.state_dict()


def test_a_scalers_state_is_ignored_by_a_run_without_one():
    scaling = LossScaling()
    scaling.restore({"scaler": {"scale": 8.0}})
    assert scaling.saved() == {} and scaling.unscale(None)


# ---------------------------------------------------------------- checkpoints on any device


def test_a_checkpoint_is_read_onto_the_cpu_whatever_device_wrote_it(tmp_path, monkeypatch):
    checkpoint = tmp_path / "run.pt"
    model = tiny_model()
    config = fp16_config(precision="fp32", max_steps=1)
    train(model, source(), config, checkpoint=checkpoint, progress=False)
    save_snapshot(model, RunFolder(tmp_path), 1, keep=1)
    loads = []
    real_load = torch.load

    def load(*args, **kwargs):
        loads.append(kwargs.get("map_location"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", load)
    state = read_checkpoint(checkpoint)
    average_snapshots([tmp_path / "snapshots" / "step-000001.pt"])
    assert [torch.device(location) for location in loads] == [CPU, CPU]
    assert {tensor.device for tensor in state["model"].values()} == {CPU}


def test_every_torch_load_in_the_package_says_where_the_tensors_go():
    calls = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load":
                keywords = {keyword.arg for keyword in node.keywords}
                calls.append((path.name, node.lineno, "map_location" in keywords))
    assert calls, "the package reads checkpoints with torch.load"
    assert all(located for _, _, located in calls), [c for c in calls if not c[2]]


# Tensor factories (torch's, and the book's own that build on the CPU) outside the functions below
# must say where their tensor goes (`device=`) or move it (`.to(...)`): a helper that makes an
# index or a mask on the CPU for a model on a GPU fails there ("Expected all tensors to be on the
# same device"), which a CPU-only test run never sees. The functions below build on the CPU on
# purpose; each is listed with why, so that a new one is a decision, not an accident.
FACTORIES = {
    "tensor", "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "randperm",
    "eye", "linspace", "as_tensor", "from_numpy",
}  # fmt: skip
BOOK_FACTORIES = {"subsequent_mask", "pad_sequences"}  # CPU tensors that callers move
CPU_MEANT = {
    # Data: batches are built on the CPU and moved by whoever trains or decodes on them.
    "ch03_training.py:pad_sequences": "data",
    "ch04_copy_task.py:CopyTask._draw": "data",
    "ch04_copy_task.py:CopyTask.to_batch": "data",
    "ch05_text.py:make_batch": "data",
    "ch01_attention.py:subsequent_mask": "a mask its callers move (`.to(device)`)",
    # A module's own parameters and buffers: `model.to(device)` moves them.
    "ch02_model.py:LayerNorm.__init__": "parameters",
    "ch02_model.py:sinusoidal_table": "a buffer",
    # Demonstrations that make their own CPU tensors (and models) and nothing else.
    "ch00_preface.py:recurrent_layer": "demonstration",
    "ch00_preface.py:count_operations": "demonstration",
    "ch01_attention.py:walk_example": "demonstration",
    "ch01_attention.py:walk_heads": "demonstration",
    "ch01_attention.py:dot_product_spread": "demonstration",
    "ch01_attention.py:softmax_saturation": "demonstration",
    "ch02_model.py:rotation_for_offset": "demonstration",
    "ch02_model.py:linear_offset_check": "demonstration",
    "ch06_decoding.py:beam_winner": "Python floats of a finished trace",
    "figures/ch04_copy_task.py:_decoding_masks": "a drawing",
    "figures/ch02_model.py:gradient_norms_by_layer": "a figure with its own CPU model",
    "figures/ch03_training.py:confidence_curve": "a figure",
    "figures/ch06_decoding.py:penalty_chart": "a figure",
    # The browser's model (annotated/export/browser_model.py) is exported on the CPU, for JavaScript.
    "export/browser_model.py:pack_bits": "export for the browser",
    # The shipped model's weights are read on the CPU; `load_state_dict` copies them where the model is.
    "training/shipped.py:unpack_bits": "reading the shipped weights",
    "export/browser_model.py:quantize_compensated": "export for the browser",
    "export/browser_model.py:calibration_pairs": "export for the browser",
    "export/browser_model.py:_logits": "export for the browser",
    # Exercise checks: the student's function and the book's run side by side on CPU inputs.
    "exercises/diagnoses.py:_triangle_of": (
        "a diagnosis of a mask returned on the CPU inputs; one on another device is reported by "
        "compare() before any diagnosis runs (exercises.diagnose)"
    ),
    "exercises/ch01_attention.py:<module>": "exercise check",
    "exercises/ch01_attention.py:_cases_attention": "exercise check",
    "exercises/ch01_attention.py:_cases_attention.normal": "exercise check",
    "exercises/ch02_model.py:_table_with": "exercise check",
    "exercises/ch02_model.py:_cases_layer_norm": "exercise check",
    "exercises/ch03_training.py:_cases_smoothing": "exercise check",
    "exercises/ch03_training.py:_smoothing_with": "exercise check",
    "exercises/ch04_copy_task.py:_cases_until_eos": "exercise check",
    "exercises/ch06_decoding.py:<module>": "exercise check",
    "exercises/ch07_multi30k.py:_cases_average.state": "exercise check",
    "exercises/ch09_table3.py:_cases_perplexity": "exercise check",
    # make grade's fresh inputs, drawn on the grader's side for each grading.
    "exercises/__init__.py:draw": "grading inputs",
    "exercises/__init__.py:fresh_cases.redraw": "grading inputs",
    "exercises/ch03_training.py:_fresh_smoothing": "grading inputs",
    "exercises/ch04_copy_task.py:_fresh_until_eos": "grading inputs",
}


def tensors_made_without_a_device(package: Path) -> dict[str, list[str]]:
    """'file:function' -> the factory calls there that neither name a device nor are moved."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name.removeprefix("torch.") not in FACTORIES and name not in BOOK_FACTORIES:
                continue
            if name not in BOOK_FACTORIES and not name.startswith("torch."):
                continue
            moved = isinstance(parents.get(node), ast.Attribute) and parents[node].attr == "to"
            if moved or any(keyword.arg == "device" for keyword in node.keywords):
                continue
            scopes, scope = [], node
            while scope in parents:
                scope = parents[scope]
                if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    scopes.append(scope.name)
            where = f"{path.relative_to(package)}:{'.'.join(reversed(scopes)) or '<module>'}"
            found.setdefault(where, []).append(f"line {node.lineno}: {name}")
    return found


def test_every_tensor_a_helper_makes_goes_to_the_models_device():
    found = tensors_made_without_a_device(PACKAGE)
    assert "ch03_training.py:pad_sequences" in found, "the scan must see the book's factories"
    unlisted = {where: calls for where, calls in found.items() if where not in CPU_MEANT}
    assert not unlisted, (
        f"tensors made on the CPU whatever device the model is on: {unlisted}. Pass "
        "device=<the model's device> (or .to(device)); if the function is meant for the CPU "
        "alone, add it to CPU_MEANT with why"
    )
    stale = sorted(set(CPU_MEANT) - set(found))
    assert not stale, f"CPU_MEANT lists functions that make no such tensor any more: {stale}"


def test_the_device_scan_finds_chapter_7s_old_attention_maps(tmp_path):
    # attention_maps as it was when chapter 7 stopped on a GPU: its index and masks on the CPU.
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "ch07_multi30k.py").write_text(
        "def attention_maps(translator, sentence):\n"
        "    src = torch.tensor([ids])\n"
        "    src_mask = torch.ones(1, 1, len(ids), dtype=torch.bool)\n"
        "    ok = torch.ones(1, 1, len(ids), dtype=torch.bool, device=device)\n"
        "    model(src, tgt, src_mask, subsequent_mask(tgt.size(1)))\n"
        "    model(src, tgt, src_mask, subsequent_mask(tgt.size(1)).to(device))\n",
        encoding="utf-8",
    )
    assert tensors_made_without_a_device(tmp_path) == {
        "figures/ch07_multi30k.py:attention_maps": [
            "line 2: torch.tensor",
            "line 3: torch.ones",
            "line 5: subsequent_mask",
        ]
    }


# ---------------------------------------------------------------- precision override, process groups


@pytest.mark.parametrize(
    ("gpus", "capability", "cpu_bf16", "override", "expected"),
    [
        (1, (9, 0), False, "fp16", "fp16"),  # an H100 made to train like a T4
        (1, (9, 0), False, "fp32", "fp32"),
        (0, (8, 0), True, "fp32", "fp32"),
        (0, (8, 0), False, "auto", "fp32"),
    ],
)
def test_annotated_precision_says_what_auto_means(
    machine, monkeypatch, gpus, capability, cpu_bf16, override, expected
):
    machine(gpus=gpus, capability=capability, cpu_bf16=cpu_bf16)
    monkeypatch.setenv(devices.PRECISION_ENV, override)
    device = training_device()
    assert chosen_precision("auto", device) == expected
    assert chosen_precision("bf16", device) == "bf16", "a named precision is kept"
    scaler = LossScaling.for_training("auto", device).scaler
    assert (scaler is not None) == (expected == "fp16")


@pytest.mark.parametrize("override", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("cpu_bf16", [True, False])
def test_a_runs_machine_line_tells_the_hardware_whatever_precision_is_asked(
    machine, monkeypatch, override, cpu_bf16
):
    """A GPU trains under ANNOTATED_PRECISION=fp16, and the budget's machine line describes the
    CPU: asking chosen_precision about the CPU there refused fp16 and stopped chapter 7 (found
    by the whole book on an H200). The line says what the CPU has, not what was asked."""
    from annotated.base.machine import describe

    machine(gpus=1, capability=(7, 5), cpu_bf16=cpu_bf16)
    monkeypatch.setenv(devices.PRECISION_ENV, override)
    assert describe().endswith(f"bf16 hardware: {cpu_bf16}")


def test_a_wrong_annotated_precision_is_refused_with_the_choices(machine, monkeypatch):
    machine()
    monkeypatch.setenv(devices.PRECISION_ENV, "half")
    with pytest.raises(ValueError, match=r"ANNOTATED_PRECISION='half': choose one of auto"):
        chosen_precision("auto", CPU)
    monkeypatch.setenv(devices.PRECISION_ENV, "fp16")
    with pytest.raises(ValueError, match=r"ANNOTATED_PRECISION=fp16 \(float16.*CUDA GPUs"):
        chosen_precision("auto", CPU)


@pytest.mark.parametrize(
    ("gpus", "expected_backend", "expected_device"),
    [(0, "gloo", "cpu"), (1, "gloo", "cpu"), (2, "nccl", "cuda:1")],
)
def test_setup_distributed_joins_the_group_the_machine_allows(
    machine, monkeypatch, capsys, gpus, expected_backend, expected_device
):
    # Process 1 of 2 under torchrun; the process group itself is pretended.
    machine(gpus=gpus)
    for name, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    joined, current = [], [0]
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: current.__setitem__(0, index))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: bool(joined))
    monkeypatch.setattr(
        torch.distributed, "init_process_group", lambda backend, **options: joined.append(backend)
    )
    monkeypatch.setattr(torch.distributed, "get_backend", lambda *args: joined[0])
    monkeypatch.setattr(torch.distributed, "get_rank", lambda *args: 1)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *args: 2)
    assert setup_distributed() == (1, 2)
    assert joined == [expected_backend]
    # The device follows the group: gloo adds up CPU tensors only, even on a machine with a GPU.
    assert str(training_device()) == expected_device
