"""What the training loop needs to run as one of several data-parallel processes (chapter 8).

When `torch.distributed` is not running, a program is process 0 of 1 and these do nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


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
