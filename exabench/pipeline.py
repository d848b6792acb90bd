"""The few functions the Snakemake rules call, so that each rule stays one line."""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path

from .aggregate import aggregate
from .execute import execute
from .launch import RunPaths, write_bundle, write_run_files
from .plan import Run, plan_table
from .results import atomic_write_text
from .site import Site


@contextlib.contextmanager
def logged(log_path: str):
    """Snakemake shows little of an exception raised in a `run:` block: put the traceback in the rule's log."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    try:
        yield
    except BaseException:
        Path(log_path).write_text(traceback.format_exc())
        raise


def cli(argv: list, log_path: str, echo: bool = False) -> None:
    """Run an `exabench` subcommand in-process, its output in the rule's log (and on the terminal
    with `echo`); a non-zero exit fails the rule."""
    import io
    import sys
    from contextlib import redirect_stderr, redirect_stdout

    from .cli import main

    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    with redirect_stdout(buf), redirect_stderr(buf):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse errors
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            buf.write(traceback.format_exc())
            rc = 1
    Path(log_path).write_text(buf.getvalue())
    if echo or rc:
        sys.stdout.write(buf.getvalue())
    if rc:
        raise RuntimeError(f"exabench {argv[0]} exited with {rc}: see {log_path}")


def write_plan(runs: list[Run], path: str, log_path: str) -> None:
    import pandas as pd
    with logged(log_path):
        atomic_write_text(path, pd.DataFrame(plan_table(runs)).to_csv(index=False))


def write_plan_json(runs: list[dict], path: str, log_path: str) -> None:
    import json
    with logged(log_path):
        atomic_write_text(path, json.dumps(runs, indent=1, sort_keys=True, default=str) + "\n")


def write_node_sweep(runs: list[Run], site: Site, results_dir: str, nodes: int, path: str, log_path: str) -> None:
    from .node_sweep import render_node_sweep
    with logged(log_path):
        atomic_write_text(path, render_node_sweep(runs, site, Path(results_dir), nodes), mode=0o755)


def render_run(run: Run, site: Site, results_dir: str, log_path: str) -> None:
    with logged(log_path):
        write_run_files(run, site, RunPaths(Path(results_dir), run.run_id))


def write_bundle_script(runs, site, results_dir, campaign, path, log_path) -> None:
    with logged(log_path):
        write_bundle(runs, site, Path(results_dir), campaign, Path(path))


def status_lines(spec_path: str, rec: dict) -> list[str]:
    """What a user sees when a run ends: its status, and the campaign's progress (done/failed/remaining)."""
    import json

    from .report import progress_line

    lines = [f"{rec['run_id']}: {rec['status']}" + (f" ({rec['error']})" if rec.get("error") else "")]
    record = Path(json.loads(Path(spec_path).read_text())["paths"]["record"])
    if record.parent.name == "records":  # a campaign run (not an every-node one under records/nodes)
        lines.append(progress_line(record.parent.parent, rec["run_id"], rec["status"]))
    return lines


def execute_run(spec_path: str, log_path: str) -> list[str]:
    """Execute one run, its output in `log_path`; prints and returns the status lines."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        rec = execute(spec_path, log=log)
    lines = status_lines(spec_path, rec)
    print("\n".join(lines), flush=True)
    return lines


def aggregate_site(records: list[str], csv: str, markdown: str, site: str, log_path: str) -> None:
    with logged(log_path):
        aggregate(records, csv, markdown, site)
