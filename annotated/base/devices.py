"""Where a model trains and in which arithmetic: the device, the precision, float16's loss scaling.

Chapter 3 explains the choices; this module makes them.

* `training_device`: the first of a CUDA GPU (the current one, which chapter 8's processes each
  set), Apple's MPS and the CPU that this machine has; processes joined by gloo (chapter 8: no
  GPU, or fewer GPUs than processes) share out the CPU, since gloo adds up only CPU tensors.
  `ANNOTATED_DEVICE` (`cpu`, `cuda`, `cuda:1`, `mps`) overrides the choice; a device the machine
  lacks is refused, with the list of those it has.
* `chosen_precision`: what a `TrainConfig.precision` means on a device. "auto" is bfloat16
  autocast where the hardware computes in bfloat16 itself (a CUDA GPU of compute capability 8.0 or
  later, a CPU with AVX-512-BF16), float16 autocast with loss scaling on an older CUDA GPU, and
  float32 anywhere else; "bf16", "fp16" and "fp32" ask for one (float16 only on a CUDA GPU).
  `ANNOTATED_PRECISION` says what "auto" means instead, for every run of a process: to see, say,
  what a GPU without bfloat16 trains like on one that has it.
* `LossScaling`: float16's gradient scaler, or nothing; chapter 3's `train_step` multiplies the
  loss and steps the optimizer through it, and a training checkpoint keeps its state.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from annotated.base.distributed import gloo_processes, rank_and_world

DEVICE_ENV = "ANNOTATED_DEVICE"
PRECISION_ENV = "ANNOTATED_PRECISION"
PRECISIONS = ("auto", "bf16", "fp16", "fp32")


def available_devices() -> list[str]:
    """The devices this machine can train on, named as $ANNOTATED_DEVICE names them."""
    names = []
    if torch.cuda.is_available():
        names += [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        names.append("mps")
    return [*names, "cpu"]


def training_device() -> torch.device:
    """The device $ANNOTATED_DEVICE names, else the current CUDA GPU (chapter 8 sets which one
    each process uses), else Apple's MPS, else the CPU."""
    named = os.environ.get(DEVICE_ENV, "").strip()
    if named:
        return named_device(named)
    # Processes joined by gloo (chapter 8's setup_distributed chooses it where the GPUs are fewer
    # than the processes) add up CPU tensors only.
    if torch.cuda.is_available() and not gloo_processes():
        return torch.device("cuda", torch.cuda.current_device())
    if torch.backends.mps.is_available() and rank_and_world()[1] == 1:
        return torch.device("mps")
    return torch.device("cpu")


def named_device(name: str) -> torch.device:
    """The device `name` ("cuda" alone: the current GPU), or a clear error if it is not here."""
    try:
        device = torch.device(name)
    except RuntimeError:  # not a device's name at all ("gpu")
        device = None
    if device is not None and device.type in ("cpu", "mps"):
        device = torch.device(device.type)
    cuda_alone = device is not None and device.type == "cuda" and device.index is None
    if cuda_alone and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    available = available_devices()
    if device is None or str(device) not in available:
        raise ValueError(
            f"{DEVICE_ENV}={name!r} is not a device this machine has; it has "
            f"{', '.join(available)}. Set {DEVICE_ENV} to one of these, or unset it to let the "
            "book choose (a CUDA GPU, else Apple's MPS, else the CPU)."
        )
    return device


def has_bf16_arithmetic(device: torch.device) -> bool:
    """Whether `device` computes in bfloat16 in hardware, not by emulating it."""
    if device.type == "cuda":
        # torch.cuda.is_bf16_supported() also answers yes where bfloat16 is only emulated, as on
        # a T4 (capability 7.5), which then runs slower than in float32. Ampere (8.0) has it.
        return torch.cuda.get_device_capability(device) >= (8, 0)
    if device.type == "cpu":
        probe = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
        return bool(probe())
    # MPS: bfloat16 autocast there depends on the macOS and PyTorch versions, and no cheap check
    # says whether both are recent enough short of running (and perhaps failing in) an operation.
    # float32 is right on every Mac; precision="bf16" still asks for bfloat16.
    return False


def chosen_precision(precision: str, device: torch.device) -> str:
    """What `precision` ("auto", "bf16", "fp16" or "fp32") means on `device`: bf16, fp16 or fp32.

    "auto" is bf16 where the hardware has it, fp16 on a CUDA GPU without it, else fp32, unless
    $ANNOTATED_PRECISION names one. A named precision is kept, but fp16 is refused off CUDA: its
    loss scaling is written for CUDA GPUs.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    override = os.environ.get(PRECISION_ENV, "").strip()
    if override and override not in PRECISIONS:
        raise ValueError(
            f"{PRECISION_ENV}={override!r}: choose one of {', '.join(PRECISIONS)}, or unset it"
        )
    asked = f"precision={precision!r}"
    if precision == "auto" and override:
        precision, asked = override, f"{PRECISION_ENV}={override}"
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(
            f"{asked} (float16 with loss scaling) is for CUDA GPUs; this model is on "
            f"{device}: use 'auto', 'bf16' or 'fp32'"
        )
    if precision != "auto":
        return precision
    if has_bf16_arithmetic(device):
        return "bf16"
    return "fp16" if device.type == "cuda" else "fp32"


class LossScaling:
    """float16's loss scaling (`torch.amp.GradScaler`) around a training step, else nothing.

    float16 has 5 exponent bits against bfloat16's and float32's 8, so small gradients would round
    to zero. The loss is multiplied by a large factor before the backward pass and the gradients
    divided by it before the optimizer step; a step whose gradients overflowed is skipped and the
    factor halved, and after 2000 steps without an overflow the factor doubles.
    """

    def __init__(self, scaler: torch.amp.GradScaler | None = None) -> None:
        self.scaler = scaler

    @classmethod
    def for_training(cls, precision: str, device: torch.device) -> LossScaling:
        """A scaler where `precision` means float16 on `device`; none for bf16 or fp32."""
        if chosen_precision(precision, device) == "fp16":
            return cls(torch.amp.GradScaler(device.type))
        return cls()

    def scale(self, loss: Tensor) -> Tensor:
        """The loss to call backward() on."""
        return loss if self.scaler is None else self.scaler.scale(loss)

    def unscale(self, optimizer: torch.optim.Optimizer) -> bool:
        """Divide the gradients back; False if they overflowed (then skip the optimizer step)."""
        if self.scaler is None:
            return True
        before = self.scaler.get_scale()
        self.scaler.unscale_(optimizer)
        self.scaler.update()  # lowers the factor if and only if a gradient was inf or NaN
        return self.scaler.get_scale() >= before

    def saved(self) -> dict:
        """The entries a training checkpoint keeps ({} without a scaler)."""
        return {} if self.scaler is None else {"scaler": self.scaler.state_dict()}

    def restore(self, checkpoint: dict) -> None:
        """Put back the scaler's state from a checkpoint's contents; one saved without a scaler
        (before float16 existed here, or by a run in another precision) leaves it as it is."""
        if self.scaler is not None and checkpoint.get("scaler"):
            self.scaler.load_state_dict(checkpoint["scaler"])
