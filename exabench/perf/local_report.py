"""The report of the local scaling check (perf.local_check): the campaign's measured 1 -> n rank (and
1 -> n node) scaling against the model for the same layout, as a table and a page that says, per run,
where the latency and bandwidth came from and why a run has no projection.

Its inputs are files the rule declares: the tidy table, the allreduce sweep, and the records it reads
the parameter counts and load averages from, so that a changed record re-runs the check."""

from __future__ import annotations

from pathlib import Path

from exabench.io import logged, write_csv_and_markdown
from exabench.markdown import frame
from exabench.perf.local_check import scaling_check
from exabench.perf.site_comm import as_site
from exabench.lazy import lazy_import

pd = lazy_import("pandas")


def write_local_check(table_csv: str | Path, sweep_csv: str | Path, records: list[str | Path], csv: str | Path,
                      markdown: str | Path, split_bytes: int, log: str | None = None, site=None) -> str:
    """Measured 1 -> n rank (and 1 -> n node) scaling of the campaign vs the model for the same layout, with
    the latency and bandwidth fitted from the campaign's allreduce records (the site file's where none).
    `records`: the campaign's record files (the runs of the table are looked up there by run id).
    `site`: the loaded Site, or its site.yaml."""
    with logged(log):
        return _write_local_check(table_csv, sweep_csv, records, csv, markdown, split_bytes, as_site(site))


def check_links(sweep: pd.DataFrame, split_bytes: int, site=None) -> dict:
    """{(backend, level, regime): (Link, origin)}: every fit of the sweep, then the site file's figures for
    the (backend, level) pairs no fit covers."""
    from exabench.perf.link_params import LEVELS, fit_table, site_link
    _, fits = fit_table(sweep, split_bytes)
    links = {k: (f.link, f"fitted ({f.summary()})") for k, f in fits.items()}
    if site is not None:
        for backend in ("mpi", "gloo"):
            for level in LEVELS:
                got = site_link(site.network, level)
                for regime in ("small", "large"):
                    if got and (backend, level, regime) not in links:
                        links[(backend, level, regime)] = (got[0], f"site ({got[1]})")
    return links


def record_info(table: pd.DataFrame, records: list[str | Path]) -> dict:
    """Per run of the table: the model's parameter count and the load average, from its record (a file
    <run_id>.json among `records`; a run without one has no entry)."""
    from exabench.records.record import read_record
    by_run = {Path(p).stem: Path(p) for p in records}
    out = {}
    for run_id in table["run_id"].unique():
        path = by_run.get(run_id)
        if path is not None and path.exists():
            rec = read_record(path)
            out[run_id] = {"parameters": (rec.get("info") or {}).get("parameters"),
                           "load_average": ((rec.get("provenance") or {}).get("hardware") or {}).get("load_average")}
    return out


def _write_local_check(table_csv, sweep_csv, records, csv, markdown, split_bytes, site) -> str:
    table = pd.read_csv(table_csv)
    links = check_links(pd.read_csv(sweep_csv), split_bytes, site)
    cores = site.node.usable_cores if site else 1
    check = scaling_check(table, links, cores, record_info(table, records))
    used = sorted({(r["comm_link"], r["link_origin"]) for _, r in check.iterrows()})
    summary = []
    for bench, g in check.dropna(subset=["gap"]).groupby("benchmark"):
        summary.append(f"- {bench}: {len(g)} runs, |gap| median {g['gap'].abs().median():.0%}, "
                       f"max {g['gap'].abs().max():.0%}")
    shown = check.drop(columns=["link_origin", "why", "usable_cores"])
    lines = [f"# Measured scaling vs the model, same layout ({site.name if site else 'this site'})", "",
             "projected_s = measured_1_rank_s x work_per_rank x core_share_factor + model_comm_s. measured_1_rank_s "
             "is the median time of the 1-rank twins (same benchmark, parameters and threads per rank): K-Means' "
             "`time` (one fit), ResNet-50's `step_time`. work_per_rank: K-Means splits size_per_node over a node's "
             "ranks (nodes / ranks), ResNet-50 keeps its batch per rank (1). model_comm_s: K-Means' collectives "
             "(MPI, small messages), ResNet-50's fp32 gradients in DDP's 25 MiB buckets (Gloo, large messages, no "
             "overlap with backward), each a ring at the latency and bandwidth of the level the run crosses "
             "(intra_node: ranks of one node; inter_node: one rank per node). core_share_factor assumes each rank "
             "owns threads_per_rank cores (it is above 1 only when a node's ranks hold more threads than its "
             f"{cores} usable cores); other jobs on the machine are not modelled: load_1m and load_1m_1_rank "
             "(1-minute load average when the records of the run and of its 1-rank twins were written) say how busy "
             "the machine was. gap = measured / projected - 1.", "", "Latency and bandwidth used:", ""]
    lines += [f"- {link}: {origin}" for link, origin in used]
    lines += ["", frame(shown), "", "Why, per run:", ""]
    lines += [f"- {r['run_id']}: {r['why']}" for _, r in check.iterrows()]
    lines += ["", "Summary:", ""] + (summary or ["- no run had a projection"]) + [""]
    return write_csv_and_markdown(csv, check, markdown, "\n".join(lines))
