"""Atomic writes and rule logging: the two ways exabench puts anything on disk."""

from __future__ import annotations

import contextlib
import os
import tempfile
import traceback
from pathlib import Path

# Threads that write and fsync in atomic_write_many: the waits overlap (the calls release the GIL),
# so a thousand small files cost a few device flushes' time, not a thousand.
FSYNC_THREADS = 16


def atomic_write_text(path: str | Path, text: str, mode: int = 0o644) -> None:
    """Write via a temp file in the same directory and rename: readers see all or nothing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_synced_temp(path, text, mode)
    with removed_on_error(tmp):
        os.replace(tmp, path)


def write_csv_and_markdown(csv: str | Path, table, markdown: str | Path, text: str) -> str:
    """A result table (a DataFrame) as CSV at `csv` and its page `text` at `markdown`, each written
    atomically; returns the text, which the commands print."""
    atomic_write_text(csv, table.to_csv(index=False))
    atomic_write_text(markdown, text)
    return text


@contextlib.contextmanager
def removed_on_error(tmp: str | Path):
    """Delete the temp file `tmp` when the block fails (interrupts too), so that a write that did
    not finish leaves nothing behind."""
    try:
        yield
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_synced_temp(path: Path, text: str, mode: int) -> str:
    """A temp file beside `path` holding `text` with `mode`, flushed to disk; its name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with removed_on_error(tmp):
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
    return tmp


def atomic_write_many(files: list[tuple[str | Path, str, int]]) -> None:
    """atomic_write_text for many (path, text, mode) at once, with the same guarantee per file:
    each is written to a temp file beside it and flushed to disk, then renamed over its path, so
    a reader sees the old file or the whole new one. The temp files are written on a few threads
    (creating, writing and syncing a file is mostly waiting on the file system, and threads wait
    together), and every one is complete before the first rename. On an error no path is replaced
    (unless a rename itself fails midway) and no temp file is left behind."""
    items = [(Path(p), text, mode) for p, text, mode in files]
    for parent in dict.fromkeys(p.parent for p, _, _ in items):
        parent.mkdir(parents=True, exist_ok=True)
    temps: list[str] = []
    futures: list = []
    renamed = 0
    from concurrent.futures import ThreadPoolExecutor  # here: a run's execution writes one file, with no pool

    try:
        with ThreadPoolExecutor(min(FSYNC_THREADS, max(1, len(items)))) as pool:
            futures = [pool.submit(_write_synced_temp, *item) for item in items]
            for future in futures:  # in order; a failure leaves the rest to be collected below
                temps.append(future.result())
        for tmp, (path, _, _) in zip(temps, items):
            os.replace(tmp, path)
            renamed += 1
    except BaseException:
        for future in futures[len(temps):]:  # temp files of writes that finished after the failure
            if not future.cancelled() and future.exception() is None:
                temps.append(future.result())
        for tmp in temps[renamed:]:
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
