"""A fair share of the CPU: as many torch threads as this process may really use.

PyTorch sizes its thread pool from the cores it can see. On a laptop that is right. On a shared
server it is not: a container limited to 2 CPUs by a cgroup quota still sees all 64 cores, and
thirty students' kernels each starting 64 threads spend their time waiting for each other. So the
book's chapters and commands call `use_fair_threads()`, which counts

* the cores the process may run on (its affinity: `taskset`, a batch system, a Jupyter server's
  CPU pinning), and
* its CPU quota (cgroup v2 `cpu.max`, or cgroup v1 `cpu.cfs_quota_us`: Docker's `--cpus`,
  Kubernetes' CPU limit, a JupyterHub spawner's `cpu_limit`),

and uses the smaller, rounded down, and at least one. `ANNOTATED_THREADS=n` overrides the choice;
so does `OMP_NUM_THREADS`, which torch itself reads, when it is set.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

THREADS_ENV = "ANNOTATED_THREADS"
CGROUP_ROOT = Path("/sys/fs/cgroup")
_chosen: tuple[int, str] | None = None  # what this process chose, said once


def _cgroup_v2_quota(root: Path, own: str) -> float | None:
    """The tightest `cpu.max` on the way from the process's cgroup up to the root, in CPUs."""
    limits = []
    folder = root / own.lstrip("/")
    while True:
        try:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
            if quota != "max":
                limits.append(int(quota) / int(period))
        except (OSError, ValueError):
            pass
        if folder == root or root not in folder.parents:
            break
        folder = folder.parent
    return min(limits) if limits else None


def _cgroup_v1_quota(root: Path, own: str) -> float | None:
    for controller in ("cpu,cpuacct", "cpu"):
        folder = root / controller / own.lstrip("/")
        for candidate in (folder, root / controller):  # inside a container the path is often "/"
            try:
                quota = int((candidate / "cpu.cfs_quota_us").read_text())
                period = int((candidate / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            return quota / period if quota > 0 and period > 0 else None
    return None


def cpu_quota(
    root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")
) -> float | None:
    """The CPUs the process's cgroup may use (1.5 for a quota of one and a half), None if unlimited
    or unknown (not Linux, no cgroup file system)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:  # "hierarchy:controllers:path"
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":
            return _cgroup_v2_quota(root, path)
        if "cpu" in controllers.split(","):
            return _cgroup_v1_quota(root, path)
    return None


def usable_cpus() -> tuple[int, str]:
    """How many CPUs this process may really use, and why: the smaller of affinity and quota."""
    cores = os.cpu_count() or 1
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        allowed = cores
    quota = cpu_quota()
    count = allowed if quota is None else max(1, min(allowed, math.floor(quota)))
    reason = f"{allowed} of {cores} cores allowed"
    reason += "; no CPU quota" if quota is None else f"; a CPU quota of {quota:g}"
    return count, reason


def choose_threads() -> tuple[int, str]:
    """The number of torch threads to use and why ($ANNOTATED_THREADS, $OMP_NUM_THREADS, else the
    usable CPUs)."""
    for variable in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = os.environ.get(variable, "").strip()
        if value:
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"{variable}={value!r}: give a whole number of threads, 1 or more")
            return int(value), f"as {variable} asks"
    count, reason = usable_cpus()
    return count, f"the CPUs this process may use ({reason})"


def use_fair_threads(quiet: bool = False) -> int:
    """Set torch's thread count to `choose_threads()`; say what was chosen, once per process."""
    global _chosen
    import torch

    first = _chosen is None
    _chosen = choose_threads() if first else _chosen
    count, reason = _chosen
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
    if first and not quiet:
        print(f"threads: torch uses {count}, {reason}; set {THREADS_ENV} to choose", flush=True)
    return count
