"""What the training loop needs to run as one of several data-parallel processes (chapter 8).

When `torch.distributed` is not running, a program is process 0 of 1 and these do nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def cuda_gpus() -> int:
    """How many CUDA GPUs this machine has (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def process_group_backend(processes: int, gpus: int, named_device: str = "") -> str:
    """How `processes` processes on one machine with `gpus` CUDA GPUs add up their numbers.

    nccl, one GPU a process, where there are as many GPUs as processes; gloo, on the CPU, where
    there are fewer (or none), or where `named_device` ($ANNOTATED_DEVICE) names a device other
    than a GPU. A GPU named while the GPUs are too few is refused: nccl cannot share one GPU
    between processes.
    """
    named = named_device.strip()
    if named and not named.startswith("cuda"):
        return "gloo"
    if gpus >= processes:
        return "nccl" if gpus else "gloo"
    if named:
        raise ValueError(
            f"ANNOTATED_DEVICE={named} asks for GPUs, but the {processes} processes on this machine "
            f"would share {gpus}: nccl needs one GPU a process. Start at most {gpus} "
            f"(--nproc_per_node={gpus}), or set ANNOTATED_DEVICE=cpu to train on the CPU with gloo."
        )
    return "gloo"


def gloo_processes() -> bool:
    """Whether this process is one of a group joined by gloo, which adds up CPU tensors only."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo"


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of processes: (0, 1) unless torch.distributed runs."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def sum_over_processes(values: Sequence[float], device: torch.device) -> list[float]:
    """Each value summed over all processes (the values themselves when there is one)."""
    if rank_and_world()[1] == 1:
        return list(values)
    summed = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(summed)
    return summed.tolist()


def data_parallel(model: torch.nn.Module) -> torch.nn.Module:
    """`model` wrapped in DistributedDataParallel when several processes train it, else `model`
    itself. Its buffers are not broadcast before each step: the book's models hold only the
    sinusoid tables, which every process computes alike."""
    if rank_and_world()[1] == 1:
        return model
    return torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)
