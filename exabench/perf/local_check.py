"""Measured scaling on this machine against the model's projection for the same layout.

For every ok run on n > 1 ranks that has a 1-rank twin (same benchmark, parameters and threads per
rank, one node): projected time = the twin's measured time x work per rank x core-sharing factor + the
run's communication at the latency and bandwidth of its level (fitted from this site's allreduce records,
or the site file's figures when none were fitted).

Work per rank, relative to the 1-rank twin: K-Means splits size_per_node over the ranks of a node (with
scaling=weak every node adds size_per_node), so nodes / ranks; a DDP classifier keeps its batch per rank
(scaling=weak: 1) or splits a global batch (strong: 1 / ranks).

Which runs, and how they communicate, is each workload's own fact (Benchmark.communication, carried by
its records into the table's `communication` column): a run is checked when its pattern names a
`timed_metric`, and modelled by its pattern:
  kmeans-fit            the collectives inside one timed K-Means fit (kmeans_collectives), MPI, small messages;
  ddp-gradient-buckets  the fp32 gradients allreduced once per step in DDP's 25 MiB buckets, Gloo on CPUs,
                        large messages; no overlap with backward (an upper bound).
Core sharing: each rank is assumed to own threads_per_rank cores; when the ranks of a node hold more
threads than the node's usable cores, compute per rank slows by that ratio. Other jobs on the node are
not modelled: their load is shown beside the figures (load_average, from the records).
"""

from __future__ import annotations

import json
import math

from exabench.perf.alphabeta import Link, allgather_time, allreduce_time
from exabench.errors import ExabenchError
from exabench.lazy import lazy_import

np = lazy_import("numpy")
pd = lazy_import("pandas")

DDP_BUCKET_BYTES = 25 * 2**20  # torch DDP's default bucket_cap_mb
KMEANS, DDP = "kmeans-fit", "ddp-gradient-buckets"  # the communication patterns this check models
PATTERNS = (KMEANS, DDP)


def kmeans_collectives(params: dict) -> list[tuple[str, int]]:
    """(kind, bytes per rank) of the collectives inside one timed K-Means fit, read from
    exabench/benchmarks/analytics/kmeans.py: picking rows costs two allgathers (weights, picked rows), each
    k-means++ centre one allreduce of its candidates' potentials, each Lloyd iteration one allreduce of
    k x (cols + 2) float64; k = 0 is one fit for each k of the suite. Pickled Python objects are counted at
    their payload size."""
    from exabench.benchmarks.analytics.kmeans import SUITE_KS
    k, cols, maxiter = int(params.get("k", 0)), int(params["cols"]), int(params["maxiter"])
    if k == 0:
        return [c for one in SUITE_KS for c in kmeans_collectives({**params, "k": one})]
    item = 4 if params.get("dtype") == "float32" else 8
    out = []

    def rows_at(n_rows):
        out.extend([("allgather", 8), ("allgather", n_rows * cols * item)])

    if params.get("init", "random") == "kmeans++":
        trials = 2 + int(np.log(k))
        rows_at(1)
        for _ in range(1, k):
            rows_at(trials)
            out.append(("allreduce", trials * 8))
    else:
        rows_at(k)
    out += [("allreduce", k * (cols + 2) * 8)] * maxiter
    return out


def ddp_buckets(gradient_bytes: float, bucket_bytes: float = DDP_BUCKET_BYTES) -> list[float]:
    """DDP allreduces the gradients in buckets of at most bucket_bytes (counted as equal buckets)."""
    count = max(1, math.ceil(gradient_bytes / bucket_bytes))
    return [gradient_bytes / count] * count


def comm_time(pattern: str, params: dict, parameters: int | None, nodes: int, ranks_per_node: int,
              link: Link) -> float:
    """Modelled communication of one unit of work (a K-Means fit, a training step) on nodes x ranks_per_node
    ranks, every collective a flat ring at `link` (the one level these runs cross)."""
    n = nodes * ranks_per_node
    if pattern == KMEANS:
        return sum(allreduce_time("ring", 1, n, b, link) if kind == "allreduce" else allgather_time(n, b, link)
                   for kind, b in kmeans_collectives(params))
    if pattern == DDP:
        if not parameters:
            raise ExabenchError("the record has no `parameters` count; cannot size the gradients")
        item = 2 if params.get("precision") in ("fp16", "bf16") else 4  # gradients in the training precision
        return sum(allreduce_time("ring", 1, n, b, link) for b in ddp_buckets(parameters * item))
    raise ExabenchError(f"scaling check: no communication model for pattern {pattern!r}; valid: "
                        f"{', '.join(PATTERNS)}")


def work_per_rank(pattern: str, params: dict, nodes: int, ranks: int) -> float:
    """Work of one rank on nodes x (ranks / nodes) ranks over the work of the single rank of the twin."""
    weak = params.get("scaling", "weak") == "weak"
    if pattern == KMEANS:  # size_per_node split over the node's ranks
        return (nodes if weak else 1) / ranks
    return 1.0 if weak else 1.0 / ranks


def core_share_factor(ranks_per_node: int, threads_per_rank: int, usable_cores: int) -> float:
    """Compute slowdown per rank when a node's ranks hold more threads than its cores (1 when they fit)."""
    return max(1.0, ranks_per_node * threads_per_rank / max(1, usable_cores))


