"""annotated/base/threads.py: torch gets as many threads as the process may really use."""

import os
import subprocess
import sys

import pytest
import torch

from annotated.base import threads
from annotated.base.threads import THREADS_ENV, choose_threads, cpu_quota, use_fair_threads


def cgroup(tmp_path, own, files):
    """A fake cgroup file system: `files` maps paths under its root to their text."""
    root = tmp_path / "cgroup"
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(own)
    return root, proc


def test_cgroup_v2_quotas_in_cpus_the_tightest_on_the_way_up(tmp_path):
    root, proc = cgroup(tmp_path, "0::/hub/alice\n", {"hub/alice/cpu.max": "150000 100000\n"})
    assert cpu_quota(root, proc) == 1.5
    root, proc = cgroup(
        tmp_path / "b",
        "0::/hub/alice\n",
        {"hub/alice/cpu.max": "max 100000\n", "hub/cpu.max": "400000 100000\n"},
    )
    assert cpu_quota(root, proc) == 4.0  # the student's own has none; the class's applies
    root, proc = cgroup(tmp_path / "c", "0::/\n", {"cpu.max": "max 100000\n"})
    assert cpu_quota(root, proc) is None


def test_cgroup_v1_quotas_and_no_cgroups_at_all(tmp_path):
    root, proc = cgroup(
        tmp_path,
        "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n",
        {"cpu,cpuacct/cpu.cfs_quota_us": "200000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert cpu_quota(root, proc) == 2.0  # the container sees its own cgroup as the root
    root, proc = cgroup(
        tmp_path / "b",
        "4:cpu,cpuacct:/\n",
        {"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert cpu_quota(root, proc) is None
    assert cpu_quota(tmp_path / "none", tmp_path / "no-such-file") is None  # macOS, Windows


def test_a_quota_caps_the_threads_below_the_cores(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _: set(range(64)), raising=False)
    monkeypatch.setattr(threads, "cpu_quota", lambda: 2.5)
    assert choose_threads() == (
        2,
        "the CPUs this process may use (64 of 64 cores allowed; a CPU quota of 2.5)",
    )
    monkeypatch.setattr(threads, "cpu_quota", lambda: 0.5)
    assert choose_threads()[0] == 1  # half a CPU still gets one thread
    monkeypatch.setattr(threads, "cpu_quota", lambda: None)
    assert choose_threads()[0] == 64


def test_the_environment_overrides_and_a_bad_value_says_what_to_give(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert choose_threads() == (3, "as OMP_NUM_THREADS asks")
    monkeypatch.setenv(THREADS_ENV, "1")
    assert choose_threads() == (1, f"as {THREADS_ENV} asks")
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(ValueError, match="whole number of threads"):
            choose_threads()


CHILD = (
    "from annotated.base.threads import use_fair_threads\n"
    "import torch\n"
    "use_fair_threads(); use_fair_threads()\n"
    "print(torch.get_num_threads())\n"
)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this system")
def test_a_process_pinned_to_one_core_uses_one_thread_and_says_so_once():
    env = {k: v for k, v in os.environ.items() if k not in (THREADS_ENV, "OMP_NUM_THREADS")}
    core = min(os.sched_getaffinity(0))
    result = subprocess.run(
        [sys.executable, "-c", CHILD],
        preexec_fn=lambda: os.sched_setaffinity(0, {core}),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[-1] == "1"
    assert [x for x in lines if x.startswith("threads:")] == [
        f"threads: torch uses 1, the CPUs this process may use (1 of {os.cpu_count()} cores "
        f"allowed; {'no CPU quota' if cpu_quota() is None else f'a CPU quota of {cpu_quota():g}'}); "
        f"set {THREADS_ENV} to choose"
    ]


def test_use_fair_threads_sets_torch(monkeypatch, capsys):
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_chosen", None)
    monkeypatch.setenv(THREADS_ENV, "1")
    try:
        assert use_fair_threads() == 1 and torch.get_num_threads() == 1
        assert capsys.readouterr().out.startswith("threads: torch uses 1, as ANNOTATED_THREADS")
    finally:
        torch.set_num_threads(before)  # the setting is global to the process
