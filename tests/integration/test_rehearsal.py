"""`exabench rehearse --profile profiles/<site>` runs a site's documented path here, end to end. A bundle site:
`snakemake --profile ... bundle`, each bundle script through the stand-in submit command (bsub on
Summit's LSF, qsub on Polaris' PBS Pro, Titan's Torque and Theta's Cobalt), the ranks through the
stand-in launcher (jsrun, PALS mpiexec, aprun) and mpirun, then the aggregate and acceptance. Every
planned run comes back with a record.
Then `every_node_script`, its job submitted the same way: one jsrun (mpiexec) across the job's nodes
per run, checked by the stand-in, its ranks here in node worlds (exabench.campaign.node_worlds).

The campaign is a small subset of the sites' own (two GEMM runs, on 1 and 2 nodes: two bundles, so
two submissions), not the rack-scale default campaign (132 runs on Summit): a tiny ResNet-50 run
takes a minute on this shared machine, and the suite cannot spend hours per site.

A Slurm site (Perlmutter here, and Stampede2 with TACC's ibrun) goes through the real loopback Slurm
(the session's slurm_cluster): its bundle scripts' #SBATCH headers checked against the Slurm rule
book and the site file, mapped to the loopback cluster, submitted with the real sbatch; its srun
(ibrun) lines checked, then run by the real srun.
Every real site's default campaign (rack scale, tiny preset) is rendered and checked as the stand-ins
check it, nothing run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import yaml

from exabench.campaign.bundles import plan_bundles
from exabench.campaign.plan import expand
from exabench.campaign.render import write_bundles, write_runs_files
from exabench.config import validate
from exabench.rehearsal.standins import check_rendered
from helpers_compare import env
from helpers_sites import REAL_SITES, REPO, site

SMALL_CAMPAIGN = """\
campaign: rehearsal-small
preset: tiny
repeats: 1
timeout_s: 600
benchmarks:
  - name: gemm
    params: {samples: 50}
    sweep:
      nodes: [1, 2]
      ranks_per_node: [1]
      precision: [fp32]
