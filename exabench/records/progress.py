"""Progress of a campaign while it runs, counted from its plan and its records.

`progress_line` is printed by `exabench execute` after each run (the run rule shows the last
line of its log): the run's status and how many of the planned runs are done, failed and
remaining. It runs in every run's job, so it imports nothing heavy (pandas only where a plan
is read from plan.csv alone).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from exabench.records.record import record_status

# The campaign's run ids, one a line, written by the render job beside the runs it rendered: what
# each run's progress line counts against (cheaper to read than plan.json, and there before any run).
RUN_IDS_NAME = "run_ids.txt"


def read_run_ids(path: str | Path) -> list[str]:
    return Path(path).read_text().split()


def load_plan(path: str | Path | None) -> list[dict]:
    """The planned runs (plan.json: a list of Run.to_dict()); no file means no plan."""
    if not path or not Path(path).exists():
        return []
    return json.loads(Path(path).read_text())


def planned_runs(results: Path) -> list[str]:
    """Run ids of the campaign: those the render job listed, plan.json or plan.csv, else the runs
    rendered so far."""
    if (results / "runs" / RUN_IDS_NAME).is_file():
        return read_run_ids(results / "runs" / RUN_IDS_NAME)
    if (results / "plan.json").is_file():
        return [r["run_id"] for r in load_plan(results / "plan.json")]
    if (results / "plan.csv").is_file():
        import pandas as pd
        return list(pd.read_csv(results / "plan.csv", usecols=["run_id"])["run_id"])
    return sorted(p.parent.name for p in (results / "runs").glob("*/spec.json"))


# Each run's status as its execution found it, a line per run (`run_id status mtime_ns size` of its
# record), appended: the progress line after each run reads this, a listing of records/ and one stat
# per record, not every record (which made a 10,000-run campaign read 50 million files).
STATUSES_NAME = "statuses.log"


def note_status(results: str | Path, run_id: str) -> None:
    """Append the status of `run_id`'s record, with the record's mtime and size (a record changed
    since is read again), to the campaign's status log."""
    record = Path(results) / "records" / f"{run_id}.json"
    try:
        st = record.stat()  # before the read: a record changed in between is noted stale, and read again
    except OSError:
        return
    status = record_status(record)
    if status is None:
        return
    try:
        with open(Path(results) / "runs" / STATUSES_NAME, "a") as log:  # one short write: appended whole
            log.write(f"{run_id} {status} {st.st_mtime_ns} {st.st_size}\n")
    except OSError:  # a note the next count can do without (it reads the record instead)
        pass


def _noted_statuses(results: Path) -> dict[str, tuple[str, int, int]]:
    noted = {}
    try:
        with open(results / "runs" / STATUSES_NAME) as log:
            for line in log:
                parts = line.split()
                if len(parts) == 4 and parts[2].isdigit() and parts[3].isdigit():
                    noted[parts[0]] = (parts[1], int(parts[2]), int(parts[3]))
    except OSError:
        pass
    return noted


def _record_files(records: Path) -> dict[str, os.DirEntry]:
    try:
        with os.scandir(records) as entries:
            return {e.name[:-5]: e for e in entries if e.name.endswith(".json")}
    except OSError:
        return {}


def progress_counts(results: Path, planned: list[str] | None = None) -> dict[str, int]:
    """Done, failed and remaining runs of `planned` (the workflow passes the whole plan; without it,
    the plan files, which may not be written yet when the first runs end). A record's status is the
    one noted when its run ended while the file is unchanged since, else read from the file."""
    planned = planned_runs(results) if planned is None else planned
    files, noted = _record_files(results / "records"), _noted_statuses(results)
    done = failed = 0
    for run_id in planned:
        entry = files.get(run_id)
        if entry is None:
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        seen = noted.get(run_id)
        if seen is not None and seen[1:] == (st.st_mtime_ns, st.st_size):
            status = seen[0]
        else:
            status = record_status(entry.path)
        if status is None:  # not a record: counted as not finished
            continue
        done += status == "ok"
        failed += status != "ok"
    return {"planned": len(planned), "done": done, "failed": failed, "remaining": len(planned) - done - failed}


def progress_line(results: str | Path, run_id: str, status: str, planned: list[str] | None = None) -> str:
    c = progress_counts(Path(results), planned)
    finished = c["done"] + c["failed"]
    return (f"exabench progress: {run_id} {status}; {finished} of {c['planned']} runs finished "
            f"({c['done']} done, {c['failed']} failed), {c['remaining']} remaining")


def status_lines(spec_path: str | Path, rec: dict, planned: list[str] | None = None) -> list[str]:
    """What a user sees when a run ends: its status, and the campaign's progress (done/failed/remaining)
    against `planned`, the whole plan's run ids where the caller knows them."""
    lines = [f"{rec['run_id']}: {rec['status']}" + (f" ({rec['error']})" if rec.get("error") else "")]
    record = Path(json.loads(Path(spec_path).read_text())["paths"]["record"])
    if record.parent.name == "records":  # a campaign run (not an every-node one under records/nodes)
        note_status(record.parent.parent, rec["run_id"])
        lines.append(progress_line(record.parent.parent, rec["run_id"], rec["status"], planned))
    return lines
