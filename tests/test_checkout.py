"""tests/checkout.py, the one way the tests run git, in the two settings GitHub's CI gives it: a
workspace another user owns (ci.yml's container runs as root, the runner made the files as uid
1001) and a clone one commit deep."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import checkout
import pytest

RUNNER_UID = 1001  # the user GitHub's runner creates the workspace as


@pytest.fixture
def no_git_config(tmp_path, monkeypatch):
    """No global or system git config, so nothing there (a safe.directory = *) hides the check."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_CEILING_DIRECTORIES"):
        monkeypatch.delenv(name, raising=False)


def repository(folder: Path, commits: int = 2) -> Path:
    """A small repository: `record.json` changed by each of `commits` commits, `notes.md` once."""
    folder.mkdir(parents=True)
    run = lambda *args: subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", "main")
    identity = ["-c", "user.name=Book", "-c", "user.email=book@example.org"]
    (folder / "notes.md").write_text("notes\n", encoding="utf-8")
    for index in range(commits):
        (folder / "record.json").write_text(f'{{"run": {index}}}\n', encoding="utf-8")
        run("add", "record.json", "notes.md")
        run(*identity, "commit", "-q", "-m", f"record {index}")
    return folder


def owned_by_another_user(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        os.lchown(path, RUNNER_UID, RUNNER_UID)


@pytest.mark.skipif(os.geteuid() != 0, reason="CI's container runs as root; so must this check")
def test_git_answers_as_root_in_a_checkout_another_user_owns(tmp_path, no_git_config):
    repo = repository(tmp_path / "workspace")
    owned_by_another_user(repo)
    # The setting is CI's: git itself refuses the checkout, as it did in ci.yml's container.
    bare = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True)
    assert bare.returncode == 128 and b"dubious ownership" in bare.stderr, bare.stderr
    # The helper asks anyway, for this checkout only, and copies what a checkout holds.
    assert sorted(checkout.tracked_files(repo)) == ["notes.md", "record.json"]
    copied = checkout.copy_tracked(tmp_path / "copy", root=repo)
    assert (copied / "record.json").read_text(encoding="utf-8") == '{"run": 1}\n'
    assert len(checkout.history(repo / "record.json", root=repo)) == 2
    # Nothing was written to a git config on the way.
    assert not (tmp_path / "home").exists()
    assert b"safe" not in (repo / ".git" / "config").read_bytes()


def test_a_clone_one_commit_deep_has_no_history_to_check_a_record_against(tmp_path, no_git_config):
    repo = repository(tmp_path / "origin", commits=3)
    first = checkout.history(repo / "record.json", root=repo)
    assert len(first) == 3
    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)],
        check=True,
        capture_output=True,
    )
    # What GitHub's checkout gives: git log sees HEAD alone, so an older commit that changed the
    # record looks absent. The helper says "no history here" instead.
    log = subprocess.run(
        ["git", "log", "--format=%H", "--", "record.json"], cwd=shallow, capture_output=True
    )
    assert log.stdout.decode().split() == first[:1]
    assert checkout.is_shallow(shallow) and not checkout.is_shallow(repo)
    assert checkout.history(shallow / "record.json", root=shallow) is None
    # A folder that is no checkout at all answers None as well.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "record.json").write_text("{}", encoding="utf-8")
    assert checkout.history(plain / "record.json", root=plain) is None
