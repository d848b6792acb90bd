"""The pictures of what a campaign measured, drawn from its records: frameworks side by side,
time-to-accuracy curves, sweeps as lines, and per-run step-time distributions. Each function
writes one PNG, or raises NothingToDraw saying why the records do not support it."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from exabench.analysis.figures import NothingToDraw, finish, grid, spread
from exabench.analysis.runs import LAYOUT
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

MAX_PANELS = 12  # a figure beyond this many panels is unreadable: the rest are named under it
ORDINAL = re.compile(r"^(\d+(?:\.\d+)?)\s*([A-Za-z]*)$")  # 2, 0.5, "1000rows", "64MB"
SWEPT_LAYOUT = ("threads_per_rank",)  # nodes and ranks: the scaling picture's
MIN_STEPS = 3  # fewer timed steps make no distribution


def samples_of(records: dict[str, dict], run_ids, metric: str) -> list[float]:
    """Every per-step sample of `metric` in the ok runs `run_ids`, pooled (repeats of one setting)."""
    out: list[float] = []
    for run_id in run_ids:
        rec = records.get(run_id)
        if rec and rec["status"] == "ok":
            out += [float(x) for x in ((rec.get("metrics") or {}).get(metric) or {}).get("samples") or []]
    return out


def _more_panels_note(fig, drawn: int, total: int, what: str) -> None:
    if total > drawn:
        fig.text(0.5, 0.005, f"and {total - drawn} more {what} (tables/ has them all)", ha="center", fontsize=8)


def _figure(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


# -- frameworks side by side ----------------------------------------------------------------------

def _setting_title(key: dict) -> str:
    work = json.loads(key["workload"] or "{}")
    batch = f", batch {work['batch_size']}" if "batch_size" in work else ""
    return (f"{key['task']} ({key['preset']}) on {key['site']}: {key['precision'] or '?'}{batch}, "
            f"{key['nodes']} node(s) x {key['ranks_per_node']} ranks x {key['threads_per_rank']} threads")


def framework_panels(table: pd.DataFrame, records: dict[str, dict]) -> list[dict]:
    """One panel per setting (task, preset, layout, precision, workload) and figure (the headline,
    then the time to accuracy where measured): a bar per stack with the value the frameworks table
    shows and the range of its runs' per-step samples."""
    keys = ["site", "task", "preset", *LAYOUT, "precision", "workload"]
    panels = []
    for values, g in table.groupby(keys, sort=True, dropna=False):
        key = dict(zip(keys, values))
        g = g.sort_values("stack")
        bars = []
        for _, r in g.iterrows():
            # the headline's spread from the runs the table took it from: the throughput runs, where there are
            runs = [i for i in r["run_ids"].split(";")
                    if ((records.get(i) or {}).get("params") or {}).get("mode") != "time_to_accuracy"]
            bars.append({"label": r["stack"], "value": r["value"], "status": r["status"],
                         "err": spread(r["value"], samples_of(records, runs or r["run_ids"].split(";"), r["metric"]))})
        first = records.get(g["run_ids"].iloc[0].split(";")[0]) or {}
        hib = ((first.get("metrics") or {}).get(g["metric"].iloc[0]) or {}).get("higher_is_better", True)
        better = "higher" if hib else "lower"
        panels.append({"title": _setting_title(key), "ylabel": f"{g['metric'].iloc[0]} ({g['unit'].iloc[0]}), "
                                                               f"{better} is better", "bars": bars})
        if g["time_to_accuracy"].notna().any():
            target = g["target_accuracy"].iloc[0]
            panels.append({"title": _setting_title(key), "ylabel": f"time to accuracy {target} (s), lower is better",
                           "bars": [{"label": r["stack"], "value": r["time_to_accuracy"], "status": r["status"],
                                     "err": (0.0, 0.0)} for _, r in g.iterrows()]})
    return panels


