"""Latency-bandwidth fits of an allreduce sweep, per backend and network level, with their errors."""

from __future__ import annotations

from pathlib import Path

from exabench.io import atomic_write_text, logged
from exabench.markdown import frame
from exabench.perf.link_params import error_by_range, fit_table
from exabench.perf.sweep import sweep_source_label
from exabench.lazy import lazy_import

pd = lazy_import("pandas")


def write_comm_fit(sweep_csv: str | Path, markdown: str | Path, split_bytes: int, log: str | None = None,
                   csv: str | Path | None = None) -> str:
    """Fits of the measured sweep, per backend and level: one (alpha, beta) over all sizes and one per
    protocol regime (below and from split_bytes), with the error against the measured times."""
    with logged(log):
        params, fits = fit_table(pd.read_csv(sweep_csv), split_bytes)
        lines = [f"# Allreduce latency-bandwidth fits ({sweep_source_label(sweep_csv)})", "",
                 "time = 2(n-1) alpha + 2(n-1)/n x bytes / bandwidth (ring), fitted by non-negative least squares "
                 f"in relative terms; `small` = messages below {split_bytes} B, `large` = from it (Open MPI and Gloo "
                 "change protocol around there). Errors are |model / measured - 1| over the fitted points.", "",
                 frame(params), ""]
        for (backend, level, regime), f in fits.items():
            lines += [f"## {backend}, {level}, {regime} messages", "", f.summary(), "",
                      "Error by message size:", "", frame(error_by_range(f)), ""]
            if regime == "all":
                t = f.table.copy()
                t["time_us"], t["model_us"] = 1e6 * t["time_s"], 1e6 * t["time_model_s"]
                lines += [frame(t[["n", "bytes", "time_us", "model_us", "rel_error"]]), ""]
        text = "\n".join(lines)
        if csv:
            atomic_write_text(csv, params.to_csv(index=False))
        atomic_write_text(markdown, text)
        return text
