"""Screen, then confirm: the first pass of a node acceptance (node_verdict.judge) names suspects;
none is drained before a confirmation round measures it again. Each suspect's node tests are
repeated and its pairs re-made with nodes known good (the controls), while the controls run the
same tests in the same round: the suspect is judged by its ratio to the controls' figures of that
round, so load that both share cancels in the ratio, and its distance in robust z is measured in
the first pass's spread of that test (the peers' MAD of the logarithms).

- confirmed (drain): a node test slow against the controls, unstable against theirs
  (exabench.analysis.node_stability: its samples' spread beyond the controls' by z_max in the first
  pass's spread of spreads, and unstable_factor times theirs) or failed again; or, for a suspect of
  a bad or unstable link, every pair with a control slow, unstable or failed.
- cleared (`suspect-cleared`): every confirmation test judged, none slow or failed.
- inconclusive: the confirmation could not judge it (no control, a control's run failed, the
  controls disagree with each other, the suspect's run never ran), or there was no healthy
  majority to take controls from (the first pass's baseline in doubt: more than
  max_outlier_share of the nodes flagged).

Confirmation runs are new runs beside the first pass's (`<run>.node-<node>.confirm-<round>`, their
own records); the first pass's records are kept.
"""

from __future__ import annotations

import math
import statistics

from exabench.analysis import node_stability as stab
from exabench.analysis.failure_cause import failure_cause
from exabench.analysis.node_reference import log_z
from exabench.analysis.node_verdict import DOWN, Criteria, _natural, figure
from exabench.campaign.node_jobs import CONFIRM_SUFFIX as SUFFIX
from exabench.records.record import headline_metric

CONTROLS = 2  # known-good nodes measured beside the suspects: two make a control pair for the links
BAD = ("slow", "failed", "unstable")  # a confirmation test's verdicts that confirm a suspect


def suspects(verdict: dict) -> list[str]:
    """The nodes the first pass flags (to drain, suspects, bad links): the ones to confirm."""
    flagged = set(verdict["bad_nodes"]) | set(verdict["suspects"]) | set(verdict["bad_links"])
    return sorted(flagged - set(verdict["down"]), key=_natural)


def in_doubt(verdict: dict, crit: Criteria) -> str:
    """Why no confirmation can be trusted ('' when one can): more than max_outlier_share of the nodes
    outside the reference on firm evidence (a bad node: slow in two observations, or a failed run; a
    bad link) leaves no healthy majority to take controls from. Suspects (one slow figure, the
    screen's lower threshold, unstable samples, slow pairs pointing at their node) are confirmed but
    not counted: one figure is what the round is there to check, and on the 8-node cluster one noisy
    GEMM figure beside two slow nodes left no round and every node undecided."""
    nodes = verdict["nodes"]
    flagged = [n for n in suspects(verdict) if n in verdict["bad_nodes"] or n in verdict["bad_links"]]
    if len(flagged) > crit.max_outlier_share * len(nodes):
        return (f"baseline in doubt: {len(flagged)} of {len(nodes)} nodes flagged in the first pass (more than "
                f"{crit.max_outlier_share:.0%}): no healthy majority to confirm them against")
    return ""


def controls(verdict: dict, flagged: list[str], count: int = CONTROLS) -> list[str]:
    """Known-good nodes: passed the first pass, nearest its references (smallest worst |z| in their
    node tests), so that a control at the tail of the spread does not pass for the norm. A node
    undecided only because another node's failure stopped a run of its (one launch across every
    node, node_worlds) passed all it ran: a control too, after those that passed everything."""
    def passed_what_ran(node):
        mine = [r for r in verdict["rows"] if node in r["nodes"] and r["kind"] != "all"]
        ran = [r for r in mine if r["status"] != "not-run"]
        return verdict["status"][node] == "inconclusive" and ran and len(ran) < len(mine) and \
            all(r["verdict"] == "pass" for r in ran)
    good = [n for n, status in verdict["status"].items() if status == "pass" and n not in flagged]
    good += [n for n in verdict["status"] if n not in flagged and n not in good and passed_what_ran(n)]

    def spread(node):
        zs = [abs(r["z"]) for r in verdict["rows"] if r["kind"] == "node" and r["nodes"] == [node]
              and not math.isnan(r["z"])]
        return max(zs, default=0.0)
    return sorted(good, key=lambda n: (verdict["status"][n] != "pass", spread(n), _natural(n)))[:count]


