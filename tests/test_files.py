"""annotated/base/files.py: a file is replaced whole or not at all, with the mode the umask gives; one
process per folder; runs and downloads go to the checkout's folders, else to the user's."""

import json
import os
import stat
import sys

import pytest

from annotated.base import files
from annotated.base.datasets import default_cache_dir
from annotated.base.files import (
    LOCK_NAME,
    RUNS_DIR_ENV,
    FolderInUseError,
    atomic_write,
    folder_lock,
)


def test_a_finished_block_replaces_the_file(tmp_path):
    target = tmp_path / "sub" / "data.txt"
    with atomic_write(target, "w", encoding="utf-8") as handle:
        handle.write("new")
        assert not target.exists(), "nothing may appear under the final name before the end"
    assert target.read_text() == "new"
    assert [p.name for p in target.parent.iterdir()] == ["data.txt"]


def test_a_failing_block_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="stop"), atomic_write(target) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("stop")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]


# --- Files others can read: the umask decides, as for any program's files --------------------


@pytest.fixture
def umask():
    """Set the process's umask for a test, and put the old one back."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_written_file_gets_the_mode_the_umask_gives(tmp_path, umask, mask, mode):
    umask(mask)
    target = tmp_path / "checkpoint.pt"
    with atomic_write(target) as handle:
        handle.write(b"weights")
    assert stat.S_IMODE(target.stat().st_mode) == mode
    assert files._umask() == mask  # read without being changed
    target.chmod(0o600)
    with atomic_write(target) as handle:  # a replaced file follows the umask too
        handle.write(b"new weights")
    assert stat.S_IMODE(target.stat().st_mode) == mode


def test_the_lock_file_follows_the_umask(tmp_path, umask):
    umask(0o022)
    with folder_lock(tmp_path / "run"):
        pass
    assert stat.S_IMODE((tmp_path / "run" / LOCK_NAME).stat().st_mode) == 0o644


# --- One process per folder ---------------------------------------------------------------------


def test_a_folder_in_use_by_a_live_process_is_refused_with_its_name(
    tmp_path, capsys, held_elsewhere
):
    folder = tmp_path / "run"
    with held_elsewhere(folder) as other:
        with pytest.raises(FolderInUseError) as refused, folder_lock(folder):
            pytest.fail("the block must not run while another process holds the folder")
        message = str(refused.value)
        assert f"process {other.pid}" in message and f"kill {other.pid}" in message
        assert "-c" in message  # the command that holds it
    assert other.returncode == 0
    with folder_lock(folder):  # released in order: taken again without a note
        pass
    assert "note" not in capsys.readouterr().out
    assert (folder / LOCK_NAME).read_text() == ""


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_note(
    tmp_path, capsys, held_elsewhere
):
    folder = tmp_path / "run"
    with held_elsewhere(folder) as other:
        other.kill()  # SIGKILL: no chance to clean up; the system releases its lock
        other.wait(timeout=60)
    assert str(other.pid) in (folder / LOCK_NAME).read_text()  # its name stays behind
    with folder_lock(folder):
        holder = json.loads((folder / LOCK_NAME).read_text())
        assert holder["pid"] == os.getpid()
    out = capsys.readouterr().out
    assert f"taking over the lock left by process {other.pid}" in out and "has ended" in out


def test_a_process_may_take_its_own_lock_again_and_releases_it_once(tmp_path, held_elsewhere):
    folder = tmp_path / "run"
    with folder_lock(folder), folder_lock(folder / "."):  # the same folder, spelled otherwise
        assert json.loads((folder / LOCK_NAME).read_text())["pid"] == os.getpid()
    with held_elsewhere(folder) as other:  # released: another process takes it at once
        assert json.loads((folder / LOCK_NAME).read_text())["pid"] == other.pid


def test_training_into_a_folder_in_use_stops_before_touching_it(tmp_path, held_elsewhere):
    from annotated.ch02_model import ModelConfig, make_model
    from annotated.ch03_training import TrainConfig, train
    from annotated.ch04_copy_task import CopyTask

    folder = tmp_path / "run"
    task = CopyTask(max_len=6, batch_size=4)
    model = make_model(ModelConfig(13, 13, N=1, d_model=16, d_ff=32, h=2))
    config = TrainConfig(max_steps=2, warmup=1, checkpoint_every=1, precision="fp32")
    with held_elsewhere(folder):
        with pytest.raises(FolderInUseError, match="in use by process"):
            train(model, task.batches, config, folder / "checkpoint.pt", progress=False)
        assert sorted(p.name for p in folder.iterdir()) == [LOCK_NAME]
    train(model, task.batches, config, folder / "checkpoint.pt", progress=False)
    assert (folder / "checkpoint.pt").exists()


# --- Where the book writes: the checkout's folders, else the user's -----------------------------


def test_a_checkout_keeps_its_runs_and_data_folders(monkeypatch):
    monkeypatch.delenv(RUNS_DIR_ENV, raising=False)
    assert files.in_checkout()  # the tests run from a clone
    assert files.runs_dir() == files.REPO_ROOT / "runs"
    assert default_cache_dir() == files.REPO_ROOT / "data"


def test_an_installed_book_writes_to_the_users_folders(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"  # an installation: the package with no pyproject.toml
    (site / "annotated").mkdir(parents=True)
    monkeypatch.setattr(files, "REPO_ROOT", site)
    monkeypatch.setattr(files.Path, "home", lambda: tmp_path / "home")
    monkeypatch.delenv(RUNS_DIR_ENV, raising=False)
    for variable in ("XDG_CACHE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(variable, raising=False)
    assert not files.in_checkout()
    if sys.platform.startswith("linux"):
        assert files.runs_dir() == tmp_path / "home" / ".local" / "share" / "annotated" / "runs"
        assert default_cache_dir() == tmp_path / "home" / ".cache" / "annotated"
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
        monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")  # the XDG spec ignores these
        assert files.runs_dir() == tmp_path / "xdg" / "annotated" / "runs"
        assert default_cache_dir() == tmp_path / "home" / ".cache" / "annotated"
    assert site not in files.runs_dir().parents and site not in default_cache_dir().parents
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "class-runs"))
    assert files.runs_dir() == tmp_path / "class-runs"
    with pytest.raises(ValueError, match="'cache' or 'data'"):
        files.user_folder("runs")
