"""The verdict of a cluster-wide acceptance: which nodes to drain and which links to check, with the
evidence, from the records of the every-node group jobs (exabench.campaign.node_jobs's plan).

Each figure is judged against its peers, never against a fixed number: per test (a configuration
and metric) the median and MAD over the nodes (or the pairs), and a figure is slow when it is on
the bad side by more than OUTLIER_Z robust z-scores of its logarithm (log_z) AND by more than
`min_effect` of the median (so peers that agree to 0.1 % do not flag a 1 % node, and the spread of
shared cores does not flag a node that is a few per cent off).

- A node is bad when it is slow in at least `node_min_tests` of its own (single-node) tests, or
  when a run of its own failed.
- A pair is slow when it is slow in `pair_min_tests` of its tests (all, if it has fewer), or a run
  of it failed. A node has a bad link when
  every one of its pairs (at least two) is slow while each partner has a pair that is not: the
  one thing the slow pairs share is that node. A bad node's slow pairs are its own slowness.
- A run that a down node kept from running is "not run: node down": reported, never a fault.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree as ET

from exabench import markdown
from exabench.analysis.acceptance import OUTLIER_Z
from exabench.analysis.plots import node_test_bars
from exabench.records.record import headline_metric

MIN_EFFECT = 0.25
LOG_MAD_FLOOR = 0.01
NODE_MIN_TESTS = 1
# Pair tests a pair must be slow in (or all it has, if fewer). One: a test with a wide spread (a
# tiny allreduce on shared cores) may miss a slow link that the ping-pong shows plainly, and a
# link is convicted only when every one of its node's pairs is slow anyway.
PAIR_MIN_TESTS = 1
DOWN = "not run: node down"


@dataclass
class Criteria:
    z_max: float = OUTLIER_Z
    min_effect: float = MIN_EFFECT
    node_min_tests: int = NODE_MIN_TESTS
    pair_min_tests: int = PAIR_MIN_TESTS
    metrics: dict = field(default_factory=dict)  # benchmark -> metrics judged (default: its headline)
    best_of: tuple = ()  # benchmarks judged on their best sample (samples that repeat one measurement)


def _test_rows(planned: list[dict], records: dict[str, dict], crit: Criteria, kinds: tuple[str, ...],
               excluded: frozenset = frozenset()) -> list[dict]:
    """One row per test subject (node or pair) of these kinds and metric: value, peers' median and MAD, z,
    ratio, slow. Subjects with an `excluded` node (bad nodes, for the pair tests) get their z and verdict
    but are not among the peers: a bad node's pairs would otherwise widen the spread that hides a bad link."""
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
        values = [figure(it["rec"], metric, crit) for it in ok if not set(it["nodes"]) & excluded]
        values = [v for v in values if v > 0]
        med = statistics.median(values) if values else math.nan
        mad = statistics.median(abs(v - med) for v in values) if values else math.nan
        logs = [math.log(v) for v in values]
        log_med = statistics.median(logs) if logs else math.nan
        log_mad = statistics.median(abs(x - log_med) for x in logs) if logs else math.nan
        judged = len(values) >= 3 and kind != "all"
        unit = ok[0]["rec"]["metrics"][metric]["unit"] if ok else ""
        for it in items:
            row = {"kind": kind, "configuration": config, "benchmark": it["benchmark"], "metric": metric,
                   "unit": unit, "subject": " ".join(it["nodes"]) if kind != "all" else "all",
                   "nodes": it["nodes"], "round": it["round"], "run_id": it["run_id"], "value": math.nan,
                   "median": med, "mad": mad, "z": math.nan, "ratio": math.nan, "slow": False, "failed": False,
                   "status": "", "note": ""}
            rec = it["rec"]
            if rec is None:
                down = it.get("status", "").startswith(DOWN)
                row.update(status=DOWN if down else "missing", note=it.get("status", "no record"), failed=not down)
            elif rec["status"] != "ok" or metric not in rec.get("metrics", {}):
                row.update(status=rec["status"], failed=True, note=f"run {rec['status']}: {rec.get('error')}")
            else:
                value = figure(rec, metric, crit)
                hib = bool(rec["metrics"][metric].get("higher_is_better", True))
                row.update(status="ok", value=value)
                if judged and value > 0:
                    z = log_z(value, log_med, log_mad)
                    worse = med / value if hib else value / med  # > 1: worse than the median
                    slow = (z < -crit.z_max if hib else z > crit.z_max) and worse >= 1 + crit.min_effect
                    row.update(z=z, ratio=value / med, slow=bool(slow),
                               note=f"{value / med:.2f}x the median of {len(values)} (z = {z:.1f})" if slow else "")
            rows.append(row)
    return rows


