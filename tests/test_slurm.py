"""Against a real two-node Slurm on loopback (tests/helpers_slurm.py starts and stops it):
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
from pathlib import Path

import pytest

from exabench.campaign.render import RunPaths, render_script
from exabench.campaign.plan import Run
from exabench.campaign.site import resolve_layout

from helpers_sites import REPO, site
from helpers_slurm import slurm_cluster  # noqa: F401  (the fixture)

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
    # layouts small enough for the loopback nodes.
    for name, req in [("frontier", dict(nodes=2, ranks_per_node=2, cores_per_rank=2, gpus_per_rank=0)),
                      ("perlmutter", dict(nodes=2, ranks_per_node=1, cores_per_rank=2, gpus_per_rank=0)),
                      ("cori-knl", dict(nodes=2, ranks_per_node=1, cores_per_rank=1)),
                      ("stampede2", dict(nodes=2, ranks_per_node=2, cores_per_rank=1))]:
        s = dataclasses.replace(site(name), partition="debug", queues=(), account="", qos="", constraint="",
                                scheduler_options={}, max_walltime_min=30)
        lay = resolve_layout(s, **req)
        text, _ = render_script(_run(lay), s, RunPaths(tmp_path / name, "probe"))
        out.append((name, text))
    return out


def test_every_rendered_slurm_script_passes_sbatch_test_only(slurm_cluster, tmp_path):  # noqa: F811
    for name, text in _slurm_scripts(tmp_path):
        script = tmp_path / "job.sh"
        script.write_text(text)
        res = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True,
                             env=slurm_cluster, timeout=60)
        assert res.returncode == 0 and "to start" in res.stderr, f"{name}: {res.stderr}\n{text}"


def test_sbatch_test_only_rejects_what_the_controller_cannot_give(slurm_cluster, tmp_path):  # noqa: F811
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


def test_campaign_through_the_slurm_executor_plugin_spans_both_nodes(slurm_cluster, tmp_path):  # noqa: F811
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


def test_bundle_script_runs_a_sweep_in_one_allocation_and_is_ingested(slurm_cluster, tmp_path):  # noqa: F811
    work = _workdir(tmp_path)
    config = work / "config" / "bundle.yaml"
    config.write_text("campaign: bundle-test\npreset: tiny\ntimeout_s: 120\nbenchmarks:\n"
                      "  - name: kmeans\n    sweep:\n      nodes: [1, 2]\n      ranks_per_node: [1]\n")
    sm = [SNAKEMAKE, "--profile", "profiles/slurm-local", "--configfile", str(config)]
    res = subprocess.run([SNAKEMAKE, "bundle", *sm[1:]], cwd=work, env=slurm_cluster, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    bundle = work / "results/slurm-local/bundles/bundle-test.sh"
    assert "#SBATCH --nodes=2" in bundle.read_text()
    sub = subprocess.run(["sbatch", "--wait", str(bundle)], cwd=work, env=slurm_cluster, capture_output=True,
                         text=True, timeout=240)
    assert sub.returncode == 0, sub.stdout + sub.stderr
    records = sorted((work / "results/slurm-local/records").glob("*.json"))
    assert [p.name for p in records] == ["kmeans.tiny.float64.n1r1t2.json", "kmeans.tiny.float64.n2r1t2.json"]
    # Ingest: the records exist, so Snakemake only aggregates (nothing is submitted again).
    dry = subprocess.run(sm + ["-n"], cwd=work, env=slurm_cluster, capture_output=True, text=True, timeout=120)
    assert not re.search(r"^run_benchmark\s+\d", dry.stdout, re.M), dry.stdout[-2000:]
    res = subprocess.run(sm, cwd=work, env=slurm_cluster, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = _table(work)
    assert {r["run_id"] for r in rows} == {"kmeans.tiny.float64.n1r1t2", "kmeans.tiny.float64.n2r1t2"}
    assert {r["status"] for r in rows} == {"ok"}
