"""Against a real two-node Slurm on loopback (tests/helpers_slurm.py starts and stops it, the
fixture slurm_cluster, registered in tests/conftest.py):
(a) every rendered Slurm script passes `sbatch --test-only`; (b) a tiny campaign through
snakemake-executor-plugin-slurm with two-node runs (K-Means over srun --mpi=pmix, ResNet-50
over Gloo); (c) a bundle script submitted with sbatch, its records ingested by aggregation."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exabench.campaign.render import RunPaths, render_script
from exabench.campaign.plan import Run
from exabench.campaign.site import resolve_layout
from exabench.rehearsal.slurm import ENDED

from helpers_docs import run_documented
from helpers_sites import REPO, site

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def _run(layout, run_id="probe") -> Run:
    return Run(run_id=run_id, benchmark="kmeans", suite="coral2-analytics", framework="mpi4py", preset="tiny",
               params={}, layout=layout, timeout_s=60)


def _slurm_scripts(tmp_path: Path):
    """(name, script) for slurm-local layouts and every Slurm profile adapted to this controller."""
    local = site("slurm-local")
    requests = [dict(nodes=1, ranks_per_node=1), dict(nodes=2, ranks_per_node=1), dict(nodes=2, ranks_per_node=2),
                dict(nodes=1, ranks_per_node=1, threads_per_rank=2), dict(nodes=2, ranks_per_node=2,
                                                                           threads_per_rank=1)]
    out = []
    for req in requests:
        lay = resolve_layout(local, **req)
        text, _ = render_script(_run(lay), local, RunPaths(tmp_path / "slurm-local", "probe"))
        out.append((f"slurm-local {req}", text))
    # The centres' sites: their partition/account/QOS/constraint names and GPUs do not exist
    # here, so those are blanked (the queues with them: the loopback partition is "debug"); CPU-only
    # layouts small enough for the loopback nodes, whose memory (4,000 MB, scripts/slurm-local.sh)
    # the nodes get too: the header asks 90 % of it (--mem), as on the centre's own nodes. No container:
    # a runtime's own batch option (Shifter's --image, a SPANK plugin at NERSC) is not on this controller.
    for name, req in [("frontier", dict(nodes=2, ranks_per_node=2, cores_per_rank=2, gpus_per_rank=0)),
                      ("perlmutter", dict(nodes=2, ranks_per_node=1, cores_per_rank=2, gpus_per_rank=0)),
                      ("cori-knl", dict(nodes=2, ranks_per_node=1, cores_per_rank=1)),
                      ("stampede2", dict(nodes=2, ranks_per_node=2, cores_per_rank=1))]:
        s = dataclasses.replace(site(name), partition="debug", queues=(), account="", qos="", constraint="",
                                scheduler_options={}, max_walltime_min=30,
                                node=dataclasses.replace(site(name).node, memory_gb=4), container={})
        lay = resolve_layout(s, **req)
        text, _ = render_script(_run(lay), s, RunPaths(tmp_path / name, "probe"))
        out.append((name, text))
    return out


def test_every_rendered_slurm_script_passes_sbatch_test_only(slurm_cluster, tmp_path):
    for name, text in _slurm_scripts(tmp_path):
        script = tmp_path / "job.sh"
        script.write_text(text)
        res = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                             env=slurm_cluster, timeout=60)
        assert res.returncode == 0 and "to start" in res.stderr, f"{name}: {res.stderr}\n{text}"


def test_sbatch_test_only_rejects_what_the_controller_cannot_give(slurm_cluster, tmp_path):
    # The check is real: three nodes do not exist on the loopback cluster.
    local = dataclasses.replace(site("slurm-local"), max_nodes=3)
    text, _ = render_script(_run(resolve_layout(local, nodes=3)), local, RunPaths(tmp_path / "x", "probe"))
    script = tmp_path / "job.sh"
    script.write_text(text)
    res = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                         env=slurm_cluster, timeout=60)
    assert res.returncode != 0, res.stderr


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "campaign"
    work.mkdir()
    for name in ("Snakefile", "workflow", "profiles", "config"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    return work


def _table(work: Path) -> list[dict]:
    with open(work / "results" / "slurm-local" / "tables" / "results.csv") as f:
        return list(csv.DictReader(f))


def test_campaign_through_the_slurm_executor_plugin_spans_both_nodes(slurm_cluster, tmp_path):
    work = _workdir(tmp_path)
    res = subprocess.run([SNAKEMAKE, "--profile", "profiles/slurm-local", "--configfile", "config/slurm-local.yaml"],
                         cwd=work, env=slurm_cluster, capture_output=True, text=True, timeout=280)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (work / "results/slurm-local/records").glob("*.json")]
    assert sorted(r["benchmark"] for r in records) == ["kmeans", "resnet50"]
    for rec in records:
        assert rec["status"] == "ok", rec.get("error")
        env = rec["provenance"]["environment"]
        assert env["SLURM_NNODES"] == "2" and env["SLURM_JOB_NODELIST"] == "n[1-2]"
        ranks = {"kmeans": 4, "resnet50": 2}[rec["benchmark"]]
        assert rec["layout"]["launch_line"].startswith(f"srun --nodes=2 --ntasks={ranks} ")
        assert env["SLURM_NTASKS"] == str(ranks)
    assert {row["status"] for row in _table(work)} == {"ok"}


def _submit_and_wait(script: Path, cwd: Path, env: dict, limit_s: float = 240) -> tuple[str, str]:
    """The job's end state and exit code, asked of the controller every second: `sbatch --wait` asks after
    2 s, 8 s more, then every 32 s, and held this test's 15-second job until 42 s."""
    sub = subprocess.run(["sbatch", "--parsable", str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=60)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    job = sub.stdout.strip().split(";")[0]
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], env=env, capture_output=True, text=True,
                               timeout=30)
        fields = dict(w.split("=", 1) for w in shown.stdout.split() if "=" in w)
        state = fields.get("JobState", "").split("+")[0]
        if state in ENDED:
            return state, fields.get("ExitCode", "")
        time.sleep(1)
    pytest.fail(f"job {job} of {script.name} still not ended after {limit_s:.0f} s")


