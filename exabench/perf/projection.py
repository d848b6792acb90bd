"""Validation of the communication model against published scaling figures, whole-machine
projections, and the check of the model against measured local scaling.

Inputs live in results/reference/published_scaling.yaml (every value with its source); the outputs
are tables (CSV + Markdown) and a plot, every projected figure labelled PROJECTED.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from exabench.perf.alphabeta import (Assumptions, Link, Machine, Workload, allreduce_time, assumptions,
                                     doubling_counts, project)
from exabench.errors import ConfigError, ExabenchError
from exabench.io import logged

REFERENCE = Path(__file__).resolve().parents[2] / "results" / "reference" / "published_scaling.yaml"
PROJECTED_BANNER = "PROJECTED by exabench's alpha-beta model (not measured)"


class Reference:
    """The reference file, with checked access: every value is {value, source} and its source exists."""

    def __init__(self, path: str | Path = REFERENCE):
        self.path = str(path)
        with open(path) as f:
            self.data = yaml.safe_load(f)
        self.sources = self.data.get("sources") or {}
        for section in ("machines", "workloads", "cases"):
            if section not in self.data:
                raise ConfigError(self.path, section, None, "a mapping (see the file's header)", "is missing")

    def value(self, entry: dict, key: str, where: str):
        if key not in entry:
            raise ConfigError(self.path, f"{where}.{key}", None, "{value, source}", "is missing")
        item = entry[key]
        if not isinstance(item, dict) or "value" not in item or "source" not in item:
            raise ConfigError(self.path, f"{where}.{key}", item, "{value: ..., source: <key of sources>}")
        if item["source"] not in self.sources:
            raise ConfigError(self.path, f"{where}.{key}.source", item["source"], ", ".join(self.sources))
        return item["value"]

    def cited(self, entry: dict) -> list[str]:
        """Source keys of every {value, source} item of an entry, estimates marked with *."""
        out = []
        for item in entry.values():
            if isinstance(item, dict) and "source" in item:
                key = item["source"] + ("*" if item.get("estimate") else "")
                if key not in out:
                    out.append(key)
        return out

    def machine(self, name: str) -> Machine:
        m = self._entry("machines", name)
        w = f"machines.{name}"
        v = lambda k: self.value(m, k, w)  # noqa: E731
        return Machine(name, int(v("devices_per_node")),
                       Link(v("intra_alpha_us") * 1e-6, v("intra_bandwidth_GBps") * 1e9),
                       Link(v("inter_alpha_us") * 1e-6, v("inter_bandwidth_GBps") * 1e9), v("algorithm"),
                       self.value(m, "inter_algorithm", w) if "inter_algorithm" in m else "ring",
                       int(v("max_nodes")) if "max_nodes" in m else None)

    def workload(self, name: str) -> Workload:
        e = self._entry("workloads", name)
        w = f"workloads.{name}"
        return Workload(name, float(self.value(e, "gradient_bytes", w)),
                        float(self.value(e, "samples_per_s_per_device", w)),
                        int(self.value(e, "batch_per_device", w)), str(e.get("precision", "fp32")))

    def _entry(self, section: str, name: str) -> dict:
        entries = self.data[section]
        if name not in entries:
            raise ConfigError(self.path, f"{section}.{name}", name, ", ".join(entries), "is not defined")
        return entries[name]


def validation_table(ref: Reference) -> pd.DataFrame:
    """One row per published case: published and projected efficiency (at the stated overlap, and its
    bounds at no and full overlap), the gap in percentage points, the verdict, why, and the sources."""
    overlap = float(ref.value(ref.data, "default_overlap", "default_overlap"))
    tol = float(ref.data.get("tolerance_pp", 10))
    rows = []
    for i, case in enumerate(ref.data["cases"]):
        where = f"cases[{i}]"
        m, w = ref.machine(case["machine"]), ref.workload(case["workload"])
        published = float(ref.value(case, "published_efficiency", where))
        base, nodes = int(case.get("baseline_nodes", 1)), int(case["nodes"])
        effs = {}
        for label, ov in (("projected", overlap), ("no_overlap", 0.0), ("full_overlap", 1.0)):
            p = project(w, m, [nodes], Assumptions(overlap=ov, mode=case.get("mode", "weak"), baseline_nodes=base,
                                                   global_batch=case.get("global_batch")))
            effs[label] = float(p["efficiency"].iloc[0])
            if label == "projected":
                at = p.iloc[0]
        gap = 100 * (effs["projected"] - published)
        inside = effs["no_overlap"] - tol / 100 <= published <= effs["full_overlap"] + tol / 100
        verdict = "match" if abs(gap) <= tol else ("miss (optimistic)" if gap > 0 else "miss (pessimistic)")
        pub = case["published_efficiency"]
        sources = [pub["source"] + ("" if pub.get("verified", True) else " (unverified)")]
        for s in ref.cited(ref.data["machines"][m.name]) + ref.cited(ref.data["workloads"][w.name]):
            if s not in sources:
                sources.append(s)
        rows.append({"case": case["id"], "title": case.get("title", ""), "machine": m.name, "workload": w.name,
                     "mode": case.get("mode", "weak"), "baseline_nodes": base, "nodes": nodes,
                     "devices": nodes * m.devices_per_node, "published": published,
                     "projected": effs["projected"], "projected_no_overlap": effs["no_overlap"],
                     "projected_full_overlap": effs["full_overlap"], "gap_pp": gap, "verdict": verdict,
                     "published_within_overlap_bounds": bool(inside), "compute_ms": 1e3 * at["compute_s"],
                     "allreduce_ms": 1e3 * at["comm_s"], "why": "" if verdict == "match" else
                     " ".join(str(case.get("why_miss", "not explained")).split()), "sources": "; ".join(sources)})
    return pd.DataFrame(rows)


def machine_projection(ref: Reference) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """The campaign of `projection.runs` at doubling node counts up to each whole machine."""
    spec = ref.data.get("projection") or {}
    overlap = float(ref.value(spec, "overlap", "projection"))
    frames, notes = [], {}
    for run in spec.get("runs", []):
        m, w = ref.machine(run["machine"]), ref.workload(run["workload"])
        if not m.max_nodes:
            raise ConfigError(ref.path, f"machines.{m.name}.max_nodes", None, "the machine's node count",
                              "is needed for a whole-machine projection")
        start = int(run.get("start_nodes", 1))  # strong scaling: start where the batch fits a device
        a = Assumptions(overlap=overlap, mode=run.get("mode", "weak"), global_batch=run.get("global_batch"),
                        baseline_nodes=start)
        p = project(w, m, doubling_counts(start, m.max_nodes), a)
        p["feasible"] = p["batch_per_device"] >= 1  # strong scaling runs out of samples per device
        frames.append(p)
        notes[f"{w.name} on {m.name}, {a.mode}"] = assumptions(w, m, a)
    return pd.concat(frames, ignore_index=True), notes


def _md_table(df: pd.DataFrame) -> str:
    """Markdown via tabulate (it comes with snakemake); floats to 3 significant digits, integers whole."""
    shown = df.copy()
    for c in shown.columns:
        if pd.api.types.is_float_dtype(shown[c]):
            shown[c] = [f"{v:.3g}" for v in shown[c]]
    return shown.to_markdown(index=False, disable_numparse=True)


def validation_markdown(table: pd.DataFrame, ref: Reference) -> str:
    overlap = ref.data["default_overlap"]
    shown = table[["case", "nodes", "devices", "published", "projected", "projected_no_overlap",
                   "projected_full_overlap", "gap_pp", "verdict", "compute_ms", "allreduce_ms", "sources"]]
    used = sorted({s.split(" ")[0].rstrip("*") for cell in table["sources"] for s in cell.split("; ")})
    lines = [f"# Communication model vs published scaling ({PROJECTED_BANNER})", "",
             "Efficiency = throughput(N nodes) / (N x throughput(baseline)). `projected` uses the stated overlap "
             f"of {overlap['value']:.0%} ({overlap.get('note', '')}); the two bounds assume none and full overlap. "
             f"gap_pp = projected - published, in percentage points; a match is within "
             f"{ref.data.get('tolerance_pp', 10)} pp. Sources marked * are estimates (see the reference file); "
             "(unverified) marks a published value quoted from the seed material.", "",
             _md_table(shown), "", "## Where the model misses, and why", ""]
    for _, r in table[table["verdict"] != "match"].iterrows():
        lines.append(f"- **{r['case']}** ({r['verdict']}, {r['gap_pp']:+.0f} pp): {r['why']}")
    if (table["verdict"] == "match").all():
        lines.append("- none")
    unverified = [(c["id"], c["published_efficiency"]) for c in ref.data["cases"]
                  if not c["published_efficiency"].get("verified", True)]
    if unverified:
        lines += ["", "## Published values not found in a primary source", ""]
        lines += [f"- **{case}** ({pub['value']:.0%}): {' '.join(str(pub.get('note', '')).split())}"
                  for case, pub in unverified]
        for _, pub in unverified:  # sources named in those notes are written out too
            used += [k for k in ref.sources if k in str(pub.get("note", "")) and k not in used]
    lines += ["", f"## Sources (from {Path(ref.path).name})", ""]
    lines += [f"- `{k}`: {' '.join(str(ref.sources[k]).split())}" for k in used]
    return "\n".join(lines) + "\n"


def projection_markdown(table: pd.DataFrame, notes: dict[str, list[str]]) -> str:
    lines = [f"# Whole-machine projection: {PROJECTED_BANNER}", "",
             "Every figure below is a projection from the parameters of results/reference/published_scaling.yaml; "
             "none is a measurement. Rows where strong scaling leaves less than one sample per device are dropped.", ""]
    for (wl, mach, mode), g in table.groupby(["workload", "machine", "mode"], sort=False):
        g = g[g["feasible"]]
        lines += [f"## {wl} on {mach}, {mode} scaling (PROJECTED)", "", "Assumptions:", ""]
        lines += [f"- {a}" for a in notes[f"{wl} on {mach}, {mode}"]]
        shown = g[["nodes", "devices", "batch_per_device", "compute_s", "comm_s", "exposed_comm_s", "throughput",
                   "efficiency"]].copy()
        shown[["compute_s", "comm_s", "exposed_comm_s"]] *= 1e3
        shown = shown.rename(columns={"compute_s": "compute_ms", "comm_s": "allreduce_ms",
                                      "exposed_comm_s": "exposed_ms", "throughput": "samples_per_s"})
        lines += ["", _md_table(shown), ""]
    return "\n".join(lines) + "\n"


def projection_plot(table: pd.DataFrame, path: str | Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for (wl, mach, mode), g in table[table["feasible"]].groupby(["workload", "machine", "mode"], sort=False):
        label = f"{wl} / {mach} / {mode}"
        style = "-" if mode == "weak" else "--"
        axes[0].loglog(g["nodes"], g["throughput"], style, marker="o", ms=3, label=label)
        axes[1].semilogx(g["nodes"], 100 * g["efficiency"], style, marker="o", ms=3, label=label)
    axes[0].set(xlabel="nodes", ylabel="samples/s (projected)", title="Throughput")
    axes[1].set(xlabel="nodes", ylabel="scaling efficiency, % (projected)", title="Efficiency", ylim=(0, 105))
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.text(0.5, 0.5, "PROJECTED", transform=ax.transAxes, fontsize=40, color="grey", alpha=0.15,
                ha="center", va="center", rotation=20)
    axes[1].legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Whole-machine projection (Summit 4,608 / Frontier 9,408 nodes): {PROJECTED_BANNER}", fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- writers the pipeline rules and the CLI call (files in, files out) ----------------------------

def write_validation(reference: str | Path, csv: str | Path, markdown: str | Path, log: str | None = None) -> str:
    with logged(log):
        return _write_validation(reference, csv, markdown)


def _write_validation(reference, csv, markdown) -> str:
    from exabench.io import atomic_write_text
    ref = Reference(reference)
    table = validation_table(ref)
    text = validation_markdown(table, ref)
    atomic_write_text(csv, table.to_csv(index=False))
    atomic_write_text(markdown, text)
    return text


def write_projection(reference: str | Path, csv: str | Path, markdown: str | Path, plot: str | Path,
                     log: str | None = None) -> str:
    with logged(log):
        return _write_projection(reference, csv, markdown, plot)


def _write_projection(reference, csv, markdown, plot) -> str:
    from exabench.io import atomic_write_text
    table, notes = machine_projection(Reference(reference))
    text = projection_markdown(table, notes)
    table.insert(0, "status", "PROJECTED")
    atomic_write_text(csv, table.to_csv(index=False))
    atomic_write_text(markdown, text)
    projection_plot(table, plot)
    return text


def write_comm_fit(sweep_csv: str | Path, markdown: str | Path, split_bytes: int, log: str | None = None,
                   csv: str | Path | None = None) -> str:
    """Fits of the measured sweep, per backend and level: one (alpha, beta) over all sizes and one per
    protocol regime (below and from split_bytes), with the error against the measured times."""
    with logged(log):
        return _write_comm_fit(sweep_csv, markdown, split_bytes, csv)


def _write_comm_fit(sweep_csv, markdown, split_bytes, csv=None) -> str:
    from exabench.perf.link_params import error_by_range, fit_table
    from exabench.io import atomic_write_text
    params, fits = fit_table(pd.read_csv(sweep_csv), split_bytes)
    lines = [f"# Allreduce latency-bandwidth fits ({sweep_source_label(sweep_csv)})", "",
             "time = 2(n-1) alpha + 2(n-1)/n x bytes / bandwidth (ring), fitted by non-negative least squares in "
             f"relative terms; `small` = messages below {split_bytes} B, `large` = from it (Open MPI and Gloo change "
             "protocol around there). Errors are |model / measured - 1| over the fitted points.", "",
             _md_table(params), ""]
    for (backend, level, regime), f in fits.items():
        lines += [f"## {backend}, {level}, {regime} messages", "", f.summary(), "", "Error by message size:", "",
                  _md_table(error_by_range(f)), ""]
        if regime == "all":
            t = f.table.copy()
            t["time_us"], t["model_us"] = 1e6 * t["time_s"], 1e6 * t["time_model_s"]
            lines += [_md_table(t[["n", "bytes", "time_us", "model_us", "rel_error"]]), ""]
    text = "\n".join(lines)
    if csv:
        atomic_write_text(csv, params.to_csv(index=False))
    atomic_write_text(markdown, text)
    return text


def sweep_source_label(sweep_csv) -> str:
    sweep = pd.read_csv(sweep_csv)
    runs = sweep["run_id"].nunique() if "run_id" in sweep else 0
    return f"{sweep_csv}: {runs} allreduce records" if runs else f"{sweep_csv}: scripts/allreduce_sweep.py"


def write_local_check(table_csv: str | Path, sweep_csv: str | Path, csv: str | Path, markdown: str | Path,
                      split_bytes: int, log: str | None = None, site=None) -> str:
    """Measured 1 -> n rank (and 1 -> n node) scaling of the campaign vs the model for the same layout, with
    the latency and bandwidth fitted from the campaign's allreduce records (the site file's where none).
    `site`: the loaded Site, or its site.yaml."""
    with logged(log):
        return _write_local_check(table_csv, sweep_csv, csv, markdown, split_bytes, _site(site))


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


def record_info(table: pd.DataFrame, records_dir: Path) -> dict:
    """Per run: the model's parameter count and the load average, from the records beside the table."""
    from exabench.records.record import read_record
    out = {}
    for run_id in table["run_id"].unique():
        path = records_dir / f"{run_id}.json"
        if path.exists():
            rec = read_record(path)
            out[run_id] = {"parameters": (rec.get("info") or {}).get("parameters"),
                           "load_average": ((rec.get("provenance") or {}).get("hardware") or {}).get("load_average")}
    return out


