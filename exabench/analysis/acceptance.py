"""Acceptance: verdicts of runs against a site's reference values, JUnit XML, references
derived from measured runs, and node outliers of a cluster-wide (every node) campaign.

Verdicts per run and metric: `pass` (ok and within tolerance), `fail` (outside, failed,
timed out, missing, or without the metric), `expected-fail` (fails as a reference marked
`expected_fail` says), `unexpected-pass` (passes although marked `expected_fail`: counts
as failing until the entry is updated), `no-reference` (ok, but no reference applies).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree as ET

import yaml

from exabench.analysis.node_reference import OUTLIER_Z
from exabench.analysis.runs import LAYOUT
from exabench.analysis.scaling import efficiency
from exabench.records.record import headline_metric, with_plan_entry
from exabench import markdown
from exabench.config import load_and_validate
from exabench.errors import ConfigError

FAILING = ("fail", "unexpected-pass")
VERDICTS = ("pass", "fail", "expected-fail", "unexpected-pass", "no-reference")
# The robust z of one node among two can never pass OUTLIER_Z: outliers need at least three peers.
MIN_PEERS = 3
NODE_SUFFIX = re.compile(r"\.node-([A-Za-z0-9._-]+)$")


@dataclass(frozen=True)
class Reference:
    benchmark: str
    metric: str
    value: float
    lower: float
    upper: float
    unit: str
    params: dict = field(default_factory=dict)
    expected_fail: bool = False
    note: str = ""
    at: dict = field(default_factory=dict)      # where the figure was measured: nodes (or {min, max}), gpus, batch
    scaled: dict = field(default_factory=dict)  # {nodes: {min, max}, how}: runs it also judges, and why it holds there

    def measured_at(self) -> str:
        """'170 nodes, 1020 GPUs' ('' where the entry says nothing of it)."""
        nodes = self.at.get("nodes")
        words = [f"{_span(nodes)} nodes"] if nodes else []
        words += [f"{self.at['gpus']} GPUs"] if "gpus" in self.at else []
        words += [f"global batch {self.at['batch']}"] if "batch" in self.at else []
        return ", ".join(words)

    def scope(self, rec: dict) -> str:
        """How the figure reaches this run: 'measured' (at its configuration, or no `at`),
        'scaled' (on scaled.nodes) or '' (out of its scope: the run is not judged by it)."""
        if all(_within(_configuration(rec).get(k), v) for k, v in self.at.items()):
            return "measured"
        if self.scaled and _within(_configuration(rec)["nodes"], self.scaled["nodes"]):
            return "scaled"
        return ""

    @property
    def band(self) -> tuple[float, float]:
        return self.value * (1 - self.lower), self.value * (1 + self.upper)

    def describe(self) -> str:
        lo, hi = self.band
        return f"{self.value:.4g} {self.unit} (-{self.lower:.0%}/+{self.upper:.0%}: {lo:.4g} .. {hi:.4g})"


def _span(nodes) -> str:
    return f"{nodes['min']}-{nodes['max']}" if isinstance(nodes, dict) else str(nodes)


def _within(value, wanted) -> bool:
    """A run's figure against an `at` value: equal, or within a {min, max} range."""
    if isinstance(wanted, dict):
        return value is not None and wanted["min"] <= value <= wanted["max"]
    return value == wanted


def _configuration(rec: dict) -> dict:
    """What `at` compares: the run's nodes, GPUs in all, and global batch (batch_size per rank x ranks)."""
    lay = rec.get("layout", {})
    ranks = lay.get("nodes", 0) * lay.get("ranks_per_node", 0)
    batch = (rec.get("params") or {}).get("batch_size")
    return {"nodes": lay.get("nodes", 0), "gpus": ranks * lay.get("gpus_per_rank", 0),
            "batch": batch * ranks if isinstance(batch, int) else None}


def load_references(path: str | Path) -> list[Reference]:
    return _references(path, load_and_validate(path, "references"))


def load_pending(path: str | Path) -> list[dict]:
    """The file's `from_history` entries: runs whose reference is still to be derived from
    the site's own history (no published figure could be cited for them)."""
    return _pending(path, load_and_validate(path, "references"))


def _pending(path, data: dict) -> list[dict]:
    """`from_history`, each entry's benchmark a registered one: a misspelt name (resnet5O) would
    match no derived entry and stay pending forever, its runs never judged."""
    from exabench.benchmarks import names
    pending = list(data.get("from_history") or [])
    known = names()
    for i, entry in enumerate(pending):
        if entry["benchmark"] not in known:
            raise ConfigError(str(path), f"from_history[{i}].benchmark", entry["benchmark"],
                              "one of " + ", ".join(known), "is not a known benchmark")
    return pending


