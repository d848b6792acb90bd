"""The result record: atomic writes, no secrets, and a record for every way a run can end."""

from __future__ import annotations

import json
import os

import pytest

from exabench.execute import execute
from exabench.records.record import ENV_ALLOW, SCHEMA, RecordError, allowed_env, read_record, write_record
from exabench.io import atomic_write_many, atomic_write_text
from helpers_runs import rendered_kmeans


def test_atomic_write_leaves_old_content_on_failure(tmp_path):
    target = tmp_path / "r.json"
    atomic_write_text(target, "old\n")

    class Boom:
        def __str__(self):
            raise RuntimeError("boom")

    with pytest.raises(TypeError):
        atomic_write_text(target, Boom())  # fails inside the write
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_atomic_write_many_writes_every_file_with_its_mode(tmp_path):
    files = [(tmp_path / f"d{i}" / name, f"{i} {name}\n", mode)
             for i in range(40) for name, mode in (("spec.json", 0o644), ("job.sh", 0o755))]
    atomic_write_many(files)
    for path, text, mode in files:
        assert path.read_text() == text
        assert path.stat().st_mode & 0o777 == mode
    assert sorted(p.name for p in (tmp_path / "d3").iterdir()) == ["job.sh", "spec.json"]  # no temp file left


def test_atomic_write_many_replaces_nothing_when_one_write_fails(tmp_path):
    old = [(tmp_path / f"f{i}", f"old {i}\n", 0o644) for i in range(30)]
    atomic_write_many(old)

    class Boom:
        def __str__(self):
            raise RuntimeError("boom")

    new = [(p, f"new {i}\n", 0o644) for i, (p, _, _) in enumerate(old)]
    new[17] = (new[17][0], Boom(), 0o644)  # one bad text among good ones, written on other threads
    with pytest.raises(TypeError):
        atomic_write_many(new)
    assert [p.read_text() for p, _, _ in old] == [t for _, t, _ in old]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p, _, _ in old)


def test_environment_allow_list_never_keeps_secrets():
    env = {"OMP_NUM_THREADS": "4", "NCCL_IB_HCA": "mlx5", "NCCL_API_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "y",
           "HOME": "/root", "MY_SITE_VAR": "v", "MY_PASSWORD": "z", "OMPI_MCA_orte_precondition_transports": "k"}
    got = allowed_env(env, extra=("MY_SITE_VAR", "MY_PASSWORD"))
    assert got == {"MY_SITE_VAR": "v", "NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "4"}


def test_write_record_archives_every_version(tmp_path):
    rec = {"schema": SCHEMA, "run_id": "x", "benchmark": "kmeans", "status": "ok", "metrics": {},
           "provenance": {"end_time": "2026-01-01T00:00:00.000+00:00"}}
    write_record(rec, tmp_path / "x.json", tmp_path / "archive")
    rec2 = {**rec, "provenance": {"end_time": "2026-01-02T00:00:00.000+00:00"}}
    write_record(rec2, tmp_path / "x.json", tmp_path / "archive")
    assert read_record(tmp_path / "x.json")["provenance"]["end_time"].startswith("2026-01-02")
    assert len(list((tmp_path / "archive").iterdir())) == 2


def test_read_record_rejects_foreign_json(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"schema": "other/1"}))
    with pytest.raises(ValueError, match="not an exabench result record"):
        read_record(tmp_path / "r.json")


def _valid_record(**changes) -> dict:
    rec = {"schema": SCHEMA, "run_id": "kmeans.tiny.n1r1t1", "benchmark": "kmeans", "status": "ok",
           "layout": {"nodes": 1, "ranks_per_node": 1, "ranks": 1, "threads_per_rank": 1, "gpus_per_rank": 0},
           "metrics": {"time": {"value": 1.5, "unit": "s", "samples": [1.5], "higher_is_better": False}},
           "workload": {"headline": "time", "scaling": "weak", "communication": {"pattern": "kmeans-fit"},
                        "data_parallel": False, "task": "kmeans"}}
    for key, value in changes.items():
        *parents, leaf = key.split(".")
        node = rec
        for k in parents:
            node = node[k]
        node[leaf] = value
    return rec