def _site(site):
    """A loaded Site as it is; a site.yaml path loaded; None stays None."""
    from exabench.campaign.site import load_site
    return load_site(site) if isinstance(site, (str, Path)) else site


def _write_local_check(table_csv, sweep_csv, csv, markdown, split_bytes, site=None) -> str:
    from exabench.io import atomic_write_text
    from exabench.perf.local_check import scaling_check
    table = pd.read_csv(table_csv)
    links = check_links(pd.read_csv(sweep_csv), split_bytes, site)
    cores = site.node.usable_cores if site else 1
    check = scaling_check(table, links, cores, record_info(table, Path(table_csv).resolve().parents[1] / "records"))
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
    lines += ["", _md_table(shown), "", "Why, per run:", ""]
    lines += [f"- {r['run_id']}: {r['why']}" for _, r in check.iterrows()]
    lines += ["", "Summary:", ""] + (summary or ["- no run had a projection"]) + [""]
    text = "\n".join(lines)
    atomic_write_text(csv, check.to_csv(index=False))
    atomic_write_text(markdown, text)
    return text


def run_allreduce_sweep(out_csv: str | Path, ranks: int, python: str, env: dict, log_path: str | Path,
                        timeout_s: int = 300) -> None:
    """Run scripts/allreduce_sweep.py under mpirun on this machine (the local site's stand-in for the
    allreduce benchmark's records); the whole process group is killed on timeout."""
    import os
    import signal
    import subprocess
    script = Path(__file__).resolve().parents[2] / "scripts" / "allreduce_sweep.py"
    cmd = ["mpirun", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np", str(ranks), python, str(script),
           "--out", str(out_csv)]
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **{k: str(v) for k, v in env.items()}})
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise ExabenchError(f"allreduce sweep: no result after {timeout_s} s (see {log_path})") from None
    if rc != 0:
        raise ExabenchError(f"allreduce sweep: mpirun exited {rc} (see {log_path})")


