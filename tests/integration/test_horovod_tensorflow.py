"""Horovod's TensorFlow binding (built by scripts/install_horovod.sh where tensorflow imports):
two ranks over mpirun and over Gloo (horovodrun --gloo), each doing allreduce,
broadcast_variables and one DistributedGradientTape step on a tiny Keras 3 model
(tests/horovod_tf_job.py). TensorFlow runs only in child processes, never in pytest's."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "horovod_tf_job.py"
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}
PROBE = ("import horovod.tensorflow as hvd; "
         "assert hvd.mpi_built() and hvd.gloo_built(), 'horovod.tensorflow built without MPI or Gloo'")


def run(cmd: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    """Run in its own session so a hung rank is killed with its launcher, not orphaned."""
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{cmd[0]} timed out after {timeout}s:\n{out[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, "")


@pytest.fixture(scope="module", autouse=True)
def horovod_tensorflow():
    """Skip unless a child python imports horovod.tensorflow built with MPI and Gloo."""
    probe = run([sys.executable, "-c", PROBE], timeout=180)
    if probe.returncode != 0:
        tail = probe.stdout.strip().splitlines()[-1:] or ["(no output)"]
        pytest.skip(f"horovod.tensorflow not importable with MPI and Gloo in {sys.executable} "
                    f"(scripts/install_horovod.sh builds it where tensorflow imports): {tail[0]}")


def ranks(outdir: Path) -> list[dict]:
    return [json.loads((outdir / f"rank{r}.json").read_text()) for r in range(2)]


def check_two_ranks(recs: list[dict]) -> None:
    assert [r["size"] for r in recs] == [2, 2]
    for r in recs:
        assert r["sum"] == [3.0, 30.0]  # (1 + 2), (10 + 20)
        assert r["average"] == [0.5]
    # broadcast_variables: ranks started apart (rank-dependent seeds) and end at rank 0's weights
    assert recs[0]["before_broadcast"] != recs[1]["before_broadcast"]
    assert recs[0]["after_broadcast"] == recs[1]["after_broadcast"] == recs[0]["before_broadcast"]
    # DistributedGradientTape: the step moved the weights, equally on both ranks, and equals the
    # single-process step on the whole batch (the mean of the two shard means)
    moved = max(abs(a - b) for a, b in zip(recs[0]["after_step"], recs[0]["after_broadcast"]))
    assert moved > 1e-4
    assert recs[0]["after_step"] == pytest.approx(recs[1]["after_step"], abs=1e-7)
    for r in recs:
        assert r["after_step"] == pytest.approx(r["reference_step"], abs=1e-5)


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun (Open MPI) not installed")
def test_mpirun_allreduce_broadcast_and_gradient_tape(tmp_path):
    out = run(["mpirun", "--oversubscribe", "-np", "2", sys.executable, str(JOB), str(tmp_path)])
    assert out.returncode == 0, out.stdout[-4000:]
    recs = ranks(tmp_path)
    assert all(r["mpi_enabled"] and not r["gloo_enabled"] for r in recs)
    check_two_ranks(recs)


@pytest.mark.timeout(300)
def test_gloo_allreduce_broadcast_and_gradient_tape(tmp_path):
    horovodrun = Path(sys.executable).with_name("horovodrun")
    launcher = [str(horovodrun)] if horovodrun.exists() else [sys.executable, "-m", "horovod.runner.launch"]
    out = run(launcher + ["--gloo", "-np", "2", "-H", "localhost:2", sys.executable, str(JOB), str(tmp_path)])
    assert out.returncode == 0, out.stdout[-4000:]
    recs = ranks(tmp_path)
    assert all(r["gloo_enabled"] and not r["mpi_enabled"] for r in recs)
    check_two_ranks(recs)