def groups(flagged: list[str], ctrl: list[str], round_: int) -> list[tuple[str, tuple[str, ...], str, str]]:
    """(group name, nodes, kind, role) of a confirmation round: each suspect alone and each control
    alone (node tests), each suspect with each control and the controls with each other (pairs);
    suspects and controls side by side in the order they are submitted, so that they run together."""
    tag = f"{SUFFIX}{round_}"
    out = []
    for i, node in enumerate(flagged):
        out.append((f"{node}{tag}", (node,), "node", "suspect"))
        if i < len(ctrl):
            out.append((f"{ctrl[i]}{tag}", (ctrl[i],), "node", "control"))
    out += [(f"{c}{tag}", (c,), "node", "control") for c in ctrl[len(flagged):]]
    out += [(f"{s}..{c}{tag}", (s, c), "pair", "suspect") for s in flagged for c in ctrl]
    if len(ctrl) >= 2:
        out.append((f"{ctrl[0]}..{ctrl[1]}{tag}", (ctrl[0], ctrl[1]), "pair", "control"))
    return out


def _first_pass_spread(verdict: dict, key: str = "log_mad") -> dict[tuple, float]:
    """(kind, configuration, metric) -> the first pass's MAD of the logarithms of that test's peers'
    figures (`log_mad`), or of their samples' spreads (`spread_log_mad`)."""
    return {(r["kind"], r["configuration"], r["metric"]): r[key] for r in verdict["rows"]
            if not math.isnan(r.get(key, math.nan))}


def _row(p: dict, rec: dict | None, metric: str, ctrl_figures: list[float], log_mad: float | None,
         crit: Criteria, ctrl_spreads: tuple = (), spread_log_mad: float | None = None) -> dict:
    """One confirmation test of a suspect: its figure against the controls' in the same round (and its
    samples' spread against theirs, `ctrl_spreads`, where the test is judged for it)."""
    row = {"kind": p["kind"], "configuration": p["configuration"], "metric": metric, "subject": " ".join(p["nodes"]),
           "nodes": p["nodes"], "run_id": p["run_id"], "value": math.nan, "reference": math.nan, "ratio": math.nan,
           "z": math.nan, "verdict": "not-judged", "cause": "", "note": "", "unit": "", "higher_is_better": True,
           "best": math.nan, "worst": math.nan, "spread": math.nan, "spread_reference": math.nan,
           "spread_z": math.nan}
    ctrl = [v for v in ctrl_figures if v > 0]
    if p["kind"] == "pair" and not ctrl:  # a pair with a control whose runs failed says nothing of the suspect
        return {**row, "note": "no control pair figure in this round"}
    if rec is None or rec.get("status") != "ok" or metric not in (rec.get("metrics") or {}):
        status = p.get("status", "")
        if status.startswith(DOWN):
            return {**row, "verdict": "not-run", "note": status}
        note = f"run {rec['status']}: {rec.get('error')}" if rec else (status or "no record")
        cause = failure_cause(rec["status"] if rec else "missing", rec.get("error") if rec else note)
        return {**row, "verdict": "failed", "cause": cause, "note": note}
    m = rec["metrics"][metric]
    value, hib = figure(rec, metric, crit), bool(m.get("higher_is_better", True))
    row.update(value=value, unit=m.get("unit", ""), higher_is_better=hib)
    if not ctrl or log_mad is None or value <= 0:
        return {**row, "note": "no control figure in this round" if not ctrl else "no first-pass spread"}
    if len(ctrl) >= 2 and abs(math.log(max(ctrl) / min(ctrl))) >= math.log(1 + crit.min_effect) and abs(
            log_z(max(ctrl), math.log(min(ctrl)), log_mad, crit.log_mad_floor)) > crit.z_max:
        return {**row, "verdict": "in-doubt", "note": "the controls disagree with each other: "
                + " ".join(f"{v:.4g}" for v in ctrl)}
    ref = statistics.median(ctrl)
    z = log_z(value, math.log(ref), log_mad, crit.log_mad_floor)
    worse = ref / value if hib else value / ref
    slow = (z < -crit.z_max if hib else z > crit.z_max) and worse >= 1 + crit.min_effect
    row.update(reference=ref, ratio=value / ref, z=z, verdict="slow" if slow else "pass",
               note=f"{value / ref:.2f}x the controls' {ref:.4g} in the same round (z = {z:.1f})")
    mine = stab.run_spread(rec, metric, crit.best_of)
    if slow or not mine or not ctrl_spreads or spread_log_mad is None:
        return row
    sref = stab.spread_reference(list(ctrl_spreads))
    sz = stab.spread_z(mine.ratio, sref, spread_log_mad, crit.log_mad_floor)
    row.update(best=mine.best, worst=mine.worst, spread=mine.ratio, spread_reference=sref.median, spread_z=sz)
    if stab.unstable(mine.ratio, sref.median, sz, crit.z_max, crit.unstable_factor):
        row.update(verdict="unstable", note="unstable: " + stab.describe(mine, sref.median, sz, row["unit"])
                   + " of the controls in the same round")
    return row


