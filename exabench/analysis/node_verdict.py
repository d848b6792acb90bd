"""The verdict of a cluster-wide acceptance: which nodes to drain, which to re-test and which links to
check, with the evidence, from the records of the every-node group jobs (exabench.campaign.node_jobs's
plan) or of the every-node script (acceptance.node_sweep_verdict feeds them here as node tests).

Each figure is judged against its healthy peers, never against a fixed number: per test (a
configuration and metric) the median and MAD of the logarithms over the nodes (or the pairs) less
those found bad (a node worse than z_screen in two of its tests is left out of every reference,
again until those stand still; exabench.analysis.node_reference), and a figure is slow when it is on
the bad side by more than z_max robust z-scores AND by more than `min_effect` of the median (so
peers that agree to 0.1 % do not flag a 1 % node, and the spread of shared cores does not flag a
node that is a few per cent off). A figure better than its peers is never a fault.

- A node is drained when one of its own runs failed (the cause named: out of memory, a signal, a
  timeout, ...), or when its slowness is confirmed: seen in `confirmations` (2) independent
  observations, two slow tests or the repeated samples of a `best_of` test, every one of which is
  slow when its best is. Slow on one observation only, it is a suspect: re-test it, never drain it.
- A pair is slow when it is slow in `pair_min_tests` of its tests (all, if it has fewer), or a run
  of it failed. A node has a bad link when
  every one of its pairs (at least two) is slow while each partner has a pair that is not: the
  one thing the slow pairs share is that node. A bad node's slow pairs are its own slowness.
- A run that a down node kept from running is "not run: node down": the node is not accepted
  (status down), but nothing of it is drained.
- A best_of test sampled over a window whose figure is not slow is unstable when its samples'
  spread is beyond its peers' (exabench.analysis.node_stability). A node whose own test is, or
  whose pairs with unflagged partners all are while each partner is steady elsewhere (an
  unstable link), is a suspect: a fault that comes and goes is confirmed before any drain.
- A test whose peers disagree too much (more than max_outlier_share outside the reference) judges
  nobody: its baseline is in doubt, and its nodes are inconclusive.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from xml.etree import ElementTree as ET

from exabench import markdown
from exabench.analysis import node_stability as stab
from exabench.analysis.failure_cause import failure_cause
from exabench.analysis.node_reference import (LOG_MAD_FLOOR, MAX_OUTLIER_SHARE, OUTLIER_Z, in_doubt, log_z, outside,
                                              reference)
from exabench.records.record import headline_metric

MIN_EFFECT = 0.25
NODE_MIN_TESTS = 1
# Independent observations of a node's slowness before it is drained: two slow tests, or one test
# judged on the best of two or more samples (all of them slow, then). One figure alone (a GEMM at
# 0.46x, z = 3.9, on shared cores) makes a suspect to re-test, not a drain.
CONFIRMATIONS = 2
# The screening threshold: a node worse than this many robust z (and by min_effect) in two of its
# tests is left out of every test's reference, and the references are made again until the set of
# such nodes stands still. Two tests, not one: a healthy node at the tail of one test's spread is
# common (a 2-core machine's noise), in two independent tests rare; left out on one figure, it
# would narrow the spread that judges it.
Z_SCREEN = 2.0
MAX_ROUNDS = 20
# Pair tests a pair must be slow in (or all it has, if fewer). One: a test with a wide spread (a
# tiny allreduce on shared cores) may miss a slow link that the ping-pong shows plainly, and a
# link is convicted only when every one of its node's pairs is slow anyway.
PAIR_MIN_TESTS = 1
DOWN = "not run: node down"
STOPPED = "not run: stopped"  # node_worlds.NOT_RUN_STOPPED: another node's failure ended the shared launch


@dataclass
class Criteria:
    z_max: float = OUTLIER_Z
    min_effect: float = MIN_EFFECT
    node_min_tests: int = NODE_MIN_TESTS
    pair_min_tests: int = PAIR_MIN_TESTS
    metrics: dict = field(default_factory=dict)  # benchmark -> metrics judged (default: its headline)
    best_of: tuple = ()  # benchmarks judged on their best sample (samples that repeat one measurement)
    log_mad_floor: float = LOG_MAD_FLOOR
    max_outlier_share: float = MAX_OUTLIER_SHARE
    confirmations: int = CONFIRMATIONS
    z_screen: float = Z_SCREEN
    accept_down: bool = False  # a node down during acceptance is not accepted unless this is set
    # A confirmation round follows (node_acceptance: exabench.analysis.node_confirm): the first pass
    # also flags a node worse than z_screen (and by min_effect) in one test, as a suspect to confirm.
    confirm: bool = False
    # A best_of test sampled over a window: unstable when its samples' spread is this many times its
    # peers' (and beyond z_max): exabench.analysis.node_stability.
    unstable_factor: float = stab.UNSTABLE_FACTOR


def _test_rows(planned: list[dict], records: dict[str, dict], crit: Criteria, kinds: tuple[str, ...],
               excluded: frozenset = frozenset(), firm: frozenset | None = None) -> list[dict]:
    """One row per test subject (node or pair) of these kinds and metric: value, peers' median and MAD, z,
    ratio, slow. Subjects with an `excluded` node (nodes found bad) get their z and verdict but are not
    among the peers: a bad node's figures (or its pairs') would otherwise widen the spread that hides
    another bad node (or a bad link)."""
    rows = []
    by_test: dict[tuple, list[dict]] = {}
    by_config: dict[tuple, list[dict]] = {}
    for p in planned:
        if p["kind"] in kinds:
            by_config.setdefault((p["kind"], p["configuration"]), []).append({**p, "rec": records.get(p["run_id"])})
    for (kind, config), items in by_config.items():
        heads = [headline_metric(it["rec"]) for it in items if it["rec"] and it["rec"].get("metrics")]
        for metric in crit.metrics.get(items[0]["benchmark"]) or [next((h for h in heads if h), "")]:
            by_test[(kind, config, metric)] = items
    for (kind, config, metric), items in sorted(by_test.items()):
        ok = [it for it in items if it["rec"] and it["rec"]["status"] == "ok" and metric in it["rec"]["metrics"]]
        figures = [(tuple(it["nodes"]), figure(it["rec"], metric, crit)) for it in ok]
        figures = [(nodes, v) for nodes, v in figures if v > 0]
        ref = reference([v for nodes, v in figures if not set(nodes) & excluded])
        judged = ref is not None and ref.peers >= 3 and kind != "all"
        doubt = judged and in_doubt([nodes for nodes, _ in figures],
                                    [outside(v, ref, crit.z_max, crit.min_effect, crit.log_mad_floor)
                                     for _, v in figures], crit.max_outlier_share, excluded, firm)
        left_out = len(figures) - ref.peers if ref else 0
        spreads = {it["run_id"]: stab.run_spread(it["rec"], metric, crit.best_of) for it in ok}
        sref = stab.healthy_reference([spreads[it["run_id"]].ratio for it in ok if spreads[it["run_id"]]
                                       and not set(it["nodes"]) & excluded], crit.log_mad_floor, crit.z_screen,
                                      crit.unstable_factor)
        med, mad = (ref.median, ref.mad) if ref else (math.nan, math.nan)
        unit = ok[0]["rec"]["metrics"][metric]["unit"] if ok else ""
        for it in items:
            row = {"kind": kind, "configuration": config, "benchmark": it["benchmark"], "metric": metric,
                   "unit": unit, "subject": " ".join(it["nodes"]) if kind != "all" else "all",
                   "nodes": it["nodes"], "round": it["round"], "run_id": it["run_id"], "value": math.nan,
                   "median": med, "mad": mad, "log_mad": ref.log_mad if ref else math.nan, "z": math.nan,
                   "ratio": math.nan, "slow": False, "failed": False,
                   "status": "", "note": "", "cause": "", "verdict": "not-judged", "observations": 0,
                   "higher_is_better": True, "unstable": False, **_no_spread(sref)}
            rec = it["rec"]
            if rec is None:
                down = it.get("status", "").startswith(DOWN)
                note = it.get("status", "no record")
                row.update(status=DOWN if down else "missing", note=note, failed=not down,
                           cause=failure_cause(DOWN if down else "missing", note),
                           verdict="not-run" if down else "failed")
            elif rec["status"] != "ok" and str(rec.get("error") or "").startswith(STOPPED):
                row.update(status="not-run", note=rec["error"], cause="stopped by another node's failure",
                           verdict="not-run")
            elif rec["status"] != "ok" or metric not in rec.get("metrics", {}):
                row.update(status=rec["status"], failed=True, note=f"run {rec['status']}: {rec.get('error')}",
                           cause=failure_cause(rec["status"], rec.get("error")), verdict="failed")
            else:
                value = figure(rec, metric, crit)
                hib = bool(rec["metrics"][metric].get("higher_is_better", True))
                row.update(status="ok", value=value, higher_is_better=hib)
                if judged and value > 0:
                    z = log_z(value, ref.log_median, ref.log_mad, crit.log_mad_floor)
                    worse = med / value if hib else value / med  # > 1: worse than the reference
                    slow = (z < -crit.z_max if hib else z > crit.z_max) and worse >= 1 + crit.min_effect
                    row.update(z=z, ratio=value / med, verdict="pass")
                    peers = f"{ref.peers} peers" + (f", {left_out} bad left out" if left_out else "")
                    if doubt:
                        row.update(verdict="in-doubt", note=f"baseline in doubt: more than "
                                                            f"{crit.max_outlier_share:.0%} of the nodes outside")
                    elif slow:
                        row.update(slow=True, verdict="slow", observations=_observations(rec, metric, crit),
                                   note=f"{value / med:.2f}x the median of {peers} (z = {z:.1f})")
                    elif spreads.get(it["run_id"]) and sref and sref.peers >= 3:
                        row.update(_spread_judged(spreads[it["run_id"]], sref, crit, unit))
            rows.append(row)
    return rows


def _no_spread(sref) -> dict:
    return {"best": math.nan, "worst": math.nan, "spread": math.nan, "spread_reference": math.nan,
            "spread_z": math.nan, "spread_log_mad": sref.log_mad if sref else math.nan}


def _spread_judged(s: stab.Spread, sref: stab.SpreadReference, crit: Criteria, unit: str) -> dict:
    """A windowed best_of figure that is not slow: its samples' spread against its peers' (node_stability)."""
    z = stab.spread_z(s.ratio, sref, sref.log_mad, crit.log_mad_floor)
    out = {"best": s.best, "worst": s.worst, "spread": s.ratio, "spread_reference": sref.median, "spread_z": z}
    if stab.unstable(s.ratio, sref.median, z, crit.z_max, crit.unstable_factor):
        out.update(unstable=True, verdict="unstable",
                   note=f"unstable: {stab.describe(s, sref.median, z, unit)} of {sref.peers} peers")
    return out


def _observations(rec: dict, metric: str, crit: Criteria) -> int:
    """Independent observations a slow figure stands for: a best_of test's samples (its best is slow,
    so every sample is), else the one figure."""
    samples = rec["metrics"][metric].get("samples") or []
    return len(samples) if rec["benchmark"] in crit.best_of and len(samples) >= 2 else 1


def figure(rec: dict, metric: str, crit: Criteria) -> float:
    """The figure judged: the metric's value, or for a `best_of` benchmark its best sample (on shared
    cores other processes only ever slow a sample down, so the best of a run's repeats is what the
    node can do; a throttled node or a rate-limited link is slow in every sample)."""
    m = rec["metrics"][metric]
    if rec["benchmark"] in crit.best_of and m.get("samples"):
        return float(max(m["samples"]) if m.get("higher_is_better", True) else min(m["samples"]))
    return float(m["value"])


def judge(planned: list[dict], records: dict[str, dict], crit: Criteria | None = None) -> dict:
    """The verdict: per-test rows, nodes to drain, suspects and bad links with their evidence, down
    nodes, each node's status and the tests whose baseline is in doubt."""
    crit = crit or Criteria()
    nodes = sorted({n for p in planned for n in p["nodes"]}, key=_natural)
    rows = _node_rows_without_bad_nodes(planned, records, crit, len(nodes))
    # A run lost with its node (Slurm's NODE_FAIL) is the node going down, not a fault of the node's.
    lost = {n for r in rows if r["failed"] and r["cause"] == "node down" for n in r["nodes"]}
    bad_nodes: dict[str, list[str]] = {}
    suspects: dict[str, list[str]] = {}
    unstable: dict[str, str] = {}  # node -> "node" or "link": unstable in the first pass (a suspect)
    for node in nodes:
        own = [r for r in rows if r["kind"] == "node" and r["nodes"] == [node]]
        slow = [r for r in own if r["slow"]]
        failed = [r for r in own if r["failed"] and node not in lost]
        if failed or (len(slow) >= crit.node_min_tests and sum(r["observations"] for r in slow) >= crit.confirmations):
            bad_nodes[node] = [evidence(r) for r in failed + slow]
        elif len(slow) >= crit.node_min_tests:
            suspects[node] = [evidence(r) for r in slow]
        elif any(r["unstable"] for r in own):  # a fault that comes and goes: confirmed before any drain
            suspects[node], unstable[node] = [evidence(r) for r in own if r["unstable"]], "node"
        elif crit.confirm and (screened := [r for r in own if r["verdict"] != "in-doubt"
                                                  and _beyond(r, crit.z_screen, crit)]):
            suspects[node] = [f"screen: {evidence(r)}" for r in screened]
    rows += _test_rows(planned, records, crit, ("pair",), frozenset(bad_nodes) | frozenset(suspects),
                       frozenset(bad_nodes))
    pair_rows = [r for r in rows if r["kind"] == "pair" and r["status"] != DOWN]
    pairs: dict[tuple, list[dict]] = {}
    for r in pair_rows:
        pairs.setdefault(tuple(r["nodes"]), []).append(r)
    slow_pair = {p: any(r["failed"] for r in rs) or
                 sum(r["slow"] for r in rs) >= min(crit.pair_min_tests, len(rs)) for p, rs in pairs.items()}
    bad_links: dict[str, list[str]] = {}
    for node in nodes:
        mine = [p for p in pairs if node in p]
        if node in bad_nodes or len(mine) < 2 or not all(slow_pair[p] for p in mine):
            continue
        # Partners that can vouch: not bad nodes themselves, with pairs of their own beside this one.
        partners = [q for p in mine for q in p if q != node and q not in bad_nodes
                    and any(node not in p for p in pairs if q in p)]
        fine_elsewhere = [q for q in partners if any(not slow_pair[p] for p in pairs if q in p and node not in p)]
        if fine_elsewhere and len(fine_elsewhere) == len(partners):
            bad_links[node] = [evidence(r) for p in mine for r in pairs[p] if r["slow"] or r["failed"]]
            bad_links[node].append(f"partners fine in their other pairs: {' '.join(sorted(fine_elsewhere, key=_natural))}")
    suspects = {n: ev for n, ev in suspects.items() if n not in bad_links}
    for node, ev in _unstable_links(nodes, pairs, set(bad_nodes) | set(bad_links) | set(suspects)).items():
        suspects[node], unstable[node] = ev, "link"
    if crit.confirm:  # a round follows: a node slow with several partners is worth measuring again
        suspects.update(_common_node_of_slow_pairs(nodes, pairs, slow_pair, set(bad_nodes) | set(bad_links)
                                                   | set(suspects) | lost))
    # Down over every kind of run: a node that dies after its own tests shows only in its pairs' runs.
    down = sorted({n for r in rows if r["status"] == DOWN for n in _down_nodes(r["note"])} | lost, key=_natural)
    unexplained = [" ".join(p) for p, bad in slow_pair.items()
                   if bad and not set(p) & (set(bad_nodes) | set(bad_links) | set(suspects))]
    in_doubt = sorted({f"{r['configuration']} {r['metric']}" for r in rows if r["verdict"] == "in-doubt"})
    verdict = {"rows": rows, "nodes": nodes, "bad_nodes": bad_nodes, "bad_links": bad_links, "suspects": suspects,
               "down": down, "unexplained_pairs": sorted(unexplained), "baseline_in_doubt": in_doubt,
               "allocation": [r for r in rows if r["kind"] == "all"], "criteria": dict(crit.__dict__),
               "unstable": unstable}
    verdict["status"] = {n: _node_status(n, verdict) for n in nodes}
    return verdict


