"""annotated/base/machine.py: one description of the machine, and the load a measurement ran under."""

import re
import time

import pytest
import torch

from annotated.base import machine


def no_sleep(seconds: float) -> None:
    raise AssertionError("without /proc/stat there is no window to wait for")


def timed(before: float, during: list[float], threads: int = 2, wall=100.0, cpu=190.0) -> dict:
    """The conditions a Timing reports for a run with these (simulated) loads, clock and CPU, on a
    machine without /proc/stat (macOS, Windows): the load-average rule."""
    loads = iter([(before,) * 3, (during[-1],) * 3])  # at the start, and at the end
    clock, used = iter([0.0, wall]), iter([0.0, cpu])
    timing = machine.Timing(
        threads,
        every=3600,  # the background sampler never fires: the samples are the ones given
        loadavg=lambda: next(loads),
        clock=lambda: next(clock),
        cpu_seconds=lambda: next(used),
        machine_seconds=lambda: None,  # no /proc/stat
        sleep=no_sleep,
    )
    with timing:
        timing.samples.extend(during[:-1])  # what the sampler would have seen meanwhile
    return timing.conditions()


class Machine:
    """A simulated machine: a clock, this process's CPU seconds, the other processes' (`others`
    cores' worth, from now on), the machine's busy CPU seconds (the sum) and a load average."""

    def __init__(self, others: float, load: float):
        self.now = self.own = self.others_seconds = 0.0
        self.others, self.load = others, load

    def run(self, seconds: float, own: float = 0.0) -> None:
        """`seconds` pass, this process using `own` cores and the others theirs."""
        self.now += seconds
        self.own += own * seconds
        self.others_seconds += self.others * seconds

    def timing(self, threads: int = 2) -> machine.Timing:
        return machine.Timing(
            threads,
            every=3600,  # no background samples: the load average at the start and the end
            loadavg=lambda: (self.load,) * 3,
            clock=lambda: self.now,
            cpu_seconds=lambda: self.own,
            machine_seconds=lambda: self.own + self.others_seconds,
            sleep=self.run,  # the window before the start: this process sleeps
        )


def test_the_machine_is_described_in_one_line_with_its_threads():
    described = machine.describe()
    pattern = r"\S+ .*, \d+ cores, torch \S+, (\d+) threads, bf16 hardware: (True|False)"
    match = re.fullmatch(pattern, described)
    assert match, described
    assert int(match.group(1)) == torch.get_num_threads()


def test_the_cpu_kind_names_its_model_instruction_sets_and_cores():
    kind = machine.cpu_kind()
    assert set(kind) == {"model", "instruction sets", "cores"} and kind["model"]
    assert set(kind["instruction sets"]) <= {"AMX-BF16", "AVX-512", "AVX2"}


def test_an_idle_run_is_clean_and_records_its_cpu_and_share():
    conditions = timed(before=0.12, during=[1.4, 2.3])
    assert conditions["busy"] is False and conditions["why busy"] is None
    assert conditions["idle measured by"] == "load average"
    assert conditions["highest load average during"] == 2.3  # its own two threads
    assert conditions["cpu share"] == 0.95  # 190 CPU seconds over 100 s on 2 threads
    assert conditions["threads"] == 2 and set(conditions["cpu"]) == {
        "model",
        "instruction sets",
        "cores",
    }


@pytest.mark.parametrize(
    ("before", "during", "why"),
    [
        (1.3, [2.0], "load average 1.30 before the start"),
        (0.2, [2.0, 3.6], "load average up to 3.60 while it ran, on 2 thread(s) of its own"),
    ],
)
def test_a_busy_machine_is_named_with_the_reason(before, during, why):
    conditions = timed(before, during)
    assert conditions["busy"] is True and why in conditions["why busy"]


