"""The confirmation round of the paths a user submits by hand (the every-node job script, the node
groups' submit.sh): as node_acceptance does (exabench.analysis.node_confirm), no node is drained
on its first pass. When the first pass flags nodes, `node_report` writes the round's jobs (each
suspect and two known-good controls alone, side by side; the pairs with the controls where the
first pass had pair tests) as node-group scripts with their own submit script,
results/<site>/nodes/groups/confirm-<round>-submit.sh, and the round's plan beside them
(confirm-<round>.json, the form of node_acceptance's confirm.json). The verdict stays "suspect"
(exit 2) until every run of the round has a record; then the round decides, as in node_acceptance:
drain, suspect-cleared or inconclusive.

A plan is kept while the first pass flags the same nodes: running node_check again reads the same
round. The round's number is one past the last recorded (node_jobs.next_round), so a round is
never mixed with an earlier one's records.
"""

from __future__ import annotations

import json
from pathlib import Path

from exabench.analysis import node_confirm
from exabench.campaign import node_jobs
from exabench.campaign.node_groups import NodeGroup, group_files

PLAN = "confirm-{round}.json"
SUBMIT = "confirm-{round}-submit.sh"


def plan_path(root: Path, round_: int) -> Path:
    return Path(root) / "nodes" / "groups" / PLAN.format(round=round_)


def latest_plan(root: Path) -> dict | None:
    """The last round's plan written under root (None without one)."""
    plans = sorted((Path(root) / "nodes" / "groups").glob(PLAN.format(round="*")),
                   key=lambda p: int(p.stem.split("-")[1]) if p.stem.split("-")[1].isdigit() else -1)
    return json.loads(plans[-1].read_text()) if plans else None


def confirmation(first: dict, crit, runs: list, site, root: Path, campaign: str) -> dict | None:
    """The round for the first pass `first` (node_verdict.judge with crit.confirm): the plan written
    before for the same flagged nodes, else a new one with its scripts; None when nothing is flagged.
    Each planned run carries `recorded` (its record exists)."""
    flagged = node_confirm.suspects(first)
    if not flagged or not crit.confirm:
        return None
    doc = latest_plan(root)
    if not doc or doc["suspects"] != flagged:
        doc = _new_round(first, crit, flagged, runs, site, Path(root), campaign)
    for p in doc["planned"]:
        p["recorded"] = Path(p["record"]).exists()
    return doc


def _new_round(first: dict, crit, flagged: list[str], runs: list, site, root: Path, campaign: str) -> dict:
    from exabench.io import atomic_write_many, atomic_write_text
    round_ = node_jobs.next_round(root)
    controls = node_confirm.controls(first, flagged)
    doc = {"round": round_, "suspects": flagged, "controls": controls, "planned": [], "jobs": {}, "submit": "",
           "in_doubt": node_confirm.in_doubt(first, crit)
           or ("" if controls else "no node passed the first pass: no control to confirm against")}
    tested = {r["configuration"] for r in first["rows"]}
    mine = [r for r in runs if r.run_id in tested]
    if not doc["in_doubt"] and not mine:
        doc["in_doubt"] = (f"the first pass's runs ({', '.join(sorted(tested))}) are not in this campaign's plan: "
                           "no confirmation round can run them again")
    if not doc["in_doubt"]:
        with_pairs = any(r["kind"] == "pair" for r in first["rows"])
        spec = [g for g in node_confirm.groups(flagged, controls, round_) if with_pairs or g[2] == "node"]
        groups = [NodeGroup(name, nodes, "pair" if kind == "pair" else "group") for name, nodes, kind, _ in spec]
        role = {name: r for name, _, _, r in spec}
        groups = [g for g in groups if any(r.layout.nodes == len(g.nodes) for r in mine)]
        submit = SUBMIT.format(round=round_)
        atomic_write_many(group_files(mine, site, root, groups, campaign, submit, side_by_side=True))
        doc["submit"] = str(Path(root) / "nodes" / "groups" / submit)
        doc["planned"] = [{**p, "role": role[p["group"]], "confirm": round_}
                          for p in node_jobs.planned_node_runs(mine, groups, root)]
    atomic_write_text(plan_path(root, round_), json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return doc


def pending(doc: dict) -> str:
    """'' when the round can be judged (it ran, or cannot run: in doubt); else what to do next."""
    if doc["in_doubt"] or all(p["recorded"] for p in doc["planned"]):
        return ""
    done = sum(p["recorded"] for p in doc["planned"])
    return (f"confirmation round {doc['round']} ({' '.join(doc['suspects'])} beside controls "
            f"{' '.join(doc['controls'])}): {done} of {len(doc['planned'])} runs recorded; submit "
            f"{doc['submit']} (bash it), then run node_check again")


def judged(first: dict, doc: dict | None, crit) -> dict:
    """The verdict of the first pass with its round applied: as it is (nothing flagged); every flagged
    node a suspect, with what to do (the round not yet run); else node_confirm's decision."""
    from exabench.analysis.node_verdict_files import read_node_record
    if doc is None:
        return first
    todo = pending(doc)
    if todo:
        v = {**first, "bad_nodes": {}, "bad_links": {}, "suspects": dict(first["suspects"]),
             "status": dict(first["status"]), "pending": todo}
        for node in doc["suspects"]:
            v["suspects"][node] = (first["bad_nodes"].get(node, []) + first["bad_links"].get(node, [])
                                   + first["suspects"].get(node, []) + [f"to confirm: {todo}"])
            v["status"][node] = "suspect"
        return v
    records = {p["run_id"]: read_node_record(p) for p in doc["planned"]}
    return node_confirm.judge(first, doc, records, crit)