def write_sweep_from_records(records: list[str], out_csv: str | Path) -> None:
    """The allreduce benchmark's records -> the sweep table (n, nodes, ranks_per_node, bytes, time_s)."""
    from exabench.records.tidy import load_records
    from exabench.perf.alphabeta import allreduce_table
    from exabench.io import atomic_write_text
    table = allreduce_table(load_records(records))
    if table.empty:
        raise ExabenchError(f"none of {len(records)} records has ok allreduce metrics time.<bytes>B")
    atomic_write_text(out_csv, table.to_csv(index=False))


def allreduce_records(runs: dict, results_dir: str) -> list[str]:
    """Record paths of the campaign's allreduce runs (the input of the sweep table, when any)."""
    return [f"{results_dir}/records/{run_id}.json" for run_id, run in runs.items() if run.benchmark == "allreduce"]


def site_sweep(runs: dict, results_dir: str, site) -> list[str]:
    """The sweep table when the site has allreduce records, or is this machine (measured here); a cluster
    site without records uses its site file's network figures instead (no input)."""
    if allreduce_records(runs, results_dir) or site.scheduler == "none":
        return [f"{results_dir}/perf/allreduce_sweep.csv"]
    return []


def write_sweep(records: list[str], out_csv: str | Path, python: str, env: dict, log: str) -> None:
    """The sweep table from the campaign's allreduce records when there are any, else measured here."""
    with logged(log):
        if records:
            write_sweep_from_records(records, out_csv)
        else:
            run_allreduce_sweep(out_csv, 2, python, env, str(log) + ".mpirun")


