"""The allreduce sweep (n, nodes, ranks_per_node, bytes, time_s) the communication parameters are fitted
to: the campaign's allreduce records when it has some, else a 2-rank mpi4py sweep measured on this
machine (scripts/allreduce_sweep.py, the local site's stand-in)."""

from __future__ import annotations

from pathlib import Path

from exabench.errors import ExabenchError
from exabench.io import atomic_write_text, logged
from exabench.lazy import lazy_import

pd = lazy_import("pandas")


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


def sweep_source_label(sweep_csv) -> str:
    sweep = pd.read_csv(sweep_csv)
    runs = sweep["run_id"].nunique() if "run_id" in sweep else 0
    return f"{sweep_csv}: {runs} allreduce records" if runs else f"{sweep_csv}: scripts/allreduce_sweep.py"