def _references(path, data: dict) -> list[Reference]:
    refs = [Reference(**{k: e[k] for k in ("benchmark", "metric", "value", "lower", "upper", "unit", "params",
                                           "expected_fail", "note", "at")}, scaled=e.get("scaled") or {})
            for e in data["references"]]
    seen = {}
    for i, r in enumerate(refs):
        for key, nodes in ((f"references[{i}].at.nodes", r.at.get("nodes")),
                           (f"references[{i}].scaled.nodes", r.scaled.get("nodes"))):
            if isinstance(nodes, dict) and nodes["min"] > nodes["max"]:
                raise ConfigError(str(path), key, nodes, "a range whose min is at most its max", "is empty")
        if r.scaled and not r.at:
            raise ConfigError(str(path), f"references[{i}].scaled", r.scaled,
                              "an entry that says where its figure was measured (at: {nodes: N})",
                              "scales a figure measured nowhere")
        key = (r.benchmark, r.metric, json.dumps(r.params, sort_keys=True), json.dumps(r.at, sort_keys=True))
        if key in seen:
            raise ConfigError(str(path), f"references[{i}]", dict(r.params), "one entry per benchmark, metric and "
                              f"params (also references[{seen[key]}])", "repeats an entry")
        seen[key] = i
    return refs


def _point(rec: dict) -> dict:
    """What a reference's `params` may select on: parameters and layout."""
    lay = rec.get("layout", {})
    return {**rec.get("params", {}), **{k: lay.get(k, 0) for k in LAYOUT}}


def _matching(refs: list[Reference], rec: dict) -> list[Reference]:
    """The references whose benchmark and params match the run, wherever they were measured."""
    point = _point(rec)
    return [r for r in refs if r.benchmark == rec["benchmark"] and all(point.get(k) == v for k, v in r.params.items())
            and not (r.metric == EFFICIENCY and point.get("nodes", 0) <= 1)]  # one node is the baseline itself


def applicable(refs: list[Reference], rec: dict) -> dict[str, Reference]:
    """Per metric, the most specific reference that matches the run and reaches it (Reference.scope):
    most params first, then one measured at the run's configuration, then one scaled to it."""
    best: dict[str, tuple] = {}
    for r in _matching(refs, rec):
        scope = r.scope(rec)
        if not scope:
            continue
        key = (len(r.params), {"measured": 2, "scaled": 1}[scope] if r.at else 0)
        if r.metric not in best or key > best[r.metric][0]:
            best[r.metric] = (key, r)
    return {metric: r for metric, (_, r) in best.items()}


def out_of_scope(refs: list[Reference], rec: dict, judged: dict[str, Reference]) -> dict[str, Reference]:
    """Per metric no reference judges, one that would but for where it was measured (`at`)."""
    return {r.metric: r for r in _matching(refs, rec) if r.metric not in judged and not r.scope(rec)}


def not_judged(ref: Reference) -> str:
    return f"not judged (reference measured at {ref.measured_at()})"


def judge(rec: dict, ref: Reference) -> tuple[str, float, str]:
    """(verdict, value, detail) of one run against one reference."""
    m = (rec.get("metrics") or {}).get(ref.metric)
    value = math.nan
    if rec["status"] != "ok":
        ok, detail = False, f"run {rec['status']}: {rec.get('error') or 'no error recorded'}"
    elif m is None and ref.metric == EFFICIENCY:
        ok, detail = False, f"no scaling efficiency: {rec.get('efficiency_missing') or 'not computed'}"
    elif m is None:
        ok, detail = False, f"metric '{ref.metric}' not in the record (has: {', '.join(rec['metrics']) or 'none'})"
    elif m.get("unit") != ref.unit:
        value = float(m["value"])
        ok, detail = False, f"unit {m.get('unit')!r} differs from the reference's {ref.unit!r}"
    else:
        value = float(m["value"])
        lo, hi = ref.band
        ok = lo <= value <= hi
        where = "within" if ok else ("below" if value < lo else "above")
        detail = f"{ref.metric} {value:.4g} {ref.unit} {where} {ref.describe()}"
    if ref.scope(rec) == "scaled":
        detail += f"; reference measured at {ref.measured_at()}, scaled to {_span(ref.scaled['nodes'])} nodes: " \
                  + ref.scaled["how"]
    if ref.expected_fail:
        note = f"; note: {ref.note}" if ref.note else ""
        return ("unexpected-pass" if ok else "expected-fail"), value, detail + note
    return ("pass" if ok else "fail"), value, detail


