"""Comparison tables from result records alone: per site, across sites, scaling,
configuration matrices and frameworks.

Every table is a long DataFrame (one row per cell) written as CSV, Parquet and
Markdown. A cell aggregates the repeats of one configuration: its value is the
median of the runs that are `ok`, `run_ids` lists every run behind it, and
`status` says `ok`, `partial` (some repeats not ok), or the status of the runs
(`failed`, `timeout`, `skipped`, `missing` when planned but no record exists, `corrupt` when its
record file is not a valid record).
A cell without an ok run has no value: never a zero, never a dropped row.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from exabench import markdown
from exabench.analysis import scaling
from exabench.analysis.frameworks import framework_table
from exabench.analysis.runs import CELL, LAYOUT, PRECISION_PARAMS, cells, load_runs
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

# Parameters that name a problem size or an algorithm, first match wins.
SIZE_PARAMS = ("size_per_node", "rows_per_rank", "size", "batch_size", "image_size", "message_bytes", "bytes", "m", "n")
ALGORITHM_PARAMS = ("algorithm", "algo", "init", "optimizer", "solver", "kernel")


# -- the tables ----------------------------------------------------------------------------------

SITE_KEYS = ["site", "benchmark", "framework", "point", *LAYOUT, "precision", "metric", "higher_is_better"]


def site_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Every configuration of every site with its headline figure, and its energy where measured."""
    return with_energy(cells(runs, SITE_KEYS), runs, SITE_KEYS)