def _unstable_links(nodes: list[str], pairs: dict[tuple, list[dict]], known: set[str]) -> dict[str, list[str]]:
    """Nodes whose link comes and goes, by the bad-link rule on unstable pairs: every pair of the node
    with a partner not already flagged (at least two; a flagged partner's pair says nothing of this
    link) unstable, while each partner has a pair without it (and without a flagged node) that is
    not. Suspects: the confirmation round, pairing the node with known-good nodes, decides."""
    shaky = {p: any(r["unstable"] for r in rs) for p, rs in pairs.items()}
    out = {}
    for node in nodes:
        mine = [p for p in pairs if node in p and not (set(p) - {node}) & known]
        if node in known or len(mine) < 2 or not all(shaky[p] for p in mine):
            continue
        partners = {q for p in mine for q in p if q != node}
        steady = {q for q in partners if any(not shaky[p] for p in pairs if q in p and node not in p
                                             and not set(p) & known)}
        if steady and steady == partners:
            out[node] = [evidence(r) for p in mine for r in pairs[p] if r["unstable"]]
            out[node].append(f"partners steady in their other pairs: {' '.join(sorted(steady, key=_natural))}")
    return out


def _common_node_of_slow_pairs(nodes: list[str], pairs: dict[tuple, list[dict]], slow_pair: dict[tuple, bool],
                               known: set[str]) -> dict[str, list[str]]:
    """Suspects the bad-link rule cannot convict (a partner's alibi is spoilt by another fault, or the
    node turned slow after its own tests): nodes slow in pairs with two or more partners that are no
    bad nodes, in more than half of their pairs. Their common node is the likelier culprit than
    each partner; the confirmation round, pairing it with known-good nodes, decides."""
    out = {}
    for node in nodes:
        if node in known:
            continue
        mine = [p for p in pairs if node in p]
        slow = [p for p in mine if slow_pair[p] and not (set(p) - {node}) & known]
        partners = sorted({q for p in slow for q in p if q != node}, key=_natural)
        if len(partners) >= 2 and 2 * len(slow) > len(mine):
            out[node] = [f"pairs slow with {len(partners)} partners ({' '.join(partners)}) of its {len(mine)} pairs"]
    return out