def verdicts(records: list[dict], refs: list[Reference], plan: list[dict] | None = None,
             site: str = "", pending: list[dict] | None = None) -> list[dict]:
    """One row per run and referenced metric (one row for a run without reference; its detail
    names the `pending` (from_history) entry that covers it, if one does)."""
    by_id = {p["run_id"]: p for p in plan or []}
    # a corrupt record fails its run, judged as the run the plan describes
    recs = [with_plan_entry(r, by_id.get(r["run_id"]), site) if r.get("corrupt_file") else r for r in records]
    have = {r["run_id"] for r in recs}
    for p in plan or []:
        if p["run_id"] not in have:  # a planned run that left no record fails, it is not skipped
            recs.append({"run_id": p["run_id"], "benchmark": p["benchmark"], "params": p.get("params", {}),
                         "workload": p.get("workload"),
                         "layout": p["layout"], "status": "missing", "error": "planned, but no record was written",
                         "metrics": {}, "site": site})
    recs = with_scaling_efficiency(recs)
    rows = []
    for rec in sorted(recs, key=lambda r: r["run_id"]):
        base = {"run_id": rec["run_id"], "benchmark": rec["benchmark"], "site": rec.get("site", site),
                "status": rec["status"]}
        found = applicable(refs, rec)
        elsewhere = out_of_scope(refs, rec, found)
        bad = rec["status"] != "ok"
        if not found and (bad or not elsewhere):
            metric = headline_metric(rec) or ""
            m = (rec.get("metrics") or {}).get(metric, {})
            rows.append({**base, "metric": metric, "value": float(m["value"]) if m and not bad else math.nan,
                         "unit": m.get("unit", ""), "reference": "", "verdict": "fail" if bad else "no-reference",
                         "detail": f"run {rec['status']}: {rec.get('error')}" if bad else _no_reference(rec, pending)})
        for metric, ref in sorted(elsewhere.items()) if not bad else ():
            m = (rec.get("metrics") or {}).get(metric) or {}
            rows.append({**base, "metric": metric, "value": float(m["value"]) if m else math.nan, "unit": ref.unit,
                         "reference": ref.describe(), "verdict": "no-reference", "detail": not_judged(ref)})
        for metric, ref in sorted(found.items()):
            verdict, value, detail = judge(rec, ref)
            rows.append({**base, "metric": metric, "value": value, "unit": ref.unit, "reference": ref.describe(),
                         "verdict": verdict, "detail": detail})
    return rows


def _no_reference(rec: dict, pending: list[dict] | None) -> str:
    point = _point(rec)
    for p in pending or []:
        if p["benchmark"] == rec["benchmark"] and all(point.get(k) == v for k, v in (p.get("params") or {}).items()):
            return (f"no reference yet: to be derived from this site's history (exabench references "
                    f"--from-history); {p.get('why', '')}".rstrip("; "))
    return "no reference applies"


# -- scaling efficiency of multi-node runs --------------------------------------------------------

EFFICIENCY = "scaling_efficiency"


def _series(rec: dict) -> str:
    lay = rec.get("layout", {})
    return json.dumps([rec.get("_campaign_id"), rec["benchmark"], rec.get("params", {}),
                       {k: lay.get(k, 0) for k in LAYOUT if k != "nodes"}], sort_keys=True)


def _efficiency_metric(rec: dict) -> str | None:
    """The figure efficiency is computed from: `throughput` where the run has one (work per second,
    whatever the scaling mode), else a time headline; none for bandwidths (allreduce's busbw)."""
    metrics = rec.get("metrics") or {}
    if "throughput" in metrics:
        return "throughput"
    head = headline_metric(rec)
    if head in metrics and not metrics[head].get("higher_is_better", True):
        return head
    return None


def with_scaling_efficiency(records: list[dict]) -> list[dict]:
    """The records, each ok multi-node run with a `scaling_efficiency` metric against the median of
    the ok 1-node runs of its series (or, where there is none, an `efficiency_missing` reason)."""
    base: dict[str, list[float]] = {}
    for r in records:
        metric = _efficiency_metric(r) if r["status"] == "ok" else None
        if metric and r.get("layout", {}).get("nodes") == 1:
            base.setdefault(_series(r), []).append(float(r["metrics"][metric]["value"]))
    out = []
    for r in records:
        lay = r.get("layout", {})
        metric = _efficiency_metric(r) if r["status"] == "ok" else None
        if not metric or lay.get("nodes", 1) <= 1:
            out.append(r)
            continue
        ones = base.get(_series(r))
        if not ones:
            out.append({**r, "efficiency_missing": f"no ok 1-node run of the same series ({r['benchmark']}, "
                                                   "same parameters and per-node layout) among the records"})
            continue
        m = r["metrics"][metric]
        rpn = lay.get("ranks_per_node") or 1
        mode = (r.get("workload") or {}).get("scaling", "strong")
        e = efficiency(float(m["value"]), statistics.median(ones), lay["nodes"] * rpn, rpn, mode,
                       bool(m.get("higher_is_better", True)))
        metrics = {**r["metrics"], EFFICIENCY: {
            "value": e, "unit": "1", "samples": [], "higher_is_better": True,
            "description": f"{metric} per worker over that of the 1-node run ({mode} scaling, median of "
                           f"{len(ones)} 1-node run(s))"}}
        out.append({**r, "metrics": metrics})
    return out


def run_verdicts(rows: list[dict]) -> dict[str, str]:
    """The verdict of each run: its worst metric (fail > unexpected-pass > expected-fail > pass)."""
    rank = {"fail": 0, "unexpected-pass": 1, "expected-fail": 2, "pass": 3, "no-reference": 4}
    out: dict[str, str] = {}
    for r in rows:
        cur = out.get(r["run_id"])
        if cur is None or rank[r["verdict"]] < rank[cur]:
            out[r["run_id"]] = r["verdict"]
    return out


