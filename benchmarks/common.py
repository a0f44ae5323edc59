"""What every benchmark records: the machine it ran on, the load it ran under, and the result
file, written atomically.

A time means something only if nothing else ran on the machine meanwhile (two cores shared with
a test run have made a training twice as slow). So a benchmark runs inside `Timing`, which notes
the load average before it started and the highest one while it ran, and the share of the CPU
the benchmark's processes got. A record taken on a busy machine says so (`"busy": true`, and
why), and `write_results` never lets it replace a clean record: it goes beside it, as
`<name>.busy.json`, with a warning.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from annotated.files import atomic_write
from annotated.runs import machine  # noqa: F401  (the benchmarks import it from here)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
IDLE_LOAD = 0.5  # a 1-minute load average above this before a benchmark: something else runs
EXTRA_LOAD = 0.75  # ... and while it runs, above its own threads by more than this


def cpu_kind() -> dict:
    """The CPU's model and the instruction sets that decide the speed of training here."""
    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    isa = [
        name
        for name, flag in (("AMX-BF16", "amx_bf16"), ("AVX-512", "avx512f"), ("AVX2", "avx2"))
        if flag in flags
    ]
    return {"model": model or "unknown", "instruction sets": isa, "cores": os.cpu_count()}


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (a kernel, a worker)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


class Timing:
    """`with Timing(threads) as timing:` ... `timing.conditions()`: the load a benchmark ran under.

    A background thread samples the 1-minute load average every `every` seconds. The machine
    counts as busy if the load was above IDLE_LOAD before the start, or rose above the
    benchmark's own threads by more than EXTRA_LOAD while it ran.
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


def _is_clean(path: Path) -> bool:
    try:
        timing = json.loads(path.read_text()).get("timing")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(timing, dict) and timing.get("busy") is False


def write_results(name: str, record: dict, quiet: bool = False) -> Path:
    """Write benchmarks/results/<name>.json (atomically) and print it (unless `quiet`).

    A record whose "timing" says the machine was busy never replaces one taken on an idle
    machine: it is written to <name>.busy.json instead, and a warning says so.
    """
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    busy = bool(record.get("timing", {}).get("busy"))
    if busy:
        print(
            f"WARNING: the machine was busy ({record['timing']['why busy']}): the times in this "
            "record are not comparable. Run the benchmark again with nothing else running.",
            file=sys.stderr,
        )
        if _is_clean(path):
            path = path.with_name(f"{name}.busy.json")
            print(
                f"WARNING: {path.name} written; the idle machine's {name}.json is kept.",
                file=sys.stderr,
            )
    with atomic_write(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(record, indent=2) + "\n")
    if not quiet:
        print(json.dumps(record, indent=2))
    return path
