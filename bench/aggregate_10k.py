"""Time the aggregation of 10,000 result records (issue: < 10 s on the 2-core machine).

    PYTHONPATH=. python bench/aggregate_10k.py [--records N] [--keep DIR]

Writes N records shaped like real ones (K-Means and ResNet-50, 3 to 8 samples per metric,
sweeps over ranks, threads and sizes, 2% failed) into a temporary directory, then times
each stage: reading the records, the tidy table (exabench aggregate), the run table and
every comparison table (exabench compare), and writing CSV/Parquet/Markdown. Prints one
line per stage and the total; exits 1 when the total exceeds --limit seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from exabench.records.tidy import load_records, markdown_summary, tidy_table
from exabench.analysis.compare import all_tables, write_tables
from exabench.analysis.runs import run_table


def metric(value, unit, hib, n, rng):
    samples = [value * rng.uniform(0.95, 1.05) for _ in range(n)]
    s = sorted(samples)
    return {"value": value, "unit": unit, "precision": "fp32", "higher_is_better": hib, "samples": samples,
            "stats": {"n": n, "median": s[n // 2], "mean": sum(s) / n, "std": 0.01, "min": s[0], "max": s[-1],
                      "q1": s[n // 4], "q3": s[3 * n // 4], "iqr": s[3 * n // 4] - s[n // 4]}}


def make_records(n: int, out: Path, seed: int = 1) -> None:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        kmeans = i % 2 == 0
        rpn, tpr, rows = 2 ** (i % 4), 1 + (i // 4) % 2, 1000 * (1 + (i // 8) % 5)
        bench = "kmeans" if kmeans else "resnet50"
        run_id = f"{bench}.tiny.fp32.rows-{rows}.n1r{rpn}t{tpr}.rep{i // 40 + 1}"
        status = "failed" if i % 50 == 7 else "ok"
        if kmeans:
            t = 0.01 * rows / 1000 / rpn
            metrics = {"time": metric(t, "s", False, 3, rng), "comm_time": metric(t / 10, "s", False, 3, rng),
                       "fom": metric(8e-5 / t, "TB/s", True, 3, rng)}
        else:
            metrics = {"throughput": metric(10.0 * rpn, "images/s", True, 8, rng),
                       "step_time": metric(0.4 / rpn, "s", False, 8, rng)}
        rec = {"schema": "exabench.result/1", "run_id": run_id, "benchmark": bench, "suite": "bench",
               "framework": "x", "campaign": "bench", "preset": "tiny", "repeat": i // 40 + 1,
               "params": {"rows_per_rank": rows, "precision": "fp32", "seed": 1}, "swept": {"rows_per_rank": rows},
               "site": "local", "layout": {"nodes": 1, "ranks_per_node": rpn, "threads_per_rank": tpr,
                                           "gpus_per_rank": 0, "ranks": rpn, "launch_line": "mpirun ..."},
               "status": status, "error": "sanity check failed" if status != "ok" else None,
               "metrics": metrics, "checks": [], "provenance": {"hosts": ["vm"], "start_time": "", "end_time": ""}}
        (out / f"{run_id}.json").write_text(json.dumps(rec, indent=2, sort_keys=True))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--limit", type=float, default=10.0, help="seconds the whole aggregation may take")
    ap.add_argument("--keep", default=None, help="write the records here (and keep them) instead of a temp dir")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="exabench-10k-") as tmp:
        root = Path(args.keep or tmp)
        make_records(args.records, root / "records")
        paths = sorted((root / "records").glob("*.json"))
        stages = []
        clock = (time.perf_counter(), time.process_time())

        def lap(name):
            nonlocal clock
            now = (time.perf_counter(), time.process_time())
            stages.append((name, now[0] - clock[0], now[1] - clock[1]))
            clock = now

        records = load_records(paths)
        lap("read records")
        df = tidy_table(records)
        (root / "results.csv").write_text(df.to_csv(index=False))
        (root / "summary.md").write_text(markdown_summary(df, "local"))
        lap("tidy table + summary (aggregate)")
        runs = run_table(records)
        tables = all_tables(runs)
        lap("run table + comparison tables")
        write_tables(tables, root / "tables")
        lap("write CSV, Parquet, Markdown")
    total, cpu = sum(s[1] for s in stages), sum(s[2] for s in stages)
    # CPU time beside wall time: on a shared machine the wall time includes waiting for a core.
    print(f"{'stage':34s} {'wall':>8s} {'cpu':>8s}")
    for name, wall, secs in stages:
        print(f"{name:34s} {wall:7.2f}s {secs:7.2f}s")
    print(f"{'total for ' + str(len(paths)) + ' records':34s} {total:7.2f}s {cpu:7.2f}s (limit {args.limit:g} s "
          f"wall; {len(df)} tidy rows, {len(runs)} runs; load average {os.getloadavg()[0]:.1f})")
    return 0 if total <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