def counts(rows: list[dict]) -> dict[str, int]:
    per_run = run_verdicts(rows)
    return {v: sum(1 for x in per_run.values() if x == v) for v in VERDICTS}


def failing_runs(rows: list[dict]) -> list[str]:
    return sorted(run for run, v in run_verdicts(rows).items() if v in FAILING)


def summary_markdown(rows: list[dict], site: str, references: str) -> str:
    c = counts(rows)
    cells = [[r["run_id"], r["benchmark"], r["metric"], "" if math.isnan(r["value"]) else f"{r['value']:.4g}",
              r["unit"], r["reference"], r["verdict"].upper(),
              str(r["detail"]).replace("|", "/").replace("\n", " ")[:300]] for r in rows]
    lines = [f"# exabench acceptance: site {site}", "", f"References: {references}", "",
             *markdown.table(["run", "benchmark", "metric", "value", "unit", "reference", "verdict", "detail"], cells)]
    lines += ["", "Runs: " + ", ".join(f"{n} {v}" for v, n in c.items()) + ".", verdict_headline(rows)]
    return "\n".join(lines) + "\n"


FROM_HISTORY = "`make rerun` twice, then `exabench references --from-history`"


def verdict_headline(rows: list[dict]) -> str:
    """The verdict in one line, with its coverage: how many runs a reference judged, and why the
    others were not (a reader takes "no run fails" for more than it is when most were never judged).
    A run waiting for a reference derived from history says how to get one."""
    per_run = run_verdicts(rows)
    waiting = {r["run_id"] for r in rows if str(r["detail"]).startswith("no reference yet")}
    unjudged = sorted(run for run, v in per_run.items() if v == "no-reference")
    judged = len(per_run) - len(unjudged)
    reasons = []
    if awaiting := [run for run in unjudged if run in waiting]:
        verb = "awaits a reference" if len(awaiting) == 1 else "await references"
        reasons.append(f"{len(awaiting)} {verb} from this machine's history ({FROM_HISTORY})")
    if without := len(unjudged) - len(awaiting):
        reasons.append(f"{without} {'has' if without == 1 else 'have'} no reference that applies")
    tail = "".join(f"; {why}" for why in reasons)
    fails = failing_runs(rows)
    if fails:
        fail = "fails" if len(fails) == 1 else "fail"
        return f"FAILED: {', '.join(fails)} ({len(fails)} of {judged} judged runs {fail}{tail})."
    if not judged:
        return f"NOT JUDGED: none of {len(per_run)} runs has a reference{tail}."
    return f"ACCEPTED: {judged} of {len(per_run)} runs judged, none fails{tail}."


def junit_xml(rows: list[dict], site: str) -> str:
    """One testsuite per benchmark, one testcase per run and metric (CI dashboards read this)."""
    suites = ET.Element("testsuites", name=f"exabench acceptance {site}")
    for bench in sorted({r["benchmark"] for r in rows}):
        mine = [r for r in rows if r["benchmark"] == bench]
        n_fail = sum(r["verdict"] in FAILING for r in mine)
        n_skip = sum(r["verdict"] in ("expected-fail", "no-reference") for r in mine)
        suite = ET.SubElement(suites, "testsuite", name=f"{site}.{bench}", tests=str(len(mine)),
                              failures=str(n_fail), errors="0", skipped=str(n_skip))
        for r in mine:
            case = ET.SubElement(suite, "testcase", classname=f"exabench.{site}.{bench}",
                                 name=f"{r['run_id']}:{r['metric']}")
            if r["verdict"] in FAILING:
                ET.SubElement(case, "failure", message=f"{r['verdict']}: {r['detail']}", type=r["verdict"]).text = \
                    r["detail"]
            elif r["verdict"] in ("expected-fail", "no-reference"):
                ET.SubElement(case, "skipped", message=f"{r['verdict']}: {r['detail']}")
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"


# -- references from measured runs -----------------------------------------------------------------

# Defaults: a figure may be this much worse or better before acceptance fails. On a laptop or
# a shared login node other processes slow a run several-fold, so the slow side is wide: a rate
# may fall to a fifth (lower 0.8), a time may grow five-fold (upper 4.0). Tighten per site.
TOLERANCES = {True: (0.8, 1.0), False: (0.5, 4.0)}  # higher_is_better -> (lower, upper)