def judge(verdict: dict, confirmation: dict, records: dict[str, dict], crit: Criteria) -> dict:
    """The first pass's verdict with the confirmation round applied: a suspect is drained only when
    the round confirms it, cleared when the round finds it well, inconclusive when the round could
    not judge it. `confirmation` is the round's plan (nodes/groups/confirm.json: suspects, controls,
    planned runs with role and status, or why no round ran); `records` its runs' records by run id."""
    flagged = list(confirmation.get("suspects") or [])
    if not flagged:
        return verdict
    spread, spread_of_spreads = _first_pass_spread(verdict), _first_pass_spread(verdict, "spread_log_mad")
    planned = confirmation.get("planned") or []
    # controls whose own node runs failed this round: a suspect's pair with one proves nothing
    failed_controls = {n for q in planned if q["role"] == "control" and q["kind"] == "node"
                       and records.get(q["run_id"], {}).get("status") != "ok" for n in q["nodes"]}
    judged: dict[tuple, list[str]] = {}  # (kind, configuration) -> the metrics the first pass judged
    for r in verdict["rows"]:
        judged.setdefault((r["kind"], r["configuration"]), [])
        if r["metric"] not in judged[(r["kind"], r["configuration"])]:
            judged[(r["kind"], r["configuration"])].append(r["metric"])
    rows, outcome = [], {}
    for node in flagged:
        mine = []
        for p in planned:
            if p["role"] != "suspect" or node not in p["nodes"]:
                continue
            if p["kind"] == "pair" and set(p["nodes"]) & failed_controls:
                continue  # its partner failed as a control: not a test of the suspect's link
            rec = records.get(p["run_id"])
            for metric in judged.get((p["kind"], p["configuration"])) or [headline_metric(rec) if rec else ""]:
                ctrl_runs = [q for q in planned if q["role"] == "control" and q["kind"] == p["kind"]
                             and q["configuration"] == p["configuration"]]
                ctrl_recs = [records[q["run_id"]] for q in ctrl_runs
                             if records.get(q["run_id"], {}).get("status") == "ok"
                             and metric in records[q["run_id"]].get("metrics", {})]
                ctrl = [figure(c, metric, crit) for c in ctrl_recs]
                spreads = tuple(s.ratio for c in ctrl_recs if (s := stab.run_spread(c, metric, crit.best_of)))
                key = (p["kind"], p["configuration"], metric)
                row = _row(p, rec, metric, ctrl, spread.get(key), crit, spreads, spread_of_spreads.get(key))
                if row["verdict"] == "failed" and ctrl_runs and not ctrl_recs:
                    # the controls failed the same run: the round's run is broken here, not the node
                    row = {**row, "verdict": "in-doubt", "note": "the controls' runs of this test failed too "
                           f"(the round's run, not the node): {row['note']}"}
                mine.append(row)
        rows += mine
        outcome[node] = _decide(node, mine, verdict, confirmation, _flagged_tests(node, verdict, crit))
    v = _applied(verdict, confirmation, rows, outcome)
    for node in _controls_measured(verdict, planned, records):
        v["status"][node] = "pass"
    return v


def _controls_measured(verdict: dict, planned: list[dict], records: dict[str, dict]) -> list[str]:
    """Controls undecided in the first pass only because another node's failure stopped runs of theirs
    (controls() takes them) that this round ran on them alone, every one ok: they pass."""
    out = []
    for node in {n for q in planned if q["role"] == "control" for n in q["nodes"]}:
        mine = [r for r in verdict["rows"] if node in r["nodes"] and r["kind"] != "all"]
        stopped = {r["configuration"] for r in mine if r["status"] == "not-run"}
        if verdict["status"].get(node) != "inconclusive" or not stopped or \
                any(r["verdict"] != "pass" for r in mine if r["status"] != "not-run"):
            continue
        ran = {q["configuration"] for q in planned if q["role"] == "control" and q["nodes"] == [node]
               and records.get(q["run_id"], {}).get("status") == "ok"}
        if stopped <= ran:
            out.append(node)
    return sorted(out, key=_natural)


def _flagged_tests(node: str, verdict: dict, crit: Criteria) -> set[tuple[str, str]]:
    """(kind, configuration) of the first-pass tests that flagged the node: its own slow, failed,
    unstable or beyond the screen's z_screen (and min_effect); its pairs' slow, failed or unstable."""
    from exabench.analysis.node_verdict import _beyond
    own = {(r["kind"], r["configuration"]) for r in verdict["rows"] if r["kind"] == "node" and r["nodes"] == [node]
           and (r["slow"] or r["failed"] or r.get("unstable") or _beyond(r, crit.z_screen, crit))}
    return own | {(r["kind"], r["configuration"]) for r in verdict["rows"] if r["kind"] == "pair"
                  and node in r["nodes"] and (r["slow"] or r["failed"] or r.get("unstable"))}


