"""Plots from the comparison tables and records (matplotlib, Agg): scaling curves with their
ideal lines, throughput by precision, allreduce bandwidth by message size, per-node
distributions, and MLPerf runs' energy to solution; `all_plots` draws those and the pictures of
exabench.analysis.pictures. Each function writes one PNG, or raises NothingToDraw when the records
do not support it: the plots index says so in one line, and no placeholder picture is drawn.
Output is byte-stable for the same input and matplotlib version (no timestamps), so a reproduced
plot can be compared with its original."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from exabench.analysis.figures import NothingToDraw, figure, finish, grid
from exabench.analysis.runs import PRECISION_PARAMS, cells
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

BUSBW = re.compile(r"^busbw\.(\d+)B$")
HOLE_STATUSES = ("failed", "timeout", "skipped", "missing", "corrupt")
_figure, _finish, _grid = figure, finish, grid


def plot_scaling(scaling: pd.DataFrame, path) -> Path:
    """One panel per series: measured figure against workers, the ideal line dashed, and holes
    (failed, missing) marked with an x at the ideal value and their status."""
    title = "Scaling against the smallest measured run"
    if scaling.empty:
        raise NothingToDraw("no workload was run at more than one size (same parameters, threads and GPUs per rank)")
    series = list(scaling.groupby(["site", "benchmark", "series", "metric"], sort=True))
    fig, axes = _grid(len(series))
    for ax, ((site, _, name, metric), s) in zip(axes, series):
        s = s.sort_values("workers")
        ok = s[s["value"].notna()]
        ax.plot(s["workers"], s["ideal_value"], "--", color="grey", label="ideal")
        ax.plot(ok["workers"], ok["value"], "o-", label="measured")
        for _, r in s[s["value"].isna()].iterrows():
            if not math.isnan(r["ideal_value"]):
                ax.plot(r["workers"], r["ideal_value"], "x", color="red")
                ax.annotate(r["status"].upper(), (r["workers"], r["ideal_value"]), color="red", fontsize=8,
                            textcoords="offset points", xytext=(4, 4))
        for _, r in ok.iterrows():
            ax.annotate(f"E={r['efficiency']:.2f}", (r["workers"], r["value"]), fontsize=8,
                        textcoords="offset points", xytext=(4, -10))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers")
        ax.set_ylabel(f"{metric} ({s['unit'].iloc[0]})")
        ax.set_title(f"{name} on {site} ({s['mode'].iloc[0]} scaling)", fontsize=9)
        ax.legend(fontsize=8)
    return _finish(fig, path, title)


def _setting(params: str) -> str:
    """A run's parameters but its precision: runs that differ in nothing else share a panel."""
    return json.dumps({k: v for k, v in json.loads(params).items() if k not in PRECISION_PARAMS}, sort_keys=True)


def _setting_label(setting: str, others: list[str]) -> str:
    """What sets this panel's runs apart from the benchmark's other panels (e.g. mode=time_to_accuracy)."""
    mine, theirs = json.loads(setting), [json.loads(o) for o in others if o != setting]
    differ = sorted(k for k in mine if any(o.get(k) != mine[k] for o in theirs))
    return ", ".join(f"{k}={mine[k]}" for k in differ)


