"""Communication and scaling model of data-parallel training (latency-bandwidth, "alpha-beta").

An allreduce of S bytes over n ranks costs, per algorithm (Thakur, Rabenseifner & Gropp 2005;
Patarasuk & Yuan 2009 for the ring):
  ring               2(n-1) alpha + 2(n-1)/n * S / beta
  halving-doubling   2 log2(n) alpha + 2(n-1)/n * S / beta   (Rabenseifner; Goyal et al. 2017 used it)
  tree               2 ceil(log2 n) (alpha + S / beta)        (binary reduce then broadcast, not pipelined)
  hierarchical       ring reduce-scatter in the node, allreduce of the node's share between nodes
                     (g ranks of a node drive its network link at once), ring allgather in the node.
alpha is the per-message latency (s) and beta the link bandwidth (bytes/s).

A training step costs compute (measured on one node, or a device rate) plus the part of the
gradient allreduce that is not overlapped with the backward pass. Efficiency and throughput
at any node count follow; `assumptions()` lists what the projection takes for granted.

Input of the fit (`fit_link`): a table with columns n (ranks), bytes, time_s; `allreduce_table`
builds it from allreduce records (metrics `time.<bytes>B`, unit us/ms/s) or their tidy table.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from exabench.errors import ExabenchError
from exabench.lazy import lazy_import

np = lazy_import("numpy")
pd = lazy_import("pandas")

ALGORITHMS = ("ring", "halving-doubling", "tree", "hierarchical")
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class Link:
    """One level of the network: latency per message (s) and bandwidth (bytes/s)."""
    alpha_s: float
    bandwidth_Bps: float

    def __post_init__(self):
        if self.alpha_s < 0 or self.bandwidth_Bps <= 0:
            raise ExabenchError(f"Link: alpha_s = {self.alpha_s!r} must be >= 0 and bandwidth_Bps = "
                                f"{self.bandwidth_Bps!r} > 0")


def _check(n: int, algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ExabenchError(f"allreduce algorithm = {algorithm!r} is not known; valid: {', '.join(ALGORITHMS)}")
    if n < 1:
        raise ExabenchError(f"allreduce over n = {n!r} ranks; valid: n >= 1")


def cost_terms(algorithm: str, n: int, nbytes: float) -> tuple[float, float]:
    """(latency multiplier, bytes moved per link) of a flat algorithm: time = a * alpha + b / beta."""
    _check(n, algorithm)
    if n == 1:
        return 0.0, 0.0
    if algorithm == "ring":
        return 2.0 * (n - 1), 2.0 * (n - 1) / n * nbytes
    if algorithm == "halving-doubling":
        return 2.0 * math.log2(n), 2.0 * (n - 1) / n * nbytes
    if algorithm == "tree":
        depth = math.ceil(math.log2(n))
        return 2.0 * depth, 2.0 * depth * nbytes
    raise ExabenchError(f"cost_terms: {algorithm!r} is not a flat algorithm; valid: ring, halving-doubling, tree")


def flat_allreduce_time(algorithm: str, n: int, nbytes: float, link: Link) -> float:
    a, b = cost_terms(algorithm, n, nbytes)
    return a * link.alpha_s + b / link.bandwidth_Bps


def ring_allreduce_time(n: int, nbytes: float, link: Link) -> float:
    """The textbook ring: 2(n-1) latency terms plus 2(n-1)/n of the bytes over the bandwidth."""
    return flat_allreduce_time("ring", n, nbytes, link)


def hierarchical_allreduce_time(nodes: int, ranks_per_node: int, nbytes: float, intra: Link, inter: Link,
                                inter_algorithm: str = "ring") -> float:
    """Reduce-scatter in the node (ring over g ranks), allreduce of S/g between nodes on each of the g
    ranks at once (so the node's link carries S in total), allgather in the node."""
    g = ranks_per_node
    _check(nodes, inter_algorithm)
    _check(g, "ring")
    in_node = 0.0 if g == 1 else 2.0 * ((g - 1) * intra.alpha_s + (g - 1) / g * nbytes / intra.bandwidth_Bps)
    a, b = cost_terms(inter_algorithm, nodes, nbytes / g)
    between = a * inter.alpha_s + b / (inter.bandwidth_Bps / g)
    return in_node + between


def allreduce_time(algorithm: str, nodes: int, ranks_per_node: int, nbytes: float, intra: Link,
                   inter: Link | None = None, inter_algorithm: str = "ring") -> float:
    """Allreduce over nodes x ranks_per_node ranks. A flat algorithm across nodes runs at the inter-node
    link's speed (the slowest hop of the ring or tree sets the pace); within one node at the intra link's."""
    inter = inter or intra
    if algorithm == "hierarchical":
        return hierarchical_allreduce_time(nodes, ranks_per_node, nbytes, intra, inter, inter_algorithm)
    return flat_allreduce_time(algorithm, nodes * ranks_per_node, nbytes, inter if nodes > 1 else intra)


def allgather_time(n: int, bytes_per_rank: float, link: Link) -> float:
    """Ring allgather: (n-1) latency terms, each rank receives the other ranks' (n-1) blocks."""
    return 0.0 if n <= 1 else (n - 1) * link.alpha_s + (n - 1) * bytes_per_rank / link.bandwidth_Bps


# --- fitting alpha and beta -------------------------------------------------------------------

@dataclass
class LinkFit:
    link: Link
    algorithm: str
    table: pd.DataFrame            # input rows with predicted time and relative error
    median_rel_error: float
    max_rel_error: float

    def summary(self) -> str:
        return (f"{self.algorithm} fit over {len(self.table)} points: alpha = {self.link.alpha_s * 1e6:.3g} us, "
                f"bandwidth = {self.link.bandwidth_Bps / 1e9:.3g} GB/s; relative error median "
                f"{self.median_rel_error:.1%}, max {self.max_rel_error:.1%}")


def fit_link(table: pd.DataFrame, algorithm: str = "ring", min_bytes: float = 0,
             max_bytes: float = float("inf")) -> LinkFit:
    """Least squares of time_s = a(n) alpha + b(n, bytes) / beta, in relative terms (each row divided by
    its time, so 8 B and 128 MiB weigh alike), alpha and 1/beta constrained to be >= 0; only messages
    of min_bytes <= bytes < max_bytes (one protocol regime) when given."""
    from scipy.optimize import nnls
    missing = {"n", "bytes", "time_s"} - set(table.columns)
    if missing:
        raise ExabenchError(f"fit_link: table lacks columns {sorted(missing)}; valid: n, bytes, time_s")
    rows = table[(table["n"] > 1) & (table["bytes"] >= min_bytes) & (table["bytes"] < max_bytes)
                 & (table["time_s"] > 0)].copy()
    if len(rows) < 2 or rows["bytes"].nunique() < 2:
        raise ExabenchError(f"fit_link: {len(rows)} usable rows (n > 1, time_s > 0); valid: at least two message "
                            "sizes")
    terms = np.array([cost_terms(algorithm, int(n), float(b)) for n, b in zip(rows["n"], rows["bytes"])])
    t = rows["time_s"].to_numpy(float)
    coef, _ = nnls(terms / t[:, None], np.ones(len(t)))
    alpha, inv_beta = coef
    if inv_beta <= 0:
        raise ExabenchError("fit_link: fitted bandwidth is infinite (time does not grow with bytes); "
                            "valid: a sweep that reaches bandwidth-bound sizes")
    link = Link(float(alpha), float(1.0 / inv_beta))
    rows["time_model_s"] = terms @ coef
    rows["rel_error"] = rows["time_model_s"] / t - 1.0
    err = rows["rel_error"].abs()
    return LinkFit(link, algorithm, rows.reset_index(drop=True), float(err.median()), float(err.max()))


def fit_regimes(table: pd.DataFrame, split_bytes: float, algorithm: str = "ring") -> tuple[LinkFit, LinkFit]:
    """Two fits, below and from split_bytes: MPI libraries switch protocol (eager to rendezvous,
    copy-in/copy-out to single copy) at some size, and one (alpha, beta) pair cannot follow both."""
    return (fit_link(table, algorithm, max_bytes=split_bytes), fit_link(table, algorithm, min_bytes=split_bytes))


_SIZE_METRIC = re.compile(r"^time\.(\d+)B$")


def allreduce_table(records_or_df, benchmark: str = "allreduce") -> pd.DataFrame:
    """Allreduce records (or their tidy table) -> columns run_id, backend, hierarchical, n, nodes,
    ranks_per_node, bytes, time_s.

    Reads the per-size metrics `time.<bytes>B` of ok runs (the allreduce micro-benchmark's naming),
    converting their unit (us, ms, s) to seconds."""
    if isinstance(records_or_df, pd.DataFrame):
        df = records_or_df
    else:
        from exabench.records.tidy import tidy_table
        df = tidy_table(list(records_or_df))
    df = df[(df["benchmark"] == benchmark) & (df["status"] == "ok")]
    out = []
    for _, r in df.iterrows():
        m = _SIZE_METRIC.match(str(r["metric"]))
        if not m:
            continue
        if r["unit"] not in TIME_UNITS:
            raise ExabenchError(f"run {r['run_id']}: metric {r['metric']} unit {r['unit']!r}; valid: "
                                f"{', '.join(TIME_UNITS)}")
        params = json.loads(r["params"]) if isinstance(r.get("params"), str) and r["params"] else {}
        out.append({"run_id": r["run_id"], "backend": params.get("backend", ""),
                    "hierarchical": bool(params.get("hierarchical", False)), "n": int(r["ranks"]),
                    "nodes": int(r["nodes"]), "ranks_per_node": int(r["ranks_per_node"]), "bytes": int(m.group(1)),
                    "time_s": float(r["value"]) * TIME_UNITS[r["unit"]]})
    return pd.DataFrame(out, columns=["run_id", "backend", "hierarchical", "n", "nodes", "ranks_per_node", "bytes",
                                      "time_s"])


# --- step time and scaling ----------------------------------------------------------------------

@dataclass(frozen=True)
class Machine:
    name: str
    devices_per_node: int        # ranks per node (one per GPU/GCD, or per CPU node)
    intra: Link                  # between ranks of a node
    inter: Link                  # a node's network link
    algorithm: str = "hierarchical"
    inter_algorithm: str = "ring"  # between nodes, when algorithm is hierarchical
    max_nodes: int | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    gradient_bytes: float            # bytes allreduced per step (parameters x bytes per gradient element)
    samples_per_s_per_device: float  # compute rate of one device alone (measured on one node)
    batch_per_device: int            # local batch (weak scaling keeps it)
    precision: str = "fp32"


@dataclass(frozen=True)
class Assumptions:
    overlap: float = 0.0     # fraction of the allreduce hidden behind backward compute (at most all of compute)
    mode: str = "weak"       # weak: fixed batch per device; strong: fixed global batch
    global_batch: int | None = None
    baseline_nodes: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)


