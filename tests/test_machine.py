"""annotated/machine.py: one description of the machine, and the load a measurement ran under."""

import re
import time

import pytest
import torch

from annotated import machine


def timed(before: float, during: list[float], threads: int = 2, wall=100.0, cpu=190.0) -> dict:
    """The conditions a Timing reports for a run with these (simulated) loads, clock and CPU."""
    loads = iter([(before,) * 3, (during[-1],) * 3])  # at the start, and at the end
    clock, used = iter([0.0, wall]), iter([0.0, cpu])
    timing = machine.Timing(
        threads,
        every=3600,  # the background sampler never fires: the samples are the ones given
        loadavg=lambda: next(loads),
        clock=lambda: next(clock),
        cpu_seconds=lambda: next(used),
    )
    with timing:
        timing.samples.extend(during[:-1])  # what the sampler would have seen meanwhile
    return timing.conditions()


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


def test_the_sampler_really_samples_while_a_benchmark_runs():
    with machine.Timing(1, every=0.01) as timing:
        time.sleep(0.2)
    assert len(timing.samples) >= 3 and timing.wall >= 0.2
    assert 0 <= timing.conditions()["cpu share"] < 0.5  # it mostly slept


def test_start_and_stop_are_the_with_block():
    timing = machine.Timing(1, every=3600).start()
    running = timing.conditions()  # the conditions so far, while it runs
    assert running["threads"] == 1 and not hasattr(timing, "wall")
    assert timing.stop()["threads"] == 1 and timing.wall >= 0
