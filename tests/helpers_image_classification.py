"""Run one image-classification benchmark the way a campaign does: plan it against the local
site, render its job script (mpirun), execute it, and return the result record."""

from __future__ import annotations

from pathlib import Path

from exabench.execute import execute
from exabench.launch import RunPaths, write_run_files
from exabench.plan import expand
from exabench.site import load_site

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(tmp_path: Path, name: str, params: dict, ranks: int = 2, preset: str = "tiny",
                  timeout_s: int = 240) -> dict:
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    config = {"campaign": "test", "preset": preset, "repeats": 1, "timeout_s": timeout_s,
              "benchmarks": [{"name": name, "params": params, "sweep": {"ranks_per_node": [ranks]}}]}
    (run,) = expand(config, site)
    paths = RunPaths(tmp_path / "results", run.run_id)
    write_run_files(run, site, paths)
    return execute(paths.spec)
