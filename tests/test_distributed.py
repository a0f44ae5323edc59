"""annotated/base/distributed.py: a process alone is process 0 of 1 and trains as it would without
torch.distributed; processes in a group learn their rank and number from it, add up their numbers
and train one model wrapped in DistributedDataParallel; and the backend that joins them, nccl or
gloo, for the machine's GPUs."""

import pytest

from annotated.base.distributed import process_group_backend


@pytest.mark.parametrize(
    ("processes", "gpus", "named", "expected"),
    [
        (2, 0, "", "gloo"),  # no GPU
        (1, 0, "", "gloo"),
        (2, 1, "", "gloo"),  # one GPU and two processes: nccl cannot share it
        (2, 2, "", "nccl"),  # a GPU a process
        (1, 4, "", "nccl"),
        (2, 2, "cpu", "gloo"),  # the CPU named, whatever the machine has
        (2, 2, "cuda", "nccl"),
    ],
)
def test_the_process_group_backend(processes, gpus, named, expected):
    assert process_group_backend(processes, gpus, named) == expected


def test_a_gpu_named_for_more_processes_than_gpus_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match=r"nproc_per_node=1.*ANNOTATED_DEVICE=cpu"):
        process_group_backend(2, 1, "cuda")