def _node_rows_without_bad_nodes(planned: list[dict], records: dict[str, dict], crit: Criteria,
                                 n_nodes: int) -> list[dict]:
    """The node (and whole-allocation) test rows, each test's reference made without the nodes that
    screen bad: worse than z_screen in `confirmations` of their tests. Again until those stand still,
    or until they would be half the nodes (no majority left to take a reference from)."""
    excluded: frozenset = frozenset()
    for _ in range(MAX_ROUNDS):
        rows = _test_rows(planned, records, crit, ("node", "all"), excluded)
        screened = frozenset(_screened(rows, crit))
        if screened == excluded or 2 * len(screened) >= n_nodes:
            break
        excluded = screened
    return rows


def _beyond(r: dict, z: float, crit: Criteria) -> bool:
    """Whether a judged figure is worse than its reference by more than `z` robust z and min_effect."""
    if math.isnan(r["z"]):
        return False
    worse = 1 / r["ratio"] if r["higher_is_better"] else r["ratio"]
    bad_side = -r["z"] if r["higher_is_better"] else r["z"]
    return bad_side > z and worse >= 1 + crit.min_effect


def _screened(rows: list[dict], crit: Criteria) -> set[str]:
    tests: dict[str, set] = {}
    for r in rows:
        if r["kind"] == "node" and _beyond(r, crit.z_screen, crit):
            tests.setdefault(r["subject"], set()).add((r["configuration"], r["metric"]))
    return {node for node, ts in tests.items() if len(ts) >= crit.confirmations}