@pytest.mark.parametrize("key, value, named", [
    ("status", "finished", "status"),
    ("metrics.time.unit", 3, "metrics.time.unit"),
    ("metrics.time.value", "fast", "metrics.time.value"),
    ("layout.nodes", 0, "layout.nodes"),
    ("workload.scaling", "linear", "workload.scaling"),
    ("run_id", "bad id\n", "run_id"),
])
def test_an_invalid_record_is_refused_naming_file_and_key_and_not_written(tmp_path, key, value, named):
    from exabench.records.record import RecordError
    target = tmp_path / "records" / "r.json"
    with pytest.raises(RecordError, match=f"{target}: key '{named}'"):
        write_record(_valid_record(**{key: value}), target, tmp_path / "archive")
    assert not target.exists() and not (tmp_path / "archive").exists()
    # the same record on disk (written by something else) is refused when read for the tables
    target.parent.mkdir()
    target.write_text(json.dumps(_valid_record(**{key: value})))
    with pytest.raises(RecordError, match=f"key '{named}'"):
        read_record(target)


def test_a_record_missing_a_required_key_or_not_json_is_named(tmp_path):
    from exabench.records.record import RecordError
    rec = _valid_record()
    del rec["metrics"]
    (tmp_path / "a.json").write_text(json.dumps(rec))
    with pytest.raises(RecordError, match="a.json: key '\\(top level\\)'.*'metrics' is a required property"):
        read_record(tmp_path / "a.json")
    (tmp_path / "b.json").write_text('{"schema": ')
    with pytest.raises(RecordError, match="b.json: not JSON"):
        read_record(tmp_path / "b.json")
    assert read_record_ok(tmp_path)


def read_record_ok(tmp_path) -> bool:
    write_record(_valid_record(), tmp_path / "kmeans.tiny.n1r1t1.json")
    return read_record(tmp_path / "kmeans.tiny.n1r1t1.json")["metrics"]["time"]["unit"] == "s"


@pytest.fixture
def rendered(tmp_path, two_core_site):
    return rendered_kmeans(tmp_path, two_core_site, sweep={"ranks_per_node": [2]}, timeout_s=2)[1]


def test_launcher_failure_gives_failed_record(rendered):
    rendered.script.write_text("#!/usr/bin/env bash\necho 'mpirun: no such launcher here' >&2\nexit 3\n")
    rec = execute(rendered.spec)
    assert rec["status"] == "failed" and rec["metrics"] == {}
    assert "exited with code 3" in rec["error"] and "no such launcher" in rec["error"]
    assert read_record(rendered.record) == rec
    # What was asked is still recorded: the default k = 0 (k = 2, 3, 4 in turn, as the reference times it).
    assert rec["params"]["k"] == 0 and rec["params"]["init"] == "random" and rec["layout"]["ranks"] == 2
    spec = json.loads(rendered.spec.read_text())
    # the run's own environment, though the record was written outside its ranks
    assert rec["provenance"]["environment"]["OMP_NUM_THREADS"] == spec["env"]["OMP_NUM_THREADS"]


HUNG_RANK_1 = """
import runpy, sys, time
from exabench.benchmarks.analytics import kmeans
from exabench.training.distributed import detect_world
if detect_world().rank == 1:
    def stuck_before_the_first_collective(self, params, ctx):
        time.sleep(600)
    kmeans.KMeans.run = stuck_before_the_first_collective
sys.argv[0] = "exabench.runner"
runpy.run_module("exabench.runner", run_name="__main__")
"""


def test_a_hung_run_says_where_each_rank_was_at_its_limit(tmp_path, two_core_site):
    # The real runner on 2 MPI ranks, rank 1 stuck before the benchmark's first collective, so rank 0
    # waits in it: the timeout record names both places, from the stacks the ranks wrote themselves.
    _, paths = rendered_kmeans(tmp_path, two_core_site, sweep={"ranks_per_node": [2]}, timeout_s=15)
    wrapper = tmp_path / "hung_rank_1.py"
    wrapper.write_text(HUNG_RANK_1)
    script = paths.script.read_text()
    assert "-m exabench.runner" in script
    paths.script.write_text(script.replace("-m exabench.runner", str(wrapper)))
    rec = execute(paths.spec)
    assert rec["status"] == "timeout", rec["error"]
    assert "where the ranks were 5 s before the limit" in rec["error"], rec["error"]
    assert "rank 1 at " in rec["error"] and "in stuck_before_the_first_collective" in rec["error"], rec["error"]
    rank0 = rec["error"].split("rank 0 at ", 1)[1].split(";", 1)[0]
    assert "exabench/benchmarks/analytics/" in rank0, rank0  # waiting inside the benchmark, not its set-up
    assert (paths.run_dir / "errors" / "stacks-rank0.txt").read_text().count("most recent call first") >= 1