def test_a_run_right_after_a_training_is_not_busy():
    # The training ended seconds ago: the load average still says 1.9, but in the 3 s before the
    # start nothing but the background (0.02 of a core) used the CPU, nor while it ran.
    computer = Machine(others=0.02, load=1.9)
    with computer.timing(threads=2) as timing:
        computer.run(100, own=1.9)
    conditions = timing.conditions()
    assert conditions["busy"] is False and conditions["why busy"] is None, conditions["why busy"]
    assert conditions["idle measured by"] == "cpu time"
    assert conditions["load average before"] == [1.9] * 3  # noted, not judged by
    assert conditions["others' cpu share before"] == 0.02
    assert conditions["others' cpu share during"] == 0.02
    assert conditions["cpu share"] == 0.95  # 190 CPU seconds over 100 s on 2 threads
    assert computer.now == 103  # the window: 3 simulated seconds, not real ones


def test_a_run_beside_a_real_load_is_busy_with_the_reason():
    computer = Machine(others=1.0, load=1.0)  # another process keeps a core busy throughout
    with computer.timing(threads=2) as timing:
        computer.run(100, own=1.0)  # it got one core of its two
    conditions = timing.conditions()
    assert conditions["idle measured by"] == "cpu time" and conditions["busy"] is True
    assert conditions["others' cpu share before"] == conditions["others' cpu share during"] == 1.0
    assert conditions["why busy"] == (
        "other processes used 1.00 cores' worth of CPU in the 3 s before the start "
        "(idle: below 0.25); other processes used 1.00 cores' worth of CPU on average while it "
        "ran (idle: below 0.25)"
    )


def test_a_load_that_starts_only_during_the_run_is_busy():
    computer = Machine(others=0.0, load=0.1)
    with computer.timing(threads=1) as timing:
        computer.run(50, own=1.0)
        computer.others = 1.0  # a test run starts halfway
        computer.run(50, own=1.0)
    conditions = timing.conditions()
    assert conditions["busy"] is True and conditions["others' cpu share before"] == 0.0
    assert conditions["others' cpu share during"] == 0.5  # a core for half the run
    assert conditions["why busy"] == (
        "other processes used 0.50 cores' worth of CPU on average while it ran (idle: below 0.25)"
    )


def test_without_proc_stat_the_load_average_rule_stands_in():
    # The same run right after a training, on a machine whose CPU time cannot be read (macOS,
    # Windows): the load average is all there is, and it still carries the training.
    conditions = timed(before=1.9, during=[2.4])
    assert conditions["idle measured by"] == "load average"
    assert conditions["others' cpu share before"] is None
    assert conditions["others' cpu share during"] is None
    assert conditions["busy"] is True
    assert conditions["why busy"] == "load average 1.90 before the start (idle: below 0.5)"


def test_the_machines_cpu_time_is_read_from_proc_stat(monkeypatch):
    seconds = machine._machine_seconds()
    if seconds is None:
        pytest.skip("no /proc/stat here")
    assert seconds > 0
    import builtins
    import io

    line = "cpu  100 20 30 5000 70 5 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n"
    real_open = builtins.open
    monkeypatch.setattr(
        builtins,
        "open",
        lambda path, *a, **k: (
            io.StringIO(line) if path == "/proc/stat" else real_open(path, *a, **k)
        ),
    )
    ticks = machine.os.sysconf("SC_CLK_TCK")
    # user + nice + system + irq + softirq + steal; not idle, not iowait
    assert machine._machine_seconds() == pytest.approx((100 + 20 + 30 + 5 + 6 + 7) / ticks)


def test_the_sampler_really_samples_while_a_benchmark_runs():
    with machine.Timing(1, every=0.01, window=0.05) as timing:
        time.sleep(0.2)
    assert len(timing.samples) >= 3 and timing.wall >= 0.2
    conditions = timing.conditions()
    assert 0 <= conditions["cpu share"] < 0.5  # it mostly slept
    # What others did here is not known (a benchmark may run), but it was measured.
    expected = "load average" if machine._machine_seconds() is None else "cpu time"
    assert conditions["idle measured by"] == expected
    if expected == "cpu time":
        assert conditions["others' cpu share before"] >= 0
        assert conditions["others' cpu share during"] >= 0


def test_start_and_stop_are_the_with_block():
    timing = machine.Timing(1, every=3600, window=0).start()  # window=0: no look before
    running = timing.conditions()  # the conditions so far, while it runs
    assert running["threads"] == 1 and not hasattr(timing, "wall")
    assert timing.stop()["threads"] == 1 and timing.wall >= 0
