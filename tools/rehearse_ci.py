"""A rehearsal of GitHub's first run of ci.yml, here: its jobs' steps as the workflow writes them.

    python -m tools.rehearse_ci [--job test|lint ...] [--keep] [--dry-run]   # `make rehearse-ci`

GitHub runs ci.yml's jobs in a Debian container (`python:3.11-bookworm`), as root, on a workspace
the runner's own user (uid 1001) created, cloned one commit deep, with every cache empty on a
first run. This does the same as far as one machine allows:

* the workspace is a depth-1 clone of HEAD (`git clone --depth 1`: committed work only), owned by
  uid 1001, with this process as root (it refuses to run as another user: the ownership would
  not be CI's);
* each `run:` step runs in order with `bash -e`, GitHub's shell, under the workflow's, the job's
  and the step's `env:` and the step's `timeout-minutes`;
* `actions/checkout` is the clone (its `fetch-depth: 0` honoured by fetching the whole history),
  `actions/setup-node` finds the Node.js on the path (and says so where it is older than asked),
  `actions/cache/restore` finds nothing (a first run) and `actions/cache/save` saves nothing,
  `actions/upload-artifact` copies its path into the rehearsal's `artifacts/` folder; an action
  this does not know stops the rehearsal, naming it.

What cannot be as on GitHub is replaced, and each replacement is printed: the caches' folders
(/var/cache/annotated) live in the rehearsal's folder; Multi30k's pinned address, out of reach
here, is served from `ANNOTATED_DATA_DIR`'s copy (`file://`), whose sha256 sums `make class-data`
checks as CI's step does; PyTorch's CPU index is out of reach too, so `TORCH` names the same
version from the package index this machine has. The Debian image is this machine's Debian.
A step that fails ends the rehearsal with its name and exit status, as it ends GitHub's job.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CI = ROOT / ".github" / "workflows" / "ci.yml"
RUNNER_UID = 1001  # the user GitHub's runner creates the workspace as
RUNNER_CACHE = "/var/cache/annotated"  # the folder ci.yml keeps its caches in
KNOWN_ACTIONS = (
    "actions/checkout",
    "actions/setup-node",
    "actions/cache/restore",
    "actions/cache/save",
    "actions/upload-artifact",
)


@dataclass
class Rehearsal:
    folder: Path  # the rehearsal's own: workspace/, runner-cache/, artifacts/, server/
    env: dict[str, str]
    dry_run: bool = False

    @property
    def workspace(self) -> Path:
        return self.folder / "workspace"

    def say(self, line: str) -> None:
        print(f"rehearse-ci: {line}", flush=True)


def load_ci() -> dict:
    return yaml.safe_load(CI.read_text(encoding="utf-8"))


def substituted(value: str, folder: Path) -> str:
    """A workflow value with the runner's cache folder moved into the rehearsal's."""
    return str(value).replace(RUNNER_CACHE, str(folder / "runner-cache"))


def job_environment(workflow: dict, job: dict, folder: Path, data: Path | None) -> dict[str, str]:
    """This process's environment, less what an enclosing make or a virtual environment hands
    down, plus the workflow's and the job's `env:`, with the replacements the docstring lists."""
    dropped = {
        "MAKEFLAGS",
        "MFLAGS",
        "MAKELEVEL",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "ANNOTATED_DATA_DIR",
    }
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if "/.venv/" not in p + "/"]
    env["PATH"] = os.pathsep.join(path)
    for name, value in {**workflow.get("env", {}), **job.get("env", {})}.items():
        env[name] = substituted(value, folder)
    if "TORCH" in env:
        env["TORCH"] = env["TORCH"].split(" --index-url")[0]  # PyTorch's index is out of reach
    if "MULTI30K_URL" in env and data is not None:
        env["MULTI30K_URL"] = f"{(data / 'multi30k').resolve().as_uri()}/"
    env["GITHUB_WORKSPACE"] = str(folder / "workspace")
    env["CI"] = "true"
    return env


def clone(rehearsal: Rehearsal, full_history: bool) -> None:
    """actions/checkout: HEAD, one commit deep (or whole), owned by the runner's user."""
    depth = [] if full_history else ["--depth", "1"]
    # The checkout rehearsed from may itself be another user's (a rehearsal inside a rehearsal,
    # or CI's own workspace): its upload-pack is told it is safe, for this one clone.
    serve = ["--upload-pack", "git -c safe.directory=* upload-pack"]
    subprocess.run(
        ["git", "clone", "-q", *depth, *serve, ROOT.as_uri(), str(rehearsal.workspace)], check=True
    )
    for path in [rehearsal.workspace, *rehearsal.workspace.rglob("*")]:
        os.lchown(path, RUNNER_UID, RUNNER_UID)


def node_major() -> int | None:
    node = shutil.which("node")
    if node is None:
        return None
    done = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    return int(re.match(r"v(\d+)", done.stdout.strip()).group(1))