"""


def _rehearse_small(name: str, tmp_path: Path, slurm_cluster: dict | None = None):
    """`exabench rehearse --profile profiles/<name>` of the small campaign (on a Slurm site through the
    loopback Slurm); (its work folder, the finished process), which exited 0."""
    campaign = tmp_path / "small.yaml"
    campaign.write_text(SMALL_CAMPAIGN)
    work = tmp_path / "rehearsal"
    slurm = {"SLURM_CONF": slurm_cluster["SLURM_CONF"]} if slurm_cluster else {}
    res = subprocess.run([sys.executable, "-m", "exabench", "rehearse", "--profile", f"profiles/{name}",
                          "--configfile", str(campaign), "--work", str(work)],
                         cwd=REPO, env={**env(), **slurm}, capture_output=True, text=True, timeout=880)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    return work, res


def _small_run_ids(name: str) -> list[str]:
    """The run ids the small campaign plans on site `name` (its threads and GPUs a rank are the site's)."""
    config = validate(yaml.safe_load(SMALL_CAMPAIGN), "config", "small.yaml")
    return sorted(r.run_id for r in expand(config, site(name), "small.yaml"))


# Each submit command and launcher kind of the bundle sites: LSF and jsrun (Summit), PBS Pro and PALS
# mpiexec (Polaris), Torque and ALPS aprun (Titan), Cobalt and aprun (Theta).
@pytest.mark.parametrize("name, submit, launcher", [("summit", "bsub", "jsrun"), ("polaris", "qsub", "mpiexec"),
                                                    ("titan", "qsub", "aprun"), ("theta", "qsub", "aprun")])
def test_a_bundle_sites_documented_path_is_rehearsed_with_a_record_for_every_planned_run(tmp_path, name, submit,
                                                                                         launcher):
    work, res = _rehearse_small(name, tmp_path)
    # the two bundles and the every-node job
    assert f"exabench rehearse {name}: rehearsed: 3 script(s) submitted, 0 refused, 2 of 2 planned" in res.stdout
    # each step said as it starts and ends, on stderr: the bundle render first
    assert res.stderr.startswith(f"exabench rehearse {name}: step 1: snakemake --profile profiles/{name} bundle "), \
        res.stderr[:500]
    assert f"exabench rehearse {name}: step 1: exit 0 in " in res.stderr
    records = sorted((work / "results" / name / "records").glob("*.json"))
    assert [p.stem for p in records] == _small_run_ids(name) and len(records) == 2
    assert all(json.loads(p.read_text())["status"] == "ok" for p in records)
    # at preset tiny's sizes (preset_sizes): the campaign's 50 samples kept beside the 5 run here
    assert all((json.loads(p.read_text())["params"]["samples"], json.loads(p.read_text())["resized"]) ==
               (5, {"samples": 50}) for p in records)
    decisions = [json.loads(line) for line in (work / "state" / "decisions.jsonl").read_text().splitlines()]
    submits = [d for d in decisions if d["tool"] == submit]
    launches = [d for d in decisions if d["tool"] == launcher]
    assert [(d["what"], d["verdict"], d["exit"]) for d in submits[:2]] == [
        (f"results/{name}/bundles/rehearsal-small-01-of-02.sh", "accepted", 0),
        (f"results/{name}/bundles/rehearsal-small-02-of-02.sh", "accepted", 0)]
    assert [d["nodes"] for d in submits[:2]] == [1, 2]   # the headers' counts, checked against the queues
    # the bundles' two launches (1 and 2 ranks), then the every-node job's one launch across all its nodes
    assert [(d["verdict"], d["exit"]) for d in launches] == [("accepted", 0)] * 3
    assert [d["ranks"] for d in launches[:2]] == [1, 2]
    every_node = [d for d in submits if d["what"] == f"results/{name}/nodes/every-node.sh"]
    assert [(d["verdict"], d["exit"]) for d in every_node] == [("accepted", 0)]
    # rendered for the one node this machine is (acceptance_nodes=1): its launch, one rank a node
    assert every_node[0]["nodes"] == 1 and launches[2]["ranks"] == 1
    # its node world's record, here the one node this machine is
    [node_record] = (work / "results" / name / "records" / "nodes").glob("*.json")
    rec = json.loads(node_record.read_text())
    assert rec["status"] == "ok" and rec["provenance"]["node_world"]["launch_nodes"] == 1, rec.get("error")
    report = (work / "rehearsal.md").read_text()
    for part in ("Verdict: **rehearsed**", f"`{'bsub <' if submit == 'bsub' else submit} results/{name}/bundles/rehearsal-small-01-of-02.sh`",
                 "## Runs and their records", "samples 50 -> 5", "node-hours the real campaign would request", "## Verdicts",
                 f"What these verdicts cover: this machine's figures (at the rehearsal's preset, tiny unless set), "
                 f"judged against {name}'s references"):
        assert part in report, part
    # the aggregate and acceptance ran where the site has references (Titan and Theta have none)
    if (REPO / "profiles" / name / "references.yaml").is_file():
        assert (work / "results" / name / "acceptance" / "verdicts.md").is_file()
    else:
        assert f"(acceptance not run: site {name} has no references file" in report
        assert not any(" acceptance " in line for line in res.stderr.splitlines()), res.stderr


# Every bundle site's default campaign through the stand-ins' checks (directives and launch lines, nothing
# run): test_bundles.py::test_the_documented_bundle_and_every_node_commands_run_for_real_on_every_bundle_site.


@pytest.mark.timeout(900)
def test_a_slurm_sites_documented_path_is_rehearsed_through_the_loopback_slurm(slurm_cluster, tmp_path):
    work, res = _rehearse_small("perlmutter", tmp_path, slurm_cluster)
    assert "exabench rehearse perlmutter: rehearsed: 2 script(s) submitted, 0 refused, 2 of 2 planned" in res.stdout
    records = {p.stem: json.loads(p.read_text()) for p in (work / "results/perlmutter/records").glob("*.json")}
    assert sorted(records) == ["gemm.tiny.fp32.n1r1t64g1", "gemm.tiny.fp32.n2r1t64g1"]
    for run_id, rec in records.items():   # each ran in a job of the real Slurm, the 2-node run on both nodes
        assert rec["status"] == "ok", rec.get("error")
        environment = rec["provenance"]["environment"]
        nodes = re.search(r"\.n(\d+)r", run_id).group(1)
        assert environment["SLURM_JOB_ID"] and environment["SLURM_NNODES"] == nodes, (run_id, environment)
    decisions = [json.loads(line) for line in (work / "state" / "decisions.jsonl").read_text().splitlines()]
    jobs = [d for d in decisions if d["tool"] == "sbatch"]
    assert [(d["what"], d["verdict"], d["queue"], d["nodes"], d["nodes_here"], d["exit"]) for d in jobs] == [
        ("results/perlmutter/bundles/rehearsal-small-01-of-02.sh", "accepted", "debug", 1, 1, 0),
        ("results/perlmutter/bundles/rehearsal-small-02-of-02.sh", "accepted", "debug", 2, 2, 0)]
    for change in ("--account m0000 -> (removed)", "--qos debug -> (removed)", "--constraint gpu -> (removed)",
                   "--gpus-per-node 1 -> (removed)"):   # the site's own directives, checked, then mapped
        assert all(any(c.startswith(change) for c in d["mapped"]) for d in jobs), change
    steps = [d for d in decisions if d["tool"] == "srun"]
    assert [(d["verdict"], d["ranks"], d["ranks_here"], d["exit"]) for d in steps] == [("accepted", 1, 1, 0),
                                                                                     ("accepted", 2, 2, 0)]
    report = (work / "rehearsal.md").read_text()
    for part in ("Verdict: **rehearsed**", "`sbatch results/perlmutter/bundles/rehearsal-small-01-of-02.sh`",
                 "asked 2 node(s) x 2 task(s), rehearsed on 2 x 2", "## Mapped to the loopback cluster",
                 "checks its jobs every 3 s here",
                 "node-hours the real campaign would request", "## Verdicts"):
        assert part in report, part
    assert (work / "results/perlmutter/acceptance/verdicts.md").is_file()


@pytest.mark.timeout(900)
def test_stampede2s_ibrun_path_is_rehearsed_through_the_loopback_slurm(slurm_cluster, tmp_path):
    # TACC's launcher under Slurm: each ibrun line checked against the job's tasks by the ibrun stand-in,
    # its ranks started as a step of the real Slurm job; the #SBATCH lines under TACC's rules.
    work, res = _rehearse_small("stampede2", tmp_path, slurm_cluster)
    assert "exabench rehearse stampede2: rehearsed: 2 script(s) submitted, 0 refused, 2 of 2 planned" in res.stdout
    records = {p.stem: json.loads(p.read_text()) for p in (work / "results/stampede2/records").glob("*.json")}
    assert sorted(records) == _small_run_ids("stampede2")
    assert all(rec["status"] == "ok" for rec in records.values()), [r.get("error") for r in records.values()]
    decisions = [json.loads(line) for line in (work / "state" / "decisions.jsonl").read_text().splitlines()]
    assert [(d["verdict"], d["nodes"], d["exit"]) for d in decisions if d["tool"] == "sbatch"] == [
        ("accepted", 1, 0), ("accepted", 2, 0)]
    assert [(d["verdict"], d["ranks"], d["exit"]) for d in decisions if d["tool"] == "ibrun"] == [
        ("accepted", 1, 0), ("accepted", 2, 0)]
    assert "Verdict: **rehearsed**" in (work / "rehearsal.md").read_text()


@pytest.mark.timeout(300)
def test_the_sbatch_stand_in_waits_for_a_jobs_end_and_gives_its_exit_code(slurm_cluster, monkeypatch, tmp_path):
    # The stand-in asks the real controller every second (sbatch --wait held each job up to 32 s past
    # its end): a job's own exit code comes back, a job killed by a signal or cancelled is no success.
    import os
    from exabench.rehearsal.slurm import wait_for_job

    monkeypatch.setenv("SLURM_CONF", slurm_cluster["SLURM_CONF"])

    def submitted(*options: str) -> str:
        # --output: a job's slurm-<id>.out goes to the test's folder, not the directory pytest runs in
        out = subprocess.run(["sbatch", "--parsable", "--time=2", "--nodes=1", f"--output={tmp_path}/slurm-%j.out",
                              *options], capture_output=True, text=True, env={**os.environ}, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip().split(";")[0]

    assert wait_for_job(submitted("--wrap", "exit 3")) == 3
    assert wait_for_job(submitted("--wrap", "kill -KILL $$")) == 1
    assert wait_for_job(submitted("--wrap", "sleep 3")) == 0
    held = submitted("--hold", "--wrap", "true")
    subprocess.run(["scancel", held], check=True, timeout=60)
    assert wait_for_job(held) == 1


@pytest.mark.parametrize("name", REAL_SITES)
def test_every_real_sites_default_campaign_passes_the_stand_ins_checks(name, tmp_path):
    # Rendered as `exabench rehearse` plans it (the site's campaign.yaml at scale=rack, preset=tiny): every
    # bundle script, run script and launch line checked as the stand-ins check them, nothing run.
    s = site(name)
    raw = yaml.safe_load((REPO / "profiles" / name / "campaign.yaml").read_text())
    config = validate({**raw, "scale": "rack", "preset": "tiny", "preset_sizes": True}, "config",
                      f"profiles/{name}/campaign.yaml")
    runs = expand(config, s, f"profiles/{name}/campaign.yaml")
    results = tmp_path / name
    bundles = write_bundles(plan_bundles(runs, s, config["campaign"], "campaign.yaml"), s, results)
    write_runs_files(runs, s, results, workers=1)
    checked, refused = check_rendered(s, results)
    assert refused == [] and checked > len(bundles) + len(runs), (checked, refused[:3])
