"""verdict.json: the node acceptance's verdict for scripts, in a versioned format
(workflow/schemas/verdict.schema.yaml): campaign, date, code version, thresholds, and per node its
status, cause, severity, action and drain line, with each test's figure, reference, ratio and
robust z as numbers. A script acts on `exit_code`: 0 all pass, 1 a node to drain, 2 undecided."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path

from exabench.analysis import node_verdict as nv

SCHEMA = "exabench-verdict/1"
DECISIONS = {0: "accepted", 1: "drain", 2: "undecided"}
ACTIONS = {"pass": "none", "suspect": "re-test (slow on one observation only: confirm before draining)",
           "suspect-cleared": "none (flagged in the first pass, well in the confirmation round)",
           "inconclusive": "re-test (not judged, judged against a baseline in doubt, or not confirmable)",
           "down": "bring the node back and run the acceptance again (only its missing runs run)"}


def _number(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _test(r: dict, reference: str = "median") -> dict:
    """A test's figures; a confirmation round's (reference="reference") is against the controls' of the
    same round. The samples' spread (node_stability) where the test is judged for it, else nulls."""
    return {"kind": r["kind"], "test": r["configuration"], "metric": r["metric"], "unit": r["unit"],
            "subject": r["subject"], "run_id": r["run_id"], "status": r["verdict"], "figure": _number(r["value"]),
            "reference": _number(r[reference]), "ratio": _number(r["ratio"]), "z": _number(r["z"]),
            "higher_is_better": r["higher_is_better"], "cause": r["cause"] or None, "detail": r["note"],
            "samples": {k: _number(r.get(k, math.nan)) for k in ("best", "worst", "spread", "spread_reference",
                                                                 "spread_z")}}


def _confirmation(node: str, verdict: dict) -> dict | None:
    c = verdict.get("confirmation") or {}
    mine = (c.get("nodes") or {}).get(node)
    if not mine:
        return None
    return {"round": c["round"], "result": mine["result"], "controls": c["controls"],
            "tests": [_test(r, "reference") for r in c["rows"] if node in r["nodes"]]}


def _own_rows(node: str, verdict: dict) -> list[dict]:
    """The node's own tests that count against it: the first pass's slow or failed, and the
    confirmation round's (its verdict as `slow`/`failed`)."""
    first = [{"cause": r["cause"], "slow": r["slow"], "failed": r["failed"], "unstable": r.get("unstable", False)}
             for r in verdict["rows"] if r["kind"] == "node" and r["nodes"] == [node]]
    again = [{"cause": r["cause"], "slow": r["verdict"] == "slow", "failed": r["verdict"] == "failed",
              "unstable": r["verdict"] == "unstable"}
             for r in (verdict.get("confirmation") or {}).get("rows", [])
             if r["kind"] == "node" and r["nodes"] == [node]]
    return first + again


def _cause(node: str, verdict: dict, status: str) -> str | None:
    if status == "drain":
        own = _own_rows(node, verdict)
        failed = [r["cause"] for r in own if r["failed"]]
        causes = list(dict.fromkeys(failed)) + (["slow"] if any(r["slow"] for r in own) else []) + (
            ["unstable"] if any(r["unstable"] for r in own) else [])
        outside = any(e.startswith("reference: ") for e in verdict["bad_nodes"].get(node, []))
        link = ["unstable link" if nv.unstable_link(node, verdict) else "bad link"] if node in verdict["bad_links"] \
            else []
        return ", ".join(causes + (["outside its reference"] if outside else []) + link)
    confirmation = (verdict.get("confirmation") or {}).get("nodes", {}).get(node)
    if status == "inconclusive" and confirmation:
        why = verdict["confirmation"]["in_doubt"]
        return ("baseline in doubt" if why.startswith("baseline in doubt")
                else "flagged, not confirmable (no confirmation round could run)" if why
                else "flagged, not confirmable (the confirmation round could not judge it)")
    shaky = (verdict.get("unstable") or {}).get(node)
    return {"pass": None, "down": "node down",
            "suspect": f"unstable{' link' if shaky == 'link' else ''} (first pass only)" if shaky
            else "slow (first pass only)",
            "suspect-cleared": "flagged in the first pass, not confirmed",
            "inconclusive": "baseline in doubt" if any(
                r["verdict"] == "in-doubt" for r in verdict["rows"] if node in r["nodes"]) else "not judged"
            }.get(status, None)


