"""Atomic writes and rule logging: the two ways exabench puts anything on disk."""

from __future__ import annotations

import contextlib
import os
import tempfile
import traceback
from pathlib import Path


def atomic_write_text(path: str | Path, text: str, mode: int = 0o644) -> None:
    """Write via a temp file in the same directory and rename: readers see all or nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def logged(log_path: str | Path | None):
    """A rule's log, opened for writing: what the rule says goes in it, and so does the traceback
    when it fails (Snakemake shows little of an exception raised in a `run:` block). No path
    (a call from the command line): what would be logged is dropped."""
    if not log_path:
        with open(os.devnull, "w") as devnull:
            yield devnull
        return
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        try:
            yield log
        except BaseException:
            log.write(traceback.format_exc())
            raise