def _node_status(node: str, verdict: dict) -> str:
    """pass, drain, down, suspect or inconclusive (a test of it in doubt or stopped by another node's
    failure, or none of its tests judged)."""
    if node in verdict["bad_nodes"] or node in verdict["bad_links"]:
        return "drain"
    if node in verdict["down"]:
        return "down"
    if node in verdict["suspects"]:
        return "suspect"
    mine = [r for r in verdict["rows"] if node in r["nodes"] and r["kind"] != "all"]
    stopped = any(r["status"] == "not-run" for r in mine)  # another node's failure stopped its run (STOPPED)
    if stopped or any(r["verdict"] == "in-doubt" for r in mine) or not any(r["verdict"] == "pass" for r in mine):
        return "inconclusive"
    return "pass"


def exit_code(verdict: dict) -> int:
    """0: every node passes; 1: a node to drain; 2: could not decide (a suspect to re-test, a node down
    unless accept_down, a node not judged or judged against a baseline in doubt, a failed
    whole-allocation run that names no node)."""
    statuses = set(verdict["status"].values())
    if "drain" in statuses:
        return 1
    undecided = {"suspect", "inconclusive"} | (set() if verdict["criteria"].get("accept_down") else {"down"})
    if statuses & undecided or any(r["failed"] for r in verdict["allocation"]):
        return 2
    return 0


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _down_nodes(note: str) -> list[str]:
    hit = re.search(r"\(([^:)]*):", note)
    return hit.group(1).split() if hit else []


