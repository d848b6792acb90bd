"""Whole-machine projections: the campaign of the reference file's `projection.runs` at doubling node
counts up to each whole machine, as tables and a plot, every figure labelled PROJECTED."""

from __future__ import annotations

from pathlib import Path

from exabench.errors import ConfigError
from exabench.io import logged, write_csv_and_markdown
from exabench.markdown import frame
from exabench.perf.alphabeta import Assumptions, assumptions, doubling_counts, project
from exabench.perf.reference import PROJECTED_BANNER, Reference
from exabench.lazy import lazy_import

pd = lazy_import("pandas")


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
        lines += ["", frame(shown), ""]
    return "\n".join(lines) + "\n"


def projection_plot(table: pd.DataFrame, path: str | Path) -> None:
    from exabench.analysis.figures import figure, save
    fig = figure((12, 4.8))
    axes = fig.subplots(1, 2)
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
    fig.suptitle(f"Whole-machine projection (Summit 4,608 / Frontier 9,472 nodes): {PROJECTED_BANNER}", fontsize=10)
    save(fig, path, dpi=120, layout=True)


def write_projection(reference: str | Path, csv: str | Path, markdown: str | Path, plot: str | Path,
                     log: str | None = None) -> str:
    with logged(log):
        table, notes = machine_projection(Reference(reference))
        text = projection_markdown(table, notes)
        table.insert(0, "status", "PROJECTED")
        write_csv_and_markdown(csv, table, markdown, text)
        projection_plot(table, plot)
        return text