def precision_panels(runs: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, y label, bars) per site, benchmark and setting (every parameter but the precision: a bar
    never folds two workloads); the bars are the cells of the best layout of each precision (the
    largest run), so precisions compare like for like."""
    rates = runs[runs["higher_is_better"] & (runs["precision"] != "")].copy()
    if rates.empty:
        return []
    rates["setting"] = [_setting(p) for p in rates["params"]]
    settings = rates.groupby(["site", "benchmark"])["setting"].unique()
    panels = []
    for (site, bench, metric, setting), g in rates.groupby(["site", "benchmark", "metric", "setting"], sort=True):
        c = cells(g, ["precision", "nodes", "ranks_per_node", "threads_per_rank", "gpus_per_rank"])
        c = c.sort_values(["precision", "nodes", "ranks_per_node"]).groupby("precision").tail(1)
        label = _setting_label(setting, list(settings[(site, bench)]))
        panels.append((f"{bench} on {site}" + (f"\n{label}" if label else ""), f"{metric} ({c['unit'].iloc[0]})", c))
    return panels


def plot_precision(runs: pd.DataFrame, path, records: list[dict] | None = None) -> Path:
    """Throughput (higher-is-better headline figures) by precision (precision_panels), error bars the
    range of the runs' per-step samples (`records`); a precision whose runs all failed shows its
    status instead of a bar."""
    from exabench.analysis.figures import spread
    from exabench.analysis.pictures import samples_of

    title = "Throughput by precision\n(error bars: range of the per-step samples)"
    panels = [p for p in precision_panels(runs) if p[2]["precision"].nunique() > 1]
    if not panels:
        raise NothingToDraw("no workload was run at more than one precision")
    by_id = {r["run_id"]: r for r in records or []}
    metric_of = dict(zip(runs["run_id"], runs["metric"]))
    fig, axes = _grid(len(panels), 4.5, 3.2)
    for ax, (panel_title, ylabel, c) in zip(axes, panels):
        xs = list(range(len(c)))
        have = [(x, r) for x, (_, r) in zip(xs, c.iterrows()) if r["value"] == r["value"]]
        errs = [spread(r["value"], samples_of(by_id, r["run_ids"].split(";"), metric_of[r["run_ids"].split(";")[0]]))
                for _, r in have]
        ax.bar([x for x, _ in have], [r["value"] for _, r in have], color="C0",
               yerr=[[e[0] for e in errs], [e[1] for e in errs]] if errs else None, capsize=5, ecolor="black")
        for x, (_, r) in zip(xs, c.iterrows()):
            text = f"{r['value']:.3g}" if r["value"] == r["value"] else r["status"].upper()
            ax.annotate(text, (x, 0 if r["value"] != r["value"] else r["value"]), ha="center", fontsize=8,
                        textcoords="offset points", xytext=(8, 3))
        ax.set_xticks(xs, [f"{p}\nn{n}r{rp}" for p, n, rp in zip(c["precision"], c["nodes"], c["ranks_per_node"])])
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title, fontsize=9)
    fig.suptitle(title, fontsize=10)
    return _finish(fig, path)


def allreduce_points(records: list[dict]) -> pd.DataFrame:
    rows = []
    for rec in records:
        if rec["status"] != "ok":
            continue
        for name, m in (rec.get("metrics") or {}).items():
            hit = BUSBW.match(name)
            if hit:
                rows.append({"run_id": rec["run_id"], "site": rec.get("site", ""), "bytes": int(hit.group(1)),
                             "busbw": float(m["value"]), "unit": m["unit"]})
    return pd.DataFrame(rows, columns=["run_id", "site", "bytes", "busbw", "unit"])


def plot_allreduce(records: list[dict], path) -> Path:
    """Bus bandwidth (nccl-tests convention) against message size, one line per run."""
    title = "Allreduce bus bandwidth by message size"
    pts = allreduce_points(records)
    if pts.empty:
        raise NothingToDraw("no allreduce run with per-size bus bandwidth (metrics busbw.<bytes>B)")
    fig = _figure((7, 4))
    ax = fig.subplots()
    for run_id, g in pts.groupby("run_id", sort=True):
        g = g.sort_values("bytes")
        ax.plot(g["bytes"], g["busbw"], "o-", label=run_id, markersize=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(f"busbw ({pts['unit'].iloc[0]})")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return _finish(fig, path)


def node_panels(df: pd.DataFrame) -> list[tuple[tuple[str, str], pd.DataFrame]]:
    """One panel per configuration (its run id less the node) and metric: two K-Means settings, or
    one benchmark at two sizes, are judged among their own peers and never share a median."""
    return list(df.groupby(["configuration", "metric"], sort=True))


def plot_nodes(node_rows: list[dict], path) -> Path:
    """Per-node figures of an every-node campaign: one panel per configuration, the peers'
    median and MAD band, flagged nodes in red with their names."""
    title = "Per-node distribution"
    df = pd.DataFrame(node_rows)
    if df.empty:
        raise NothingToDraw("no per-node records (the every-node acceptance was not run)")
    groups = node_panels(df)
    fig, axes = _grid(len(groups), 5.5, 3.4)
    for ax, ((configuration, metric), g) in zip(axes, groups):
        g = g.sort_values("node").reset_index(drop=True)
        med, mad = g["median"].iloc[0], g["mad"].iloc[0]
        ax.axhline(med, color="grey", label="median")
        if mad == mad:
            ax.axhspan(med - mad, med + mad, color="grey", alpha=0.2, label="median +- MAD")
        for i, r in g.iterrows():
            y = r["value"] if r["value"] == r["value"] else med
            ax.plot(i, y, "x" if r["value"] != r["value"] else "o", color="red" if r["flagged"] else "C0")
            if r["flagged"]:
                ax.annotate(r["node"] if r["value"] == r["value"] else f"{r['node']} (no figure)", (i, y),
                            color="red", fontsize=8, textcoords="offset points", xytext=(3, 3))
        ax.set_xticks(range(len(g)), g["node"], rotation=90, fontsize=7)
        ax.set_ylabel(metric)
        ax.set_title(f"{configuration}: {metric} on {len(g)} nodes", fontsize=8)
        ax.legend(fontsize=7)
    return _finish(fig, path, title)


def plot_energy_to_solution(runs: pd.DataFrame, path) -> Path:
    """MLPerf runs (headline time_to_train): energy to solution against time to solution, one point per
    run, one panel per benchmark and site. Only measured energy is drawn (docs/energy.md)."""
    title = "Energy to solution (MLPerf runs)"
    need = {"metric", "energy_j", "value", "status"}
    pts = runs[(runs["metric"] == "time_to_train") & (runs["status"] == "ok")] if need <= set(runs.columns) else runs[:0]
    have = pts[pts["energy_j"] == pts["energy_j"]] if len(pts) else pts
    if have.empty:
        why = ("no MLPerf run in the records" if pts.empty else
               f"{len(pts)} MLPerf runs, none with measured energy (the record's energy section says why)")
        raise NothingToDraw(why)
    groups = list(have.groupby(["benchmark", "site"], sort=True))
    fig, axes = _grid(len(groups), 4.5, 3.4)
    for ax, ((bench, site), g) in zip(axes, groups):
        ax.plot(g["value"], g["energy_j"] / 1e3, "o", color="C2")
        ax.set_xlabel(f"time to train ({g['unit'].iloc[0]})")
        ax.set_ylabel("energy to train (kJ)")
        ax.set_title(f"{bench} on {site}: {len(g)} of {len(pts[(pts['benchmark'] == bench)])} runs measured",
                     fontsize=9)
    return _finish(fig, path, title)


# Every picture a campaign can have, in the report's order (what it measured first), with its title.
PLOTS = {"frameworks": "Frameworks side by side", "time_to_accuracy": "Time-to-accuracy curves",
         "sweeps": "Sweeps", "step_times": "Step-time distributions", "scaling": "Scaling against ideal",
         "precision": "Throughput by precision", "allreduce": "Allreduce bus bandwidth by message size",
         "nodes": "Per-node distribution", "energy": "Energy to solution (MLPerf runs)"}
INDEX = "index.json"  # the plots folder's list of pictures: file, or why it was not drawn


def all_plots(runs: pd.DataFrame, records: list[dict], node_records: list[dict], out_dir) -> list[dict]:
    """Draw every picture the records support; one entry per picture of PLOTS: its name, title and
    file, or (file None) why it was not drawn. No placeholder picture is written."""
    from exabench.analysis import pictures
    from exabench.analysis.acceptance import node_outliers
    from exabench.analysis.compare import scaling_table
    from exabench.analysis.frameworks import framework_table

    drawers = {"frameworks": lambda p: pictures.plot_frameworks(framework_table(runs), records, p),
               "time_to_accuracy": lambda p: pictures.plot_time_to_accuracy(records, p),
               "sweeps": lambda p: pictures.plot_sweeps(records, p),
               "step_times": lambda p: pictures.plot_step_times(records, p),
               "scaling": lambda p: plot_scaling(scaling_table(runs), p),
               "precision": lambda p: plot_precision(runs, p, records),
               "allreduce": lambda p: plot_allreduce(records, p),
               "nodes": lambda p: plot_nodes(node_outliers(node_records), p),
               "energy": lambda p: plot_energy_to_solution(runs, p)}
    out_dir = Path(out_dir)
    return [draw(name, title, drawers[name], out_dir / f"{name}.png") for name, title in PLOTS.items()]


def draw(name: str, title: str, draw_to, path: Path) -> dict:
    """One picture's index entry: drawn by `draw_to(path)`, or why not (NothingToDraw)."""
    try:
        return {"name": name, "title": title, "file": draw_to(path).name, "why": ""}
    except NothingToDraw as why:
        return {"name": name, "title": title, "file": None, "why": str(why)}