def reference_points(records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """The ok runs grouped by benchmark and point: the parameters that vary among the benchmark's
    runs, plus the layout (JSON of the point's `params` key of a reference entry)."""
    ok = [r for r in records if r["status"] == "ok" and r.get("metrics")]
    out: dict[tuple[str, str], list[dict]] = {}
    for bench in sorted({r["benchmark"] for r in ok}):
        mine = [r for r in ok if r["benchmark"] == bench]
        varying = sorted(k for k in {k for r in mine for k in r.get("params", {})}
                         if len({json.dumps(r["params"].get(k)) for r in mine}) > 1)
        groups: dict[str, list[dict]] = {}
        for r in mine:
            key = {**{k: r["params"].get(k) for k in varying}, **{k: r["layout"].get(k, 0) for k in LAYOUT}}
            groups.setdefault(json.dumps(key, sort_keys=True), []).append(r)
        out.update({(bench, key): rs for key, rs in sorted(groups.items())})
    return out


def derive_references(records: list[dict], metrics: dict[str, str] | None = None,
                      tolerances: dict[bool, tuple[float, float]] | None = None) -> list[dict]:
    """One reference per benchmark, headline metric and point (the parameters that vary among
    the benchmark's runs, plus the layout), valued at the median over repeats of ok runs."""
    tolerances = tolerances or TOLERANCES
    out = []
    for (bench, key), rs in reference_points(records).items():
        metric = (metrics or {}).get(bench) or headline_metric(rs[0])
        ms = [r["metrics"][metric] for r in rs if metric in r["metrics"]]
        if not ms:
            continue
        lower, upper = tolerances[bool(ms[0].get("higher_is_better", True))]
        out.append({"benchmark": bench, "metric": metric, "params": json.loads(key),
                    "value": float(f"{statistics.median(m['value'] for m in ms):.4g}"), "lower": lower,
                    "upper": upper, "unit": ms[0]["unit"],
                    "note": "median of " + ", ".join(sorted(r["run_id"] for r in rs))})
    return out


def efficiency_references(records: list[dict], band: tuple[float, float] = (5.0, 95.0),
                          min_tolerance: float = 0.05) -> list[dict]:
    """`scaling_efficiency` references of the multi-node runs among `records` (a campaign's, or
    several campaigns'): per benchmark and point, the median efficiency over the runs, with a band
    from the `band` percentiles of the runs' efficiencies (at least `min_tolerance` each side; one
    run gives no spread, so only the minimum). Each note names the runs and the spread."""
    import numpy as np

    multi = [r for r in with_scaling_efficiency([r for r in records if r["status"] == "ok"])
             if EFFICIENCY in r.get("metrics", {})]
    out = []
    for (bench, key), rs in reference_points(multi).items():
        values = np.asarray([r["metrics"][EFFICIENCY]["value"] for r in rs], float)
        med = float(np.median(values))
        lo, hi = (float(x) for x in np.percentile(values, band))
        out.append({"benchmark": bench, "metric": EFFICIENCY, "params": json.loads(key),
                    "value": float(f"{med:.4g}"), "lower": round(max(min_tolerance, 1 - lo / med), 4),
                    "upper": round(max(min_tolerance, hi / med - 1), 4), "unit": "1",
                    "note": f"median scaling efficiency of {len(values)} run(s) (spread {values.min():.3g} .. "
                            f"{values.max():.3g}, band p{band[0]:g}..p{band[1]:g}): "
                            + ", ".join(sorted(r["run_id"] for r in rs))})
    return out


def stored_records(store: str | Path, campaign_ids: list[str]) -> list[dict]:
    """The ok records of these stored campaigns, each with its `_campaign_id` (so that a multi-node
    run's efficiency is computed against the 1-node run of its own campaign)."""
    import pandas as pd

    from exabench.records.store import connect
    con = connect(store, read_only=True)
    try:
        con.register("wanted", pd.DataFrame({"campaign_id": list(campaign_ids)}))
        rows = con.execute("SELECT record, campaign_id FROM records WHERE status = 'ok' AND "
                           "campaign_id IN (SELECT campaign_id FROM wanted)").fetchall()
    finally:
        con.close()
    return [{**json.loads(text), "_campaign_id": cid} for text, cid in rows]


# How the notes of derived entries begin (derive_references, efficiency_references, history_references).
DERIVED_NOTES = ("median of ", "median scaling efficiency of ", "history: ")


def merge_references(published: str | Path, derived: list[dict], site: str) -> tuple[dict, list[dict]]:
    """A site's published references file with `derived` entries (of `site`) added where its
    `from_history` list asks for them: (the merged file's data, the entries added). Published
    entries win: a derived entry that repeats one (benchmark, metric, params) is dropped. A file of
    another site is refused: its runs would be judged against this site's figures."""
    data = load_and_validate(published, "references")
    if data.get("site") and data["site"] != site:
        raise ConfigError(str(published), "site", data["site"], f"'{site}' (the --site-name the entries are derived "
                          f"from), or merge into profiles/{site}/references.yaml",
                          f"is another site than --site-name {site}")
    # entries an earlier merge added are derived anew, not kept as if published
    refs = [e for e in data["references"] if not str(e.get("note", "")).startswith(DERIVED_NOTES)]

    def key(e):
        return e["benchmark"], e["metric"], json.dumps(e.get("params") or {}, sort_keys=True)

    have = {key(e) for e in refs}
    pending = _pending(published, data)

    def wanted(e):
        return any(p["benchmark"] == e["benchmark"] and p.get("metric", "") in ("", e["metric"])
                   and (p.get("metric") == EFFICIENCY) == (e["metric"] == EFFICIENCY)
                   and all((e.get("params") or {}).get(k) == v for k, v in (p.get("params") or {}).items())
                   for p in pending)

    added = [e for e in derived if key(e) not in have and wanted(e)]
    return {**data, "references": refs + added}, added


def merged_yaml(data: dict, published: str | Path, command: str) -> str:
    """The merged references file: the published file's own header kept, the command added."""
    lines = Path(published).read_text().splitlines()
    head = [line for i, line in enumerate(lines) if line.startswith("#") and ADDED not in line
            and not (i and ADDED in lines[i - 1])]
    source = str(data.get("source", "")).split("; derived entries: ")[0]
    body = yaml.safe_dump({"site": data.get("site", ""), "source": f"{source}; derived entries: {command}",
                           "references": data["references"],
                           "from_history": data.get("from_history") or []}, sort_keys=False, width=120)
    return "\n".join(head) + f"\n# {ADDED}\n#   {command}\n" + body


ADDED = "Entries added from measured runs by:"


def references_yaml(refs: list[dict], site: str, command: str) -> str:
    head = (f"# Performance references of site '{site}' (schema: workflow/schemas/references.schema.yaml).\n"
            f"# A run passes when its figure is within [value x (1 - lower), value x (1 + upper)].\n"
            f"# Derived from measured runs; regenerate with:\n#   {command}\n")
    body = yaml.safe_dump({"site": site, "source": command, "references": refs}, sort_keys=False, width=120)
    return head + body


# -- every node of an allocation ----------------------------------------------------------------------

def node_of(rec: dict) -> str:
    """The node a per-node run was launched on: the `.node-<name>` its run id ends with (the
    scheduler's name for it), else the host names the run saw."""
    hit = NODE_SUFFIX.search(rec["run_id"])
    if hit:
        return hit.group(1)
    hosts = (rec.get("provenance") or {}).get("hosts") or []
    return hosts[0] if len(hosts) == 1 else ",".join(hosts) or "?"


def node_outliers(records: list[dict], refs: list[Reference] | None = None, z_max: float = OUTLIER_Z,
                  crit=None) -> list[dict]:
    """Per single-node configuration (its run id less the .node-<name> suffix) and headline metric:
    each node's figure, its healthy peers' median and MAD, its robust z, whether it is slow or failed
    and why, and the node's status, judged as node_acceptance judges (exabench.analysis.node_verdict):
    one-sided (a faster node is no fault), confirmed before a drain, causes named."""
    return node_rows(node_sweep_verdict(records, refs, z_max, crit))


def node_sweep_verdict(records: list[dict], refs: list[Reference] | None = None, z_max: float = OUTLIER_Z,
                       crit=None, confirm=None) -> dict:
    """The verdict of the every-node script's records (one run per single-node configuration and node,
    its run id ending in .node-<name>): node_acceptance's judgement (exabench.analysis.node_verdict),
    as node tests. With `confirm` (the first pass's verdict -> the verdict with its confirmation round
    applied: exabench.analysis.node_confirm_scripts), the first pass screens and the round decides, as
    in node_acceptance; without it the first pass decides. A run outside a reference of the site
    fails its node as a failed run does."""
    from dataclasses import replace

    from exabench.analysis import node_verdict as nv
    from exabench.analysis.node_confirm import SUFFIX
    records = [r for r in records if SUFFIX not in r["run_id"]]  # node_acceptance's confirmation runs
    planned = [{"group": node_of(r), "kind": "node", "round": 0, "nodes": [node_of(r)], "run_id": r["run_id"],
                "configuration": NODE_SUFFIX.sub("", r["run_id"]), "benchmark": r["benchmark"], "record": "-"}
               for r in records]
    verdict = nv.judge(planned, {r["run_id"]: r for r in records}, replace(crit or nv.Criteria(z_max=z_max),
                                                                           confirm=confirm is not None))
    if confirm is not None:
        verdict = confirm(verdict)
    verdict["references"] = {}  # run id -> [(within, "reference: ...")]
    verdict["judged_by_references"] = []  # run ids a reference could have failed as slow
    by_node: dict[str, list] = {}
    for r in records:
        own = list(applicable(refs or [], r).values()) if r["status"] == "ok" else []
        checks = [judge(r, ref) for ref in own]
        verdict["references"][r["run_id"]] = [(v not in FAILING, f"reference: {detail}") for v, _, detail in checks]
        by_node.setdefault(node_of(r), []).extend(verdict["references"][r["run_id"]])
        if any(bounds_slowness(ref, r) for ref in own):
            verdict["judged_by_references"].append(r["run_id"])
    for node, checks in by_node.items():
        failing = [text for within, text in checks if not within]
        if failing:
            verdict["bad_nodes"][node] = verdict["bad_nodes"].get(node, []) + failing
            verdict["suspects"].pop(node, None)
            verdict["status"][node] = "drain"
        elif verdict["status"][node] == "inconclusive" and _judged_by_references_alone(node, verdict):
            # too few peers, but every test of the node judged against the site's references; one test
            # left unjudged, failed (a skipped NCCL run included) or in doubt keeps it inconclusive
            verdict["status"][node] = "pass"
    return verdict


def _judged_by_references_alone(node: str, verdict: dict) -> bool:
    """Whether each test of the node ran and a reference that bounds slowness judged it."""
    mine = [r for r in verdict["rows"] if r["nodes"] == [node]]
    return bool(mine) and all(r["status"] == "ok" and r["verdict"] == "not-judged"
                              and r["run_id"] in verdict["judged_by_references"] for r in mine)


def bounds_slowness(ref: Reference, rec: dict) -> bool:
    """Whether the reference's band could fail a slow figure of this run: a floor above zero where
    higher is better, a finite ceiling where lower is. A sanity band such as 0 .. 1 of peak fails no
    slow node, so it judges none (a node passed on it alone was a check that cannot fail)."""
    lo, hi = ref.band
    higher = bool(((rec.get("metrics") or {}).get(ref.metric) or {}).get("higher_is_better", True))
    return lo > 0 if higher else math.isfinite(hi)


def node_rows(verdict: dict) -> list[dict]:
    """The node report's rows of a sweep verdict: one per node test."""
    from exabench.analysis.node_verdict import evidence
    rows = []
    for r in verdict["rows"]:
        node = r["subject"]
        checks = verdict["references"].get(r["run_id"], [])
        reasons = [evidence(r)] if r["slow"] or r["failed"] else []
        reasons += [text for within, text in checks if not within]
        if r["verdict"] == "not-judged" and r["status"] == "ok":
            peers = sum(1 for q in verdict["rows"] if q["configuration"] == r["configuration"] and q["status"] == "ok")
            reasons.append(f"not judged among peers: {peers} ok nodes, outliers need {MIN_PEERS}")
        if r["verdict"] == "in-doubt":
            reasons.append(r["note"])
        rows.append({"node": node, "run_id": r["run_id"], "benchmark": r["benchmark"],
                     "configuration": r["configuration"], "metric": r["metric"], "value": r["value"],
                     "median": r["median"], "mad": r["mad"], "z": r["z"],
                     "flagged": bool(r["slow"] or r["failed"] or not all(within for within, _ in checks)),
                     "judged": r["verdict"] != "not-judged" or r["run_id"] in verdict["judged_by_references"],
                     "status": verdict["status"][node],
                     "reason": "; ".join(reasons)})
    return sorted(rows, key=lambda x: (x["configuration"], x["node"]))


def flagged_nodes(rows: list[dict]) -> list[str]:
    """The nodes not accepted: to drain, to re-test (suspects) or not judged."""
    return sorted({r["node"] for r in rows if r.get("status", "pass") not in ("pass", "suspect-cleared")})


def nodes_by_status(rows: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node, status in sorted({(r["node"], r["status"]) for r in rows}):
        out.setdefault(status, []).append(node)
    return out


def node_exit_code(rows: list[dict]) -> int:
    """As verdict.json's: 0 every node passes, 1 a node to drain, 2 could not decide."""
    statuses = {r["status"] for r in rows}
    return 1 if "drain" in statuses else 2 if statuses & {"suspect", "inconclusive", "down"} or not rows else 0


def _status_line(rows: list[dict]) -> str:
    by = nodes_by_status(rows)
    words = {"drain": "drain", "suspect": "re-test (suspect)", "inconclusive": "not judged (inconclusive)"}
    return "; ".join(f"{words[s]} {' '.join(by[s])}" for s in words if by.get(s))


def nodes_markdown(rows: list[dict], site: str) -> str:
    cells = [[r["node"], r["run_id"], r["metric"],
              *(("" if math.isnan(r[k]) else f"{r[k]:.4g}") for k in ("value", "median", "mad", "z")),
              "YES" if r["flagged"] else "", r["status"], r["reason"]] for r in rows]
    lines = [f"# exabench node check: site {site}", "",
             "Judged as node_acceptance judges (docs/acceptance.md): against the healthy peers' median, one-sided, "
             "a node drained when it fails a run or its slowness is confirmed, a suspect to re-test when it is slow "
             "in one observation only; the drain list and verdict.json are in nodes/.", "",
             *markdown.table(["node", "run", "metric", "value", "peers' median", "MAD", "z", "flagged", "status",
                              "reason"], cells)]
    if not rows:
        lines += ["", "No per-node records: the every-node job has not run."]
    else:
        lines += ["", ("Flagged nodes: " + _status_line(rows)) if flagged_nodes(rows) else "No node flagged."]
    return "\n".join(lines) + "\n"


def references_label(path: str | Path, name: str | None = None) -> str:
    """The references file's name and its kind: derived from the results history (its `source` is an
    `exabench references --from-history` command) or static (written by hand, or from one campaign)."""
    path = Path(path)
    source = ""
    if path.is_file():
        data = yaml.safe_load(path.read_text()) or {}
        source = str(data.get("source") or "") if isinstance(data, dict) else ""
    kind = "derived from the results history" if "--from-history" in source else "static"
    if "--merge" in source:  # a site's published entries, with those its from_history list asked for
        kind = "published, with entries " + ("derived from the results history" if "--from-history" in source
                                             else "derived from measured runs")
    return f"{name or path.name} ({kind})"


def write_verdicts(records: list[str], references: str, plan: str | None, site: str, markdown: str, csv: str,
                   junit: str) -> list[dict]:
    """Judge the records (files or directories) against references.yaml; write the verdicts as
    Markdown, CSV and JUnit XML. Planned runs without a record fail."""
    from exabench.analysis.runs import load_plan
    from exabench.records.record import record_paths
    from exabench.records.tidy import load_records

    rows = verdicts_against(load_records(record_paths(records)), references, load_plan(plan), site)
    # The file's name only, so a summary rebuilt from an archive is byte-identical.
    write_verdict_files(rows, site, references_label(references), markdown, csv, junit)
    return rows


def verdicts_against(records: list[dict], references: str | Path, plan: list[dict] | None, site: str) -> list[dict]:
    """The verdicts of `records` against a references file: its references and its pending
    (from_history) entries, which the detail of a run without a reference names. One reading for a
    campaign's verdicts and for an archive's rebuilt ones, so that the two are the same."""
    return verdicts(records, load_references(references), plan, site, load_pending(references))


def write_verdict_files(rows: list[dict], site: str, label: str, markdown: str | Path, csv: str | Path,
                        junit: str | Path) -> None:
    import pandas as pd

    from exabench.io import atomic_write_text
    atomic_write_text(markdown, summary_markdown(rows, site, label))
    atomic_write_text(csv, pd.DataFrame(rows).to_csv(index=False))
    atomic_write_text(junit, junit_xml(rows, site))


def check_verdicts(verdicts_csv: str) -> tuple[bool, str]:
    """(passed, text): whether a verdicts table has no failing run, and the lines that say so
    (each failing metric, then the failing runs by name)."""
    import pandas as pd

    df = pd.read_csv(verdicts_csv, keep_default_na=False)
    per_run = run_verdicts(df.to_dict("records"))
    bad = sorted(r for r, v in per_run.items() if v in FAILING)
    if not bad:
        return True, f"exabench: acceptance: {verdict_headline(df.to_dict('records'))}"
    lines = [f"FAILED {r['run_id']} [{r['metric']}]: {r['verdict']}: {r['detail']}"
             for _, r in df[df["verdict"].isin(FAILING)].iterrows()]
    lines.append(f"exabench: acceptance FAILED: {len(bad)} of {len(per_run)} runs: {', '.join(bad)} "
                 f"(summary {verdicts_csv})")
    return False, "\n".join(lines)


def write_node_check(records: list[str], references: str | None, site: str, markdown: str,
                     z_max: float = OUTLIER_Z, csv: str | None = None, out_dir: str | None = None,
                     crit=None, campaign: str = "", confirm=None) -> list[dict]:
    """Judge the every-node script's records as node_acceptance does; write the Markdown report (the
    rows as CSV, which `check_nodes` reads; and under out_dir the verdict's verdict.json, drain.txt,
    junit.xml, verdict.md and tests.csv)."""
    from exabench.io import atomic_write_text
    from exabench.records.record import record_paths
    from exabench.records.tidy import load_records

    refs = load_references(references) if references else []
    verdict = node_sweep_verdict(load_records(record_paths(records)), refs, z_max, crit, confirm)
    rows = node_rows(verdict)
    atomic_write_text(markdown, nodes_markdown(rows, site))
    if csv:
        import pandas as pd
        columns = ["node", "run_id", "benchmark", "configuration", "metric", "value", "median", "mad", "z",
                   "flagged", "judged", "status", "reason"]
        atomic_write_text(csv, pd.DataFrame(rows, columns=columns).to_csv(index=False))
    if out_dir:
        from exabench.analysis.verdict_document import write_files
        write_files(verdict, out_dir, site, campaign)
    return rows


def check_nodes(nodes_csv: str, with_references: bool) -> tuple[bool, str]:
    """(passed, text): every node passes (none to drain, none to re-test, every one judged: among
    peers, or against references)."""
    import pandas as pd

    df = pd.read_csv(nodes_csv, keep_default_na=False)
    if df.empty:
        return False, "exabench: node check FAILED: no per-node records (run the every-node job script first)"
    rows = df.to_dict("records")
    if not (df["judged"].astype(str) == "True").any():
        return False, (f"exabench: node check cannot judge: fewer than {MIN_PEERS} ok nodes per configuration and "
                       + ("the references judge none of them" if with_references
                          else "no references.yaml to judge them against"))
    if flagged_nodes(rows):
        return False, (f"exabench: node check FAILED (exit {node_exit_code(rows)}): {_status_line(rows)} "
                       f"(see {nodes_csv}; drain list: {Path(nodes_csv).parent / 'nodes' / 'drain.txt'})")
    return True, f"exabench: node check passed: {df['node'].nunique()} nodes, none flagged"


def node_check_line(rows: list[dict], markdown: str) -> str:
    if not rows:
        return "no per-node records: run the every-node job script first (snakemake ... every_node_script)"
    return (f"{len({r['node'] for r in rows})} nodes checked; flagged: {_status_line(rows) or 'none'} "
            f"-> {markdown}")
