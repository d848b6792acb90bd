"""Run an MLPerf-HPC benchmark for real: a spec like the render rule writes, then 1 rank in
process or N ranks under mpirun (real Gloo process groups), and the record back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from exabench import benchmarks
from exabench.benchmarks.mlperf import harness as mlperf
from exabench.records.record import read_record

REPO = Path(__file__).resolve().parents[1]


def make_spec(tmp: Path, name: str, preset: str, overrides: dict, ranks: int, threads: int = 1) -> Path:
    cls = benchmarks.get(name)
    params = asdict(cls.resolve_params(preset, overrides, "(test)", "params"))
    run_dir = tmp / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    spec = {"spec_version": 1, "run_id": f"{name}.test", "benchmark": name, "suite": cls.suite,
            "framework": cls.framework, "preset": preset, "params": params, "swept": {}, "repeat": 1,
            "campaign": "test", "timeout_s": 600, "site": "local", "launch_line": "(test)", "env": {},
            "layout": {"nodes": 1, "ranks_per_node": ranks, "threads_per_rank": threads, "gpus_per_rank": 0,
                       "ranks": ranks},
            "paths": {"run_dir": str(run_dir), "record": str(tmp / "record.json"),
                      "archive_dir": str(tmp / "archive")}}
    path = tmp / "spec.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


def run_mpi(spec: Path, ranks: int, timeout: int = 280) -> dict:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader,tcp", OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo",
               OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run(["mpirun", "--oversubscribe", "-np", str(ranks), sys.executable, "-m", "exabench.runner",
                           "--spec", str(spec)], env=env, capture_output=True, text=True, timeout=timeout)
    record_path = json.loads(spec.read_text())["paths"]["record"]
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return read_record(record_path)


def oc20_log(path, durations, quality, batch=16, staging=False, seed=1, nodes=1):
    """An OC20-shaped log through MLPerfLog and run_to_target: each epoch sleeps its duration
    (real timestamps, no training); the quality per epoch is given."""
    log = mlperf.MLPerfLog(path, 0, "oc20", platform="test")
    log.start("init_start")
    log.event("cache_clear", True)
    for key, value in (("number_of_nodes", nodes), ("accelerators_per_node", 0), ("global_batch_size", batch),
                       ("seed", seed), ("opt_name", "AdamW"), ("opt_base_learning_rate", 0.0004),
                       ("opt_learning_rate_warmup_steps", 31252), ("opt_learning_rate_warmup_factor", 0.2),
                       ("opt_learning_rate_decay_boundary_steps", [125008, 187512, 250016]),
                       ("opt_learning_rate_decay_factor", 0.1), ("train_samples", 64), ("eval_samples", 8)):
        log.event(key, value)
    if staging:
        log.start("staging_start")
        time.sleep(0.2)
        log.end("staging_stop", metadata={"staging_duration": 0.2})
    log.end("init_stop")
    mlperf.run_to_target(log, len(quality), lambda e: (time.sleep(durations[e - 1]), (0.0, 64, 1.0))[1],
                         lambda e: quality[e - 1], "eval_error", 0.036, False, lambda: None)
    log.close()
    return path