def test_bundle_script_runs_a_sweep_in_one_allocation_and_is_ingested(slurm_cluster, tmp_path):
    # A bundle site (submit: bundles): the loopback site's file with that one key changed.
    work = _workdir(tmp_path)
    bundle_site = work / "bundle-site.yaml"
    bundle_site.write_text((work / "profiles/slurm-local/site.yaml").read_text() + "submit: bundles\n")
    config = work / "config" / "bundle.yaml"
    config.write_text("campaign: bundle-test\npreset: tiny\ntimeout_s: 120\nbenchmarks:\n"
                      "  - name: kmeans\n    sweep:\n      nodes: [2]\n      ranks_per_node: [1, 2]\n")
    sm = [SNAKEMAKE, "--profile", "profiles/slurm-local", "--configfile", str(config), "--config", f"site={bundle_site}"]
    res = subprocess.run([SNAKEMAKE, "bundle", *sm[1:]], cwd=work, env=slurm_cluster, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    bundle = work / "results/slurm-local/bundles/bundle-test.sh"
    assert "#SBATCH --nodes=2" in bundle.read_text()
    # A plain run after rendering starts nothing (no job, no record) and says what to submit.
    plain = subprocess.run(sm, cwd=work, env=slurm_cluster, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "bundle-test: 2 of 2 run(s) pending, 2 node(s) x 9 min in debug: sbatch " in plain.stderr, plain.stderr
    assert f"sbatch {bundle.relative_to(work)}" in plain.stderr and "run_benchmark" not in plain.stdout + plain.stderr
    assert not list((work / "results/slurm-local/records").glob("*.json"))
    queue = subprocess.run(["squeue", "-h", "-o", "%j"], env=slurm_cluster, capture_output=True, text=True, timeout=30)
    assert "run_benchmark" not in queue.stdout and "bundle-test" not in queue.stdout
    state, exit_code = _submit_and_wait(bundle, work, slurm_cluster)
    assert (state, exit_code) == ("COMPLETED", "0:0"), (state, exit_code)
    records = sorted((work / "results/slurm-local/records").glob("*.json"))
    assert [p.name for p in records] == ["kmeans.tiny.float64.n2r1t2.json", "kmeans.tiny.float64.n2r2t1.json"]
    # Ingest: the records exist, so Snakemake only aggregates (nothing is submitted again).
    dry = subprocess.run(sm + ["-n"], cwd=work, env=slurm_cluster, capture_output=True, text=True, timeout=120)
    assert not re.search(r"^run_benchmark\s+\d", dry.stdout, re.M), dry.stdout[-2000:]
    res = subprocess.run(sm, cwd=work, env=slurm_cluster, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _table(work)
    assert {r["run_id"] for r in rows} == {"kmeans.tiny.float64.n2r1t2", "kmeans.tiny.float64.n2r2t1"}
    assert {r["status"] for r in rows} == {"ok"}


def test_a_finished_jobs_energy_is_read_through_sacct_or_why_there_is_none(slurm_cluster, tmp_path):
    """docs/energy.md's --slurm-job for a job of the loopback Slurm that has just ended: its ConsumedEnergy
    through sacct, or (a cluster that gathers no energy, or keeps no accounting, as this one) why there is
    none, never zero joules."""
    sub = subprocess.run(["sbatch", "--parsable", "--wait", "-N1", "-o", str(tmp_path / "job.out"), "--wrap", "true"],
                         cwd=tmp_path, env=slurm_cluster, capture_output=True, text=True, timeout=120)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    job = sub.stdout.split()[0].split(";")[0]
    res = run_documented("python -m exabench.energy --slurm-job ID", fill={"ID": job},
                         env={"SLURM_CONF": slurm_cluster["SLURM_CONF"]}, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    energy = json.loads(res.stdout)
    assert energy["source"] == "slurm" and (energy["joules"] is None) == bool(energy["reason"]), energy
    assert energy["joules"] is None or energy["joules"] > 0


def test_every_node_groups_run_one_job_per_node_and_node_check_reads_them(slurm_cluster, tmp_path):
    """The single-node set (K-Means and a GEMM) on each of the two nodes: one sbatch job per node running
    its runs in sequence; a resubmission skips them; node_check judges the nodes against references."""
    work = _workdir(tmp_path)
    config = work / "config" / "every-node.yaml"
    config.write_text("campaign: every-node\npreset: tiny\ntimeout_s: 120\nevery_node: {nodes: 'n[1-2]', group: 1}\n"
                      "benchmarks:\n  - name: kmeans\n    sweep: {ranks_per_node: [1]}\n"
                      "  - name: gemm\n    params: {precision: fp32}\n    sweep: {ranks_per_node: [1]}\n")
    sm = [SNAKEMAKE, "--profile", "profiles/slurm-local", "--configfile", str(config)]
    res = subprocess.run([SNAKEMAKE, "every_node_groups", "--force-use-threads", *sm[1:]], cwd=work, env=slurm_cluster,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    groups = work / "results/slurm-local/nodes/groups"
    submit = groups / "submit.sh"

    def submit_and_wait() -> list[str]:
        out = subprocess.run(["bash", str(submit)], env=slurm_cluster, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        ids = re.findall(r"Submitted batch job (\d+)", out.stdout)
        for _ in range(240):
            states = [re.search(r"JobState=(\w+)", subprocess.run(
                ["scontrol", "show", "job", i], env=slurm_cluster, capture_output=True, text=True).stdout).group(1)
                for i in ids]
            if all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") for s in states):
                assert set(states) == {"COMPLETED"}, states
                return ids
            time.sleep(1)
        raise AssertionError(f"jobs {ids} did not finish: {states}")

    jobs = submit_and_wait()
    assert len(jobs) == 2  # one job per node, not one per run and node
    records = {p.name: json.loads(p.read_text()) for p in (work / "results/slurm-local/records/nodes").glob("*.json")}
    single = ["gemm.tiny.fp32.n1r1t2", "kmeans.tiny.float64.n1r1t2"]
    assert sorted(records) == sorted(f"{r}.node-{n}.json" for r in single for n in ("n1", "n2"))
    job_of = {}
    for name, rec in records.items():
        assert rec["status"] == "ok", rec.get("error")
        env = rec["provenance"]["environment"]
        node = name.rsplit(".node-", 1)[1][:-5]
        assert env["SLURM_JOB_NODELIST"] == node and env["SLURM_NNODES"] == "1"
        job_of.setdefault(node, set()).add(env["SLURM_JOB_ID"])
    # Each node's runs ran inside that node's one job; the two jobs are the two submitted.
    assert all(len(ids) == 1 for ids in job_of.values()) and sorted(i.pop() for i in job_of.values()) == sorted(jobs)
    stamps = {p: p.stat().st_mtime_ns for p in (work / "results/slurm-local/records/nodes").glob("*.json")}
    again = submit_and_wait()  # resubmitted: every run is recorded, each job skips them all
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # The resubmitted jobs' own logs, named by their ids (sorting the names would order 10 before 9).
    assert all("2 run(s), 0 failed to execute, 2 recorded before" in (groups / f"slurm-{i}.out").read_text()
               for i in again)
    # node_check: two nodes are too few to judge among peers, so against references (generous bands).
    refs = work / "refs.yaml"
    made = subprocess.run([sys.executable, "-m", "exabench", "references", "--from",
                           str(work / "results/slurm-local/records/nodes"), "--site-name", "slurm-local",
                           "--tolerance", "0.99,100", "--out", str(refs)], cwd=work, env=slurm_cluster,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stdout + made.stderr
    with open(config, "a") as f:  # in the config file: --config would replace the profile's site
        f.write(f"references: {refs}\n")
    check = subprocess.run([SNAKEMAKE, "node_check", *sm[1:]], cwd=work, env=slurm_cluster, capture_output=True,
                           text=True, timeout=120)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    with open(work / "results/slurm-local/acceptance/nodes.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["node"], r["benchmark"]) for r in rows) == sorted(
        (n, b) for n in ("n1", "n2") for b in ("gemm", "kmeans"))
    assert {r["flagged"] for r in rows} == {"False"}


def test_a_confirmation_rounds_pairs_start_after_every_job_sent_before_them_has_ended(slurm_cluster, tmp_path):
    """A hand-submitted round's submit.sh on real Slurm: the node tests go in together, each pair held
    (--dependency=afterany on the ids sbatch printed and squeue still lists) until the jobs before it end:
    a pair beside another shares the fabric, and a suspect's pair is judged against the control pair."""
    from exabench.campaign.node_groups import submit_script

    log, names = tmp_path / "log", ("n1", "n2", "n1..n2", "n2..n1")
    for name in names:
        (tmp_path / f"{name}.sh").write_text(f"#!/bin/bash\n#SBATCH -N 1 -p debug -t 2 -o {tmp_path}/%j.out\n"
                                             f"echo \"start {name} $(date +%s.%N)\" >> {log}; sleep 2\n"
                                             f"echo \"end {name} $(date +%s.%N)\" >> {log}\n")
    script = tmp_path / "confirm-1-submit.sh"
    script.write_text(submit_script(site("slurm-local"), "c", [(tmp_path / f"{n}.sh", "") for n in names], tmp_path,
                                    side_by_side=True, alone={"n1..n2.sh", "n2..n1.sh"}))
    out = subprocess.run(["bash", str(script)], cwd=tmp_path, env=slurm_cluster, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    ids = re.findall(r"Submitted batch job (\d+)", out.stdout)
    assert len(ids) == 4, out.stdout
    for _ in range(120):
        listed = subprocess.run(["squeue", "-h", "-o", "%i"], env=slurm_cluster, capture_output=True, text=True).stdout
        if not set(ids) & set(listed.split()):
            break
        time.sleep(1)
    stamps = {tuple(line.split()[:2]): float(line.split()[2]) for line in log.read_text().splitlines()}
    assert len(stamps) == 8, stamps
    ended = lambda *jobs: max(stamps[("end", j)] for j in jobs)  # noqa: E731
    assert stamps[("start", "n1..n2")] >= ended("n1", "n2"), stamps
    assert stamps[("start", "n2..n1")] >= ended("n1", "n2", "n1..n2"), stamps


def test_a_node_pair_group_script_passes_sbatch_test_only(slurm_cluster, tmp_path):
    from exabench.campaign.node_groups import group_files, node_groups
    from exabench.campaign.plan import expand
    from exabench.config import validate
    from exabench.io import atomic_write_many
    s = site("slurm-local")
    config = validate({"campaign": "pairs", "preset": "tiny", "timeout_s": 120,
                       "every_node": {"nodes": ["n1", "n2"], "group": 2},
                       "benchmarks": [{"name": "kmeans", "sweep": {"nodes": [2], "ranks_per_node": [1, 2]}}]},
                      "config", "pairs.yaml")
    atomic_write_many(group_files(expand(config, s, "pairs.yaml"), s, tmp_path, node_groups(config, s, "pairs.yaml"),
                                  "pairs"))
    script = tmp_path / "nodes" / "groups" / "n1..n2.sh"
    assert "#SBATCH --nodelist=n1,n2" in script.read_text() and script.read_text().count("run_on_group /") == 2
    res = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, env=slurm_cluster,
                         timeout=60)
    assert res.returncode == 0 and "to start at" in res.stderr, res.stderr


def _job_script(proc: Path, job: str) -> bool:
    """Whether /proc/<pid> is job `job`'s batch script; False for a process that ended meanwhile."""
    try:
        return b"slurm_script" in (proc / "cmdline").read_bytes() and \
            f"SLURM_JOB_ID={job}\0".encode() in (proc / "environ").read_bytes()
    except OSError:
        return False


def _descendants(root: int) -> list[int]:
    """Every live process below `root` (from /proc: pid -> parent)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out, todo = [], [root]
    while todo:
        kids = [p for p, pp in parent.items() if pp == todo[-1]]
        todo.pop()
        out += kids
        todo += kids
    return out


def test_every_node_job_is_one_step_per_run_and_holds_few_processes_on_the_batch_node(slurm_cluster,
                                                                                      tmp_path):
    """every_node_script on both loopback nodes through sbatch: every node's records, from one srun
    step per run; the batch script's processes (sampled while it runs) stay at a fixed few."""
    work = _workdir(tmp_path)
    config = work / "config" / "every-node.yaml"
    config.write_text("campaign: every-node\npreset: tiny\ntimeout_s: 120\n"
                      "benchmarks:\n  - name: kmeans\n    sweep: {ranks_per_node: [1, 2]}\n"
                      "  - name: gemm\n    params: {precision: fp32}\n    sweep: {ranks_per_node: [1]}\n")
    res = subprocess.run([SNAKEMAKE, "every_node_script", "--force-use-threads", "--profile", "profiles/slurm-local",
                          "--configfile", str(config)], cwd=work, env=slurm_cluster, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    script = work / "results/slurm-local/nodes/every-node.sh"
    assert "for " not in script.read_text() and script.read_text().count("\nsrun ") == 3
    out = subprocess.run(["sbatch", "--parsable", str(script)], env=slurm_cluster, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    most, state = 0, ""
    for _ in range(1200):
        batch = [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/cmdline") if _job_script(p.parent, job)]
        for pid in batch:  # the batch script and what it started: the tasks are slurmstepd's, not its
            most = max(most, 1 + len(_descendants(pid)))
        state = re.search(r"JobState=(\w+)", subprocess.run(["scontrol", "show", "job", job], env=slurm_cluster,
                                                            capture_output=True, text=True).stdout).group(1)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"):
            break
        time.sleep(0.2)
    print(f"\nevery-node job {job} on 2 nodes: at most {most} process(es) on the batch node")
    assert state == "COMPLETED", (state, *(p.read_text()[-3000:] for p in script.parent.glob("../runs/every-node/slurm-*")))
    records = {p.name: json.loads(p.read_text()) for p in (work / "results/slurm-local/records/nodes").glob("*.json")}
    single = ["gemm.tiny.fp32.n1r1t2", "kmeans.tiny.float64.n1r1t2", "kmeans.tiny.float64.n1r2t1"]
    assert sorted(records) == sorted(f"{r}.node-{n}.json" for r in single for n in ("n1", "n2"))
    for name, rec in records.items():
        assert rec["status"] == "ok", rec.get("error")
        assert rec["provenance"]["environment"]["SLURM_JOB_ID"] == job
    # bash, its srun (or the one preparation's python), and the `$(...)` subshell at most: whatever the node count.
    assert 1 <= most <= 4
