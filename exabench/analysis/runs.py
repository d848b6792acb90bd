"""The run table every comparison reads: one row per run (planned runs without a record show as
`missing`) with its headline figure, and the cell that folds the repeats of one configuration.

A cell's value is the median of the runs that are `ok`, `run_ids` lists every run behind it, and
`status` says `ok`, `partial` (some repeats not ok), or the status of the runs (`failed`,
`timeout`, `skipped`, `missing`, `corrupt`: a file in records/ that is not a valid record, its
row named after the file with the reason). A cell without an ok run has no value: never a zero, never a
dropped row.
"""

from __future__ import annotations

import json
import math
import re

from exabench.records.progress import load_plan  # noqa: F401 - the run table's plan reader
from exabench.records.record import LAYOUT, headline_metric, with_plan_entry, workload_of
from exabench.records.tidy import load_records
from exabench.lazy import lazy_import

np = lazy_import("numpy")
pd = lazy_import("pandas")

# The parameters that name a run's precision, first match wins.
PRECISION_PARAMS = ("precision", "dtype")
LAYOUT_TOKEN = re.compile(r"\.n\d+r\d+t\d+(g\d+)?(\.rep\d+)?$")
REPEAT_TOKEN = re.compile(r"\.rep\d+$")
CELL = ["value", "unit", "n_ok", "n_runs", "status", "run_ids", "error"]


# -- one row per run ---------------------------------------------------------------------------

def workers_of(layout: dict) -> int:
    """Workers of a run for scaling: GPUs where ranks drive GPUs, else ranks."""
    ranks = int(layout.get("ranks") or layout["nodes"] * layout["ranks_per_node"])
    return ranks * int(layout.get("gpus_per_rank") or 0) or ranks


def devices_of(layout: dict) -> int:
    """Devices of a run for per-device figures: its GPUs, or its nodes on a CPU-only run."""
    ranks = int(layout.get("ranks") or layout["nodes"] * layout["ranks_per_node"])
    return ranks * int(layout.get("gpus_per_rank") or 0) or int(layout["nodes"])


def _run_row(run_id, benchmark, framework, site, preset, repeat, params, layout, status, error, metrics,
             info=None, workload=None):
    facts = workload_of({"benchmark": benchmark, "params": params, "workload": workload})
    metric = headline_metric({"metrics": metrics, "workload": workload})
    tta = metrics.get("time_to_accuracy") or {}
    m = metrics.get(metric) or {}
    energy, per_joule = metrics.get("energy") or {}, metrics.get(f"{metric}_per_joule") or {}
    precision = m.get("precision") or next((str(params[k]) for k in PRECISION_PARAMS if k in params), "")
    return {"run_id": run_id, "point": REPEAT_TOKEN.sub("", run_id), "workload": LAYOUT_TOKEN.sub("", run_id),
            "benchmark": benchmark, "task": facts["task"], "scaling": facts["scaling"], "framework": framework,
            "site": site,
            "preset": preset, "repeat": repeat, **{k: int(layout.get(k) or 0) for k in LAYOUT},
            "ranks": int(layout.get("ranks") or layout["nodes"] * layout["ranks_per_node"]),
            "workers": workers_of(layout), "devices": devices_of(layout),
            "params": json.dumps(params, sort_keys=True), "status": status, "error": error or "",
            "metric": metric or "", "value": float(m["value"]) if status == "ok" and "value" in m else math.nan,
            "unit": m.get("unit", ""), "precision": precision,
            "higher_is_better": bool(m.get("higher_is_better", True)),
            # for the framework comparison: what averaged the gradients, and the time-to-accuracy
            "collectives": str((info or {}).get("backend") or ""),
            "time_to_accuracy": float(tta["value"]) if status == "ok" and "value" in tta else math.nan,
            # the timed region's energy and the headline per joule, where a source measured them (docs/energy.md)
            "energy_j": float(energy["value"]) if status == "ok" and "value" in energy else math.nan,
            "per_joule": float(per_joule["value"]) if status == "ok" and "value" in per_joule else math.nan,
            "per_joule_unit": per_joule.get("unit", "")}


def run_table(records: list[dict], plan: list[dict] | None = None, site: str | None = None) -> pd.DataFrame:
    """One row per run with its headline figure; planned runs without a record are `missing`, and a
    corrupt record's row takes its run's facts from the plan."""
    by_id = {p["run_id"]: p for p in plan or []}
    records = [with_plan_entry(r, by_id.get(r["run_id"]), site) if r.get("corrupt_file") else r for r in records]
    rows = [_run_row(r["run_id"], r["benchmark"], r.get("framework", ""), r.get("site", ""), r.get("preset", ""),
                     r.get("repeat", 1), r.get("params", {}), r.get("layout", {}), r["status"], r.get("error"),
                     r.get("metrics") or {}, r.get("info"), r.get("workload")) for r in records]
    seen = {(r["site"], r["run_id"]) for r in rows}
    # A plan written before plan entries carried the workload's facts: those of its benchmark's records.
    facts = {r["benchmark"]: r["workload"] for r in records if r.get("workload")}
    for p in plan or []:
        where = site or p.get("site", "")
        if (where, p["run_id"]) not in seen:
            rows.append(_run_row(p["run_id"], p["benchmark"], p.get("framework", ""), where, p.get("preset", ""),
                                 p.get("repeat", 1), p.get("params", {}), p["layout"], "missing",
                                 "planned, but no record was written", {}, None,
                                 p.get("workload") or facts.get(p["benchmark"])))
    # A run without metrics (missing, crashed, timed out) shows the figure its benchmark's other
    # runs report, so it lands in the same table row, series or matrix as a visible hole.
    headline = {}
    for r in rows:
        if r["metric"]:
            headline.setdefault(r["benchmark"], {k: r[k] for k in ("metric", "unit", "higher_is_better")})
    for r in rows:
        if not r["metric"] and r["benchmark"] in headline:
            r.update(headline[r["benchmark"]])
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    return df.sort_values(["site", "benchmark", "run_id"], kind="stable").reset_index(drop=True)


def load_runs(record_paths, plan_path=None, site=None) -> pd.DataFrame:
    return run_table(load_records(record_paths), load_plan(plan_path), site)


# -- cells ---------------------------------------------------------------------------------------

def cell(status, value, unit, run_id, error) -> dict:
    """The repeats of one configuration (parallel sequences, one item per run) folded into
    one cell (see the module doc)."""
    ok = [v for st, v in zip(status, value) if st == "ok" and v == v]
    if len(ok) == len(status):
        state = "ok"
    elif ok:
        state = "partial"
    else:
        others = sorted(set(status) - {"ok"})
        state = others[0] if len(others) == 1 else "failed"
    return {"value": float(np.median(ok)) if ok else math.nan, "unit": next((u for u in unit if u), ""),
            "n_ok": len(ok), "n_runs": len(status), "status": state, "run_ids": ";".join(sorted(run_id)),
            "error": " / ".join(sorted({e for e in error if isinstance(e, str) and e}))}


def cells(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One cell per distinct value of `keys`, in sorted key order (plain arrays: fast for 10^4 runs)."""
    if df.empty:
        return pd.DataFrame(columns=keys + CELL)
    cols = [df[c].to_numpy() for c in ("status", "value", "unit", "run_id", "error")]
    out = []
    for k, idx in df.groupby(keys, sort=True, dropna=False).indices.items():
        out.append({**dict(zip(keys, k if isinstance(k, tuple) else (k,))),
                    **cell(*(list(c[idx]) for c in cols))})
    return pd.DataFrame(out, columns=keys + CELL)
