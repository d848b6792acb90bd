"""A rerun in progress (`make rerun`: the campaign's command with --forcerun run_benchmark, every run
again) is marked in the results folder when it starts and cleared when a campaign command ends
well. A rerun killed halfway leaves records of two campaigns side by side; the plain command then
saw every record as done and aggregated old and new in one table, without a word. While the mark is
there, a command that is not the rerun itself is refused when records older than the rerun remain,
naming how many and how to go on."""

from __future__ import annotations

import json
import time
from pathlib import Path

from exabench.errors import ExabenchError

MARKER = "rerun-unfinished.json"


def marker_path(results: str | Path) -> Path:
    return Path(results) / MARKER


def is_rerun(argv: list[str] | None) -> bool:
    """Whether the user's Snakemake command line runs every run again (--forcerun run_benchmark, or
    --forceall), read with Snakemake's own parser; False in a job's process (argv None)."""
    if not argv:
        return False
    from snakemake.cli import get_argument_parser
    try:
        args = get_argument_parser().parse_args(argv)
    except (SystemExit, Exception):
        return False
    return bool(args.forceall) or "run_benchmark" in (args.forcerun or [])


def mark(results: str | Path, argv: list[str]) -> None:
    """`onstart` of a rerun: the time it started, before it replaces any record."""
    from exabench.io import atomic_write_text
    atomic_write_text(marker_path(results), json.dumps({"started": time.time(), "command": argv}) + "\n")


def clear(results: str | Path) -> None:
    """`onsuccess`: the campaign's records are this campaign's (a rerun that ended, or a plain
    command that found no record older than the rerun)."""
    marker_path(results).unlink(missing_ok=True)


def check_unfinished(results: str | Path, run_ids, argv: list[str] | None) -> None:
    """Refuse a campaign command other than the rerun while a rerun is unfinished and records older
    than its start remain (ExabenchError naming them and what to do)."""
    path = marker_path(results)
    if argv is None or is_rerun(argv) or not path.is_file():
        return
    try:
        started = float(json.loads(path.read_text())["started"])
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise ExabenchError(f"{path}: not a rerun mark ({exc}); delete it if no rerun is under way") from None
    records = Path(results) / "records"
    older = [run_id for run_id in run_ids
             if (records / f"{run_id}.json").is_file() and (records / f"{run_id}.json").stat().st_mtime < started]
    if not older:
        return
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    shown = ", ".join(older[:3]) + (f" and {len(older) - 3} more" if len(older) > 3 else "")
    raise ExabenchError(
        f"a rerun of this campaign started {when} did not finish: {len(older)} of {len(list(run_ids))} records "
        f"are still the earlier campaign's ({shown}), and one table would mix the two. Finish the rerun "
        f"(`make rerun`, or this command with --forcerun run_benchmark: every run again), or, to keep the "
        f"records as they are, delete {path}")
