"""The files of node_acceptance's verdict: the group jobs' plan (nodes/groups/jobs.json) and their
records in, the verdict's files (exabench.analysis.verdict_document.write_files) and one plot per
test out. Apart from node_verdict, which judges: the every-node script's path (acceptance.
write_node_check) writes the same files without the plots, and plots is no import of the judgement."""

from __future__ import annotations

import json
from pathlib import Path

from exabench.analysis.node_verdict import Criteria, judge
from exabench.analysis.plots import node_test_bars
from exabench.analysis.verdict_document import write_files


def read_node_record(p: dict) -> dict:
    """The run's record; one that cannot be read fails its run (the file is named, the verdict goes on)."""
    from exabench.records.record import RecordError, read_record
    try:
        return read_record(p["record"])
    except (RecordError, OSError, ValueError) as exc:
        return {"run_id": p["run_id"], "benchmark": p["benchmark"], "status": "failed", "metrics": {},
                "error": f"unreadable record: {exc}"}


def write_verdict(jobs_json: str | Path, out_dir: str | Path, site: str, crit: Criteria | None = None,
                  campaign: str = "") -> dict:
    """Read the plan of node runs and their records; write verdict.md, verdict.json (checked against
    its schema), tests.csv, junit.xml, drain.txt and plots/<test>.png under out_dir. Returns the verdict."""
    planned = json.loads(Path(jobs_json).read_text())["planned"]
    records = {p["run_id"]: read_node_record(p) for p in planned if Path(p["record"]).exists()}
    verdict = judge(planned, records, crit)
    write_files(verdict, out_dir, site, campaign)
    out = Path(out_dir) / "plots"
    out.mkdir(exist_ok=True)
    tests: dict[tuple, list[dict]] = {}
    for r in verdict["rows"]:
        if r["kind"] != "all":
            tests.setdefault((r["configuration"], r["metric"]), []).append(r)
    for (config, metric), rs in tests.items():
        node_test_bars(rs, out / f"{config}.{metric}.png")
    return verdict
