"""Validation of the communication model against published scaling figures: one row per published
case (results/reference/published_scaling.yaml), published against projected efficiency, with the
verdict, why it misses where it does, and every source written out."""

from __future__ import annotations

from pathlib import Path

from exabench.io import logged, write_csv_and_markdown
from exabench.markdown import frame
from exabench.perf.alphabeta import Assumptions, project
from exabench.perf.reference import PROJECTED_BANNER, Reference
from exabench.lazy import lazy_import

pd = lazy_import("pandas")


def validation_table(ref: Reference) -> pd.DataFrame:
    """One row per published case: published and projected efficiency (at the stated overlap, and its
    bounds at no and full overlap), the gap in percentage points, the verdict, why, and the sources."""
    overlap = float(ref.value(ref.data, "default_overlap", "default_overlap"))
    tol = float(ref.data.get("tolerance_pp", 10))
    rows = []
    for i, case in enumerate(ref.data["cases"]):
        where = f"cases[{i}]"
        m, w = ref.machine(case["machine"]), ref.workload(case["workload"])
        published = float(ref.value(case, "published_efficiency", where))
        base, nodes = int(case.get("baseline_nodes", 1)), int(case["nodes"])
        effs = {}
        for label, ov in (("projected", overlap), ("no_overlap", 0.0), ("full_overlap", 1.0)):
            p = project(w, m, [nodes], Assumptions(overlap=ov, mode=case.get("mode", "weak"), baseline_nodes=base,
                                                   global_batch=case.get("global_batch")))
            effs[label] = float(p["efficiency"].iloc[0])
            if label == "projected":
                at = p.iloc[0]
        gap = 100 * (effs["projected"] - published)
        inside = effs["no_overlap"] - tol / 100 <= published <= effs["full_overlap"] + tol / 100
        verdict = "match" if abs(gap) <= tol else ("miss (optimistic)" if gap > 0 else "miss (pessimistic)")
        pub = case["published_efficiency"]
        sources = [pub["source"] + ("" if pub.get("verified", True) else " (unverified)")]
        for s in ref.cited(ref.data["machines"][m.name]) + ref.cited(ref.data["workloads"][w.name]):
            if s not in sources:
                sources.append(s)
        rows.append({"case": case["id"], "title": case.get("title", ""), "machine": m.name, "workload": w.name,
                     "mode": case.get("mode", "weak"), "baseline_nodes": base, "nodes": nodes,
                     "devices": nodes * m.devices_per_node, "published": published,
                     "projected": effs["projected"], "projected_no_overlap": effs["no_overlap"],
                     "projected_full_overlap": effs["full_overlap"], "gap_pp": gap, "verdict": verdict,
                     "published_within_overlap_bounds": bool(inside), "compute_ms": 1e3 * at["compute_s"],
                     "allreduce_ms": 1e3 * at["comm_s"], "why": "" if verdict == "match" else
                     " ".join(str(case.get("why_miss", "not explained")).split()), "sources": "; ".join(sources)})
    return pd.DataFrame(rows)


def validation_markdown(table: pd.DataFrame, ref: Reference) -> str:
    overlap = ref.data["default_overlap"]
    shown = table[["case", "nodes", "devices", "published", "projected", "projected_no_overlap",
                   "projected_full_overlap", "gap_pp", "verdict", "compute_ms", "allreduce_ms", "sources"]]
    used = sorted({s.split(" ")[0].rstrip("*") for cell in table["sources"] for s in cell.split("; ")})
    lines = [f"# Communication model vs published scaling ({PROJECTED_BANNER})", "",
             "Efficiency = throughput(N nodes) / (N x throughput(baseline)). `projected` uses the stated overlap "
             f"of {overlap['value']:.0%} ({overlap.get('note', '')}); the two bounds assume none and full overlap. "
             f"gap_pp = projected - published, in percentage points; a match is within "
             f"{ref.data.get('tolerance_pp', 10)} pp. Sources marked * are estimates (see the reference file); "
             "(unverified) marks a published value quoted from the seed material.", "",
             frame(shown), "", "## Where the model misses, and why", ""]
    for _, r in table[table["verdict"] != "match"].iterrows():
        lines.append(f"- **{r['case']}** ({r['verdict']}, {r['gap_pp']:+.0f} pp): {r['why']}")
    if (table["verdict"] == "match").all():
        lines.append("- none")
    unverified = [(c["id"], c["published_efficiency"]) for c in ref.data["cases"]
                  if not c["published_efficiency"].get("verified", True)]
    if unverified:
        lines += ["", "## Published values not found in a primary source", ""]
        lines += [f"- **{case}** ({pub['value']:.0%}): {' '.join(str(pub.get('note', '')).split())}"
                  for case, pub in unverified]
        for _, pub in unverified:  # sources named in those notes are written out too
            used += [k for k in ref.sources if k in str(pub.get("note", "")) and k not in used]
    lines += ["", f"## Sources (from {Path(ref.path).name})", ""]
    lines += [f"- `{k}`: {' '.join(str(ref.sources[k]).split())}" for k in used]
    return "\n".join(lines) + "\n"


def write_validation(reference: str | Path, csv: str | Path, markdown: str | Path, log: str | None = None) -> str:
    with logged(log):
        ref = Reference(reference)
        table = validation_table(ref)
        return write_csv_and_markdown(csv, table, markdown, validation_markdown(table, ref))
