"""Horovod (built by scripts/install_horovod.sh): its own launcher over Gloo, mpirun, the
DistributedOptimizer step against one process, and an exabench run with fp16 compression."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_image_classification import ROOT, run_benchmark

pytest.importorskip("horovod.torch", reason="Horovod not installed: run scripts/install_horovod.sh <venv>")

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
ALLREDUCE = ("import torch, horovod.torch as hvd; hvd.init(); "
             "s = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum); "
             "print(f'rank {hvd.rank()} of {hvd.size()} sum {s.item()}', flush=True); hvd.shutdown()")


def _env() -> dict:
    return {**os.environ, **MPI_ENV, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}


@pytest.mark.timeout(300)
def test_horovodrun_gloo_allreduce():
    horovodrun = shutil.which("horovodrun") or str(Path(sys.executable).with_name("horovodrun"))
    out = subprocess.run([horovodrun, "--gloo", "-np", "2", "-H", "localhost:2", sys.executable, "-c", ALLREDUCE],
                         env=_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0 of 2 sum 3.0" in out.stdout and "rank 1 of 2 sum 3.0" in out.stdout


@pytest.mark.timeout(300)
def test_mpirun_allreduce():
    out = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", sys.executable, "-c", ALLREDUCE],
                         env=_env(), capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("sum 3.0") == 2


@pytest.mark.timeout(300)
def test_distributed_optimizer_step_equals_single_process_step(tmp_path):
    cmd = ["mpirun", "--oversubscribe", "-np", "2", sys.executable,
           str(ROOT / "tests" / "helpers_image_classification.py"), "horovod", str(tmp_path)]
    subprocess.run(cmd, env=_env(), check=True, timeout=240, capture_output=True)
    out = json.loads((tmp_path / "ddp_step.json").read_text())
    assert out["size"] == 2 and out["moved"] > 1e-3
    assert out["diff_ranks"] == 0.0 and out["diff_single"] < 1e-5
    assert out["grad_norms"][0] == out["grad_norms"][1]


@pytest.mark.timeout(300)
def test_exabench_run_over_horovod_with_fp16_compression_and_larc(tmp_path):
    rec = run_benchmark(tmp_path, "convnet_cifar10", {"data": "synthetic", "backend": "horovod",
                                                      "compression": "fp16", "fusion_threshold_mb": 16.0,
                                                      "optimizer": "lars", "lr": 0.05, "reference_batch": 32,
                                                      "lr_warmup_steps": 2})
    assert rec["status"] == "ok", rec["error"]
    assert rec["info"]["backend"] == "horovod"
    assert all(c["passed"] for c in rec["checks"]), rec["checks"]
    assert rec["metrics"]["throughput"]["value"] > 0