def test_time_limit_gives_timeout_record(rendered):
    # The job says which process it is and would outlive its 2 s limit by far: the limit, not the job's
    # end, must stop it (judged by the process being gone, not by a wall-clock bound that load can break).
    pid_file = rendered.run_dir / "job.pid"
    rendered.script.write_text(f"#!/usr/bin/env bash\necho $$ > {pid_file}\nsleep 60\n")
    rec = execute(rendered.spec)
    assert rec["status"] == "timeout" and "time limit of 2 s" in rec["error"]
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
    assert rec["provenance"]["elapsed_s"] >= 2  # never stopped before its limit
    print(f"\ntimeout record after {rec['provenance']['elapsed_s']:.2f} s (limit 2 s)")


def test_a_rank_error_is_reported_with_its_rank(rendered):
    errors = rendered.run_dir / "errors"
    rendered.script.write_text(
        f"#!/usr/bin/env bash\nmkdir -p {errors}\n"
        f"printf 'rank 1 on h: ValueError: bad shape\\n\\ntraceback' > {errors}/rank1.txt\nexit 1\n")
    rec = execute(rendered.spec)
    assert rec["status"] == "failed" and rec["error"].startswith("rank 1 on h: ValueError: bad shape")


def test_secrets_in_the_environment_never_reach_a_record(rendered, monkeypatch):
    monkeypatch.setenv("MY_API_TOKEN", "hunter2-secret")
    rendered.script.write_text("#!/usr/bin/env bash\nexit 1\n")
    execute(rendered.spec)
    assert "hunter2-secret" not in rendered.record.read_text()
    assert os.environ["MY_API_TOKEN"] == "hunter2-secret"


@pytest.mark.parametrize("name", ["NCCL_IB_CRED", "UCX_SESS_ID", "FI_CXI_TOK", "CUDA_PRIV_2", "HOROVOD_AUTH_ID",
                                  "MPICH_PASSWD", "NCCL_NET_CREDS", "UCX_SESSION", "FI_HMAC", "NCCL_SIGNING_SALT",
                                  "HIP_CERT_PATH", "MIOPEN_Bearer"])
def test_a_secret_like_part_of_a_name_keeps_it_out_of_a_record(name):
    env = {name: "hunter2", "NCCL_IB_HCA": "mlx5", "UCX_TLS": "rc", "FI_PROVIDER": "cxi", "OMP_NUM_THREADS": "4"}
    assert allowed_env(env, extra=(name,)) == {"FI_PROVIDER": "cxi", "NCCL_IB_HCA": "mlx5", "OMP_NUM_THREADS": "4",
                                              "UCX_TLS": "rc"}


def test_every_allow_listed_name_is_kept():
    env = {name: "v" for name in ENV_ALLOW}
    assert allowed_env(env) == env


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_an_ok_record_with_a_value_that_is_not_a_number_is_not_a_valid_record(tmp_path, value):
    rec = {"schema": SCHEMA, "run_id": "x", "benchmark": "kmeans", "status": "ok", "checks": [],
           "metrics": {"time": {"value": 1.0, "unit": "s"}, "rate": {"value": value, "unit": "1/s"}},
           "provenance": {"end_time": "2026-01-01T00:00:00.000+00:00"}}
    with pytest.raises(RecordError, match=r"x.json: key 'metrics.rate.value' = (nan|inf|-inf) in a record with "
                                          r"status 'ok'; valid: a finite number"):
        write_record(rec, tmp_path / "x.json")
    (tmp_path / "x.json").write_text(json.dumps(rec))  # as a crashed writer or a hand edit leaves it
    with pytest.raises(RecordError, match="in a record with status 'ok'"):
        read_record(tmp_path / "x.json")
    failed = {**rec, "status": "failed", "error": "loss diverged"}  # a failed run may carry what it measured
    write_record(failed, tmp_path / "x.json")
    assert read_record(tmp_path / "x.json")["status"] == "failed"