def evidence(r: dict) -> str:
    where = f"pair {r['subject']}" if r["kind"] == "pair" else r["configuration"]
    if r["failed"]:  # the cause, then the record's own words (unless they begin with the cause)
        return f"{where}: " + ("" if r["note"].startswith(r["cause"]) else f"{r['cause']}: ") + r["note"]
    if r.get("unstable"):
        return f"{where} {r['metric']} {r['note']}"
    return (f"{where} {r['metric']} {r['value']:.4g} {r['unit']} = {r['ratio']:.2f}x the median {r['median']:.4g} "
            f"(z = {r['z']:.1f})")


def flagged(verdict: dict) -> bool:
    return exit_code(verdict) != 0


# -- outputs -------------------------------------------------------------------------------------------

def drain_lines(verdict: dict) -> list[str]:
    """One `scontrol update` per node to drain, its reason short and quote-free (Slurm keeps it as given)."""
    return [drain_line(node, verdict) for node in sorted(set(verdict["bad_nodes"]) | set(verdict["bad_links"]),
                                                         key=_natural)]


def drain_line(node: str, verdict: dict) -> str:
    what = []
    if node in verdict["bad_nodes"]:
        tests = [r for r in verdict["rows"] if r["kind"] == "node" and r["nodes"] == [node]
                 and (r["slow"] or r["failed"] or r.get("unstable"))]
        again = [r for r in (verdict.get("confirmation") or {}).get("rows", []) if r["kind"] == "node"
                 and r["nodes"] == [node] and r["verdict"] in ("slow", "failed", "unstable")]
        first = [f"{r['configuration']} " + (r["cause"] if r["failed"] else f"unstable {r['spread']:.3g}x spread"
                                             if r.get("unstable") else f"{r['ratio']:.2f}x median") for r in tests]
        confirmed = [f"confirmed {r['configuration']} " + (
            r["cause"] if r["verdict"] == "failed" else f"unstable {r['spread']:.3g}x spread"
            if r["verdict"] == "unstable" else f"{r['ratio']:.2f}x controls") for r in again]
        outside = [text.split(" (")[0] for text in verdict["bad_nodes"][node] if text.startswith("reference: ")]
        what.append("bad node: " + ", ".join(first + confirmed + outside))
    if node in verdict["bad_links"] and unstable_link(node, verdict):
        what.append("unstable link: every pair unstable, partners steady elsewhere")
    elif node in verdict["bad_links"]:
        what.append("bad link: every pair slow, partners fine elsewhere")
    reason = re.sub(r"[\"'\\\n]", "", "exabench acceptance: " + " / ".join(what))[:200]
    return f'scontrol update nodename={node} state=drain reason="{reason}"'


