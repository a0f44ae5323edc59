"""The machine a number was measured on, and the load it was measured under.

A training time or a step cost means something only beside the machine that produced it, and only
if nothing else was running meanwhile (two cores shared with a test run have made a training twice
as slow). Chapter 9's Table 3 and the benchmarks in `benchmarks/` describe both with what this
module holds; a run folder's budget names its machine with `describe()` and notes the load
average while its probe ran:

* `describe()`: one line naming the CPU, its cores, torch's version and threads, and whether the
  CPU computes in bf16;
* `cpu_kind()`: the CPU's model and the instruction sets that decide how fast it trains;
* `Timing`: a `with` block that notes the load average before it starts and the highest one while
  it runs, and the share of the CPU its process got; its `conditions()` say whether the machine
  was busy, and why.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from annotated.ch03_training import use_bf16

IDLE_LOAD = 0.5  # a 1-minute load average above this before a measurement: something else runs
EXTRA_LOAD = 0.75  # ... and while it runs, above its own threads by more than this


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:  # not Linux
        return []


def describe() -> str:
    """CPU architecture and model, cores, torch version and threads, bf16 support."""
    model = platform.processor() or ""
    for line in _cpuinfo():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return (
        f"{platform.machine()} {model}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, bf16 hardware: {use_bf16('auto', torch.device('cpu'))}"
    )


def cpu_kind() -> dict:
    """The CPU's model and the instruction sets that decide the speed of training here."""
    model, flags = "", set()
    for line in _cpuinfo():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and not model:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    isa = [
        name
        for name, flag in (("AMX-BF16", "amx_bf16"), ("AVX-512", "avx512f"), ("AVX2", "avx2"))
        if flag in flags
    ]
    return {"model": model or "unknown", "instruction sets": isa, "cores": os.cpu_count()}


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (a kernel, a worker)."""
    try:
        import resource
    except ImportError:  # Windows: this process only
        return time.process_time()
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class Timing:
    """`with Timing(threads) as timing:` ... `timing.conditions()`: the load a measurement ran under.

    A background thread samples the 1-minute load average every `every` seconds. The machine
    counts as busy if the load was above IDLE_LOAD before the start, or rose above the
    measurement's own threads by more than EXTRA_LOAD while it ran.
    """

    def __init__(
        self,
        threads: int,
        every: float = 10.0,
        loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg,
        clock: Callable[[], float] = time.perf_counter,
        cpu_seconds: Callable[[], float] = _cpu_seconds,
    ) -> None:
        self.threads, self.every = threads, every
        self.loadavg, self.clock, self.cpu_seconds = loadavg, clock, cpu_seconds
        self.samples: list[float] = []
        self._stop = threading.Event()

    def __enter__(self) -> Timing:
        self.before = self.loadavg()
        self.started, self.cpu_started = self.clock(), self.cpu_seconds()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(self.loadavg()[0])

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join()
        self.samples.append(self.loadavg()[0])
        self.wall, self.cpu = self.clock() - self.started, self.cpu_seconds() - self.cpu_started

    def start(self) -> Timing:
        """The same as entering a `with` block, for a benchmark's main function."""
        return self.__enter__()

    def stop(self) -> dict:
        """End the timing and return its `conditions()`."""
        self.__exit__(None, None, None)
        return self.conditions()

    def conditions(self) -> dict:
        """CPU, threads, load before and during, CPU share, and whether the machine was busy."""
        if hasattr(self, "wall"):
            wall, cpu = self.wall, self.cpu
        else:  # still running: the conditions so far (a benchmark that records as it goes)
            wall, cpu = self.clock() - self.started, self.cpu_seconds() - self.cpu_started
        during = max(self.samples, default=self.before[0])
        reasons = []
        if self.before[0] > IDLE_LOAD:
            reasons.append(
                f"load average {self.before[0]:.2f} before the start (idle: below {IDLE_LOAD})"
            )
        if during > self.threads + EXTRA_LOAD:
            reasons.append(
                f"load average up to {during:.2f} while it ran, on {self.threads} thread(s) of its own"
            )
        return {
            "cpu": cpu_kind(),
            "threads": self.threads,
            "load average before": [round(x, 2) for x in self.before],
            "highest load average during": round(during, 2),
            "cpu share": round(cpu / max(wall, 1e-9) / self.threads, 2),
            "busy": bool(reasons),
            "why busy": "; ".join(reasons) or None,
        }
