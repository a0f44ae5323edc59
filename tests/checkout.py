"""Git, as the tests ask it about this checkout: the one helper every test that runs git goes through.

In CI's container (ci.yml runs its jobs as root in a Debian image) the workspace belongs to the
runner's user (uid 1001), and actions/checkout sets `safe.directory` only in a temporary config
that it removes again: a bare `git ls-files` there exits 128 ("detected dubious ownership"). The
tests own this checkout whoever owns its files, so `git()` names it safe for each call, and
nothing is written to any git config.

GitHub also clones one commit deep. `history()` says so (None) instead of handing back a history
that has only HEAD in it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str, root: Path = ROOT, check: bool = True) -> subprocess.CompletedProcess:
    """`git <args>` in `root`, which counts as safe whoever owns it; bytes out, bytes err."""
    command = ["git", "-c", f"safe.directory={root}", *args]
    return subprocess.run(command, cwd=root, capture_output=True, check=check, timeout=120)


def tracked_files(root: Path = ROOT) -> list[str]:
    """The paths git tracks in `root`, as they are listed (relative, in git's order)."""
    listed = git("ls-files", "-z", root=root).stdout.decode()
    return [name for name in listed.split("\0") if name]


def copy_tracked(folder: Path, root: Path = ROOT) -> Path:
    """What a fresh checkout of `root` holds: its tracked files as they stand, copied to `folder`."""
    for name in tracked_files(root):
        source = root / name
        if source.is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    return folder


def is_shallow(root: Path = ROOT) -> bool:
    """Whether `root` is a shallow clone (GitHub's checkout is one commit deep by default)."""
    done = git("rev-parse", "--is-shallow-repository", root=root)
    return done.stdout.decode().strip() == "true"


def history(path: Path, root: Path = ROOT) -> list[str] | None:
    """The commits that changed `path`, newest first; None where `root` is not a git checkout,
    holds no commit that changed it, or is a shallow clone (its history stops at the graft, so a
    record's older commit would look absent)."""
    try:
        if is_shallow(root):
            return None
        found = git("log", "--format=%H", "--", str(path.relative_to(root)), root=root)
    except (OSError, subprocess.CalledProcessError):
        return None
    return found.stdout.decode().split() or None
