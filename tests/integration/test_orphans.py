"""No run's ranks outlive its execution (issue 35): whatever way the process that started a run
dies (a signal to `exabench execute` itself, SIGKILL of it, the death of the bundle or every-node
script above it), the job's process group is stopped and no record claims `ok`. Real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exabench.campaign.render import RunPaths
from conftest import requires_mpi
from helpers_runs import rendered_kmeans
from test_faults import two_runs  # noqa: F401 - the fixture: a campaign of two runs rendered by snakemake

ROOT = Path(__file__).resolve().parents[2]

# A stand-in for a run's ranks: a child that would write an `ok` record after 60 s, and the script
# (the launcher) waiting on it. Both live in the job's own session, as real ranks do.
RANKS = """#!/usr/bin/env bash
run_dir="$(dirname "$0")"
( sleep 60; cp "$run_dir/ok.json" {record} ) &
echo $! > "$run_dir/rank.pid"
wait
"""


@pytest.fixture
def rank_run(tmp_path, two_core_site):
    run, paths = rendered_kmeans(tmp_path, two_core_site, timeout_s=300)
    paths.script.write_text(RANKS.format(record=paths.record))
    (paths.run_dir / "ok.json").write_text(json.dumps({"run_id": run.run_id, "status": "ok"}))
    return paths


def gone(pid: int, timeout: float = 15.0) -> bool:
    """The process ended (a zombie nobody reaps counts as ended)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Until `path` holds a whole line (the writer may be half-way)."""
    end = time.monotonic() + timeout
    while not (path.exists() and path.read_text().endswith("\n")):
        assert proc.poll() is None, f"ended before {path} appeared: {proc.communicate()}"
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def start(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # a signal below reaches the one process it is sent to


def execute_pid_of(paths: RunPaths) -> int:
    return json.loads((paths.run_dir / "run.lock").read_text())["pid"]


EXECUTE = [sys.executable, "-m", "exabench", "execute", "--spec"]


# Who is killed, and how: the execution itself (as `scancel` or a user would), or the script above it
# (a bundle or every-node script running `exabench execute`, killed half-way).
@pytest.mark.parametrize("target,sig", [
    ("execute", signal.SIGTERM), ("execute", signal.SIGHUP), ("execute", signal.SIGKILL),
    ("parent", signal.SIGTERM), ("parent", signal.SIGKILL),
])
def test_a_run_whose_execution_or_its_parent_dies_leaves_no_rank_running_and_no_ok_record(rank_run, target, sig):
    paths = rank_run
    script = f"{' '.join(EXECUTE)} {paths.spec}; echo bundle goes on"
    top = start(["bash", "-c", script]) if target == "parent" else start([*EXECUTE, str(paths.spec)])
    try:
        wait_for(paths.run_dir / "rank.pid", top)
        rank = int((paths.run_dir / "rank.pid").read_text())
        execution = execute_pid_of(paths)
        os.kill(top.pid if target == "parent" else execution, sig)
        assert gone(rank), f"rank {rank} still runs after {sig.name} to the {target}"
        assert gone(execution), f"the execution (PID {execution}) still runs after {sig.name} to the {target}"
    finally:
        if top.poll() is None:
            os.killpg(top.pid, signal.SIGKILL)
        top.communicate(timeout=30)
    if paths.record.exists():
        assert json.loads(paths.record.read_text())["status"] != "ok"
    if sig != signal.SIGKILL or target == "parent":  # the execution lived to clean up: its lock is gone
        assert not (paths.run_dir / "run.lock").exists()


def test_a_signalled_execution_says_so_and_exits_non_zero(rank_run):
    paths = rank_run
    proc = start([*EXECUTE, str(paths.spec)])
    wait_for(paths.run_dir / "rank.pid", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "Traceback" not in err
    assert "its execution got SIGTERM; its ranks were stopped and no record was written" in err
    assert not paths.record.exists()


def test_sigkill_of_snakemake_and_of_the_runs_execution_leaves_no_rank_running(two_runs):
    """The fault matrix's worst case: snakemake and the job process executing the run both die by
    SIGKILL, so nothing of the run's own code is left to stop the ranks but the watchdog."""
    from test_faults import snakemake_popen
    cwd, cfg, runs, (_, slow), _ = two_runs
    smk = snakemake_popen(cwd, cfg, f"results/local/records/{slow}.json")
    try:
        wait_for(runs / slow / "job.pid", smk, timeout=180)
        job = int((runs / slow / "job.pid").read_text())
        execution = json.loads((runs / slow / "run.lock").read_text())["pid"]
        assert execution != smk.pid  # a job process of its own, below snakemake
        os.kill(execution, signal.SIGKILL)
        os.kill(smk.pid, signal.SIGKILL)
        assert gone(job), f"the run's job (PID {job}) runs on after SIGKILL of snakemake and of its execution"
    finally:
        if smk.poll() is None:
            os.killpg(smk.pid, signal.SIGKILL)
        smk.communicate(timeout=30)
    record = cwd / "results" / "local" / "records" / f"{slow}.json"
    assert not record.exists() or json.loads(record.read_text())["status"] != "ok"


# Real Open MPI ranks: mpirun puts each rank in a process group of its own (in the job's session),
# where a signal to the job's group does not reach it. Here mpirun itself dies by SIGKILL, as when
# a stop escalates past its grace time: its rank, orphaned, must still be stopped with the job.
MPIRUN_RANK = """#!/usr/bin/env bash
run_dir="$(dirname "$0")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
mpirun --oversubscribe -np 1 bash -c "echo \\$\\$ > $run_dir/rank.pid.tmp; mv $run_dir/rank.pid.tmp $run_dir/rank.pid; exec sleep 120" &
echo $! > "$run_dir/mpirun.pid"
wait
"""


@requires_mpi
def test_a_rank_in_a_group_of_its_own_is_stopped_when_its_mpirun_is_killed(tmp_path, two_core_site):
    run, paths = rendered_kmeans(tmp_path, two_core_site, script=MPIRUN_RANK, timeout_s=300)
    proc = start([*EXECUTE, str(paths.spec)])
    try:
        wait_for(paths.run_dir / "rank.pid", proc)
        rank = int((paths.run_dir / "rank.pid").read_text())
        assert os.getpgid(rank) != execute_job_pgid(paths)  # its own group: the case at hand
        os.kill(int((paths.run_dir / "mpirun.pid").read_text()), signal.SIGKILL)
        assert gone(rank), f"rank {rank} (its own process group) runs on after its mpirun was killed"
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    assert not paths.record.exists() or json.loads(paths.record.read_text())["status"] != "ok"


def execute_job_pgid(paths: RunPaths) -> int:
    return json.loads((paths.run_dir / "run.lock").read_text())["job_pgid"]