def figure(rec: dict, metric: str, crit: Criteria) -> float:
    """The figure judged: the metric's value, or for a `best_of` benchmark its best sample (on shared
    cores other processes only ever slow a sample down, so the best of a run's repeats is what the
    node can do; a throttled node or a rate-limited link is slow in every sample)."""
    m = rec["metrics"][metric]
    if rec["benchmark"] in crit.best_of and m.get("samples"):
        return float(max(m["samples"]) if m.get("higher_is_better", True) else min(m["samples"]))
    return float(m["value"])


def log_z(value: float, log_median: float, log_mad: float) -> float:
    """The robust z-score of log(value) among the peers' logs: performance varies by factors (a node
    half as fast is as far off as one twice as fast), and on shared cores the spread grows with the
    figure. The MAD is floored at LOG_MAD_FLOOR (1 %): identical peers make no outlier of a tiny gap."""
    return 0.6745 * (math.log(value) - log_median) / max(log_mad, LOG_MAD_FLOOR)


def judge(planned: list[dict], records: dict[str, dict], crit: Criteria | None = None) -> dict:
    """The verdict: per-test rows, bad nodes and bad links with their evidence, down nodes."""
    crit = crit or Criteria()
    rows = _test_rows(planned, records, crit, ("node", "all"))
    nodes = sorted({n for p in planned for n in p["nodes"]}, key=_natural)
    down = sorted({n for r in rows if r["status"] == DOWN for n in _down_nodes(r["note"])}, key=_natural)
    bad_nodes: dict[str, list[str]] = {}
    for node in nodes:
        own = [r for r in rows if r["kind"] == "node" and r["nodes"] == [node]]
        slow = [r for r in own if r["slow"]]
        failed = [r for r in own if r["failed"]]
        if len(slow) >= crit.node_min_tests or failed:
            bad_nodes[node] = [_evidence(r) for r in failed + slow]
    rows += _test_rows(planned, records, crit, ("pair",), frozenset(bad_nodes))
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
            bad_links[node] = [_evidence(r) for p in mine for r in pairs[p] if r["slow"] or r["failed"]]
            bad_links[node].append(f"partners fine in their other pairs: {' '.join(sorted(fine_elsewhere, key=_natural))}")
    unexplained = [" ".join(p) for p, bad in slow_pair.items() if bad and not set(p) & (set(bad_nodes) | set(bad_links))]
    return {"rows": rows, "nodes": nodes, "bad_nodes": bad_nodes, "bad_links": bad_links, "down": down,
            "unexplained_pairs": sorted(unexplained),
            "allocation": [r for r in rows if r["kind"] == "all"], "criteria": crit.__dict__}


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _down_nodes(note: str) -> list[str]:
    hit = re.search(r"\(([^:)]*):", note)
    return hit.group(1).split() if hit else []


def _evidence(r: dict) -> str:
    where = f"pair {r['subject']}" if r["kind"] == "pair" else r["configuration"]
    if r["failed"]:
        return f"{where}: {r['note']}"
    return (f"{where} {r['metric']} {r['value']:.4g} {r['unit']} = {r['ratio']:.2f}x the median {r['median']:.4g} "
            f"(z = {r['z']:.1f})")


def flagged(verdict: dict) -> bool:
    return bool(verdict["bad_nodes"] or verdict["bad_links"] or any(r["failed"] for r in verdict["allocation"]))


# -- outputs -------------------------------------------------------------------------------------------

def drain_lines(verdict: dict) -> list[str]:
    """One `scontrol update` per flagged node, its reason short and quote-free (Slurm keeps it as given)."""
    out = []
    for node in sorted(set(verdict["bad_nodes"]) | set(verdict["bad_links"]), key=_natural):
        what = []
        if node in verdict["bad_nodes"]:
            tests = [r for r in verdict["rows"] if r["kind"] == "node" and r["nodes"] == [node]
                     and (r["slow"] or r["failed"])]
            what.append("bad node: " + ", ".join(f"{r['configuration']} " + ("failed" if r["failed"] else
                                                                             f"{r['ratio']:.2f}x median")
                                                 for r in tests))
        if node in verdict["bad_links"]:
            what.append("bad link: every pair slow, partners fine elsewhere")
        reason = re.sub(r"[\"'\\\n]", "", "exabench acceptance: " + " / ".join(what))[:200]
        out.append(f'scontrol update nodename={node} state=drain reason="{reason}"')
    return out


