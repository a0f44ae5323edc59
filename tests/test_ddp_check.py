"""annotated/ddp_check.py: one side of chapter 8's data-parallel check. Alone, it trains the small
float64 model on its synthetic pairs and reports what ran; under torchrun, no gloo thread of its
process group outlives the teardown. (Two processes against one, the check itself, is chapter 8's
`ddp_check`: tests/test_ch08_wmt.py.)"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from command_line import ROOT

from annotated.base.checkpoints import read_checkpoint
from annotated.base.devices import DEVICE_ENV, training_device
from annotated.ddp_check import VOCAB, main, synthetic_pairs


def test_the_synthetic_pairs_reverse_their_source_and_come_again_for_a_seed():
    pairs = synthetic_pairs(50, seed=3)
    assert len(pairs) == 50 and pairs == synthetic_pairs(50, seed=3)
    assert pairs != synthetic_pairs(50, seed=4)
    words = set(VOCAB.encode([f"w{i}" for i in range(16)]))
    assert len(words) == 16 and VOCAB.unk not in words
    for source, target in pairs:
        assert source[-1] == VOCAB.specials.eos and target == source[:-1][::-1]
        assert 3 <= len(target) <= 11 and set(target) <= words


def test_alone_it_trains_its_steps_in_float64_and_reports_what_ran(tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", DEVICE_ENV):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "out.pt"
    assert main(["--out", str(out), "--steps", "2", "--accumulate", "2"]) == 0
    state = read_checkpoint(out)
    assert state["step"] == 2 and [row["step"] for row in state["history"]] == [1, 2]
    assert state["train_config"]["accumulate"] == 2
    assert state["model_config"]["p_drop"] == 0.0  # dropout off: both sides draw alike
    weights = [t for t in state["model"].values() if t.is_floating_point()]
    assert weights and all(t.dtype == torch.float64 for t in weights)
    report = json.loads(out.with_suffix(".json").read_text())
    assert report == {"backend": None, "device": training_device().type, "processes": 1}


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
