"""The machine a number was measured on, and the load it was measured under.

A training time or a step cost means something only beside the machine that produced it, and only
if nothing else was running meanwhile (two cores shared with a test run have made a training twice
as slow). Chapter 9's Table 3 and the benchmarks in `benchmarks/` describe both with what this
module holds; a run folder's budget names its machine with `describe()` and notes the load
average while its probe ran:

* `describe()`: one line naming the CPU, its cores, torch's version and threads, and whether the
  CPU computes in bf16;
* `cpu_kind()`: the CPU's model and the instruction sets that decide how fast it trains;
* `Timing`: a `with` block that measures what other processes do with the CPU for a few seconds
  before it starts and while it runs, notes the load averages too, and the share of the CPU its
  process got; its `conditions()` say whether the machine was busy, and why.

How idleness is judged: by CPU time, not by the load average. The 1-minute load average is an
average over the last minutes (it decays by e^(-5/60) every 5 s), so a training that ended 30 s
ago still shows as a load of about 1.2 on two cores: a benchmark started right after
`make train-multi30k` would be called busy for what just ended. The kernel's count of the CPU time
all processes used (`/proc/stat`) says what is happening now: over a 3 s window before the start,
and over the run, the machine's busy CPU seconds less this process's own are what the others
used. Where there is no `/proc/stat` (macOS, Windows), the load-average rule stands in, and the
record says so (`"idle measured by": "load average"`).
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from annotated.base.devices import has_bf16_arithmetic

# Where /proc/stat can be read: other processes' CPU time, in cores' worth (CPU seconds per second).
# An idle machine's background (the shell, sshd, systemd, an idle Jupyter kernel) uses a few
# hundredths of a core; a training, a test run or a notebook uses a whole core or more. A quarter
# of a core sits far above the first and far below the second, and is still what matters: shared
# with a two-thread benchmark on two cores, a quarter core slows it by about an eighth.
OTHERS_IDLE = 0.25  # others used more than this in the window before the start: busy
OTHERS_DURING = 0.25  # ... or more than this on average while it ran: busy
WINDOW = 3.0  # seconds of others' CPU time looked at before the start (this process sleeps)

# Where it cannot (macOS, Windows): the 1-minute load average, which lags by a minute.
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
        f"{torch.get_num_threads()} threads, bf16 hardware: {has_bf16_arithmetic(torch.device('cpu'))}"
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


def _machine_seconds() -> float | None:
    """Busy CPU seconds of all the machine's processes since boot, from /proc/stat (Linux).

    The first line is "cpu  user nice system idle iowait irq softirq steal guest guest_nice", in
    clock ticks of 1/CLK_TCK s. Busy is user + nice + system + irq + softirq + steal: steal is CPU
    a hypervisor gave to another machine, which slows a measurement as much (guest time is already
    inside user and nice; idle and iowait are not busy). None where there is no /proc/stat.
    """
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, AttributeError, ValueError):  # not Linux (Windows has no os.sysconf)
        return None
    if not fields or fields[0] != "cpu":
        return None
    counts = [int(x) for x in fields[1:9]] + [0] * (9 - len(fields))  # old kernels: no steal
    user, nice, system, _idle, _iowait, irq, softirq, steal = counts[:8]
    return (user + nice + system + irq + softirq + steal) / ticks


class Timing:
    """`with Timing(threads) as timing:` ... `timing.conditions()`: the load a measurement ran under.

    Idleness is judged by CPU time where the machine's can be read (`machine_seconds`, by default
    /proc/stat's): before the start, this process sleeps `window` seconds while it notes the CPU
    seconds the machine's processes used, less its own; more than OTHERS_IDLE cores' worth means
    something else runs. At the end, the machine's busy CPU seconds over the run, less this
    process's and its finished children's (`cpu_seconds`), are what the others used; more than
    OTHERS_DURING cores' worth on average means they shared the CPU with it. Not the load average:
    it lags by a minute, and would call a machine busy for a training that ended 30 s ago.

    The load averages are noted all the same (a background thread samples the 1-minute one every
    `every` seconds), and where the machine's CPU time cannot be read (`machine_seconds` returns
    None: macOS, Windows) they decide, as they did before: busy if the load was above IDLE_LOAD
    before the start, or rose above the measurement's own threads by more than EXTRA_LOAD while it
    ran. `window=0` skips the look before the start. The clock, the sleep and the readers are
    arguments so that tests can simulate a machine.
    """

    def __init__(
        self,
        threads: int,
        every: float = 10.0,
        loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg,
        clock: Callable[[], float] = time.perf_counter,
        cpu_seconds: Callable[[], float] = _cpu_seconds,
        machine_seconds: Callable[[], float | None] = _machine_seconds,
        window: float = WINDOW,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.threads, self.every = threads, every
        self.loadavg, self.clock, self.cpu_seconds = loadavg, clock, cpu_seconds
        self.machine_seconds, self.window, self.sleep = machine_seconds, window, sleep
        self.samples: list[float] = []
        self.others_before: float | None = None  # cores' worth, in the window before the start
        self._stop = threading.Event()

    def _look_before(self) -> float | None:
        """Others' CPU use, in cores' worth, over `window` seconds while this process sleeps."""
        machine = self.machine_seconds()
        if machine is None or self.window <= 0:
            return None
        own, started = self.cpu_seconds(), self.clock()
        self.sleep(self.window)
        machine_after, own_after, elapsed = (
            self.machine_seconds(),
            self.cpu_seconds(),
            self.clock() - started,
        )
        if machine_after is None or elapsed <= 0:
            return None
        others = (machine_after - machine) - (own_after - own)
        return max(others, 0.0) / elapsed

    def __enter__(self) -> Timing:
        self.others_before = self._look_before()
        self.before = self.loadavg()
        self.started, self.cpu_started = self.clock(), self.cpu_seconds()
        self.machine_started = self.machine_seconds()
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
        self.machine = self._machine_since_start()

    def _machine_since_start(self) -> float | None:
        """The machine's busy CPU seconds since the start; None if they cannot be read."""
        now = self.machine_seconds() if self.machine_started is not None else None
        return None if now is None else now - self.machine_started

    def start(self) -> Timing:
        """The same as entering a `with` block, for a benchmark's main function."""
        return self.__enter__()

    def stop(self) -> dict:
        """End the timing and return its `conditions()`."""
        self.__exit__(None, None, None)
        return self.conditions()

    def conditions(self) -> dict:
        """CPU, threads, others' CPU use and load before and during, CPU share, and whether the
        machine was busy (and why)."""
        if hasattr(self, "wall"):
            wall, cpu, machine = self.wall, self.cpu, self.machine
        else:  # still running: the conditions so far (a benchmark that records as it goes)
            wall, cpu = self.clock() - self.started, self.cpu_seconds() - self.cpu_started
            machine = self._machine_since_start()
        others_during = None if machine is None else max(machine - cpu, 0.0) / max(wall, 1e-9)
        during = max(self.samples, default=self.before[0])
        by_cpu_time = others_during is not None
        reasons = []
        if by_cpu_time:
            if self.others_before is not None and self.others_before > OTHERS_IDLE:
                reasons.append(
                    f"other processes used {self.others_before:.2f} cores' worth of CPU in the "
                    f"{self.window:g} s before the start (idle: below {OTHERS_IDLE})"
                )
            if others_during > OTHERS_DURING:
                reasons.append(
                    f"other processes used {others_during:.2f} cores' worth of CPU on average "
                    f"while it ran (idle: below {OTHERS_DURING})"
                )
        else:  # no /proc/stat: the lagging load average is all there is
            if self.before[0] > IDLE_LOAD:
                reasons.append(
                    f"load average {self.before[0]:.2f} before the start (idle: below {IDLE_LOAD})"
                )
            if during > self.threads + EXTRA_LOAD:
                reasons.append(
                    f"load average up to {during:.2f} while it ran, "
                    f"on {self.threads} thread(s) of its own"
                )
        return {
            "cpu": cpu_kind(),
            "threads": self.threads,
            "load average before": [round(x, 2) for x in self.before],
            "highest load average during": round(during, 2),
            "cpu share": round(cpu / max(wall, 1e-9) / self.threads, 2),
            "others' cpu share before": (
                None if self.others_before is None else round(self.others_before, 2)
            ),
            "others' cpu share during": None if others_during is None else round(others_during, 2),
            "idle measured by": "cpu time" if by_cpu_time else "load average",
            "busy": bool(reasons),
            "why busy": "; ".join(reasons) or None,
        }
