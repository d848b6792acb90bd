"""A campaign's run job is a light process (issue 34): the campaign is rendered by one job, and
each run is `exabench execute` started by Snakemake's shell, which loads no workflow; a new run
in the plan runs alone, a changed run runs again alone. Real Snakemake, real processes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exabench.campaign.plan import expand
from exabench.campaign.site import load_site
from exabench.config import validate
from exabench.records.record import base_record, check_record
from helpers_runs import rendered_kmeans

ROOT = Path(__file__).resolve().parents[2]

# A stand-in for a run's ranks: it writes the command line of every process above it (up to PID 1),
# one a line, then puts the run's `ok` record (prepared beside it) in place.
ANCESTRY = """#!/usr/bin/env bash
run_dir="$(dirname "$0")"
pid=$PPID
while [ "$pid" -gt 1 ]; do
  tr '\\0' ' ' < /proc/$pid/cmdline; echo
  pid=$(awk '{{print $4}}' /proc/$pid/stat)
done > "$run_dir/ancestry.txt"
cp "$run_dir/ok.json" {record}
"""


def snakemake(cwd: Path, cfg: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--profile",
           str(ROOT / "profiles" / "local"), "--config", f"site={ROOT}/profiles/local/site.yaml",
           "--configfile", str(cfg), "--cores", "2", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)


def campaign_file(tmp_path: Path, ks: list[int]) -> tuple[Path, list[str]]:
    campaign = {"campaign": "light", "timeout_s": 120, "benchmarks": [{"name": "kmeans", "sweep": {"k": ks}}]}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(campaign))
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    return cfg, [r.run_id for r in expand(validate(campaign, "config", str(cfg)), site, str(cfg))]


def stand_in(runs: Path, run_id: str) -> None:
    """Replace the run's rendered job script by ANCESTRY, with its ok record beside it."""
    spec = json.loads((runs / run_id / "spec.json").read_text())
    rec = {**base_record(spec), "status": "ok", "error": None, "checks": [],
           "metrics": {"elapsed_s": {"value": 0.0, "unit": "s", "higher_is_better": False, "samples": [0.0]}}}
    check_record(rec, "ok.json")
    (runs / run_id / "ok.json").write_text(json.dumps(rec))
    (runs / run_id / "job.sh").write_text(ANCESTRY.format(record=shlex.quote(spec["paths"]["record"])))


def ran(out: str) -> list[str]:
    return sorted(line.split("=", 1)[1] for line in out.splitlines() if line.strip().startswith("wildcards: run_id="))


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_campaign_renders_in_one_job_and_each_run_is_a_process_with_no_workflow(tmp_path):
    cfg, ids = campaign_file(tmp_path, [3, 4])
    runs = tmp_path / "results" / "local" / "runs"
    render = snakemake(tmp_path, cfg, "--until", "render")
    assert render.returncode == 0, render.stdout[-3000:]
    assert render.stdout.count("rule render:") == 1, render.stdout[-3000:]  # one job for the campaign
    assert (runs / "run_ids.txt").read_text().split() == ids
    for run_id in ids:
        stand_in(runs, run_id)

    first = snakemake(tmp_path, cfg, *(f"results/local/records/{i}.json" for i in ids))
    assert first.returncode == 0, first.stdout[-3000:]
    assert ran(first.stdout) == sorted(ids)
    for run_id in ids:
        chain = (runs / run_id / "ancestry.txt").read_text().splitlines()
        # The job script's parent is the run's execution, started by Snakemake's shell from the
        # campaign's own snakemake: no second snakemake (a `run:` job's, which parses the workflow) between.
        assert "-m exabench execute --spec" in chain[0] and "--planned results/local/runs/run_ids.txt" in chain[0], chain
        snakemakes = [c for c in chain if "snakemake" in c]
        assert len(snakemakes) == 1 and "--configfile" in snakemakes[0] and "--target-jobs" not in snakemakes[0], chain
        log = (tmp_path / "logs" / "local" / "runs" / f"{run_id}.log").read_text()
        assert f"run {run_id}" not in log  # the execution wrote no error of its own: the record was the job's
    assert "runs finished" in first.stdout and "of 2 runs finished" in first.stdout, first.stdout[-3000:]

    # A run added to the plan: the render job runs again (the plan changed), the finished runs do not.
    cfg, ids3 = campaign_file(tmp_path, [3, 4, 5])
    new = sorted(set(ids3) - set(ids))
    before = {i: (tmp_path / "results" / "local" / "records" / f"{i}.json").read_text() for i in ids}
    grown = snakemake(tmp_path, cfg, "-n", *(f"results/local/records/{i}.json" for i in ids3))
    assert grown.returncode == 0, grown.stdout[-3000:]
    assert ran(grown.stdout) == new and "rule render:" in grown.stdout, grown.stdout[-3000:]
    for run_id, text in before.items():
        assert (tmp_path / "results" / "local" / "records" / f"{run_id}.json").read_text() == text


def test_the_execute_entry_imports_no_snakemake_nor_the_rule_seam(tmp_path, two_core_site):
    """What `exabench execute` (a run job's command) has imported once the run is over."""
    run, paths = rendered_kmeans(tmp_path, two_core_site, script="#!/usr/bin/env bash\nexit 3\n")
    probe = ("import json, sys\nfrom exabench.cli import main\nrc = main(['execute', '--spec', sys.argv[1]])\n"
             "print(json.dumps({'rc': rc, 'modules': sorted(sys.modules)}))")
    out = subprocess.run([sys.executable, "-c", probe, str(paths.spec)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["rc"] == 0 and json.loads(paths.record.read_text())["status"] == "failed"  # it did run
    heavy = [m for m in seen["modules"] if m.split(".")[0] in ("snakemake", "pandas", "torch")
             or m in ("exabench.pipeline", "exabench.analysis")]
    assert heavy == [], heavy
