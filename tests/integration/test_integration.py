"""Real runs: two MPI ranks, torch.distributed over Gloo, and whole Snakemake campaigns."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
import yaml

from conftest import REPO, requires_mpi
from exabench.config import validate
from exabench.execute import execute
from exabench.campaign.render import RunPaths, write_run_files
from exabench.campaign.plan import expand

pytestmark = [pytest.mark.integration, requires_mpi]


def run_one(tmp_path, site, entry: dict) -> dict:
    cfg = validate({"benchmarks": [entry], "timeout_s": 600}, "config", "c.yaml")
    (run,) = expand(cfg, site, "c.yaml")
    paths = RunPaths(tmp_path / "results" / site.name, run.run_id)
    write_run_files(run, site, paths)
    return execute(paths.spec)


@pytest.mark.timeout(300)
def test_kmeans_two_ranks(tmp_path, two_core_site):
    rec = run_one(tmp_path, two_core_site, {"name": "kmeans", "sweep": {"ranks_per_node": [2], "k": [3]},
                                            "params": {"size_per_node": "6000rows"}})
    assert rec["status"] == "ok", rec["error"]
    assert rec["layout"]["ranks"] == 2 and rec["layout"]["launch_line"].startswith("mpirun -np 2")
    t = rec["metrics"]["time"]
    assert t["unit"] == "s" and 5 <= len(t["samples"]) <= 20 and t["value"] == pytest.approx(t["stats"]["median"])
    assert {c["name"]: c["passed"] for c in rec["checks"]}["centres_recovered"]
    assert rec["info"]["rows"] == 6000  # each rank generated its own share of the node's rows
    fom = rec["metrics"]["fom"]
    assert fom["unit"] == "TB/s" and fom["value"] == pytest.approx(6000 * 250 * 8 / 1e12 / t["value"])
    assert rec["provenance"]["environment"]["OMP_NUM_THREADS"] == "1"


@pytest.mark.timeout(300)
def test_resnet50_two_ranks_gloo(tmp_path, two_core_site):
    rec = run_one(tmp_path, two_core_site, {"name": "resnet50", "sweep": {"ranks_per_node": [2]},
                                            "params": {"image_size": 32, "steps": 3, "warmup_steps": 1}})
    assert rec["status"] == "ok", rec["error"]
    assert rec["info"]["backend"] == "gloo" and rec["info"]["parameters"] == 25_557_032
    thr, step = rec["metrics"]["throughput"], rec["metrics"]["step_time"]
    assert thr["unit"] == "images/s" and thr["precision"] == "fp32" and len(thr["samples"]) == 3
    # Total throughput is measured: global batch x steps / sum of the slowest rank's step times.
    assert thr["value"] == pytest.approx(4 * 2 * 3 / sum(step["samples"]))
    assert rec["metrics"]["throughput_per_device"]["value"] == pytest.approx(thr["value"] / 2)
    assert all(c["passed"] for c in rec["checks"]), rec["checks"]


@pytest.mark.timeout(300)
def test_raising_rank_fails_the_run_with_its_error(tmp_path, two_core_site):
    rec = run_one(tmp_path, two_core_site, {"name": "resnet50", "sweep": {"ranks_per_node": [2]},
                                            "params": {"image_size": 32, "steps": 2, "warmup_steps": 0,
                                                       "fail_at_step": 1}})
    assert rec["status"] == "failed"
    assert "rank 1" in rec["error"] and "injected failure at step 1" in rec["error"]


def snakemake(*args, cwd, timeout=900):
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
           "--profile", str(REPO / "profiles" / "local"), "--config", f"site={REPO}/profiles/local/site.yaml",
           *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def campaign(tmp_path):
    cfg = {"campaign": "itest", "benchmarks": [
        {"name": "kmeans", "sweep": {"ranks_per_node": [2], "k": [3, 4]}, "params": {"size_per_node": "4000rows"}},
        {"name": "resnet50", "label": "broken", "sweep": {"ranks_per_node": [2]},
         "params": {"image_size": 32, "steps": 2, "warmup_steps": 0, "fail_at_step": 0}},
    ]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.timeout(900)
def test_campaign_goes_on_after_a_broken_run(tmp_path, campaign):
    dry = snakemake("--configfile", str(campaign), "-n", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    for run_id in ("kmeans.tiny.float64.k-3.n1r2t1", "kmeans.tiny.float64.k-4.n1r2t1",
                   "resnet50.broken.tiny.fp32.n1r2t1"):
        assert f"results/local/records/{run_id}.json" in dry.stdout + dry.stderr

    done = snakemake("--configfile", str(campaign), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = pd.read_csv(tmp_path / "results/local/tables/results.csv")
    status = table.groupby("run_id")["status"].first().to_dict()
    assert status == {"kmeans.tiny.float64.k-3.n1r2t1": "ok", "kmeans.tiny.float64.k-4.n1r2t1": "ok",
                      "resnet50.broken.tiny.fp32.n1r2t1": "failed"}
    broken = table[table.run_id == "resnet50.broken.tiny.fp32.n1r2t1"].iloc[0]
    assert "injected failure at step 0" in broken["error"] and pd.isna(broken["value"])
    summary = (tmp_path / "results/local/tables/summary.md").read_text()
    assert "| resnet50.broken.tiny.fp32.n1r2t1 | resnet50 |" in summary and "2 of 3 runs ok" in summary
    assert "2 of 3 runs ok" in done.stdout  # printed at the end of the job
    assert "3 of 3 runs finished (2 done, 1 failed), 0 remaining" in done.stdout  # one progress line per run

    # Nothing changed: a second run does nothing; the plan is on disk.
    again = snakemake("--configfile", str(campaign), "-n", cwd=tmp_path)
    assert "Nothing to be done" in again.stdout + again.stderr
    plan = pd.read_csv(tmp_path / "results/local/plan.csv")
    assert len(plan) == 3


@pytest.mark.timeout(120)
def test_bad_config_stops_snakemake_with_a_clear_message(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"benchmarks": [{"name": "kmeans", "sweep": {"k": [-1]}}]}))
    res = snakemake("--configfile", str(bad), "-n", cwd=tmp_path)
    assert res.returncode != 0
    assert f"{bad}: key 'benchmarks[0].sweep.k' = -1" in res.stdout + res.stderr
    assert not (tmp_path / "results").exists()  # nothing half-written


@pytest.mark.timeout(120)
def test_lint_has_no_complaints(tmp_path):
    res = snakemake("--lint", cwd=REPO)
    assert res.returncode == 0 and "Congratulations" in res.stdout + res.stderr, res.stdout + res.stderr
