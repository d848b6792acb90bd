"""The every-node job under an MPI launcher started from the batch node only (exabench.campaign.
node_worlds): one launch across every node, each node's ranks in their own MPI world. Here real
mpirun ranks stand for two nodes' (EXABENCH_NODE_NAME per rank), then node-collect; the jobs
rendered for the real sites' own launchers (jsrun, aprun, mpiexec, ibrun)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exabench.campaign.node_sweep import prepare_nodes
from exabench.campaign.plan import Run
from exabench.campaign.render import RunPaths, write_runs_files
from exabench.campaign.site import resolve_layout

from helpers_sites import REPO, site

NODES = ["n01", "n02"]


def _kmeans_spec(tmp_path: Path, ranks: int = 2, params: dict | None = None, benchmark: str = "kmeans") -> Path:
    s = site("local")
    run = Run(run_id=f"{benchmark}.tiny.n1r{ranks}t1", benchmark=benchmark, suite="s", framework="f",
              preset="tiny", params=params or {}, layout=resolve_layout(s, nodes=1, ranks_per_node=ranks,
                                                                        threads_per_rank=1), timeout_s=120)
    write_runs_files([run], s, tmp_path)
    spec = RunPaths(tmp_path, run.run_id).spec.resolve()
    prepare_nodes([spec], NODES)
    (tmp_path / "nodes.txt").write_text("".join(f"{n}\n" for n in NODES))
    return spec


def _launch_two_nodes(spec: Path, ranks_per_node: int, env_extra: str = "") -> subprocess.CompletedProcess:
    """Every rank of both nodes in one mpirun (one MPI_COMM_WORLD), each rank told which node it
    stands for, as ranks on two hosts would know from their host names."""
    name = f'n0$(( OMPI_COMM_WORLD_RANK / {ranks_per_node} + 1 ))'
    wrapper = f'export EXABENCH_NODE_NAME={name} {env_extra}; exec "$@"'
    cmd = [shutil.which("mpirun"), "--oversubscribe", "-np", str(2 * ranks_per_node), "-x", "PYTHONPATH",
           "bash", "-c", wrapper, "rank", sys.executable, "-m", "exabench.runner", "--spec", str(spec), "--node-world"]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(spec.parent),
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)


def _collect(tmp_path: Path, spec: Path, exit_code: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exabench", "node-collect", "--spec", str(spec), "--nodes-file",
                           str(tmp_path / "nodes.txt"), "--exit", str(exit_code)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}, timeout=60)


def _node_record(tmp_path: Path, spec: Path, node: str) -> dict:
    run_id = json.loads(spec.read_text())["run_id"]
    return json.loads((tmp_path / "records" / "nodes" / f"{run_id}.node-{node}.json").read_text())


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_one_launch_over_two_nodes_gives_each_node_its_own_two_rank_world_and_record(tmp_path):
    # 4 ranks in one MPI_COMM_WORLD; K-Means allreduces over its communicator: each node's record is
    # its own 2-rank run (both ranks on the node, their own centroids' agreement checked).
    spec = _kmeans_spec(tmp_path)
    res = _launch_two_nodes(spec, 2)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    for node in NODES:
        rec = _node_record(tmp_path, spec, node)
        assert rec["status"] == "ok" and rec["run_id"] == f"kmeans.tiny.n1r2t1.node-{node}", rec.get("error")
        # the node's world: its 2 ranks, not the launch's 4
        assert rec["provenance"]["node_world"] == {"node": node, "ranks": 2, "launch_ranks": 4, "launch_nodes": 2}
        assert rec["layout"]["launch_line"].startswith("one launch across every node (node worlds), each node "
                                                       "running: mpirun ")
        assert all(c["passed"] for c in rec["checks"])
    done = _collect(tmp_path, spec, 0)
    assert done.returncode == 0 and "launch exit 0; 2 node record(s): 2 ok" in done.stdout, done.stdout + done.stderr


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
@pytest.mark.parametrize("backend", ["mpi", "gloo", "horovod"])
def test_each_nodes_allreduce_runs_over_its_own_ranks_with_every_backend(backend, tmp_path):
    # mpi4py on the node's communicator; Gloo's rendezvous broadcast over it; Horovod initialised on it
    # (hvd.init(comm=...)): each reports its node's 2 ranks, and the sums check against 2 ranks' values.
    if backend == "horovod":
        pytest.importorskip("horovod.torch")
    spec = _kmeans_spec(tmp_path, params={"backend": backend, "sizes": "doubling", "min_bytes": 8,
                                          "max_bytes": 4096, "warmup": 1, "iters": 3, "iters_large": 2},
                        benchmark="allreduce")
    res = _launch_two_nodes(spec, 2)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    for node in NODES:
        rec = _node_record(tmp_path, spec, node)
        assert rec["status"] == "ok", rec.get("error")
        assert rec["provenance"]["node_world"]["ranks"] == 2 and all(c["passed"] for c in rec["checks"])


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI's mpirun")
def test_a_node_that_fails_stops_the_launch_and_only_it_is_recorded_failed(tmp_path):
    # n02's ranks fail at once (a parameter the benchmark does not take: it raises); mpirun stops n01's
    # ranks with them. node-collect: n02 failed with its own error, n01 "not run: stopped ..." whether
    # or not n01's ranks ran their SIGTERM handler before mpirun's SIGKILL.
    spec = _kmeans_spec(tmp_path)
    node_spec = spec.parent.parent.parent / "nodes" / "kmeans.tiny.n1r2t1" / "n02" / "spec.json"
    broken = json.loads(node_spec.read_text())
    broken["params"] = {**broken["params"], "no_such_param": 1}
    node_spec.write_text(json.dumps(broken))
    res = _launch_two_nodes(spec, 2)
    assert res.returncode != 0
    done = _collect(tmp_path, spec, res.returncode)
    assert done.returncode == 1, done.stdout + done.stderr
    bad, stopped = _node_record(tmp_path, spec, "n02"), _node_record(tmp_path, spec, "n01")
    assert bad["status"] == "failed" and "no_such_param" in bad["error"], bad["error"]
    if stopped["status"] != "ok":  # n01 may have finished before mpirun stopped it
        assert stopped["error"].startswith("not run: stopped with the launch across every node (exit "), stopped
        assert stopped["error"].endswith("node(s) n02 failed")


def test_node_collect_records_a_timed_out_launch_and_keeps_what_was_recorded(tmp_path):
    from exabench.execute import collect_node_world as collect
    from exabench.records.record import base_record, now_iso, provenance, write_record
    spec = _kmeans_spec(tmp_path)
    n01 = json.loads((tmp_path / "nodes" / "kmeans.tiny.n1r2t1" / "n01" / "spec.json").read_text())
    t = now_iso()
    ok = {**base_record(n01), "status": "ok", "error": None, "metrics": {}, "checks": [], "info": {},
          "provenance": provenance(t, t, ["h"])}
    write_record(ok, n01["paths"]["record"], n01["paths"]["archive_dir"])
    assert collect(spec, NODES, 137, 130.0) == {"n01": "ok", "n02": "timeout"}
    late = _node_record(tmp_path, spec, "n02")
    assert late["error"].startswith("run exceeded its time limit of 120 s and was stopped with the launch across "
                                    "every node")


# The real sites whose launcher is started from the batch node only: their every-node job is one
# launch per run across every node, in node worlds.
WORLD_SITES = {"summit": "jsrun", "summitdev": "jsrun", "titan": "aprun", "theta": "aprun", "polaris": "mpiexec",
               "aurora": "mpiexec", "stampede2": "ibrun"}


def test_every_real_site_has_an_every_node_job_one_launch_step_or_node_worlds():
    from exabench.campaign import launchers
    from helpers_sites import REAL_SITES
    stepping = {s for s in REAL_SITES if launchers.facts(site(s).launcher).node_step}  # srun sites
    assert stepping and {s: site(s).launcher for s in REAL_SITES if s not in stepping} == WORLD_SITES


@pytest.mark.parametrize("site_name", sorted(WORLD_SITES))
def test_real_sites_every_node_jobs_are_one_launch_per_run_across_every_node(site_name, tmp_path):
    from test_every_node import _sweep
    s, runs, files = _sweep(site_name, tmp_path)
    jobs = {n: t for n, t in files.items() if n != "every-node.sh" or len(files) == 1}
    single = {r.run_id: r for r in runs if r.layout.nodes == 1}
    seen = []
    for name, text in jobs.items():
        check = subprocess.run(["bash", "-n", str(tmp_path / "nodes" / name)], capture_output=True, text=True)
        assert check.returncode == 0, (name, check.stderr)
        assert "for " not in text and "&\n" not in text and "node-agent" not in text
        for line in (x for x in text.splitlines() if x.startswith("step=0; ")):
            run_id = re.search(r"--spec \S+/runs/([^/\s]+)/spec.json --node-world", line).group(1)
            timeout = re.search(r"exec timeout --kill-after=30 (\d+) (\S+) ", line)
            assert timeout.group(2) == WORLD_SITES[site_name] and int(timeout.group(1)) == single[run_id].timeout_s
            assert line.endswith(" ) || step=$?")
            seen.append(run_id)
        assert text.count("-m exabench node-collect ") == text.count("step=0; ")
    assert sorted(seen) == sorted(single)


def _write_marks(tmp_path: Path, marks: dict[str, list[str]]) -> dict[str, Path]:
    """Each node's ranks' stop marks as the launch left them ("" for a mark no SIGTERM wrote); node ->
    its errors folder."""
    folders = {}
    for node, texts in marks.items():
        folders[node] = errors = tmp_path / "nodes" / "kmeans.tiny.n1r2t1" / node / "errors"
        errors.mkdir(parents=True)
        for rank, text in enumerate(texts):
            (errors / f"stopped-rank{rank}.txt").write_text(text)
    return folders


def test_node_collect_finds_the_node_whose_rank_was_killed_outright_among_those_the_launch_stopped(tmp_path):
    # Exit 137 after 20 s of a 120 s limit: not the limit (timeout's exit 137 needs the whole limit) but a
    # rank killed, as mpirun exits when the kernel's OOM killer ended one. n01's two ranks were stopped by
    # the launch's SIGTERM (their marks written); n02's rank 1 left its mark empty: killed outright.
    from exabench.execute import collect_node_world as collect
    spec = _kmeans_spec(tmp_path)
    _write_marks(tmp_path, {"n01": ["stacks", "stacks"], "n02": ["stacks", ""]})
    assert collect(spec, NODES, 137, 20.0) == {"n01": "failed", "n02": "failed"}
    killed, stopped = _node_record(tmp_path, spec, "n02"), _node_record(tmp_path, spec, "n01")
    assert killed["error"] == ("1 of its 2 rank(s) ended with no record, no error and no stop signal from the launch "
                               "(exit 137): killed outright (out of memory, or a signal)")
    assert stopped["error"] == ("not run: stopped with the launch across every node (exit 137) before this node's run "
                                "recorded: node(s) n02 failed")


def test_an_empty_stop_mark_beside_another_nodes_own_error_is_a_stop_not_a_kill(tmp_path):
    # n02's ranks wrote their error (they ended the launch); one of n01's ranks left its mark empty:
    # the launcher's SIGKILL reached it before its SIGTERM handler ran (mpirun sends it milliseconds
    # after SIGTERM), so n01 is stopped with the launch, not killed outright.
    from exabench.execute import collect_node_world as collect
    spec = _kmeans_spec(tmp_path)
    errors = _write_marks(tmp_path, {"n01": ["stacks", ""], "n02": ["", ""]})["n02"]
    (errors / "rank0.txt").write_text("rank 0 on n02: TypeError: run() got an unexpected keyword argument 'k2'\n")
    assert collect(spec, NODES, 1, 3.0) == {"n01": "failed", "n02": "failed"}
    assert "TypeError" in _node_record(tmp_path, spec, "n02")["error"]
    assert _node_record(tmp_path, spec, "n01")["error"] == (
        "not run: stopped with the launch across every node (exit 1) before this node's run recorded: node(s) n02 "
        "failed")


def test_node_collect_names_the_one_node_left_without_a_record_by_a_failed_launch(tmp_path):
    # Every other node finished (its record written, nothing to stop); n02's rank was killed at the end:
    # no mark is written anywhere, but n02 alone has no record of a launch that failed.
    from exabench.execute import collect_node_world as collect
    from exabench.records.record import base_record, now_iso, provenance, write_record
    spec = _kmeans_spec(tmp_path)
    n01 = json.loads((tmp_path / "nodes" / "kmeans.tiny.n1r2t1" / "n01" / "spec.json").read_text())
    t = now_iso()
    write_record({**base_record(n01), "status": "ok", "error": None, "metrics": {}, "checks": [], "info": {},
                  "provenance": provenance(t, t, ["h"])}, n01["paths"]["record"], n01["paths"]["archive_dir"])
    errors = tmp_path / "nodes" / "kmeans.tiny.n1r2t1" / "n02" / "errors"
    errors.mkdir(parents=True)
    for rank in (0, 1):
        (errors / f"stopped-rank{rank}.txt").write_text("")
    assert collect(spec, NODES, 137, 20.0) == {"n01": "ok", "n02": "failed"}
    assert _node_record(tmp_path, spec, "n02")["error"].startswith("2 of its 2 rank(s) ended with no record, no error "
                                                                    "and no stop signal")
