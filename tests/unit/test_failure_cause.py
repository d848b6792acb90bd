"""A node's failed run names its cause in the node's verdict and drain line: out of memory, killed by
a signal (which), a timeout, a node down, no record (exabench.analysis.failure_cause)."""

from __future__ import annotations

import pytest

from exabench.analysis import node_verdict as nv
from exabench.analysis.failure_cause import failure_cause
from exabench.analysis.verdict_document import document

from helpers_node_verdict import _campaign, _stopped_by_n03


@pytest.mark.parametrize("status, error, cause", [
    ("failed", "job script exited with code 137 and wrote no record; last output: bash: line 3: 812 Killed",
     "out of memory"),
    ("failed", "slurmstepd: error: Detected 1 oom_kill event in StepId=12.0. Some of the step tasks have been "
               "OOM Killed.", "out of memory"),
    ("failed", "rank 0 on n03: MemoryError: Unable to allocate 2.00 GiB", "out of memory"),
    ("missing", "missing: job 41 ended OUT_OF_MEMORY", "out of memory"),
    ("failed", "job script exited with code 137 and wrote no record; last output: (none)", "killed by signal SIGKILL"),
    ("failed", "job script exited with code -11 and wrote no record; last output: (none)", "killed by signal SIGSEGV"),
    ("failed", "run gemm.tiny stopped: its execution got SIGTERM; its ranks were stopped", "killed by signal SIGTERM"),
    ("timeout", "run exceeded its 300 s limit", "timeout"),
    ("failed", "job script exited with code 137 and wrote no record; last output: slurmstepd: error: *** STEP 12.0 "
               "ON n03 CANCELLED AT 2026-11-28T20:01:02 DUE TO TIME LIMIT *** | Killed", "timeout"),
    ("missing", "missing: job 7 ended TIMEOUT", "timeout"),
    ("missing", "missing: job 7 ended NODE_FAIL", "node down"),
    ("not run: node down (n05: down*)", "not run: node down (n05: down*)", "node down"),
    ("missing", "missing: job 7 ended FAILED", "no record"),
    ("missing", "missing: no job submitted", "no record"),
    ("failed", "ValueError: bad shape", "run failed"),
    # 255 is mpirun's (or ssh's) exit -1, no signal: it was 'killed by signal signal 127'
    ("failed", "job script exited with code 255 and wrote no record; last output: * an inability to create a "
               "connection back to mpirun", "run failed"),
    ("failed", None, "run failed"),
])
def test_failure_causes(status, error, cause):
    assert failure_cause(status, error) == cause


def test_an_out_of_memory_node_is_drained_naming_the_cause():
    planned, records = _campaign()
    rec = records["stream.tiny.n1r1t1.node-n04"]
    rec.update(status="failed", metrics={}, error="job script exited with code 137 and wrote no record; "
                                                  "last output: /bin/sh: line 1: 4242 Killed python -m exabench.runner")
    v = nv.judge(planned, records)
    assert list(v["bad_nodes"]) == ["n04"] and v["status"]["n04"] == "drain"
    assert v["bad_nodes"]["n04"][0].startswith("stream.tiny.n1r1t1: out of memory: run failed: job script exited")
    line = nv.drain_lines(v)[0]
    assert line.startswith('scontrol update nodename=n04 state=drain reason="exabench acceptance: bad node: '
                           'stream.tiny.n1r1t1 out of memory')
    n04 = document(v, "c", "x")["nodes"]["n04"]
    assert n04["cause"] == "out of memory" and n04["severity"] == "clear" and n04["action"] == "drain"
    stream = next(t for t in n04["tests"] if t["test"] == "stream.tiny.n1r1t1")
    assert stream["status"] == "failed" and stream["cause"] == "out of memory" and stream["figure"] is None


def test_a_run_lost_with_its_node_makes_the_node_down_not_drained():
    planned, records = _campaign()
    del records["gemm.tiny.n1r1t1.node-n02"]
    next(p for p in planned if p["run_id"] == "gemm.tiny.n1r1t1.node-n02")["status"] = "missing: job 9 ended NODE_FAIL"
    v = nv.judge(planned, records)
    assert v["down"] == ["n02"] and v["bad_nodes"] == {} and v["status"]["n02"] == "down" and nv.exit_code(v) == 2
    assert document(v, "c", "x")["nodes"]["n02"]["cause"] == "node down"


def test_a_timeout_names_its_cause_in_the_drain_line():
    planned, records = _campaign()
    records["gemm.tiny.n1r1t1.node-n06"].update(status="timeout", metrics={}, error="run exceeded its 300 s limit")
    v = nv.judge(planned, records)
    assert "gemm.tiny.n1r1t1 timeout" in nv.drain_lines(v)[0]


def test_nodes_stopped_by_another_nodes_failure_are_not_run_not_drained():
    # One MPI launch across every node (node_worlds): n03's ranks failed and mpirun stopped the
    # others' ranks. n03 is drained for its own failure; n01 and n05 measured nothing on that run, so
    # they are neither drained nor passed: inconclusive (run it again), exit 2 were n03 not drained.
    planned, records = _stopped_by_n03(("n01", "n05"), "rank 0 on n03: RuntimeError: CUDA error: ECC")
    v = nv.judge(planned, records)
    assert list(v["bad_nodes"]) == ["n03"] and v["status"]["n03"] == "drain"
    assert v["status"]["n01"] == v["status"]["n05"] == "inconclusive"
    row = next(r for r in v["rows"] if r["run_id"] == "stream.tiny.n1r1t1.node-n01")
    assert row["verdict"] == "not-run" and not row["failed"] and row["cause"] == "stopped by another node's failure"
    assert nv.exit_code(v) == 1


def test_nodes_only_stopped_by_another_serve_as_controls_after_those_that_passed_everything():
    # Every node but n03 stopped on STREAM by n03's failure: none passed everything, so without them no
    # confirmation round could run. They passed all they ran: controls, so n03's failure can be confirmed.
    from exabench.analysis import node_confirm
    planned, records = _stopped_by_n03(("n01", "n02", "n04", "n05", "n06", "n07", "n08"), "1 of its 2 rank(s) ended "
                                       "with no record, no error and no stop signal from the launch (exit 137)", 137)
    v = nv.judge(planned, records)
    assert set(v["status"].values()) == {"inconclusive", "drain"} and v["status"]["n03"] == "drain"
    ctrl = node_confirm.controls(v, ["n03"])
    assert len(ctrl) == node_confirm.CONTROLS and "n03" not in ctrl
    records["stream.tiny.n1r1t1.node-n08"].update(status="ok", error=None, metrics={"triad_gbs": {
        "value": 10.0, "unit": "GB/s", "samples": [], "higher_is_better": True}})
    assert node_confirm.controls(nv.judge(planned, records), ["n03"])[0] == "n08"  # passed everything: first
