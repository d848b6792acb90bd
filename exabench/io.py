"""Atomic writes and rule logging: the two ways exabench puts anything on disk."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import tempfile
import stat
import traceback
from pathlib import Path

from exabench.errors import ExabenchError

def atomic_write_text(path: str | Path, text: str | bytes, mode: int = 0o644) -> None:
    """Write via a temp file in the same directory and rename: readers see all or nothing (`text`
    as UTF-8, or bytes as they are)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_temp(path, text, mode)
    with removed_on_error(tmp):
        os.replace(tmp, path)


def read_own_file(path: str | Path) -> bytes:
    """The bytes of `path`, a file this process trusts because only its user can have written it:
    owned by the current user and writable by no one else. Anything else (a file another user of a
    group-shared project space planted or can change) raises ExabenchError naming it; a missing
    file raises FileNotFoundError. The checks are on the opened file (fstat), a symbolic link is
    not followed, so that nothing can be swapped in between the check and the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ExabenchError(f"{path}: a symbolic link; refused (delete it: it is remade)") from None
        raise
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ExabenchError(f"{path}: not a regular file; refused (delete it: it is remade)")
        if info.st_uid != os.getuid():
            raise ExabenchError(f"{path}: owned by uid {info.st_uid}, not by you (uid {os.getuid()}); "
                                "refused (delete it: it is remade)")
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ExabenchError(f"{path}: writable by group or others (mode {stat.S_IMODE(info.st_mode):o}); "
                                "refused (delete it: it is remade)")
        return f.read()


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


# Temp files are named by the process and a counter, opened with O_EXCL (never another's file):
# tempfile.mkstemp's random names and a text-mode file object cost 0.1 ms a file, a quarter of a
# 10,000-run render's CPU (20,000 files).
_TEMP_SEQUENCE = itertools.count()


def _write_temp(path: Path, text: str | bytes, mode: int, sync: bool = True) -> str:
    """A temp file beside `path` holding `text` (UTF-8; bytes as they are) with `mode`, flushed to
    disk unless `sync` is False (atomic_write_many syncs its files together); its name."""
    tmp = f"{path.parent}/.{path.name}.{os.getpid()}-{next(_TEMP_SEQUENCE)}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # left by a process that died with this pid
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with removed_on_error(tmp):
        try:
            data = memoryview(text.encode() if isinstance(text, str) else text)
            while data:
                data = data[os.write(fd, data):]
            os.fchmod(fd, mode)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return tmp


def _sync_all(temps: list[str], folders) -> None:
    """Every file of `temps` on disk: one syncfs(2) per file system of `folders` where Linux has it,
    else an fsync per file. 20,000 fsyncs took 10 s here, one syncfs 0.6 s; on a parallel file
    system each fsync is a round trip to its servers."""
    import ctypes

    unsynced = set()
    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # not Linux (or no libc symbol): a file at a time
        syncfs = None
    for folder in {os.stat(f).st_dev: f for f in folders}.values() if syncfs else folders:
        fd = os.open(folder, os.O_RDONLY)
        try:
            if syncfs is None or syncfs(fd) != 0:
                unsynced.add(os.stat(folder).st_dev)
        finally:
            os.close(fd)
    for tmp in temps if unsynced else ():
        if os.stat(tmp).st_dev in unsynced:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def atomic_write_many(files: list[tuple[str | Path, str, int]]) -> None:
    """atomic_write_text for many (path, text, mode) at once, with the same guarantee per file:
    each is written to a temp file beside it, all of them are flushed to disk (_sync_all), then each
    is renamed over its path, so a reader sees the old file or the whole new one. On an error no
    path is replaced (unless a rename itself fails midway) and no temp file is left behind."""
    items = [(Path(p), text, mode) for p, text, mode in files]
    folders = list(dict.fromkeys(p.parent for p, _, _ in items))
    for parent in folders:
        parent.mkdir(parents=True, exist_ok=True)
    temps: list[str] = []
    renamed = 0
    try:
        for item in items:
            temps.append(_write_temp(*item, sync=False))
        _sync_all(temps, folders)
        for tmp, (path, _, _) in zip(temps, items):
            os.replace(tmp, path)
            renamed += 1
    except BaseException:
        for tmp in temps[renamed:]:
            Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def logged(log_path: str | Path | None):
    """A rule's log, opened for writing: what the rule says goes in it, and so does the traceback
    when it fails on a bug (Snakemake shows little of an exception raised in a `run:` block); a
    failure exabench explains (ExabenchError: a refusal, a failed verdict) adds its one line. No path
    (a call from the command line): what would be logged is dropped."""
    if not log_path:
        with open(os.devnull, "w") as devnull:
            yield devnull
        return
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        try:
            yield log
        except ExabenchError as exc:  # a refusal or a verdict, said in words: its reason, no traceback
            log.write(f"{exc}\n")
            raise
        except BaseException:
            log.write(traceback.format_exc())
            raise
