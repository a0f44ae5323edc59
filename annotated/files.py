"""Writing the files that matter (checkpoints, downloads, notebooks, bundles) atomically.

Every such file is written to a temporary file in the same folder, flushed to disk, and only
then renamed over its final name. A rename within one folder is atomic, so a process stopped
at any instant leaves either the old file or the new one, never half of one; if the writing
fails (or the block that writes raises), the temporary file is removed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

# The checkout (or the folder above the installed package): runs/ and data/ live here.
REPO_ROOT = Path(__file__).resolve().parent.parent


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
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