# --- the site's communication parameters (fitted, else from its site file) ------------------------

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


def write_site_comm(site, sweep_csv: str | None, csv: str | Path, markdown: str | Path,
                    split_bytes: int, log: str | None = None) -> str:
    """The site's communication parameters table. `site`: the loaded Site, or its site.yaml."""
    with logged(log):
        from exabench.io import atomic_write_text
        site = _site(site)
        sweep = pd.read_csv(sweep_csv) if sweep_csv else None
        table = site_comm_table(site, sweep, split_bytes, sweep_source_label(sweep_csv) if sweep_csv else "")
        lines = [f"# Communication parameters of site {site.name}", "",
                 "Per network level, the latency and bandwidth the communication model uses. `fitted`: from this "
                 "site's allreduce records (they win); `site`: from the site file's `network` figures, each with its "
                 "source; `none`: neither exists.", "", _md_table(table), ""]
        try:
            proj = site_allreduce_projection(site, table)
            lines += [f"## ResNet-50 fp32 gradient allreduce on {site.name} ({PROJECTED_BANNER})", "",
                      f"Hierarchical allreduce of {RESNET50_FP32_GRADIENT_BYTES} bytes, "
                      f"{site.node.gpus or 1} rank(s) per node, ring inside and between nodes, with the parameters "
                      "above; no contention, full bisection.", "", _md_table(proj), ""]
        except ExabenchError as exc:
            lines += [f"No projection: {exc}", ""]
        text = "\n".join(lines)
        atomic_write_text(csv, table.to_csv(index=False))
        atomic_write_text(markdown, text)
        return text