def write_index(entries: list[dict], path: str | Path) -> None:
    """The pictures' index (for the campaign page), their files named relative to its folder."""
    from exabench.io import atomic_write_text
    atomic_write_text(path, json.dumps(entries, indent=1) + "\n")


def index_markdown(entries: list[dict]) -> str:
    """The plots folder's index: the pictures drawn, then one line per picture not drawn and why."""
    lines = ["# Plots", ""] + [f"- [{e['title']}]({e['file']})" for e in entries if e["file"]]
    skipped = [f"- {e['title']}: not drawn, {e['why']}" for e in entries if not e["file"]]
    return "\n".join(lines + (["", "Not drawn:", ""] + skipped if skipped else [])) + "\n"


def write_plots(records: list[str], nodes: list[str], plan: str | None, site: str | None, out_dir) -> str:
    """Records (and per-node records) -> every picture they support in `out_dir`, with its index
    (index.json, index.md); returns a one-line summary."""
    from exabench.analysis.runs import load_plan, run_table
    from exabench.io import atomic_write_text
    from exabench.records.record import record_paths
    from exabench.records.tidy import load_records

    recs = load_records(record_paths(records))
    node_recs = load_records(record_paths(nodes)) if nodes else []
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in PLOTS:  # an earlier campaign's picture this one may not support (no other file is touched)
        (out_dir / f"{name}.png").unlink(missing_ok=True)
    entries = all_plots(run_table(recs, load_plan(plan), site), recs, node_recs, out_dir)
    write_index(entries, out_dir / INDEX)
    atomic_write_text(out_dir / "index.md", index_markdown(entries))
    drawn = [e["name"] for e in entries if e["file"]]
    return f"{len(drawn)} plots -> {out_dir} ({', '.join(drawn) or 'none'}); not drawn: {len(entries) - len(drawn)}"


