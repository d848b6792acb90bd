"""Which latency and bandwidth the communication model uses for a site, and where they come from.

Two origins, per network level (intra-node: between ranks of one node; inter-node: a node's link):
  fitted  the site's own allreduce records (or the local sweep), fitted with commmodel.fit_link;
  site    the site description's `network` figures (profiles/<site>/site.yaml, each with its source).
A fit wins over the site's figures; a level with neither has no parameters, and the table says so.
A site that gives a bandwidth but no latency gets latency 0, flagged: optimistic for small messages,
negligible for the megabyte gradients of data-parallel training.
"""

from __future__ import annotations

from exabench.perf.alphabeta import Link, LinkFit, Machine, fit_link
from exabench.errors import ExabenchError
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

LEVELS = ("intra_node", "inter_node")


def sweep_levels(sweep: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Rows of an allreduce sweep table by the level they measure: all ranks on one node (intra), or
    one rank per node on several nodes (inter). Mixed layouts measure both at once and are left out."""
    nodes = sweep["nodes"] if "nodes" in sweep else pd.Series(1, index=sweep.index)
    rpn = sweep["ranks_per_node"] if "ranks_per_node" in sweep else sweep["n"]
    return {"intra_node": sweep[nodes == 1], "inter_node": sweep[(nodes > 1) & (rpn == 1)]}


def select_sweep(sweep: pd.DataFrame, backend: str | None = None) -> pd.DataFrame:
    """The flat (non-hierarchical) allreduce rows of one backend (all when backend is None)."""
    out = sweep
    if "hierarchical" in out:
        out = out[~out["hierarchical"].astype(str).str.lower().isin(("true", "1"))]
    if backend is not None:
        if "backend" not in out:
            raise ExabenchError(f"allreduce sweep has no backend column; cannot select backend {backend!r}")
        out = out[out["backend"] == backend]
    return out


def fit_levels(sweep: pd.DataFrame, min_bytes: float = 0, max_bytes: float = float("inf"),
               algorithm: str = "ring") -> dict[str, LinkFit]:
    """One fit per level that the sweep measures with at least two message sizes in [min_bytes, max_bytes)."""
    fits = {}
    for level, rows in sweep_levels(sweep).items():
        rows = rows[(rows["bytes"] >= min_bytes) & (rows["bytes"] < max_bytes)]
        if rows["bytes"].nunique() >= 2:
            fits[level] = fit_link(rows, algorithm)
    return fits


def site_link(network: dict, level: str) -> tuple[Link, str] | None:
    """(Link, where it comes from) from a site's `network` figures, or None when it gives no bandwidth."""
    bw = network.get(f"{level}_bandwidth_GBps")
    if not bw:
        return None
    lat = network.get(f"{level}_latency_us")
    origin = f"bandwidth: {bw['source']}" + (f" ({bw['note']})" if bw.get("note") else "")
    if lat:
        origin += f"; latency: {lat['source']}" + (f" ({lat['note']})" if lat.get("note") else "")
        alpha = lat["value"] * 1e-6
    else:
        origin += "; latency: not given by the site, 0 assumed (optimistic for small messages)"
        alpha = 0.0
    return Link(alpha, bw["value"] * 1e9), origin


def resolve_links(site, fits: dict[str, LinkFit] | None = None, fit_source: str = "") -> pd.DataFrame:
    """Per level: the parameters the model uses, `origin` (fitted, site or none) and `detail` (the fit's
    summary and data, or the site file's sources)."""
    fits = fits or {}
    rows = []
    for level in LEVELS:
        if level in fits:
            f = fits[level]
            rows.append({"level": level, "origin": "fitted", "alpha_us": f.link.alpha_s * 1e6,
                         "bandwidth_GBps": f.link.bandwidth_Bps / 1e9,
                         "detail": f"{fit_source}: {f.summary()}".lstrip(": ")})
            continue
        got = site_link(site.network, level)
        if got:
            link, origin = got
            rows.append({"level": level, "origin": "site", "alpha_us": link.alpha_s * 1e6,
                         "bandwidth_GBps": link.bandwidth_Bps / 1e9, "detail": f"{site.path}: {origin}"})
        else:
            rows.append({"level": level, "origin": "none", "alpha_us": float("nan"),
                         "bandwidth_GBps": float("nan"),
                         "detail": f"no allreduce records measure it and {site.path or site.name} gives no "
                                   f"network.{level}_bandwidth_GBps"})
    return pd.DataFrame(rows)


def links_of(table: pd.DataFrame) -> dict[str, Link]:
    """The Link of every level that has parameters in a resolve_links table."""
    return {r["level"]: Link(r["alpha_us"] * 1e-6, r["bandwidth_GBps"] * 1e9)
            for _, r in table.iterrows() if r["origin"] != "none"}


def site_machine(site, table: pd.DataFrame) -> Machine:
    """The site as the scaling model sees it: one rank per GPU (or one per node without GPUs), a
    hierarchical allreduce (ring in the node, ring between nodes). A missing level is an error, except
    the intra-node one where a node holds one rank."""
    links = links_of(table)
    per_node = site.node.gpus or 1
    if "inter_node" not in links:
        raise ExabenchError(f"site {site.name}: no inter-node latency/bandwidth (no allreduce records across nodes, "
                            f"and {site.path or 'its site file'} has no network.inter_node_bandwidth_GBps); valid: "
                            "run the allreduce benchmark on 2+ nodes, or add the figure with its source")
    intra = links.get("intra_node")
    if intra is None:
        if per_node > 1:
            raise ExabenchError(f"site {site.name}: {per_node} ranks per node but no intra-node bandwidth; valid: "
                                "network.intra_node_bandwidth_GBps with its source, or allreduce records on one node")
        intra = links["inter_node"]  # unused with one rank per node
    return Machine(site.name, per_node, intra, links["inter_node"], "hierarchical", "ring",
                   site.max_nodes)


# --- the fit report: parameters per backend and level, error by message-size range ----------------

SIZE_RANGES = ((0, 1024, "< 1 KiB"), (1024, 65536, "1-64 KiB"), (65536, 2**20, "64 KiB-1 MiB"),
               (2**20, float("inf"), ">= 1 MiB"))
BACKEND_PREFERENCE = ("nccl", "gloo", "horovod", "mpi")  # data-parallel training's backends first


def backends(sweep: pd.DataFrame) -> list[str]:
    """Backends in a sweep table; the stand-in script's table (no column) is MPI."""
    if "backend" not in sweep:
        return ["mpi"]
    return sorted(set(sweep["backend"].fillna("mpi").replace("", "mpi")), key=lambda b: (
        BACKEND_PREFERENCE.index(b) if b in BACKEND_PREFERENCE else len(BACKEND_PREFERENCE), b))


def normalised(sweep: pd.DataFrame) -> pd.DataFrame:
    out = sweep.copy()
    out["backend"] = out["backend"].fillna("mpi").replace("", "mpi") if "backend" in out else "mpi"
    return out


def error_by_range(fit: LinkFit) -> pd.DataFrame:
    """Median and max |relative error| of a fit's points, per message-size range."""
    t = fit.table
    rows = []
    for lo, hi, label in SIZE_RANGES:
        part = t[(t["bytes"] >= lo) & (t["bytes"] < hi)]
        if len(part):
            err = part["rel_error"].abs()
            rows.append({"sizes": label, "points": len(part), "median_rel_error": float(err.median()),
                         "max_rel_error": float(err.max())})
    return pd.DataFrame(rows)


def fit_table(sweep: pd.DataFrame, split_bytes: int) -> tuple[pd.DataFrame, dict]:
    """Every fit of a sweep: per backend and level, over all sizes, below split_bytes and from it.
    Returns the parameter table and {(backend, level, regime): LinkFit}."""
    sweep = normalised(sweep)
    rows, fits = [], {}
    for backend in backends(sweep):
        flat = select_sweep(sweep, backend)
        for regime, lo, hi in (("all", 0, float("inf")), ("small", 0, split_bytes),
                               ("large", split_bytes, float("inf"))):
            for level, f in fit_levels(flat, lo, hi).items():
                fits[(backend, level, regime)] = f
                rows.append({"backend": backend, "level": level, "regime": regime,
                             "sizes": f"{int(f.table['bytes'].min())}-{int(f.table['bytes'].max())} B",
                             "points": len(f.table), "alpha_us": f.link.alpha_s * 1e6,
                             "bandwidth_GBps": f.link.bandwidth_Bps / 1e9,
                             "median_rel_error": f.median_rel_error, "max_rel_error": f.max_rel_error})
    if not rows:
        raise ExabenchError("allreduce sweep: no backend and level has two message sizes to fit (need flat "
                            "allreduce rows on one node, or one rank per node on several nodes)")
    return pd.DataFrame(rows), fits


def preferred_fits(fits: dict, regime: str = "large") -> tuple[dict[str, LinkFit], str]:
    """Per level, the fit the site projection uses: the first backend of BACKEND_PREFERENCE measured, the
    given regime when it was fitted, else all sizes. Returns the fits and a label saying which."""
    chosen, labels = {}, []
    for level in LEVELS:
        keys = [k for k in fits if k[1] == level]
        if not keys:
            continue
        order = {b: i for i, b in enumerate(BACKEND_PREFERENCE)}
        backend = min({k[0] for k in keys}, key=lambda b: (order.get(b, len(order)), b))
        reg = regime if (backend, level, regime) in fits else "all"
        chosen[level] = fits[(backend, level, reg)]
        labels.append(f"{level}: {backend}, {reg} messages")
    return chosen, "; ".join(labels)