def _confirmation_evidence(node: str, verdict: dict, status: str) -> list[str]:
    """What the round found of a node it did not drain (a drained node's is in its evidence already)."""
    mine = (verdict.get("confirmation") or {}).get("nodes", {}).get(node)
    if not mine or status == "drain":
        return []
    return [f"first pass: {e}" for e in mine["first_pass"]] + [f"{mine['result']}: {e}" for e in mine["evidence"]]


def _severity(node: str, verdict: dict, status: str) -> str:
    if status in ("pass", "suspect-cleared"):
        return "none"
    mine = [r for r in verdict["rows"] if node in r["nodes"] and (r["slow"] or r["failed"] or r.get("unstable"))]
    if status == "down" or any(r["failed"] for r in mine):
        return "clear"
    worst = max([abs(r["z"]) for r in mine if r["slow"]] + [r["spread_z"] for r in mine if r.get("unstable")],
                default=0.0)
    return "clear" if worst >= 2 * verdict["criteria"]["z_max"] else "borderline"


def _action(node: str, verdict: dict, status: str) -> str:
    if status == "suspect" and (verdict.get("unstable") or {}).get(node):
        return "re-test (unstable in the first pass: confirm before draining)"
    return ACTIONS[status]


def document(verdict: dict, site: str, campaign: str) -> dict:
    """The verdict.json document of a judged verdict (node_verdict.judge)."""
    from exabench import __version__
    from exabench.records.record import git_state
    git = git_state()
    crit = verdict["criteria"]
    code = nv.exit_code(verdict)
    drains = {node: nv.drain_line(node, verdict) for node in set(verdict["bad_nodes"]) | set(verdict["bad_links"])}
    nodes = {}
    for node in verdict["nodes"]:
        status = verdict["status"][node]
        link = " (check its link: cable, port)" if node in verdict["bad_links"] else ""
        nodes[node] = {"status": status, "cause": _cause(node, verdict, status),
                       "severity": _severity(node, verdict, status),
                       "action": "drain" + link if status == "drain" else _action(node, verdict, status),
                       "drain": drains.get(node),
                       "evidence": verdict["bad_nodes"].get(node, []) + verdict["bad_links"].get(node, [])
                       + verdict["suspects"].get(node, [])
                       + _confirmation_evidence(node, verdict, status),
                       "confirmation": _confirmation(node, verdict),
                       "tests": [_test(r) for r in verdict["rows"] if node in r["nodes"] and r["kind"] != "all"]}
    return {"schema": SCHEMA, "campaign": campaign, "site": site,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "code_version": {"exabench": __version__, "git_commit": git["commit"], "git_dirty": git["dirty"]},
            "thresholds": {k: crit[k] for k in ("z_max", "z_screen", "min_effect", "log_mad_floor",
                                                "max_outlier_share", "confirmations", "node_min_tests",
                                                "pair_min_tests", "confirm", "unstable_factor")}
            | {"best_of": list(crit["best_of"]), "metrics": crit["metrics"]},
            "decision": DECISIONS[code], "exit_code": code, "accept_down": bool(crit["accept_down"]),
            "nodes": nodes, "baseline_in_doubt": verdict["baseline_in_doubt"],
            "unexplained_pairs": verdict["unexplained_pairs"],
            "allocation": [_test(r) for r in verdict["allocation"]], "drain": nv.drain_lines(verdict),
            "confirmation": {k: (verdict.get("confirmation") or {}).get(k) for k in ("round", "controls", "in_doubt")}
            if verdict.get("confirmation") else None}


def validated(doc: dict, file: str) -> dict:
    """The document, checked against workflow/schemas/verdict.schema.yaml (ConfigError naming the key)."""
    from exabench.config import validate
    return validate(doc, "verdict", file)


def write_files(verdict: dict, out_dir: str | Path, site: str, campaign: str) -> dict:
    """The verdict's files under out_dir: verdict.json (checked against its schema), verdict.md,
    tests.csv, junit.xml, drain.txt. Returns the verdict.json document."""
    import pandas as pd

    from exabench.io import atomic_write_text
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = validated(document(verdict, site, campaign), str(out / "verdict.json"))
    atomic_write_text(out / "verdict.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    atomic_write_text(out / "verdict.md", nv.verdict_markdown(verdict, site))
    atomic_write_text(out / "tests.csv", pd.DataFrame([{k: v for k, v in r.items() if k != "nodes"}
                                                       for r in verdict["rows"]]).to_csv(index=False))
    atomic_write_text(out / "junit.xml", nv.junit_xml(verdict, site))
    atomic_write_text(out / "drain.txt", "".join(line + "\n" for line in nv.drain_lines(verdict)))
    return doc