def step_time(w: Workload, m: Machine, nodes: int, batch_per_device: float, overlap: float) -> dict:
    """Compute + exposed communication of one step. A fraction `overlap` of the allreduce hides behind
    compute, but never more than the compute itself (exposed >= comm - compute)."""
    if not 0.0 <= overlap <= 1.0:
        raise ExabenchError(f"overlap = {overlap!r}; valid: 0 <= overlap <= 1")
    compute = batch_per_device / w.samples_per_s_per_device
    comm = allreduce_time(m.algorithm, nodes, m.devices_per_node, w.gradient_bytes, m.intra, m.inter,
                          m.inter_algorithm)
    exposed = max((1.0 - overlap) * comm, comm - compute, 0.0)
    return {"compute_s": compute, "comm_s": comm, "exposed_comm_s": exposed, "step_s": compute + exposed}


def project(w: Workload, m: Machine, node_counts, a: Assumptions) -> pd.DataFrame:
    """Throughput, speedup and scaling efficiency at each node count, relative to a.baseline_nodes.

    Weak scaling keeps the batch per device; strong scaling splits a.global_batch over all devices.
    Efficiency = throughput(N) / (throughput(baseline) x N / baseline): for a fixed amount of work it
    equals the ratio of times, so one formula serves both modes."""
    if a.mode not in ("weak", "strong"):
        raise ExabenchError(f"mode = {a.mode!r}; valid: weak, strong")
    if a.mode == "strong" and not a.global_batch:
        raise ExabenchError("strong scaling needs global_batch; valid: a positive integer")

    def one(nodes: int) -> dict:
        devices = nodes * m.devices_per_node
        batch = w.batch_per_device if a.mode == "weak" else a.global_batch / devices
        st = step_time(w, m, nodes, batch, a.overlap)
        return {"workload": w.name, "machine": m.name, "mode": a.mode, "nodes": nodes, "devices": devices,
                "batch_per_device": batch, **st, "throughput": devices * batch / st["step_s"]}

    base = one(a.baseline_nodes)
    rows = []
    for n in node_counts:
        r = one(int(n))
        r["speedup"] = r["throughput"] / base["throughput"]
        r["efficiency"] = r["speedup"] / (r["nodes"] / a.baseline_nodes)
        rows.append(r)
    return pd.DataFrame(rows)


