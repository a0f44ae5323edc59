"""Where the book writes, and how: atomically, with the user's permissions, one process per folder.

* `atomic_write`: every file that matters (checkpoints, downloads, notebooks, records) is written
  to a temporary file in the same folder, flushed to disk, and only then renamed over its final
  name. A rename within one folder is atomic, so a process stopped at any instant leaves either
  the old file or the new one, never half of one; if the writing fails (or the block that writes
  raises), the temporary file is removed. The file gets the mode the umask gives any new file
  (0644 under the usual umask 022), not the private 0600 of a temporary file.
* `folder_lock`: a folder that one process is writing (a training run) is locked against a second
  one; a lock left by a process that was killed is taken over, with a note.
* `runs_dir`, `user_folder`: inside a checkout the book writes its runs to `runs/` and its
  downloads to `data/`; installed as a package, to the user's own folders (for example
  `~/.local/share/annotated/runs` and `~/.cache/annotated` on Linux), never inside the
  installation. `$ANNOTATED_RUNS_DIR` chooses another folder for the runs.
* `read_vocabulary_file`: a vocabulary saved in a run folder (chapter 5), refused with what to do
  when it is not one or was built with other settings.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

# The checkout (or, installed, the site-packages folder that holds the package).
REPO_ROOT = Path(__file__).resolve().parents[2]
RUNS_DIR_ENV = "ANNOTATED_RUNS_DIR"
APP = "annotated"


def in_checkout() -> bool:
    """Whether the package runs from a clone of the book (its pyproject.toml beside it)."""
    return (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "annotated").is_dir()


def user_folder(kind: str) -> Path:
    """The user's own folder of this kind for the book: "cache" (downloads) or "data" (runs).

    Linux and other Unix: $XDG_CACHE_HOME or ~/.cache, $XDG_DATA_HOME or ~/.local/share;
    macOS: ~/Library/Caches or ~/Library/Application Support; Windows: %LOCALAPPDATA%.
    """
    if kind not in ("cache", "data"):
        raise ValueError(f"kind must be 'cache' or 'data', got {kind!r}")
    home = Path.home()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
        return base / APP / kind
    if sys.platform == "darwin":
        library = home / "Library"
        return library / ("Caches" if kind == "cache" else "Application Support") / APP
    variable, default = (
        ("XDG_CACHE_HOME", home / ".cache")
        if kind == "cache"
        else ("XDG_DATA_HOME", home / ".local" / "share")
    )
    value = os.environ.get(variable, "")
    base = Path(value) if os.path.isabs(value) else default  # the XDG spec ignores relative paths
    return base / APP


def runs_dir() -> Path:
    """Where training runs go: $ANNOTATED_RUNS_DIR, else the checkout's runs/, else the user's."""
    if os.environ.get(RUNS_DIR_ENV):
        return Path(os.environ[RUNS_DIR_ENV]).expanduser()
    return REPO_ROOT / "runs" if in_checkout() else user_folder("data") / "runs"


def _umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # elsewhere the only way to read it is to set it, and set it back
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "wb", encoding: str | None = None
) -> Iterator[IO]:
    """Open a temporary file beside `path`; it replaces `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # delete=False: the file must outlive its handle, to be renamed into place.
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115
        mode,
        encoding=encoding,
        dir=path.parent,
        prefix=f"{path.name}.",
        suffix=".tmp",
        delete=False,
    )
    try:
        with handle:
            # A temporary file is created private (0600); the final file is an ordinary one.
            if hasattr(os, "fchmod"):
                os.fchmod(handle.fileno(), 0o666 & ~_umask())
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


LOCK_NAME = "in-use.lock"


class FolderInUseError(RuntimeError):
    """Another live process holds the folder's lock (it is training into that folder)."""


def _try_lock(fd: int) -> bool:
    """Lock the open file `fd` for this process without waiting: False if another process holds
    it. The operating system releases the lock when its process ends, however it ends."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError, or EACCES on some systems
        return False
    return True


def _describe(holder: dict) -> str:
    started = holder.get("started")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(started)) if started else "?"
    return (
        f"process {holder.get('pid', '?')} on {holder.get('host', '?')} "
        f"(user {holder.get('user', '?')}, since {when}: {holder.get('command', '?')})"
    )


def _read_holder(fd: int) -> dict:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 1 << 16).decode("utf-8", "replace").strip()
    except OSError:  # Windows forbids reading a range another process has locked
        return {}
    if not text:
        return {}
    try:
        holder = json.loads(text)
    except json.JSONDecodeError:
        return {"pid": text[:40]}
    return holder if isinstance(holder, dict) else {}


_held: dict[Path, list] = {}  # folder -> [lock file descriptor, depth]: a process may nest


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str], quiet: bool = False) -> Iterator[None]:
    """Hold `folder`'s lock for the block, so that no other process writes into it meanwhile.

    A folder held by another live process raises FolderInUseError naming that process. The lock
    is the operating system's on the file `in-use.lock`, so it ends with its process even when
    the process is killed; the file then still names the process, which is how a lock left by a
    killed run is recognised and taken over (with a note, unless `quiet`). The same process may
    take the same folder's lock again inside the block (a training inside a benchmark's claim).
    """
    folder = Path(folder).resolve()
    if folder in _held:
        _held[folder][1] += 1
        try:
            yield
        finally:
            _held[folder][1] -= 1
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if not _try_lock(fd):
            holder = _read_holder(fd)
            raise FolderInUseError(
                f"{folder} is in use by {_describe(holder)}. Two processes writing one run "
                f"folder would overwrite each other's checkpoints: wait for that one to finish, "
                f"stop it (kill {holder.get('pid', '<pid>')}), or give this run another folder."
            )
        left = _read_holder(fd)
        if left and not quiet:
            print(
                f"note: {folder.name}: taking over the lock left by {_describe(left)}, "
                "which has ended; what it saved is kept",
                flush=True,
            )
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "user": _user(),
            "started": round(time.time()),
            "command": " ".join(sys.argv)[:200] or "python",
        }
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(me).encode())
        _held[folder] = [fd, 1]
        try:
            yield
        finally:
            del _held[folder]
            os.ftruncate(fd, 0)  # an empty lock file: released in order, nothing to take over
    finally:
        os.close(fd)  # closing releases the lock


def _user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no user name in some containers
        return str(os.getuid()) if hasattr(os, "getuid") else "?"


def read_vocabulary_file(path: str | Path, content: str, expected_settings: dict | None) -> dict:
    """A saved vocabulary's JSON (its `settings` and its `content`), or a clear error.

    A vocabulary built with other settings than `expected_settings` (when given) is refused.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not {"settings", content} <= set(data):
            raise ValueError(f"it has no {content!r} and 'settings'")
    except (UnicodeDecodeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise ValueError(
            f"{path} is not a vocabulary file of this book ({error}); delete it, and the next "
            "training run rebuilds it from the training data"
        ) from None
    saved = data["settings"]
    if expected_settings is not None and saved != expected_settings:
        differing = sorted(
            key
            for key in set(saved) | set(expected_settings)
            if saved.get(key) != expected_settings.get(key)
        )
        raise ValueError(
            f"{path} was built with other settings ({', '.join(differing)}: saved "
            f"{[saved.get(k) for k in differing]}, wanted "
            f"{[expected_settings.get(k) for k in differing]}). Delete it to rebuild, or use "
            "the configuration that built it."
        )
    return data
