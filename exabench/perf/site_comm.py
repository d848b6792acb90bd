"""The communication parameters of a site: per network level, the latency and bandwidth the model uses
(fitted from the site's allreduce sweep where it measures the level, the site file's figures otherwise),
and the projected allreduce time of ResNet-50's gradients up to the whole site."""

from __future__ import annotations

from pathlib import Path

from exabench.errors import ExabenchError
from exabench.io import logged, write_csv_and_markdown
from exabench.markdown import frame
from exabench.perf.alphabeta import allreduce_time, doubling_counts
from exabench.perf.reference import PROJECTED_BANNER
from exabench.perf.sweep import sweep_source_label
from exabench.lazy import lazy_import

pd = lazy_import("pandas")

RESNET50_FP32_GRADIENT_BYTES = 102_228_128  # 25,557,032 parameters (resnet50_params in the reference file)


def site_comm_table(site, sweep: pd.DataFrame | None, split_bytes: int, sweep_label: str = "") -> pd.DataFrame:
    """resolve_links for a site: fits of its allreduce sweep (data-parallel backend first, large messages)
    where it measures a level, the site file's network figures otherwise."""
    from exabench.perf.link_params import fit_table, preferred_fits, resolve_links
    fits, label = {}, ""
    if sweep is not None and len(sweep):
        _, all_fits = fit_table(sweep, split_bytes)
        fits, label = preferred_fits(all_fits)
    return resolve_links(site, fits, f"{sweep_label} ({label})" if label else sweep_label)


def site_allreduce_projection(site, table: pd.DataFrame, nbytes: float = RESNET50_FP32_GRADIENT_BYTES) -> pd.DataFrame:
    """Hierarchical allreduce time of nbytes at doubling node counts up to the site's max_nodes (PROJECTED)."""
    from exabench.perf.link_params import site_machine
    m = site_machine(site, table)
    rows = []
    for nodes in doubling_counts(1, max(1, m.max_nodes or 1)):
        t = allreduce_time(m.algorithm, nodes, m.devices_per_node, nbytes, m.intra, m.inter, m.inter_algorithm)
        ranks = nodes * m.devices_per_node
        busbw = nbytes / t / 1e9 * 2 * (ranks - 1) / ranks if t > 0 else float("nan")  # nccl-tests' busbw
        rows.append({"status": "PROJECTED", "nodes": nodes, "ranks": ranks, "bytes": int(nbytes),
                     "allreduce_ms": 1e3 * t, "busbw_GBps": busbw})
    return pd.DataFrame(rows)


def as_site(site):
    """A loaded Site as it is; a site.yaml path loaded; None stays None."""
    from exabench.campaign.site import load_site
    return load_site(site) if isinstance(site, (str, Path)) else site


def write_site_comm(site, sweep_csv: str | None, csv: str | Path, markdown: str | Path,
                    split_bytes: int, log: str | None = None) -> str:
    """The site's communication parameters table. `site`: the loaded Site, or its site.yaml."""
    with logged(log):
        site = as_site(site)
        sweep = pd.read_csv(sweep_csv) if sweep_csv else None
        table = site_comm_table(site, sweep, split_bytes, sweep_source_label(sweep_csv) if sweep_csv else "")
        lines = [f"# Communication parameters of site {site.name}", "",
                 "Per network level, the latency and bandwidth the communication model uses. `fitted`: from this "
                 "site's allreduce records (they win); `site`: from the site file's `network` figures, each with its "
                 "source; `none`: neither exists.", "", frame(table), ""]
        try:
            proj = site_allreduce_projection(site, table)
            lines += [f"## ResNet-50 fp32 gradient allreduce on {site.name} ({PROJECTED_BANNER})", "",
                      f"Hierarchical allreduce of {RESNET50_FP32_GRADIENT_BYTES} bytes, "
                      f"{site.node.gpus or 1} rank(s) per node, ring inside and between nodes, with the parameters "
                      "above; no contention, full bisection.", "", frame(proj), ""]
        except ExabenchError as exc:
            lines += [f"No projection: {exc}", ""]
        return write_csv_and_markdown(csv, table, markdown, "\n".join(lines))