def plot_frameworks(table: pd.DataFrame, records: list[dict], path) -> Path:
    """The frameworks table as bars: each stack (framework and its collectives) on the same task,
    batch, precision and layout; error bars the range of the per-step samples."""
    if table.empty:
        raise NothingToDraw("no task was run by two frameworks (or stacks) at the same setting")
    panels = framework_panels(table, {r["run_id"]: r for r in records})
    drawn = panels[:MAX_PANELS]
    fig, axes = grid(len(drawn), 5.2, 3.4)
    for ax, panel in zip(axes, drawn):
        bars = panel["bars"]
        xs = range(len(bars))
        heights = [b["value"] if b["value"] == b["value"] else 0.0 for b in bars]
        errs = [[b["err"][0] for b in bars], [b["err"][1] for b in bars]]
        ax.bar(xs, heights, color=[f"C{i}" for i in xs], yerr=errs, capsize=6, ecolor="black")
        for x, b in zip(xs, bars):
            text = _figure(b["value"]) if b["value"] == b["value"] else b["status"].upper()
            ax.annotate(text, (x, heights[x]), ha="center", fontsize=8, textcoords="offset points", xytext=(8, 3))
        ax.set_xticks(list(xs), [b["label"] for b in bars])
        ax.set_ylabel(panel["ylabel"], fontsize=8)
        ax.set_title(panel["title"], fontsize=8, wrap=True)
    _more_panels_note(fig, len(drawn), len(panels), "settings")
    fig.suptitle("Frameworks side by side\n(error bars: range of the per-step samples)", fontsize=10)
    return finish(fig, path)


# -- time-to-accuracy curves ----------------------------------------------------------------------

def accuracy_curves(records: list[dict]) -> list[dict]:
    """Each ok time-to-accuracy run's validation accuracy after each epoch, against the epoch and
    against the training time so far (the sum of the epochs' times, slowest rank)."""
    curves = []
    for rec in records:
        params, metrics = rec.get("params") or {}, rec.get("metrics") or {}
        accs = (metrics.get("accuracy") or {}).get("samples") or []
        if params.get("mode") != "time_to_accuracy" or not accs or rec["status"] != "ok":
            continue
        epoch_times = (metrics.get("epoch_time") or {}).get("samples") or []
        wall = [sum(epoch_times[:i + 1]) for i in range(len(accs))] if len(epoch_times) >= len(accs) else []
        curves.append({"run_id": rec["run_id"], "task": (rec.get("workload") or {}).get("task", rec["benchmark"]),
                       "site": rec.get("site", ""), "label": f"{rec.get('framework') or rec['benchmark']}"
                                                             f" ({rec['run_id'].split('.')[-1]})",
                       "accuracy": [float(a) for a in accs], "wall": wall,
                       "target": params.get("target_accuracy")})
    return sorted(curves, key=lambda c: (c["site"], c["task"], c["run_id"]))


