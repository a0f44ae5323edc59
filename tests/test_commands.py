"""Every command the book documents starts and describes itself: a test runs each one's `--help`.

The commands are found where a reader meets them, in the README, the chapters, the course page
and the Makefile, so a command renamed, moved or broken at import fails here with its name.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMAND = re.compile(
    r"(?:python3?|\$\(PY\)) (-m annotated(?:\.[a-z_0-9]+)+|(?:benchmarks|tools)/[a-z_0-9]+\.py)"
)


def documented_commands() -> list[str]:
    places = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "benchmarks" / "README.md"]
    places += [ROOT / "Makefile", *sorted((ROOT / "annotated").rglob("*.py"))]
    places += sorted((ROOT / "site").glob("*.md"))
    found = set()
    for path in places:
        found.update(COMMAND.findall(path.read_text(encoding="utf-8")))
    return sorted(found)


def test_the_documented_commands_are_found():
    commands = documented_commands()
    assert {"-m annotated.train", "-m annotated.translate", "benchmarks/bench_table3.py"} <= set(
        commands
    )
    # a command in a subpackage is found whole, not cut at its package
    assert "-m annotated.base.datasets" in commands and "-m annotated.base" not in commands
    assert any(command.startswith("tools/") for command in commands)


@pytest.mark.slow
def test_every_documented_command_answers_help():
    # Started together (each imports torch, which takes a few seconds), then each one awaited.
    running = {
        command: subprocess.Popen(
            [sys.executable, *command.split(), "--help"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for command in documented_commands()
    }
    failed = []
    for command, process in running.items():
        out, _ = process.communicate(timeout=300)
        if process.returncode != 0 or "usage:" not in out:
            failed.append(f"python {command} --help (exit {process.returncode}): {out[-400:]}")
    assert not failed, "\n\n".join(failed)