def _decide(node: str, mine: list[dict], verdict: dict, confirmation: dict,
            flagged: set[tuple[str, str]] = frozenset()) -> tuple[str, list[str]]:
    """(confirmed | cleared | inconclusive | down, evidence) of one suspect from its confirmation rows.
    Any own test slow, unstable or failed again confirms it, and so does a pair test in which every
    pair with a control is (its link); to clear it, the tests it was flagged on (`flagged`; all its
    own tests, and its pairs for a link, where none is known) must be judged well, every pair with a
    control among them: another test the round could not judge (its controls disagreeing on shared
    cores, say) says nothing of the suspicion."""
    if confirmation.get("in_doubt"):
        return "inconclusive", [confirmation["in_doubt"]]
    own = [r for r in mine if r["kind"] == "node"]
    pairs = [r for r in mine if r["kind"] == "pair"]
    if any(r["verdict"] == "not-run" for r in own):
        return "down", [f"confirmation {DOWN}"]
    bad_own = [r for r in own if r["verdict"] in BAD]
    if bad_own:
        return "confirmed", [_evidence(r) for r in bad_own]
    link_suspect = node in verdict["bad_links"] or (verdict.get("unstable") or {}).get(node) == "link"
    # per pair test (the 2 Gbit/s link's ping-pongs were 0.09x the controls' while its Gloo allreduce,
    # noisier, passed: judged all together, the link was cleared)
    by_test: dict[tuple, list[dict]] = {}
    for r in pairs:
        by_test.setdefault((r["configuration"], r["metric"]), []).append(r)
    bad_tests = [rs for rs in by_test.values() if all(r["verdict"] in BAD for r in rs)]
    if bad_tests:
        return "confirmed-link", [_evidence(r) for rs in bad_tests for r in rs]
    suspected = [r for r in mine if (r["kind"], r["configuration"]) in flagged]
    needed = suspected or own + (pairs if link_suspect else [])
    if not own or (link_suspect and not pairs) or any(r["verdict"] != "pass" for r in needed):
        why = [f"{_where(r)}: {r['verdict']}" + (" with one control, not the other" if r["verdict"] in BAD else "")
               + f": {r['note']}" for r in needed if r["verdict"] != "pass"]
        return "inconclusive", ["confirmation could not judge it"] + (why or ["no confirmation run"])
    return "cleared", [f"confirmation {_where(r)}: {r['note']}" for r in own + pairs if r["verdict"] == "pass"] + [
        f"confirmation {_where(r)}: not judged ({r['verdict']}: {r['note']}), not a test it was flagged on"
        for r in own if r["verdict"] not in ("pass", *BAD)]


def _where(r: dict) -> str:
    return f"{r['configuration']} pair {r['subject']}" if r["kind"] == "pair" else r["configuration"]


def _evidence(r: dict) -> str:
    where = f"pair {r['subject']}" if r["kind"] == "pair" else r["configuration"]  # as the first pass says it
    if r["verdict"] == "failed":
        return f"confirmation {where}: {r['cause']}: {r['note']}"
    if r["verdict"] == "unstable":
        return f"confirmation {where} {r['metric']} {r['note']}"
    return f"confirmation {where} {r['metric']} {r['value']:.4g} {r['unit']} = {r['note']}"


def _applied(verdict: dict, confirmation: dict, rows: list[dict], outcome: dict) -> dict:
    v = {**verdict, "bad_nodes": dict(verdict["bad_nodes"]), "bad_links": dict(verdict["bad_links"]),
         "suspects": dict(verdict["suspects"]), "status": dict(verdict["status"]), "down": list(verdict["down"])}
    for node, (result, evidence) in outcome.items():
        first = verdict["bad_nodes"].get(node, []) + verdict["bad_links"].get(node, []) + verdict["suspects"].get(
            node, [])
        for table in (v["bad_nodes"], v["bad_links"], v["suspects"]):
            table.pop(node, None)
        if result == "confirmed":
            v["bad_nodes"][node] = first + evidence
            v["status"][node] = "drain"
        elif result == "confirmed-link":
            v["bad_links"][node] = first + evidence
            v["status"][node] = "drain"
        elif result == "down":
            v["down"] = sorted(set(v["down"]) | {node}, key=_natural)
            v["status"][node] = "down"
        else:
            v["status"][node] = "suspect-cleared" if result == "cleared" else "inconclusive"
    v["confirmation"] = {"round": confirmation.get("round"), "controls": confirmation.get("controls") or [],
                         "in_doubt": confirmation.get("in_doubt") or "", "rows": rows,
                         "nodes": {n: {"result": r.replace("-link", ""), "evidence": e,
                                       "first_pass": verdict["bad_nodes"].get(n, []) + verdict["bad_links"].get(n, [])
                                       + verdict["suspects"].get(n, [])}
                                   for n, (r, e) in outcome.items()}}
    return v