def uses_step(rehearsal: Rehearsal, step: dict, job: dict) -> None:
    """What an action does, as the docstring says; an unknown action is refused."""
    action = step["uses"].partition("@")[0]
    given = step.get("with", {})
    if action not in KNOWN_ACTIONS:
        raise SystemExit(f"rehearse-ci: {action}: the rehearsal does not know this action")
    if action == "actions/checkout":
        rehearsal.say(f"checkout: a clone of HEAD, depth {given.get('fetch-depth', 1) or 'all'}")
        if not rehearsal.dry_run:
            clone(rehearsal, given.get("fetch-depth", 1) == 0)
    elif action == "actions/setup-node":
        wanted, have = int(str(given["node-version"]).split(".")[0]), node_major()
        if have is None:
            raise SystemExit(f"rehearse-ci: setup-node: Node.js {wanted} asked, none on the path")
        older = " (older: this machine's, a replacement)" if have < wanted else ""
        rehearsal.say(f"setup-node: Node.js {wanted} asked, {have} on the path{older}")
    elif action == "actions/cache/restore":
        rehearsal.say(f"cache restore: {given['key']}: not found (a first run)")
    elif action == "actions/cache/save":
        rehearsal.say(f"cache save: {given['key']}: skipped")
    elif action == "actions/upload-artifact":
        source = rehearsal.workspace / substituted(given["path"], rehearsal.folder)
        target = (
            rehearsal.folder / "artifacts" / str(given["name"]).replace("${{", "").replace("}}", "")
        )
        rehearsal.say(f"upload-artifact: {given['path']} -> {target}")
        if not rehearsal.dry_run and source.exists():
            copy = shutil.copytree if source.is_dir() else shutil.copy2
            target.parent.mkdir(parents=True, exist_ok=True)
            copy(source, target)


def run_step(rehearsal: Rehearsal, step: dict, job: dict) -> None:
    name = step.get("name", step["run"].splitlines()[0])
    env = dict(rehearsal.env)
    for key, value in step.get("env", {}).items():
        env[key] = substituted(value, rehearsal.folder)
    minutes = step.get("timeout-minutes", job.get("timeout-minutes", 360))
    rehearsal.say(f"run: {name} (at most {minutes} minutes)")
    if rehearsal.dry_run:
        return
    started = time.time()
    try:
        done = subprocess.run(
            ["bash", "-e", "-c", substituted(step["run"], rehearsal.folder)],
            cwd=rehearsal.workspace,
            env=env,
            timeout=minutes * 60,
        )
    except subprocess.TimeoutExpired:
        raise SystemExit(
            f"rehearse-ci: {name}: stopped at its limit of {minutes} minutes"
        ) from None
    if done.returncode != 0:
        raise SystemExit(f"rehearse-ci: {name}: exit status {done.returncode}")
    rehearsal.say(f"{name}: passed in {time.time() - started:.0f} s")


def matrix_values(job: dict) -> list[dict]:
    matrix = job.get("strategy", {}).get("matrix", {}) or {}
    if not matrix:
        return [{}]
    (key,) = matrix  # ci.yml's matrix has one axis, the Python
    return [{key: value} for value in matrix[key]]


def expand(text, values: dict):
    """${{ matrix.x }} replaced throughout a job (strings inside dicts and lists too)."""
    if isinstance(text, str):
        for key, value in values.items():
            text = text.replace(f"${{{{ matrix.{key} }}}}", str(value))
        return text
    if isinstance(text, dict):
        return {k: expand(v, values) for k, v in text.items()}
    if isinstance(text, list):
        return [expand(v, values) for v in text]
    return text


def rehearse_job(workflow: dict, job_id: str, base: Path, data: Path | None, dry_run: bool) -> None:
    for values in matrix_values(workflow["jobs"][job_id]):
        job = expand(workflow["jobs"][job_id], values)
        folder = base / "-".join([job_id, *map(str, values.values())])
        folder.mkdir(parents=True)
        rehearsal = Rehearsal(folder, job_environment(workflow, job, folder, data), dry_run)
        image = job.get("container", {}).get("image", job.get("runs-on"))
        rehearsal.say(f"job {job_id} {values or ''} (GitHub: {image}; here: this machine)")
        for step in job["steps"]:
            if "uses" in step:
                uses_step(rehearsal, step, job)
            else:
                run_step(rehearsal, step, job)
        rehearsal.say(f"job {job_id} {values or ''}: every step passed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", action="append", help="ci.yml's job to rehearse (default: all)")
    parser.add_argument("--keep", action="store_true", help="keep the rehearsal's folder")
    parser.add_argument("--dry-run", action="store_true", help="say what would run; run nothing")
    args = parser.parse_args(argv)
    workflow = load_ci()
    jobs = args.job or list(workflow["jobs"])
    unknown = sorted(set(jobs) - set(workflow["jobs"]))
    if unknown:
        parser.error(f"ci.yml has no job {unknown}; it has {sorted(workflow['jobs'])}")
    if os.geteuid() != 0 and not args.dry_run:
        print("rehearse-ci: run it as root, as ci.yml's container does", file=sys.stderr)
        return 2
    data = Path(os.environ["ANNOTATED_DATA_DIR"]) if os.environ.get("ANNOTATED_DATA_DIR") else None
    if data is None and not args.dry_run:
        print(
            "rehearse-ci: set ANNOTATED_DATA_DIR to a local copy of the data sets (Multi30k's "
            "public address is out of reach here; its files are served from that copy)",
            file=sys.stderr,
        )
        return 2
    base = Path(tempfile.mkdtemp(prefix="rehearse-ci-"))
    os.chmod(base, 0o755)
    try:
        for job_id in jobs:
            rehearse_job(workflow, job_id, base, data, args.dry_run)
    finally:
        if args.keep or args.dry_run:
            print(f"rehearse-ci: the rehearsal's folder is {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    print("rehearse-ci: every job passed" if not args.dry_run else "rehearse-ci: dry run done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