def assumptions(w: Workload, m: Machine, a: Assumptions) -> list[str]:
    """The lines printed beside every projection."""
    alg = m.algorithm + (f" (between nodes: {m.inter_algorithm})" if m.algorithm == "hierarchical" else "")
    lines = [f"model: step = compute + exposed allreduce; allreduce '{alg}' of {w.gradient_bytes / 1e6:.4g} MB "
             f"({w.precision} gradients) per step",
             f"compute: {w.samples_per_s_per_device:.4g} samples/s per device, independent of node count "
             "(no I/O, no straggler, no batch-size effect on device speed)",
             f"network: intra-node alpha {m.intra.alpha_s * 1e6:.3g} us, {m.intra.bandwidth_Bps / 1e9:.4g} GB/s; "
             f"inter-node alpha {m.inter.alpha_s * 1e6:.3g} us, {m.inter.bandwidth_Bps / 1e9:.4g} GB/s per node; "
             "no contention from other jobs, full bisection",
             f"overlap: {a.overlap:.0%} of the allreduce hidden behind compute (at most the compute time)",
             f"{a.mode} scaling" + (f", {w.batch_per_device} samples per device" if a.mode == "weak"
                                    else f", global batch {a.global_batch}") +
             f"; efficiency relative to {a.baseline_nodes} node(s)"]
    return lines + list(a.notes)


def doubling_counts(start: int, stop: int) -> list[int]:
    """start, 2 start, 4 start, ... below stop, then stop itself (a whole machine is rarely a power of 2)."""
    out, n = [], max(1, start)
    while n < stop:
        out.append(n)
        n *= 2
    return out + [stop]
