"""What one student needs for each chapter on a class server: CPU time, memory and disk, measured.

    python -m benchmarks.bench_class [--profile class] [--threads 1] [--chapters ch07_multi30k ...]
    (`make class-resources`)

Each chapter's notebook is executed from a fresh kernel, as a student would run it, with the
profile a class sets for every chapter (ANNOTATED_PROFILE=class: chapter 7's 15-minute run,
chapter 8's smoke run, chapter 9's recorded table), one torch thread (a student's share of a
shared server), runs written to a scratch folder and the data read from $ANNOTATED_DATA_DIR. For
each chapter the record keeps the CPU time the kernel used (user + system: what a class of n
students costs a server is n times this), the wall time, the kernel's peak memory (resident set),
and the disk its runs took. Writes benchmarks/results/class.json. CPU time and memory hardly
depend on what else runs; the wall time does, so the record carries the load as well.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS_DIR, Timing, describe, read_json_object, write_results
from tools.chapters import chapter_sources

# Run in a child process: execute one notebook, then report what its kernel used.
EXECUTE_ONE = """
import json, resource, sys, time
import jupytext
from nbclient import NotebookClient
notebook = jupytext.read(sys.argv[1])  # the chapter's source, as its notebook would run it
started = time.perf_counter()
NotebookClient(notebook, timeout=3 * 3600, kernel_name="python3",
               resources={"metadata": {"path": sys.argv[2]}}).execute()
wall = time.perf_counter() - started
used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the kernel, ended and waited for
print(json.dumps({"wall": wall, "cpu": used.ru_utime + used.ru_stime, "rss_kb": used.ru_maxrss}))
"""


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def measure(source: Path, profile: str, threads: int, scratch: Path) -> dict:
    """Execute one chapter's notebook in a fresh kernel; its CPU, wall time, memory and disk."""
    runs, work = scratch / "runs", scratch / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        ANNOTATED_PROFILE=profile,
        ANNOTATED_THREADS=str(threads),
        ANNOTATED_RUNS_DIR=str(runs),
    )
    result = subprocess.run(
        [sys.executable, "-c", EXECUTE_ONE, str(source), str(work)],
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{source.name} failed:\n{result.stderr[-4000:]}")
    used = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        "cpu minutes": round(used["cpu"] / 60, 2),
        "wall minutes": round(used["wall"] / 60, 2),
        "peak memory MB": round(used["rss_kb"] / 1024),  # Linux reports kilobytes
        "runs disk MB": round(folder_size(runs) / 1e6, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="class")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chapters", nargs="*", default=None, help="default: every chapter")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)  # what describe() reports
    chosen = args.chapters
    sources = [s for s in chapter_sources() if chosen is None or s.stem in chosen]
    path = RESULTS_DIR / "class.json"
    earlier = read_json_object(path)
    same = earlier.get("profile") == args.profile and earlier.get("threads") == args.threads
    chapters = dict(earlier.get("chapters", {})) if same else {}  # a subset updates its own
    timing = Timing(args.threads).start()
    for source in sources:
        with tempfile.TemporaryDirectory() as scratch:
            chapters[source.stem] = measure(source, args.profile, args.threads, Path(scratch))
        print(source.stem, chapters[source.stem], flush=True)
        record = {  # rewritten after every chapter: a stopped measurement keeps what it has
            "benchmark": "what one student needs per chapter (each notebook from a fresh kernel)",
            "profile": args.profile,
            "threads": args.threads,
            "machine": describe(),
            "measured at": time.strftime("%Y-%m-%d %H:%M"),
            "timing": timing.conditions(),  # the whole measurement's, so far
            "chapters": dict(sorted(chapters.items())),
            "total cpu minutes": round(sum(c["cpu minutes"] for c in chapters.values()), 1),
        }
        write_results("class", record, quiet=True)
    timing.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