def scaling_check(df: pd.DataFrame, links: dict, usable_cores: int, info: dict | None = None) -> pd.DataFrame:
    """One row per measured multi-rank run with a 1-rank twin.

    df: the tidy results table. links: {(backend, level, regime): (Link, origin text)} with level
    intra_node / inter_node; a missing key gives a row without projection that says so. info: per run_id
    {"parameters": int, "load_average": [1, 5, 15 min]} from the records."""
    info = info or {}
    comm = df["communication"].map(lambda text: json.loads(text) if isinstance(text, str) and text else {})
    modelled = comm.map(lambda c: c.get("pattern") in PATTERNS and bool(c.get("timed_metric")))
    ok = df[(df["status"] == "ok") & modelled]
    timed = ok[ok["metric"] == comm[ok.index].map(lambda c: c["timed_metric"])].copy()
    if timed.empty:
        raise ExabenchError(f"scaling check: no ok run whose communication pattern ({', '.join(PATTERNS)}) the "
                            "model knows, with its timed metric, in the table")
    timed["comm"] = comm[timed.index]
    extra = {m: dict(zip(ok[ok["metric"] == m]["run_id"], ok[ok["metric"] == m]["value"]))
             for m in ("compute_time", "comm_time")}
    timed["key"] = timed["benchmark"] + "|" + timed["params"] + "|" + timed["threads_per_rank"].astype(str)
    rows = []
    for _, g in timed.groupby("key", sort=True):
        one = g[(g["ranks"] == 1) & (g["nodes"] == 1)]
        if one.empty:
            continue
        t1 = float(one["value"].median())
        c1 = [extra["compute_time"][r] for r in one["run_id"] if r in extra["compute_time"]]
        compute1 = float(np.median(c1)) if c1 else float("nan")
        params = json.loads(g["params"].iloc[0])
        loads1 = [(info.get(r) or {}).get("load_average") for r in one["run_id"]]
        load1 = float(np.median([x[0] for x in loads1 if x])) if any(loads1) else float("nan")
        for _, r in g[g["ranks"] > 1].iterrows():
            row = _row(r, params, t1, compute1, links, usable_cores, extra, info.get(r["run_id"], {}))
            row["load_1m_1_rank"] = load1
            row["why"] = _why(row, r["comm"]["pattern"])
            rows.append(row)
    if not rows:
        raise ExabenchError("scaling check: no run on >1 rank has a 1-rank twin (same benchmark, parameters and "
                            "threads per rank, one node)")
    return pd.DataFrame(rows)


def _row(r, params, t1, compute1, links, usable_cores, extra, run_info) -> dict:
    bench, run_id, pattern = r["benchmark"], r["run_id"], r["comm"]["pattern"]
    nodes, rpn, threads = int(r["nodes"]), int(r["ranks_per_node"]), int(r["threads_per_rank"])
    backend, regime = r["comm"]["backend"], r["comm"]["regime"]
    level = "inter_node" if nodes > 1 else "intra_node"
    share = core_share_factor(rpn, threads, usable_cores)
    work = work_per_rank(pattern, params, nodes, int(r["ranks"]))
    measured = float(r["value"])
    got = links.get((backend, level, regime))
    load = run_info.get("load_average") or [float("nan")]
    row = {"benchmark": bench, "run_id": run_id, "layout": f"n{nodes}r{rpn}t{threads}", "ranks": int(r["ranks"]),
           "measured_1_rank_s": t1, "work_per_rank": work, "core_share_factor": share,
           "comm_link": f"{backend} {level} {regime}", "link_origin": got[1] if got else "none",
           "model_comm_s": float("nan"), "projected_s": float("nan"),
           "measured_s": measured, "gap": float("nan"), "measured_compute_s": extra["compute_time"].get(run_id, np.nan),
           "compute_vs_model": float("nan"), "measured_comm_s": extra["comm_time"].get(run_id, np.nan),
           "load_1m": float(load[0]), "usable_cores": usable_cores}
    if not math.isnan(row["measured_compute_s"]) and not math.isnan(compute1) and compute1 > 0:
        row["compute_vs_model"] = row["measured_compute_s"] / (compute1 * work * share)
    if got and pattern == DDP and not run_info.get("parameters"):
        row["link_origin"] = "none (the record has no `parameters` count to size the gradients)"
        got = None
    if got:
        comm = comm_time(pattern, params, run_info.get("parameters"), nodes, rpn, got[0])
        row["model_comm_s"] = comm
        row["projected_s"] = t1 * work * share + comm
        row["gap"] = measured / row["projected_s"] - 1.0
    return row


def _why(row: dict, pattern: str) -> str:
    if row["link_origin"].startswith("none ("):
        return f"no projection: {row['link_origin'][6:-1]}"
    if row["link_origin"] == "none":
        return f"no {row['comm_link']} latency/bandwidth: no allreduce records fit it and the site file gives none"
    parts = []
    if abs(row["gap"]) <= 0.1:
        parts.append("within 10% of the projection")
    if not math.isnan(row["compute_vs_model"]):
        parts.append(f"compute per rank {row['compute_vs_model']:.2f}x what the model expects (1-rank compute x "
                     f"{row['work_per_rank']:.2g} work x {row['core_share_factor']:.2g} core sharing)")
        if not math.isnan(row["measured_comm_s"]):
            parts.append(f"time inside collectives {row['measured_comm_s'] * 1e3:.3g} ms vs "
                         f"{row['model_comm_s'] * 1e3:.3g} ms modelled transfer: the rest is waiting for the slower "
                         "rank")
    elif pattern == DDP:
        implied = (row["measured_s"] - row["model_comm_s"]) / (row["measured_1_rank_s"] * row["work_per_rank"])
        parts.append(f"DDP step, compute not timed apart: if the allreduce costs what the model says, compute per rank "
                     f"took {implied:.2f}x the 1-rank step (cores shared with the other rank and other jobs)")
    if not math.isnan(row["load_1m"]):
        parts.append(f"load average {row['load_1m']:.2f} on {row['usable_cores']} cores after this run, "
                     f"{row.get('load_1m_1_rank', float('nan')):.2f} after the 1-rank twins")
    return "; ".join(parts)
