"""The framework comparison: one task (ResNet-50, the CIFAR-10 ConvNet, CosmoFlow...) at the
same problem, batch, precision and layout under every software stack that ran it, with
throughput and time-to-accuracy side by side.

A stack is the framework and the collectives that average its gradients: `native` (torch DDP,
tf.distribute's MultiWorkerMirroredStrategy) or `horovod`. Runs are matched on the task, the
preset, the layout, the precision and every parameter the task's runs share, except the ones
that only pick or tune the stack and the ones that only say how long to measure: so two stacks
are never compared on different problems, and a time-to-accuracy run lands in the same row as
the throughput run of the same configuration.
"""

from __future__ import annotations

import json
import math

from exabench.analysis.runs import cell
from exabench.records.record import LAYOUT
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

# Parameters that choose or tune the stack, or how long and in which mode a run is measured.
STACK_PARAMS = frozenset({"backend", "fusion_threshold_mb", "compression", "channels_last", "compile"})
MEASURE_PARAMS = frozenset({"mode", "target_accuracy", "max_epochs", "epochs", "steps", "warmup_steps", "warmup",
                            "fail_at_step", "seed"})
COLUMNS = ["site", "task", "preset", *LAYOUT, "precision", "workload", "stack", "framework", "collectives",
           "metric", "value", "unit", "relative", "time_to_accuracy", "target_accuracy", "tta_relative", "status",
           "run_ids"]


def stack_of(framework: str, params: dict) -> str:
    return f"{framework or '?'}+{'horovod' if params.get('backend') == 'horovod' else 'native'}"


def _workload_key(params: dict, shared: set[str]) -> str:
    return json.dumps({k: params.get(k) for k in sorted(shared)}, sort_keys=True)


def _cell(g: pd.DataFrame) -> dict:
    """The runs of `g` folded the way every comparison table folds repeats (runs.cell)."""
    return cell(*(list(g[c]) for c in ("status", "value", "unit", "run_id", "error")))


def _row(keys: dict, g: pd.DataFrame) -> dict:
    params = [json.loads(p) for p in g["params"]]
    tta_mode = pd.Series([p.get("mode") == "time_to_accuracy" for p in params], index=g.index)
    thr = g[~tta_mode] if (~tta_mode).any() else g  # the headline from throughput runs when there are some
    targets = sorted({p.get("target_accuracy") for p, t in zip(params, tta_mode) if t})
    tta = g[tta_mode]
    # Times to different targets are different figures: no one value for the row then.
    tta_value = _cell(tta.assign(value=tta["time_to_accuracy"]))["value"] if len(targets) == 1 else math.nan
    used = [c for c, st in zip(g["collectives"], g["status"]) if c and st == "ok"] or list(g["collectives"])
    return {**keys, "framework": g["framework"].iloc[0], "collectives": used[0] if used else "",
            "metric": thr["metric"].iloc[0], "value": _cell(thr)["value"],
            "unit": thr["unit"].iloc[0], "higher_is_better": bool(thr["higher_is_better"].iloc[0]),
            "time_to_accuracy": tta_value, "target_accuracy": ";".join(str(t) for t in targets),
            "status": _cell(g)["status"], "run_ids": ";".join(sorted(g["run_id"]))}


def framework_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (task, preset, layout, precision, workload, stack), for tasks run by at least
    two stacks. `value` is the task's headline figure (throughput for the image classifiers);
    `relative` and `tta_relative` compare the stack with the best stack of its row group
    (1 = best, 0.5 = half as fast), whichever way the figure is better."""
    if runs.empty or "task" not in runs:
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for (site, task), t in runs.groupby(["site", "task"], sort=True):
        params = [json.loads(p) for p in t["params"]]
        stacks = [stack_of(f, p) for f, p in zip(t["framework"], params)]
        if len(set(stacks)) < 2:
            continue
        shared = set.intersection(*(set(p) for p in params)) - STACK_PARAMS - MEASURE_PARAMS - {"precision"}
        t = t.assign(stack=stacks, workload=[_workload_key(p, shared) for p in params])
        keys = ["preset", *LAYOUT, "precision", "workload"]
        for key, group in t.groupby(keys, sort=True, dropna=False):
            if group["stack"].nunique() < 2:
                continue
            block = [_row({"site": site, "task": task, **dict(zip(keys, key)), "stack": s}, g)
                     for s, g in group.groupby("stack", sort=True)]
            hib = block[0].pop("higher_is_better")
            for r in block[1:]:
                r.pop("higher_is_better")
            values = [r["value"] for r in block if not math.isnan(r["value"])]
            best = (max if hib else min)(values, default=math.nan)
            best_tta = min((r["time_to_accuracy"] for r in block if not math.isnan(r["time_to_accuracy"])),
                           default=math.nan)
            for r in block:
                r["relative"] = r["value"] / best if hib else best / r["value"]
                r["tta_relative"] = best_tta / r["time_to_accuracy"]
            rows += block
    return pd.DataFrame(rows, columns=COLUMNS)
