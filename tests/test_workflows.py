"""The GitHub workflows (.github/workflows/), read here: they parse, every `make` target they run
exists, and what they rely on agrees with the files it comes from (the Makefile's torch, the
Pythons pyproject.toml declares, the variable tests/needs.py reads, the names CONTRIBUTING.md gives
for the one-time steps of publishing). `make lint` runs actionlint on them as well."""

import re
import shlex
import sys
import tomllib
from pathlib import Path

import yaml
from needs import REQUIRE_ALL_ENV

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import publish  # noqa: E402  (tools/publish.py)

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
    for line in command.splitlines():
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
    assert any(step.get("run") == "make lint" for step in lint["steps"])


def test_the_release_publishes_by_trusted_publishing_as_contributing_says():
    release = load(publish.RELEASE_WORKFLOW)
    assert release.get("on", release.get(True)) == {"push": {"tags": ["v*"]}}
    pypi = release["jobs"]["pypi"]
    assert pypi["permissions"] == {"id-token": "write"}
    (publishing,) = [s for s in pypi["steps"] if s.get("uses", "").startswith("pypa/")]
    assert not publishing.get("with"), "no token or password: PyPI trusts the workflow's OIDC token"
    runs = [step.get("run", "") for step in steps(release)]
    assert 'python3 tools/publish.py tag "$GITHUB_REF_NAME"' in runs
    assert any("gh release create" in run for run in runs)
    guide = " ".join((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8").split())
    assert f"`{publish.RELEASE_WORKFLOW}`" in guide
    assert f"environment `{pypi['environment']['name']}`" in guide
    site = load(publish.SITE_WORKFLOW)
    assert site["jobs"]["deploy"]["environment"]["name"] == "github-pages"
    assert "make pdf" in [step.get("run") for step in steps(site)]