def unstable_link(node: str, verdict: dict) -> bool:
    """Whether the node's link was flagged for coming and going (its pairs unstable), not for being slow."""
    return (verdict.get("unstable") or {}).get(node) == "link"


def verdict_markdown(verdict: dict, site: str) -> str:
    lines = [f"# exabench cluster acceptance: site {site}", ""]
    c = verdict["criteria"]
    best = f" ({', '.join(c['best_of'])}: best sample)" if c["best_of"] else ""
    lines += [f"Judged against healthy peers{best}: the reference is the median and MAD of the logarithms of the "
              f"peers that are not outliers themselves (iterated; MAD floored at {c['log_mad_floor']}); slow = "
              f"worse than it by more than {c['z_max']} robust z (0.6745 x deviation of the logarithm / MAD of the "
              f"logarithms; the table's MAD is the plain one) and by more than {c['min_effect']:.0%}; a node is "
              f"drained when it fails a run or its slowness is confirmed ({c['confirmations']} observations: slow "
              f"tests, or a best-of test's samples), a suspect to re-test when slow in {c['node_min_tests']} "
              f"test(s) without confirmation; a pair is slow in {c['pair_min_tests']} of its tests (or all it has); "
              "a bad link: every pair of the node slow, its partners fine elsewhere; more than "
              f"{c['max_outlier_share']:.0%} of a test's peers outside its reference: its baseline is in doubt. "
              "Unstable (a best-of test sampled over a window, not slow): its samples' spread (best over the "
              f"figure of its slowest quarter of the window) beyond its peers' by more than {c['z_max']} robust z "
              f"and {c.get('unstable_factor', stab.UNSTABLE_FACTOR):g}x their median spread; a node whose own test "
              "is, or whose pairs all are (partners steady elsewhere), is a suspect until confirmed.", ""]
    for title, table in (("Bad nodes (drain)", verdict["bad_nodes"]), ("Bad links (check)", verdict["bad_links"]),
                         ("Suspects (re-test, not drained)", verdict["suspects"])):
        lines.append(f"## {title}")
        lines += [f"- **{n}**: " + "; ".join(ev) for n, ev in table.items()] or ["- none"]
        lines.append("")
    confirmation = verdict.get("confirmation")
    if confirmation:
        lines += [f"## Confirmation round {confirmation['round'] or '(none ran)'}: the nodes the first pass flagged, "
                  "measured again beside known-good nodes (controls: " + (" ".join(confirmation["controls"]) or "none")
                  + "); drained only when confirmed"]
        if confirmation["in_doubt"]:
            lines.append(f"- not confirmed: {confirmation['in_doubt']}")
        lines += [f"- **{n}**: {c['result']}: " + "; ".join(c["evidence"]) for n, c in confirmation["nodes"].items()]
        lines.append("")
    lines += ["## Nodes down (not accepted" + (": accept_down is set" if c.get("accept_down") else "") + ")",
              *([f"- {n}: its runs {DOWN}" for n in verdict["down"]] or ["- none"]), ""]
    if verdict["baseline_in_doubt"]:
        lines += ["## Baseline in doubt (its nodes inconclusive)", *[f"- {t}" for t in verdict["baseline_in_doubt"]],
                  ""]
    if verdict["unexplained_pairs"]:
        lines += ["## Slow pairs with no culprit (not flagged)", *[f"- {p}" for p in verdict["unexplained_pairs"]], ""]
    lines += ["## Tests", ""]
    cells = [[r["kind"], r["configuration"], r["metric"], r["subject"], _fmt(r["value"]), r["unit"], _fmt(r["median"]),
              _fmt(r["mad"]), _fmt(r["z"], ".1f"), "SLOW" if r["slow"] else ("FAILED" if r["failed"] else
                                                                           "UNSTABLE" if r.get("unstable") else ""),
              r["status"], r["note"].replace("|", "/")[:160]] for r in verdict["rows"]]
    lines += markdown.table(["kind", "test", "metric", "subject", "value", "unit", "median", "MAD", "z", "verdict",
                             "status", "note"], cells)
    lines += ["", headline(verdict)]
    return "\n".join(lines) + "\n"