def node_test_bars(rows: list[dict], path: str | Path) -> Path:
    """One test of a cluster acceptance (exabench.analysis.node_verdict's rows): a bar per node or
    pair, the peers' median as a line; slow or failed bars red, those of a down node grey."""
    r0 = rows[0]
    fig = _figure((max(6, 0.35 * len(rows)), 3.2))
    ax = fig.subplots()
    values = [0 if math.isnan(r["value"]) else r["value"] for r in rows]
    colours = ["tab:red" if r["slow"] or r["failed"] else ("lightgray" if r["value"] != r["value"] else "tab:blue")
               for r in rows]
    ax.bar(range(len(rows)), values, color=colours)
    if not math.isnan(r0["median"]):
        ax.axhline(r0["median"], color="black", lw=1, label="peers' median")
        ax.legend(fontsize=7)
    ax.set_xticks(range(len(rows)), [r["subject"].replace(" ", "-") for r in rows], rotation=90, fontsize=7)
    ax.set_ylabel(f"{r0['metric']} ({r0['unit']})")
    ax.set_title(f"{r0['configuration']}: {r0['metric']} per {'pair' if r0['kind'] == 'pair' else 'node'}",
                 fontsize=9)
    return _finish(fig, path)


HEAT_Z_CLIP = 6.0  # robust z beyond this is one colour: a node 6 or 60 z off its peers is off alike
STATUS_COLOURS = {"drain": "red", "suspect": "darkorange", "down": "grey", "inconclusive": "dimgrey"}


