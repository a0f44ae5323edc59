"""annotated/ddp_check.py: one side of chapter 8's data-parallel check. Alone, it trains the small
float64 model on its synthetic pairs and reports what ran; under torchrun, no gloo thread of its
process group outlives the teardown. (Two processes against one, the check itself, is chapter 8's
`ddp_check`: tests/test_ch08_wmt.py.)"""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from command_line import ROOT


@pytest.mark.skipif(
    not Path("/proc/self/task").exists(), reason="thread names come from Linux /proc"
)
@pytest.mark.slow
def test_no_gloo_thread_outlives_teardown(tmp_path):
    # The cause of a rare abort at exit: a process group kept alive past destroy_process_group
    # (by torch._dynamo, imported by DDP after the group existed) whose threads ran on to exit.
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", "annotated.ddp_check", "--out", str(tmp_path / "out.pt"), "--steps", "2"]
    result = subprocess.run(
        [*command, "--report-threads"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # (rank, thread names), read so that two reports run together on one line still count as two
    reports = re.findall(
        r"rank (\d) threads after teardown:(.*?)(?=rank \d threads after|$)", result.stdout, re.M
    )
    assert sorted(rank for rank, _ in reports) == ["0", "1"], result.stdout
    for rank, names in reports:
        assert "gloo" not in names, f"rank {rank}: {names}"
