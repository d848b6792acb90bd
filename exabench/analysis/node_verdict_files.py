"""The files of node_acceptance's verdict: the group jobs' plan (nodes/groups/jobs.json) and their
records in, the verdict's files (exabench.analysis.verdict_document.write_files), the heat map of
nodes x tests and one plot per test out, with the plots' index (what was drawn, what not and why).
Apart from node_verdict, which judges: the every-node script's path (acceptance.write_node_check)
writes the same files without the plots, and plots is no import of the judgement."""

from __future__ import annotations

import json
from pathlib import Path

from exabench.analysis.node_verdict import Criteria, judge
from exabench.analysis.plots import (draw, index_markdown, node_heat_matrix, node_test_bars, plot_node_heat_map,
                                     write_index)
from exabench.analysis.verdict_document import write_files


def read_node_record(p: dict) -> dict:
    """The run's record; one that cannot be read fails its run (the file is named, the verdict goes on)."""
    from exabench.records.record import RecordError, read_record
    try:
        return read_record(p["record"])
    except (RecordError, OSError, ValueError) as exc:
        return {"run_id": p["run_id"], "benchmark": p["benchmark"], "status": "failed", "metrics": {},
                "error": f"unreadable record: {exc}"}


def heat_map_json(verdict: dict) -> str:
    """The heat map's numbers and marks (plots.node_heat_matrix, with each node's status and the bad
    links), for a script or a test to read what the picture shows; a cell not judged is null."""
    m = node_heat_matrix(verdict)
    z = [[v if v == v else None for v in row] for row in m["z"]]
    return json.dumps({**m, "z": z, "status": {n: verdict["status"][n] for n in m["nodes"]},
                       "bad_links": sorted(verdict["bad_links"]), "unexplained_pairs": list(verdict["unexplained_pairs"])},
                      indent=1) + "\n"


def write_verdict(jobs_json: str | Path, out_dir: str | Path, site: str, crit: Criteria | None = None,
                  campaign: str = "", confirm_json: str | Path | None = None) -> dict:
    """Read the plan of node runs and their records (and the confirmation round's, confirm_json);
    write verdict.md, verdict.json (checked against its schema), tests.csv, junit.xml, drain.txt,
    plots/heat_map.png and its numbers (heat_map.json), plots/<test>.png and plots/index.json and
    index.md under out_dir. Returns the verdict: the first pass's, with the confirmation round
    applied (exabench.analysis.node_confirm)."""
    from exabench.analysis import node_confirm
    from exabench.io import atomic_write_text
    planned = json.loads(Path(jobs_json).read_text())["planned"]
    records = {p["run_id"]: read_node_record(p) for p in planned if Path(p["record"]).exists()}
    verdict = judge(planned, records, crit)
    if confirm_json:
        confirmation = json.loads(Path(confirm_json).read_text())
        confirmed = {p["run_id"]: read_node_record(p) for p in confirmation["planned"] if Path(p["record"]).exists()}
        verdict = node_confirm.judge(verdict, confirmation, confirmed, crit or Criteria())
    write_files(verdict, out_dir, site, campaign)
    out = Path(out_dir) / "plots"
    out.mkdir(exist_ok=True)
    tests: dict[tuple, list[dict]] = {}
    for r in verdict["rows"]:
        if r["kind"] != "all":
            tests.setdefault((r["configuration"], r["metric"]), []).append(r)
    (out / "heat_map.png").unlink(missing_ok=True)  # an earlier verdict's, which this one may not support
    entries = [draw("heat_map", "Nodes x tests (robust z)", lambda p: plot_node_heat_map(verdict, p),
                    out / "heat_map.png")]
    atomic_write_text(out / "heat_map.json", heat_map_json(verdict))
    for (config, metric), rs in tests.items():
        entries.append(draw(f"{config}.{metric}", f"{config}: {metric}", lambda p, rs=rs: node_test_bars(rs, p),
                            out / f"{config}.{metric}.png"))
    write_index(entries, out / "index.json")
    atomic_write_text(out / "index.md", index_markdown(entries))
    return verdict
