"""Progress of a campaign while it runs, counted from its plan and its records.

`progress_line` is printed by `exabench execute` after each run (the run rule shows the last
line of its log): the run's status and how many of the planned runs are done, failed and
remaining. It runs in every run's job, so it imports nothing heavy (pandas only where a plan
is read from plan.csv alone).
"""

from __future__ import annotations

import json
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


def progress_counts(results: Path, planned: list[str] | None = None) -> dict[str, int]:
    """Done, failed and remaining runs of `planned` (the workflow passes the whole plan; without it,
    the plan files, which may not be written yet when the first runs end)."""
    planned = planned_runs(results) if planned is None else planned
    done = failed = 0
    for run_id in planned:
        status = record_status(results / "records" / f"{run_id}.json")
        if status is None:  # no record yet, or not a record: counted as not finished
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
        lines.append(progress_line(record.parent.parent, rec["run_id"], rec["status"], planned))
    return lines
