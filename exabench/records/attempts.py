"""Retry the failed runs of a campaign, and restore a record, without ever losing one.

`retry` moves each record of a run that failed, timed out or is corrupt out of `records/` into
`attempts/<run_id>/`, so that the next `snakemake` runs exactly those runs (a run without a
record is unfinished) and nothing else. `restore` puts back a record kept in `archive/<run_id>/`
(every record a run ever wrote) or `attempts/<run_id>/`, or one read from a campaign archive; the
record it replaces is moved into `attempts/` first. Each move is a rename within the results
directory, so a file is either where it was or where it went."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from exabench.errors import ExabenchError
from exabench.io import atomic_write_text
from exabench.records.record import RecordError, check_record, now_iso, read_record

RETRIED = ("failed", "timeout")  # and corrupt files; `skipped` is a verdict of the run, not a fault
ATTEMPTS = "attempts"
ARCHIVE = "archive"


@dataclass(frozen=True)
class Moved:
    run_id: str
    status: str  # failed, timeout, corrupt, or the replaced record's status (restore)
    to: Path


def _stamp() -> str:
    return re.sub(r"[^0-9]", "", now_iso())[:20]


def set_aside(record: Path, status: str, results: Path) -> Moved:
    """Move `record` into attempts/<run_id>/<time>-<status>.json (a rename: atomic, never a copy)."""
    run_id = record.stem
    folder = results / ATTEMPTS / run_id
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{_stamp()}-{status}.json"
    n = 1
    while target.exists():
        target, n = folder / f"{_stamp()}-{status}-{n}.json", n + 1
    os.rename(record, target)
    return Moved(run_id, status, target)


def record_status(path: Path) -> str:
    """The record's status, or "corrupt" where it cannot be read as a record."""
    try:
        return read_record(path)["status"]
    except RecordError:
        return "corrupt"


def retry_candidates(results: str | Path) -> list[tuple[Path, str]]:
    """The campaign's records (`records/*.json`) of runs that failed, timed out or are corrupt."""
    out = []
    for path in sorted(Path(results, "records").glob("*.json")):
        status = record_status(path)
        if status in RETRIED or status == "corrupt":
            out.append((path, status))
    return out


def campaign_results(results: str | Path) -> Path:
    """`results` when it holds a campaign's records/, else ExabenchError naming it."""
    results = Path(results)
    if not (results / "records").is_dir():
        raise ExabenchError(f"{results}: no records/ folder: not the results of a campaign "
                            "(give results/<site>)")
    return results


def retry(results: str | Path, dry_run: bool = False) -> list[Moved]:
    """Set aside the records of every failed, timed-out or corrupt run; returns what moved (or would)."""
    results = campaign_results(results)
    found = retry_candidates(results)
    if dry_run:
        return [Moved(p.stem, status, results / ATTEMPTS / p.stem) for p, status in found]
    return [set_aside(p, status, results) for p, status in found]


def kept_records(results: str | Path, run_id: str) -> list[Path]:
    """Every record of `run_id` kept in archive/ and attempts/, oldest first."""
    results = Path(results)
    found = [*(results / ARCHIVE / run_id).glob("*.json"), *(results / ATTEMPTS / run_id).glob("*.json")]
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


def choose_kept(results: str | Path, run_id: str, version: str | None = None) -> Path:
    """The kept record named `version`, else the latest one that differs from the current record."""
    kept = kept_records(results, run_id)
    current = Path(results, "records", f"{run_id}.json")
    now = current.read_bytes() if current.is_file() else None
    chosen = [p for p in kept if p.name == version] if version else [p for p in kept if p.read_bytes() != now][-1:]
    if not chosen:
        what = f"no kept record named {version!r}" if version else "no kept record other than the current one"
        raise ExabenchError(f"run {run_id}: {what} in {results}/{ARCHIVE}/{run_id}/ or {results}/{ATTEMPTS}/{run_id}/ "
                            "(exabench restore --list shows them)")
    return chosen[0]


def restore(results: str | Path, run_id: str, text: str, source: str) -> Moved | None:
    """Make `text` (a record of `run_id`, from `source`) the run's record again; the record it
    replaces, if any, goes into attempts/ first. Returns that move."""
    results = Path(results)
    record = results / "records" / f"{run_id}.json"
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ExabenchError(f"{source}: not a JSON record ({exc}); nothing restored") from None
    try:
        check_record(data, source)
    except RecordError as exc:
        raise ExabenchError(f"{exc}; nothing restored") from None
    if data.get("run_id") != run_id:
        raise ExabenchError(f"{source}: a record of run {data.get('run_id')!r}, not of {run_id!r}; nothing restored")
    moved = None
    if record.exists():
        moved = set_aside(record, record_status(record), results)
    atomic_write_text(record, text)
    return moved