def plot_time_to_accuracy(records: list[dict], path) -> Path:
    """Per task: validation accuracy against the epoch and against the training time, one line per
    run, the target dashed."""
    curves = accuracy_curves(records)
    if not curves:
        raise NothingToDraw("no time-to-accuracy run (params mode=time_to_accuracy) finished with its accuracies")
    tasks = sorted({(c["site"], c["task"]) for c in curves})[:MAX_PANELS // 2]
    fig, axes = grid(2 * len(tasks), 5.0, 3.4)
    for i, (site, task) in enumerate(tasks):
        by_epoch, by_time = axes[2 * i], axes[2 * i + 1]
        mine = [c for c in curves if (c["site"], c["task"]) == (site, task)]
        for n, c in enumerate(mine):
            by_epoch.plot(range(1, len(c["accuracy"]) + 1), c["accuracy"], "o-", color=f"C{n}", label=c["label"])
            if c["wall"]:
                by_time.plot(c["wall"], c["accuracy"], "o-", color=f"C{n}", label=c["label"])
        for ax, xlabel in ((by_epoch, "epoch"), (by_time, "training time (s, sum of the epochs)")):
            for target in sorted({c["target"] for c in mine if c["target"] is not None}):
                ax.axhline(target, ls="--", color="grey", label=f"target {target}")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("validation accuracy")
            ax.set_title(f"{task} on {site}", fontsize=9)
            ax.legend(fontsize=7)
    return finish(fig, path, "Time to accuracy: validation accuracy per epoch")


# -- sweeps as lines ------------------------------------------------------------------------------

def _ordinal(value) -> float | None:
    """A swept value's position on a line (2, 0.5, "1000rows"); None for a category (fp32, kmeans++)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    hit = ORDINAL.match(str(value))
    return float(hit.group(1)) if hit else None


def sweep_series(records: list[dict]) -> list[dict]:
    """Per benchmark and swept parameter (the records' `swept` keys, and threads per rank) with at
    least two ordinal values: one line per setting of everything else, the headline figure's median
    over repeats at each value, with the range of the per-step samples."""
    from exabench.records.record import headline_metric

    ok = [r for r in records if r["status"] == "ok" and headline_metric(r)]
    series = []
    for bench in sorted({r["benchmark"] for r in ok}):
        recs = [r for r in ok if r["benchmark"] == bench]
        swept = sorted({k for r in recs for k in (r.get("swept") or {})}) + list(SWEPT_LAYOUT)
        for key in swept:
            def value_of(r):
                return (r.get("layout") or {}).get(key) if key in SWEPT_LAYOUT else (r.get("params") or {}).get(key)
            points = [(r, value_of(r)) for r in recs]
            if any(_ordinal(v) is None for _, v in points) or len({v for _, v in points}) < 2:
                continue  # a category (fp32, kmeans++) or one value: no line
            lines: dict[str, dict] = {}
            for r, v in points:
                rest = {**(r.get("params") or {}), **{k: (r.get("layout") or {}).get(k) for k in LAYOUT}}
                rest.pop(key, None)
                line = lines.setdefault(json.dumps(rest, sort_keys=True, default=str), {"rest": rest, "at": {}})
                line["at"].setdefault(v, []).append(r)
            lines = {k: ln for k, ln in lines.items() if len(ln["at"]) >= 2}
            for metric in sorted({headline_metric(r) for r in recs}):
                drawn = [_line(ln, metric, [o["rest"] for o in lines.values()]) for ln in lines.values()]
                drawn = [d for d in drawn if len(d["x"]) >= 2]
                if drawn:
                    m = next((r["metrics"][metric] for r in recs if metric in r["metrics"]), {})
                    series.append({"site": recs[0].get("site", ""), "benchmark": bench, "key": key, "metric": metric,
                                   "unit": m.get("unit", ""), "lines": drawn})
    return series


def _line(line: dict, metric: str, others: list[dict]) -> dict:
    xs, ys, lo, hi = [], [], [], []
    for v, runs in sorted(line["at"].items(), key=lambda kv: _ordinal(kv[0])):
        values = [float(r["metrics"][metric]["value"]) for r in runs if metric in r["metrics"]]
        if not values:
            continue
        y = statistics.median(values)
        samples = [float(s) for r in runs for s in r["metrics"][metric].get("samples") or []]
        below, above = spread(y, samples)
        xs.append(v), ys.append(y), lo.append(below), hi.append(above)
    differ = sorted(k for k, v in line["rest"].items() if any(o.get(k) != v for o in others))
    return {"x": xs, "y": ys, "err": [lo, hi], "label": ", ".join(f"{k}={line['rest'][k]}" for k in differ)}


def plot_sweeps(records: list[dict], path) -> Path:
    """Each swept parameter as a line: the headline figure against the parameter's values."""
    series = sweep_series(records)
    if not series:
        raise NothingToDraw("no parameter was swept over two or more numeric values with everything else equal")
    drawn = series[:MAX_PANELS]
    fig, axes = grid(len(drawn), 5.0, 3.4)
    for ax, s in zip(axes, drawn):
        ordinals = sorted({_ordinal(x) for line in s["lines"] for x in line["x"]})
        labels = {}
        for line in s["lines"]:
            labels.update({_ordinal(x): str(x) for x in line["x"]})
        for n, line in enumerate(s["lines"]):
            xs = [ordinals.index(_ordinal(x)) for x in line["x"]]
            ax.errorbar(xs, line["y"], yerr=line["err"], fmt="o-", color=f"C{n}", capsize=4,
                        label=line["label"] or None)
        ax.set_xticks(range(len(ordinals)), [labels[o] for o in ordinals])
        ax.set_xlabel(s["key"])
        ax.set_ylabel(f"{s['metric']} ({s['unit']})")
        ax.set_title(f"{s['benchmark']} on {s['site']}: {s['metric']} by {s['key']}", fontsize=9)
        if any(line["label"] for line in s["lines"]):
            ax.legend(fontsize=7)
    _more_panels_note(fig, len(drawn), len(series), "sweeps")
    fig.suptitle("Sweeps: median over repeats\n(error bars: range of the per-step samples)", fontsize=10)
    return finish(fig, path)


# -- step-time distributions ----------------------------------------------------------------------

def timed_steps(rec: dict) -> tuple[str, list[float]]:
    """(metric, samples) of a run's timed steps: its step_time, else a headline that is a time per
    step or iteration (seconds, lower is better: K-Means' time per iteration); ("", []) if none."""
    from exabench.records.record import headline_metric

    metrics = rec.get("metrics") or {}
    for name in ("step_time", headline_metric(rec)):
        m = metrics.get(name) or {}
        if m.get("unit") == "s" and not m.get("higher_is_better", True) and len(m.get("samples") or []) >= MIN_STEPS:
            return name, [float(x) for x in m["samples"]]
    return "", []


def step_times(records: list[dict]) -> dict[tuple[str, str, str], list[tuple[str, list[float]]]]:
    """Per site, task (a framework's twin beside it) and timed metric, each ok run's timed steps (at
    least MIN_STEPS)."""
    out: dict[tuple[str, str, str], list[tuple[str, list[float]]]] = {}
    for rec in sorted(records, key=lambda r: r["run_id"]):
        metric, samples = timed_steps(rec) if rec["status"] == "ok" else ("", [])
        if samples:
            task = (rec.get("workload") or {}).get("task") or rec["benchmark"]
            out.setdefault((rec.get("site", ""), task, metric), []).append((rec["run_id"], samples))
    return out


def plot_step_times(records: list[dict], path) -> Path:
    """Per benchmark, a box per run of its timed steps (median, quartiles, whiskers at 1.5 IQR,
    outliers as points): a slow step or a bimodal run shows here, not in a median."""
    groups = step_times(records)
    if not groups:
        raise NothingToDraw(f"no run timed {MIN_STEPS} or more steps (step_time, or a time per iteration, "
                            "with samples)")
    keys = sorted(groups)[:MAX_PANELS]
    fig, axes = grid(len(keys), 9.0, max(2.2, 0.45 * max(len(groups[k]) for k in keys) + 1.4), cols=1)
    for ax, key in zip(axes, keys):
        runs = groups[key][::-1]  # boxes count up from the bottom: the first run on top
        boxes = ax.boxplot([s for _, s in runs], orientation="horizontal", widths=0.6, patch_artist=True,
                           medianprops={"color": "black"})
        frameworks = sorted({name.split(".")[0] for name, _ in runs})
        for box, (name, _) in zip(boxes["boxes"], runs):  # a colour per benchmark: a framework's twin apart
            box.set(facecolor=f"C{frameworks.index(name.split('.')[0])}", alpha=0.7)
        everything = [x for _, s in runs for x in s]
        if min(everything) > 0 and max(everything) > 20 * min(everything):
            from matplotlib.ticker import FormatStrFormatter, LogLocator
            ax.set_xscale("log")  # a few slow steps would squash every box into a line
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
            ax.tick_params(axis="x", which="minor", labelbottom=False)
        ax.set_yticks(range(1, len(runs) + 1), [f"{name} ({len(s)})" for name, s in runs], fontsize=7)
        ax.set_xlabel(f"{key[2]} (s)")
        ax.set_title(f"{key[1]} on {key[0]}: {key[2]}", fontsize=9)
    _more_panels_note(fig, len(keys), len(groups), "benchmarks")
    return finish(fig, path, "Step times per run (timed steps or iterations in brackets)")
