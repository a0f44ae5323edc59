"""tools/rehearse_ci.py, `make rehearse-ci`: ci.yml's steps as GitHub's first run has them. Here the
plan is checked against ci.yml, and one rehearsed job proves the setting is CI's: root, on a
depth-1 clone that uid 1001 owns, where a bare git refuses the checkout as it did on GitHub."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools import rehearse_ci as rehearse


def test_the_rehearsal_knows_every_action_ci_uses_and_runs_every_step_in_order(capsys):
    workflow = rehearse.load_ci()
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            if "uses" in step:
                assert step["uses"].partition("@")[0] in rehearse.KNOWN_ACTIONS, step["uses"]
    assert rehearse.main(["--dry-run"]) == 0
    said = capsys.readouterr().out
    for job in workflow["jobs"].values():
        names = [s["name"] for s in job["steps"] if "run" in s and "name" in s]
        places = [said.index(f"run: {name} (") for name in names]
        assert places == sorted(places), "the steps in the workflow's order"


def test_the_replacements_are_the_ones_the_docstring_names(tmp_path):
    workflow = rehearse.load_ci()
    job = rehearse.expand(workflow["jobs"]["test"], {"python": "3.11"})
    data = tmp_path / "data"
    env = rehearse.job_environment(workflow, job, tmp_path, data)
    assert env["TORCH"] == workflow["env"]["TORCH"].split(" --index-url")[0]
    assert env["MULTI30K_URL"] == f"{(data / 'multi30k').resolve().as_uri()}/"
    assert env["ANNOTATED_DATA_DIR"] == str(tmp_path / "runner-cache" / "data")
    assert env["PIP_CACHE_DIR"].startswith(str(tmp_path / "runner-cache"))
    assert env["ANNOTATED_REQUIRE_ALL"] == "1"
    assert "/.venv/" not in env["PATH"] + "/" and "VIRTUAL_ENV" not in env


@pytest.mark.skipif(os.geteuid() != 0, reason="ci.yml's container runs as root; so must this")
def test_a_rehearsed_job_runs_as_root_on_a_shallow_clone_uid_1001_owns(tmp_path):
    probe = (
        'stat -c %u README.md > "$GITHUB_WORKSPACE/../owner"\n'
        "git rev-parse --is-shallow-repository 2> ../refused || true\n"
        'git -c safe.directory="$PWD" rev-parse --is-shallow-repository > ../shallow\n'
    )
    workflow = {
        "env": {"PIP_CACHE_DIR": "/var/cache/annotated/pip"},
        "jobs": {
            "probe": {
                "runs-on": "ubuntu-latest",
                "steps": [
                    {"uses": "actions/checkout@v7", "with": {"persist-credentials": False}},
                    {"name": "probe", "run": probe},
                ],
            }
        },
    }
    rehearse.rehearse_job(workflow, "probe", tmp_path, None, dry_run=False)
    folder = Path(tmp_path / "probe")
    assert (folder / "owner").read_text().strip() == str(rehearse.RUNNER_UID)
    # The step's own git meets GitHub's refusal, which tests/checkout.py answers.
    assert "dubious ownership" in (folder / "refused").read_text()
    assert (folder / "shallow").read_text().strip() == "true"  # one commit deep