def verdict_markdown(verdict: dict, site: str) -> str:
    lines = [f"# exabench cluster acceptance: site {site}", ""]
    c = verdict["criteria"]
    best = f" ({', '.join(c['best_of'])}: best sample)" if c["best_of"] else ""
    lines += [f"Judged against peers{best}: slow = worse than the median by more than {c['z_max']} robust z "
              f"(0.6745 x deviation of the logarithm / MAD of the logarithms; the table's MAD is the plain "
              f"one) and by more than {c['min_effect']:.0%}; a bad node is slow in at least "
              f"{c['node_min_tests']} of its own tests or fails one; a pair is slow in {c['pair_min_tests']} of "
              "its tests (or all it has); a bad link: every pair of the node slow, its partners fine elsewhere.", ""]
    for title, table in (("Bad nodes (drain)", verdict["bad_nodes"]), ("Bad links (check)", verdict["bad_links"])):
        lines.append(f"## {title}")
        lines += [f"- **{n}**: " + "; ".join(ev) for n, ev in table.items()] or ["- none"]
        lines.append("")
    lines += ["## Nodes down", *([f"- {n}: its runs {DOWN}" for n in verdict["down"]] or ["- none"]), ""]
    if verdict["unexplained_pairs"]:
        lines += ["## Slow pairs with no culprit (not flagged)", *[f"- {p}" for p in verdict["unexplained_pairs"]], ""]
    lines += ["## Tests", ""]
    cells = [[r["kind"], r["configuration"], r["metric"], r["subject"], _fmt(r["value"]), r["unit"], _fmt(r["median"]),
              _fmt(r["mad"]), _fmt(r["z"], ".1f"), "SLOW" if r["slow"] else ("FAILED" if r["failed"] else ""),
              r["status"], r["note"].replace("|", "/")[:160]] for r in verdict["rows"]]
    lines += markdown.table(["kind", "test", "metric", "subject", "value", "unit", "median", "MAD", "z", "verdict",
                             "status", "note"], cells)
    lines += ["", ("FLAGGED: nodes " + (" ".join(verdict["bad_nodes"]) or "none") + "; links "
                   + (" ".join(verdict["bad_links"]) or "none")) if flagged(verdict) else "ACCEPTED: nothing flagged."]
    return "\n".join(lines) + "\n"


def _fmt(x: float, spec: str = ".4g") -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def junit_xml(verdict: dict, site: str) -> str:
    """One testcase per node and per node's link (and per whole-allocation run): failures carry the
    evidence; a node that was down is skipped, not failed."""
    suites = ET.Element("testsuites", name=f"exabench cluster acceptance {site}")
    linked = {n for r in verdict["rows"] if r["kind"] == "pair" for n in r["nodes"]}
    cases = [("nodes", n, verdict["bad_nodes"].get(n)) for n in verdict["nodes"]]
    cases += [("links", n, verdict["bad_links"].get(n)) for n in verdict["nodes"] if n in linked]
    cases += [("allocation", r["configuration"], [r["note"]] if r["failed"] else None) for r in verdict["allocation"]]
    for suite_name in ("nodes", "links", "allocation"):
        mine = [c for c in cases if c[0] == suite_name]
        if not mine:
            continue
        suite = ET.SubElement(suites, "testsuite", name=f"{site}.{suite_name}", tests=str(len(mine)),
                              failures=str(sum(1 for c in mine if c[2])), errors="0")
        for _, name, evidence in mine:
            case = ET.SubElement(suite, "testcase", classname=f"exabench.{site}.{suite_name}", name=name)
            if evidence:
                ET.SubElement(case, "failure", message=f"{name}: " + "; ".join(evidence)[:500],
                              type="bad-node" if suite_name == "nodes" else "bad-link").text = "\n".join(evidence)
            elif name in verdict["down"]:
                ET.SubElement(case, "skipped", message=f"{name}: {DOWN}")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


def read_node_record(p: dict) -> dict:
    """The run's record; one that cannot be read fails its run (the file is named, the verdict goes on)."""
    from exabench.records.record import RecordError, read_record
    try:
        return read_record(p["record"])
    except (RecordError, OSError, ValueError) as exc:
        return {"run_id": p["run_id"], "benchmark": p["benchmark"], "status": "failed", "metrics": {},
                "error": f"unreadable record: {exc}"}


def write_verdict(jobs_json: str | Path, out_dir: str | Path, site: str, crit: Criteria | None = None) -> dict:
    """Read the plan of node runs and their records; write verdict.md, tests.csv, junit.xml, drain.txt
    and plots/<test>.png under out_dir. Returns the verdict."""
    import pandas as pd

    from exabench.io import atomic_write_text
    planned = json.loads(Path(jobs_json).read_text())["planned"]
    records = {p["run_id"]: read_node_record(p) for p in planned if Path(p["record"]).exists()}
    verdict = judge(planned, records, crit)
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "verdict.md", verdict_markdown(verdict, site))
    atomic_write_text(out / "tests.csv", pd.DataFrame([{k: v for k, v in r.items() if k != "nodes"}
                                                       for r in verdict["rows"]]).to_csv(index=False))
    atomic_write_text(out / "junit.xml", junit_xml(verdict, site))
    atomic_write_text(out / "drain.txt", "".join(line + "\n" for line in drain_lines(verdict)))
    tests: dict[tuple, list[dict]] = {}
    for r in verdict["rows"]:
        if r["kind"] != "all":
            tests.setdefault((r["configuration"], r["metric"]), []).append(r)
    for (config, metric), rs in tests.items():
        node_test_bars(rs, out / "plots" / f"{config}.{metric}.png")
    return verdict
