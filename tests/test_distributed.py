"""annotated/base/distributed.py: a process alone is process 0 of 1 and trains as it would without
torch.distributed; processes in a group learn their rank and number from it, add up their numbers
and train one model wrapped in DistributedDataParallel; and the backend that joins them, nccl or
gloo, for the machine's GPUs."""

import json
import os
import subprocess
import sys

import pytest
import torch
from command_line import ROOT

from annotated.base.distributed import (
    cuda_gpus,
    data_parallel,
    gloo_processes,
    process_group_backend,
    rank_and_world,
    sum_over_processes,
)

CPU = torch.device("cpu")


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


# ---------------------------------------------------------------- one process, or a group


def test_a_process_alone_is_process_0_of_1_and_trains_as_without_torch_distributed():
    assert not torch.distributed.is_initialized()
    assert rank_and_world() == (0, 1) and not gloo_processes()
    assert sum_over_processes((1.5, -2.0), CPU) == [1.5, -2.0]
    model = torch.nn.Linear(2, 3)
    assert data_parallel(model) is model


@pytest.mark.parametrize(
    ("available", "count", "expected"), [(True, 2, 2), (False, 2, 0), (False, 0, 0)]
)
def test_gpus_are_counted_only_where_cuda_works(monkeypatch, available, count, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    assert cuda_gpus() == expected


# Each of two processes under torchrun reports, in one line of JSON, what the module tells it.
TWO_PROCESSES = """
import json
from pathlib import Path

import torch
import torch._dynamo  # before the group, as chapter 8's setup_distributed does

from annotated.base.distributed import (
    data_parallel, gloo_processes, rank_and_world, sum_over_processes
)

torch.distributed.init_process_group("gloo")
rank, world = rank_and_world()
summed = sum_over_processes([rank + 1.0, 0.25], torch.device("cpu"))
wrapped = type(data_parallel(torch.nn.Linear(2, 3))).__name__
line = {"rank": rank, "world": world, "gloo": gloo_processes(), "summed": summed, "model": wrapped}
torch.distributed.barrier()
torch.distributed.destroy_process_group()
# A file per process: two processes printing to one pipe can run their lines together.
Path(__file__).with_name(f"rank-{rank}.json").write_text(json.dumps(line))
"""


@pytest.mark.slow
def test_two_gloo_processes_know_their_ranks_add_up_their_numbers_and_wrap_the_model(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(TWO_PROCESSES)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [*command, str(script)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("rank-*.json"))]
    assert sorted(line["rank"] for line in lines) == [0, 1], result.stdout + result.stderr[-3000:]
    for line in lines:
        assert line["world"] == 2 and line["gloo"], line
        assert line["summed"] == [3.0, 0.5], line  # 1 + 2, and 0.25 twice
        assert line["model"] == "DistributedDataParallel", line