def headline(verdict: dict) -> str:
    """The verdict in one line, as its exit code says it."""
    code = exit_code(verdict)
    if code == 0:
        return "ACCEPTED: nothing flagged." + (f" (down, accepted: {' '.join(verdict['down'])})" if verdict["down"]
                                               else "")
    if code == 1:
        return ("FLAGGED: nodes " + (" ".join(verdict["bad_nodes"]) or "none") + "; links "
                + (" ".join(verdict["bad_links"]) or "none"))
    by = {s: [n for n, st in verdict["status"].items() if st == s] for s in ("suspect", "down", "inconclusive")}
    return "UNDECIDED: " + "; ".join(f"{s} {' '.join(ns)}" for s, ns in by.items() if ns) + (
        "; whole-allocation run failed" if any(r["failed"] for r in verdict["allocation"]) else "")


def _fmt(x: float, spec: str = ".4g") -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def junit_xml(verdict: dict, site: str) -> str:
    """Per node one testcase with its verdict (suite `nodes`: failure to drain, error when undecided:
    suspect, down, inconclusive) and one per test of it as it ran (suite `node-tests`: passed, failed,
    or skipped only when it did not run); per node's link and per whole-allocation run."""
    suites = ET.Element("testsuites", name=f"exabench cluster acceptance {site}")
    linked = {n for r in verdict["rows"] if r["kind"] == "pair" for n in r["nodes"]}
    cases = [("nodes", n, n, _node_case(n, verdict)) for n in verdict["nodes"]]
    cases += [("node-tests", r["subject"], f"{r['subject']} {r['configuration']} {r['metric']}", _test_case(r))
              for r in verdict["rows"] if r["kind"] == "node"]
    cases += [("links", n, n, ("failure", "unstable-link" if unstable_link(n, verdict) else "bad-link",
                               verdict["bad_links"][n]) if n in verdict["bad_links"] else None)
              for n in verdict["nodes"] if n in linked]
    cases += [("allocation", "all", r["configuration"], _test_case(r)) for r in verdict["allocation"]]
    for suite_name in ("nodes", "node-tests", "links", "allocation"):
        mine = [c for c in cases if c[0] == suite_name]
        if not mine:
            continue
        count = {k: str(sum(1 for c in mine if c[3] and c[3][0] == k)) for k in ("failure", "error", "skipped")}
        suite = ET.SubElement(suites, "testsuite", name=f"{site}.{suite_name}", tests=str(len(mine)),
                              failures=count["failure"], errors=count["error"], skipped=count["skipped"])
        for _, owner, name, outcome in mine:
            classname = f"exabench.{site}.{suite_name}" + (f".{owner}" if suite_name == "node-tests" else "")
            case = ET.SubElement(suite, "testcase", classname=classname, name=name)
            if outcome:
                tag, kind, evidence = outcome
                el = ET.SubElement(case, tag, message=f"{name}: " + "; ".join(evidence)[:500],
                                   **({"type": kind} if tag != "skipped" else {}))
                el.text = "\n".join(evidence) if tag != "skipped" else None
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def _node_case(node: str, verdict: dict) -> tuple | None:
    status = verdict["status"][node]
    evidence = verdict["bad_nodes"].get(node, []) + verdict["bad_links"].get(node, [])
    if status == "drain":
        kind = "bad-node" if node in verdict["bad_nodes"] else "bad-link"
        return "failure", "unstable" if (verdict.get("unstable") or {}).get(node) else kind, evidence
    if status == "down" and verdict["criteria"].get("accept_down"):
        return "skipped", "", [DOWN]
    if status == "down":
        return "error", "node-down", [f"went down during acceptance: its runs {DOWN}"]
    if status == "suspect":
        why = "unstable" if (verdict.get("unstable") or {}).get(node) else "slow on one observation"
        return "error", "suspect", [f"re-test: {why}, not confirmed"] + verdict["suspects"][node]
    if status == "inconclusive":
        return "error", "inconclusive", ["not judged, or judged against a baseline in doubt"]
    return None


def _test_case(r: dict) -> tuple | None:
    if r["failed"]:
        return "failure", r["cause"], [evidence(r)]
    if r["slow"] or r.get("unstable"):
        return "failure", "slow" if r["slow"] else "unstable", [evidence(r)]
    if r["status"] == DOWN:
        return "skipped", "", [r["note"] or DOWN]
    return None