def with_energy(table: pd.DataFrame, runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Beside each cell, the median over its ok runs of the timed region's energy (J) and of the headline
    per joule (empty where no source measured them: docs/energy.md)."""
    if runs.empty or "energy_j" not in runs:
        return table.assign(energy_j=math.nan, per_joule=math.nan, per_joule_unit="")
    ok = runs[runs["status"] == "ok"]
    folded = ok.groupby(keys, dropna=False, sort=False).agg(
        energy_j=("energy_j", "median"), per_joule=("per_joule", "median"),
        per_joule_unit=("per_joule_unit", "first")).reset_index()
    out = table.merge(folded, on=keys, how="left")
    out["per_joule_unit"] = out["per_joule_unit"].fillna("")
    return out


def cross_site_table(runs: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Speedup of each site over `baseline` for the same workload (benchmark and parameters).

    The baseline cell is the one with the same layout, else the baseline's largest run
    of that workload. Speedups: total, per node, and per device (GPUs, or nodes on CPU).
    """
    keys = ["site", "benchmark", "workload", "params", *LAYOUT, "nodes_", "devices", "metric", "higher_is_better"]
    runs = runs.assign(nodes_=runs["nodes"])
    c = cells(runs, keys).drop(columns="nodes_")
    base = c[c["site"] == baseline]
    rows = []
    for _, r in c[c["site"] != baseline].iterrows():
        same = base[(base["params"] == r["params"]) & (base["benchmark"] == r["benchmark"])
                    & (base["metric"] == r["metric"])]
        match = same[(same[list(LAYOUT)] == r[list(LAYOUT)].values).all(axis=1)]
        b = (match if len(match) else same.sort_values(["nodes", "devices", "value"], ascending=False)).head(1)
        row = {k: r[k] for k in ["benchmark", "workload", "metric", "unit", "site", "nodes", "devices", "value",
                                 "status", "run_ids"]}
        if b.empty:
            row.update(baseline_nodes=math.nan, baseline_devices=math.nan, baseline_value=math.nan,
                       baseline_status="no baseline run", baseline_run_ids="", speedup=math.nan,
                       speedup_per_node=math.nan, speedup_per_device=math.nan)
        else:
            b = b.iloc[0]
            hib = bool(r["higher_is_better"])
            both = not (math.isnan(r["value"]) or math.isnan(b["value"]))
            row.update(baseline_nodes=b["nodes"], baseline_devices=b["devices"], baseline_value=b["value"],
                       baseline_status=b["status"], baseline_run_ids=b["run_ids"])
            # Per node / per device: the strong-scaling efficiency formula with nodes / devices as workers.
            row.update(
                speedup=scaling.speedup(r["value"], b["value"], 1, 1, "strong", hib) if both else math.nan,
                speedup_per_node=scaling.efficiency(r["value"], b["value"], r["nodes"], b["nodes"], "strong", hib)
                if both else math.nan,
                speedup_per_device=scaling.efficiency(r["value"], b["value"], r["devices"], b["devices"], "strong",
                                                      hib) if both else math.nan)
        rows.append(row)
    cols = ["benchmark", "workload", "metric", "unit", "site", "nodes", "devices", "value", "status", "run_ids",
            "baseline_nodes", "baseline_devices", "baseline_value", "baseline_status", "baseline_run_ids", "speedup",
            "speedup_per_node", "speedup_per_device"]
    return pd.DataFrame(rows, columns=cols)


def scaling_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Strong or weak scaling series (same workload, threads and GPUs per rank; workers vary),
    each against its smallest measured (ok) run, with the ideal line."""
    keys = ["site", "benchmark", "workload", "params", "scaling", "threads_per_rank", "gpus_per_rank", "metric",
            "higher_is_better", "workers", "nodes"]
    c = cells(runs, keys)
    rows = []
    for _, s in c.groupby(keys[:9], sort=True):
        if s["workers"].nunique() < 2:
            continue
        s = s.sort_values(["workers", "nodes"])
        measured = s[s["value"].notna()]
        mode = s["scaling"].iloc[0]  # the workload's, from its records
        b = measured.iloc[0] if len(measured) else None
        for _, r in s.iterrows():
            row = {"site": r["site"], "benchmark": r["benchmark"], "series": f"{r['workload']}.t{r['threads_per_rank']}"
                   + (f"g{r['gpus_per_rank']}" if r["gpus_per_rank"] else ""), "mode": mode,
                   "metric": r["metric"], "unit": r["unit"], "workers": r["workers"], "nodes": r["nodes"],
                   "value": r["value"], "status": r["status"], "run_ids": r["run_ids"]}
            if b is None:
                row.update(baseline_workers=math.nan, baseline_value=math.nan, speedup=math.nan,
                           ideal_speedup=math.nan, efficiency=math.nan, ideal_value=math.nan)
            else:
                hib, n, n0, v0 = bool(r["higher_is_better"]), r["workers"], b["workers"], b["value"]
                has = not math.isnan(r["value"])
                row.update(baseline_workers=n0, baseline_value=v0,
                           speedup=scaling.speedup(r["value"], v0, n, n0, mode, hib) if has else math.nan,
                           ideal_speedup=scaling.ideal_speedup(n, n0),
                           efficiency=scaling.efficiency(r["value"], v0, n, n0, mode, hib) if has else math.nan,
                           ideal_value=scaling.ideal_value(v0, n, n0, mode, hib))
            rows.append(row)
    cols = ["site", "benchmark", "series", "mode", "metric", "unit", "workers", "nodes", "value", "status", "run_ids",
            "baseline_workers", "baseline_value", "speedup", "ideal_speedup", "efficiency", "ideal_value"]
    return pd.DataFrame(rows, columns=cols)


def _axis_value(row: dict, key: str):
    return row[key] if key in LAYOUT else row["_params"].get(key)


def matrix_table(runs: pd.DataFrame, row_keys: tuple[str, ...], col_keys: tuple[str, ...]) -> pd.DataFrame:
    """Configuration matrices per site and benchmark: the first row key and the first column key
    (layout fields or parameters) that both vary among a benchmark's runs; every other setting
    is the matrix's context (one matrix per context)."""
    keys = ["site", "benchmark", "metric", "context", "row_key", "row", "col_key", "col"]
    rows = []
    for (site, bench, metric), g in (runs.groupby(["site", "benchmark", "metric"], sort=True) if len(runs) else []):
        cols = ["params", "run_id", "status", "value", "unit", "error", *LAYOUT]
        runs_g = [dict(zip(cols, v)) for v in zip(*(g[c].tolist() for c in cols))]
        for r in runs_g:
            r["_params"] = json.loads(r["params"])

        def varies(key, runs_g=runs_g):
            return len({str(v) for v in (_axis_value(r, key) for r in runs_g) if v is not None}) > 1
        rk = next((k for k in row_keys if varies(k)), None)
        ck = next((k for k in col_keys if k != rk and varies(k)), None)
        if rk is None or ck is None:
            continue
        for r in runs_g:
            rest = {k: v for k, v in r["_params"].items() if k not in (rk, ck)}
            rest.update({k: r[k] for k in LAYOUT if k not in (rk, ck)})
            rows.append({"site": site, "benchmark": bench, "metric": metric,
                         "context": ",".join(f"{k}={v}" for k, v in sorted(rest.items())),
                         "row_key": rk, "row": str(_axis_value(r, rk)), "col_key": ck, "col": str(_axis_value(r, ck)),
                         **{k: r[k] for k in ("run_id", "status", "value", "unit", "error")}})
    if not rows:
        return pd.DataFrame(columns=keys + CELL)
    out = cells(pd.DataFrame(rows), keys)
    # A context with one cell is no matrix (it is a row of the per-site table).
    size = out.groupby(keys[:4], sort=False)["row"].transform("size")
    out = out[size > 1]
    if out.empty:
        return pd.DataFrame(columns=keys + CELL)
    # Numbers sort as numbers ("8" before "16"); the CSV keeps the text of each axis value.
    order = out.assign(_r=out["row"].map(_num_key), _c=out["col"].map(_num_key))
    return out.loc[order.sort_values(keys[:4] + ["_r", "_c"]).index].reset_index(drop=True)


def _num_key(text: str):
    """Numbers by value, sizes with a unit by amount ('2000rows' before '20000rows', '512MiB' before
    '8GB'), other text after them."""
    from exabench.benchmarks.analytics.common import parse_size
    from exabench.errors import ConfigError

    try:
        return (0, float(text), "")
    except ValueError:
        pass
    try:
        kind, amount = parse_size(text)
        return (0, amount, kind)
    except ConfigError:
        return (1, 0.0, text)


def threads_size_table(runs: pd.DataFrame) -> pd.DataFrame:
    return matrix_table(runs, ("threads_per_rank",), SIZE_PARAMS)


def precision_algorithm_table(runs: pd.DataFrame) -> pd.DataFrame:
    return matrix_table(runs, PRECISION_PARAMS, ALGORITHM_PARAMS)


# -- rendering -----------------------------------------------------------------------------------

fmt = markdown.cell


def cell_text(value: float, status: str, n_ok: int, n_runs: int) -> str:
    """A value, or the reason there is none, in capitals (never a blank or a zero)."""
    if status in ("ok", "partial") and not math.isnan(value):
        return fmt(value) + (f" ({n_ok}/{n_runs} ok)" if status == "partial" else "")
    return status.upper()


def markdown_long(df: pd.DataFrame, title: str, columns: list[str], note: str = "") -> str:
    lines = [f"## {title}", ""] + ([note, ""] if note else [])
    if df.empty:
        return "\n".join(lines + ["(no rows: nothing in the records varies the way this table needs)", ""]) + "\n"
    cells = []
    for _, r in df.iterrows():
        vals = []
        for c in columns:
            if c == "value" and "status" in r and "n_ok" in r:
                vals.append(cell_text(r["value"], r["status"], r["n_ok"], r["n_runs"]))
            elif c == "value" and "status" in r:
                vals.append(cell_text(r["value"], r["status"], 1, 1))
            else:
                vals.append(fmt(r[c]))
        cells.append(vals)
    return "\n".join(lines + markdown.table(columns, cells)) + "\n"


def markdown_matrix(df: pd.DataFrame, title: str) -> str:
    """Each matrix as a grid; a cell shows its value and a [n] reference to the runs behind it."""
    lines = [f"## {title}", ""]
    if df.empty:
        return "\n".join(lines + ["(no rows: no benchmark varies both axes of this matrix)", ""]) + "\n"
    for key, g in df.groupby(["site", "benchmark", "metric", "context", "row_key", "col_key"], sort=False):
        site, bench, metric, context, rk, ck = key
        unit = next((u for u in g["unit"] if u), "")
        cols = list(dict.fromkeys(g["col"]))
        refs: list[str] = []
        grid = []
        for row, rg in g.groupby("row", sort=False):
            texts = []
            for col in cols:
                hit = rg[rg["col"] == col]
                if hit.empty:
                    texts.append("NOT PLANNED")
                    continue
                h = hit.iloc[0]
                refs.append(h["run_ids"])
                texts.append(f"{cell_text(h['value'], h['status'], h['n_ok'], h['n_runs'])} [{len(refs)}]")
            grid.append([row, *texts])
        lines += [f"### {bench} on {site}: {metric} ({unit}), {rk} x {ck}", "", f"Context: {context}", "",
                  *markdown.table([f"{rk} \\ {ck}", *cols], grid), ""]
        lines += [f"[{i}] {ids}" for i, ids in enumerate(refs, 1)] + [""]
    return "\n".join(lines) + "\n"


TABLES = {
    # name: (title, Markdown columns); matrices render as grids
    "site": ("Per site: headline figure of every configuration",
             ["site", "benchmark", "point", "precision", "metric", "value", "unit", "energy_j", "per_joule",
              "per_joule_unit", "n_runs", "status", "run_ids"]),
    "cross_site": ("Across sites: speedup over the baseline site",
                   ["benchmark", "workload", "metric", "site", "nodes", "devices", "value", "baseline_value",
                    "speedup", "speedup_per_node", "speedup_per_device", "status", "baseline_status", "run_ids",
                    "baseline_run_ids"]),
    "scaling": ("Scaling: efficiency against the smallest measured run",
                ["site", "series", "mode", "metric", "workers", "value", "unit", "speedup", "ideal_speedup",
                 "efficiency", "ideal_value", "status", "run_ids"]),
    "threads_x_size": ("Configuration matrix: threads per rank x problem size", None),
    "precision_x_algorithm": ("Configuration matrix: precision x algorithm", None),
    "frameworks": ("Frameworks compared: same task, batch, precision and layout (relative: 1 = the best stack)",
                   ["site", "task", "preset", "nodes", "ranks_per_node", "precision", "stack", "collectives",
                    "metric", "value", "unit", "relative", "time_to_accuracy", "target_accuracy", "tta_relative",
                    "status", "run_ids"]),
}


def table_names(baseline: str | None = None) -> list[str]:
    """The tables a campaign gets, in order: the cross-site one only against a baseline site."""
    return [name for name in TABLES if baseline or name != "cross_site"]


def all_tables(runs: pd.DataFrame, baseline: str | None = None) -> dict[str, pd.DataFrame]:
    make = {"site": site_table, "cross_site": lambda r: cross_site_table(r, baseline), "scaling": scaling_table,
            "threads_x_size": threads_size_table, "precision_x_algorithm": precision_algorithm_table,
            "frameworks": framework_table}
    return {name: make[name](runs) for name in table_names(baseline)}


def table_markdown(name: str, df: pd.DataFrame, baseline: str | None = None) -> str:
    title, columns = TABLES[name]
    if columns is None:
        return markdown_matrix(df, title)
    note = f"Baseline site: {baseline}." if name == "cross_site" else ""
    return markdown_long(df, title, columns, note)


def write_tables(tables: dict[str, pd.DataFrame], out_dir: str | Path, baseline: str | None = None) -> list[Path]:
    """<name>.csv, <name>.parquet and <name>.md per table, plus comparison.md with them all."""
    from exabench.io import atomic_write_text
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, combined = [], ["# exabench comparison tables", ""]
    for name, df in tables.items():
        md = table_markdown(name, df, baseline)
        combined.append(md)
        atomic_write_text(out_dir / f"{name}.md", md)
        atomic_write_text(out_dir / f"{name}.csv", df.to_csv(index=False))
        df.to_parquet(out_dir / f"{name}.parquet", index=False)
        written += [out_dir / f"{name}.{ext}" for ext in ("csv", "parquet", "md")]
    atomic_write_text(out_dir / "comparison.md", "\n".join(combined))
    return written + [out_dir / "comparison.md"]


def write_comparison(records: list[str], plan: str | None, site: str | None, baseline: str | None,
                     out_dir: str | Path) -> str:
    """Records (files or directories) -> every comparison table in `out_dir`; returns a one-line summary."""
    from exabench.records.record import record_paths

    runs = load_runs(record_paths(records), plan, site)
    written = write_tables(all_tables(runs, baseline or None), out_dir, baseline or None)
    return f"{len(runs)} runs -> {len(written)} table files in {out_dir}"
