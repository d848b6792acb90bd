"""Run one micro-benchmark for a test: in this process (one rank), or through the real
plan -> render -> execute path, whose job script starts the ranks with mpirun."""

from __future__ import annotations

import json
from pathlib import Path

from exabench.config import REPO_ROOT, validate
from exabench.training.distributed import World
from exabench.execute import execute
from exabench.campaign.render import RunPaths, run_spec, write_run_files
from exabench.campaign.plan import expand
from exabench.runner import run as run_rank
from exabench.campaign.site import load_site

LOCAL_SITE = REPO_ROOT / "profiles" / "local" / "site.yaml"


def plan_one(tmp_path: Path, name: str, params: dict, ranks: int = 1, threads: int = 1, preset: str = "tiny"):
    config = {"campaign": "test-micro", "preset": preset, "timeout_s": 240,
              "benchmarks": [{"name": name, "params": params,
                              "sweep": {"ranks_per_node": [ranks], "threads_per_rank": [threads]}}]}
    validate(config, "config", "(test)")
    site = load_site(LOCAL_SITE)
    (run,) = expand(config, site, "(test)")
    return run, site, RunPaths(tmp_path / "results", run.run_id)


def run_in_process(tmp_path: Path, name: str, params: dict, preset: str = "tiny") -> dict:
    """The record of a one-rank run executed in this process (no launcher)."""
    run, site, paths = plan_one(tmp_path, name, params, preset=preset)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    spec = run_spec(run, site, paths, "(in process)")
    return run_rank(spec, World(0, 1, 0, 1, "single", False))


def run_launched(tmp_path: Path, name: str, params: dict, ranks: int = 2, preset: str = "tiny") -> dict:
    """The record of a run started by its rendered job script (mpirun with `ranks` ranks)."""
    run, site, paths = plan_one(tmp_path, name, params, ranks=ranks, preset=preset)
    write_run_files(run, site, paths)
    record = execute(paths.spec)
    assert json.loads(paths.record.read_text())["run_id"] == run.run_id
    return record


def metric(record: dict, name: str) -> float:
    return record["metrics"][name]["value"]