def node_heat_matrix(verdict: dict) -> dict:
    """The heat map's data from a cluster verdict (node_verdict.judge): a row per node (its label
    marks its status and a bad link), a column per node test then per pair test, each cell the
    node's robust z (for a pair test the median over its pairs: a bad link makes all of its node's
    pairs slow, its partners only one each), signed so that negative is worse than the peers
    whichever way the metric goes; nan where not judged, `failed` where its run failed."""
    def test_of(r: dict) -> tuple:
        return r["kind"], r["configuration"], r["metric"]

    tests = sorted({test_of(r) for r in verdict["rows"] if r["kind"] in ("node", "pair")},
                   key=lambda t: (t[0] != "node", t[1], t[2]))
    z, failed = [], []
    for node in verdict["nodes"]:
        cells = [[r for r in verdict["rows"] if test_of(r) == t and node in r["nodes"]] for t in tests]
        zs = [[r["z"] if r["higher_is_better"] else -r["z"] for r in rs if r["z"] == r["z"]] for rs in cells]
        z.append([float(pd.Series(c).median()) if c else math.nan for c in zs])
        failed.append([any(r["failed"] for r in rs) for rs in cells])
    status = verdict["status"]
    labels = [node + (f" {status[node]}" if status[node] in STATUS_COLOURS else "")
              + ((" (unstable link)" if (verdict.get("unstable") or {}).get(node) == "link" else " (bad link)")
                 if node in verdict["bad_links"] else "") for node in verdict["nodes"]]
    return {"nodes": verdict["nodes"], "labels": labels, "node_tests": sum(t[0] == "node" for t in tests),
            "tests": [f"{c}\n{m}" + ("\n(pairs' median)" if k == "pair" else "") for k, c, m in tests],
            "z": z, "failed": failed}


def plot_node_heat_map(verdict: dict, path) -> Path:
    """The cluster acceptance at a glance: nodes x tests coloured by robust z (node_heat_matrix), red
    worse than the peers, clipped at +-HEAT_Z_CLIP; drained nodes' names in red, suspects' in orange,
    down nodes' rows hatched, bad links and slow pairs no node explains named below."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import Normalize
    from matplotlib.patches import Rectangle

    m = node_heat_matrix(verdict)
    z = np.array(m["z"], dtype=float).reshape(len(m["nodes"]), len(m["tests"]))
    if not m["node_tests"] or np.isnan(z[:, :m["node_tests"]]).all():
        raise NothingToDraw("no node test was judged (no node figure, or fewer than 3 nodes with one per test)")
    fig = _figure((2.5 + 1.3 * len(m["tests"]), 1.8 + 0.3 * len(m["nodes"])))
    ax = fig.subplots()
    cmap = colormaps["RdBu"].with_extremes(bad="lightgrey")
    image = ax.imshow(np.ma.masked_invalid(z), cmap=cmap, norm=Normalize(-HEAT_Z_CLIP, HEAT_Z_CLIP), aspect="auto")
    fig.colorbar(image, ax=ax, extend="both", label="robust z (negative: worse than its peers)")
    if m["node_tests"] < len(m["tests"]):
        ax.axvline(m["node_tests"] - 0.5, color="black", lw=2)
    for i, node in enumerate(m["nodes"]):
        if verdict["status"][node] == "down":
            ax.add_patch(Rectangle((-0.5, i - 0.5), len(m["tests"]), 1, fill=False, hatch="//", edgecolor="grey", lw=0))
        for j, v in enumerate(z[i]):
            text = f"{v:+.1f}" if v == v else ("failed" if m["failed"][i][j] else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=7,
                    color="white" if abs(v) > HEAT_Z_CLIP / 2 else ("red" if v != v else "black"))
    ax.set_xticks(range(len(m["tests"])), m["tests"], fontsize=7)
    ax.set_yticks(range(len(m["nodes"])), m["labels"], fontsize=8)
    for label, node in zip(ax.get_yticklabels(), m["nodes"]):
        label.set_color(STATUS_COLOURS.get(verdict["status"][node], "black"))
    links = ", ".join(verdict["bad_links"]) or "none"
    odd = verdict["unexplained_pairs"]
    odd = f"; slow pairs no node explains: {', '.join(odd)}" if odd else ""
    ax.set_xlabel(f"bad links (every pair of the node slow): {links}{odd}", fontsize=8)
    return _finish(fig, path, "Node acceptance: robust z per node and test")
