"""A campaign's run job is a light process (issue 34): each run is `exabench execute` started by
Snakemake's shell, which loads no workflow and renders the run's own files first (no campaign-wide
job above the runs: docs/architecture.md); a new run in the plan runs alone, a changed run runs
again alone. Real Snakemake, real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exabench.campaign.plan import expand
from exabench.campaign.site import load_site
from exabench.config import validate
from exabench.records.record import base_record, check_record
from helpers_runs import rendered_kmeans, stand_in_site

ROOT = Path(__file__).resolve().parents[2]

# A run's ranks' stand-in (helpers_runs.stand_in_site): it writes the command line of every process
# above it (up to PID 1), one a line, then puts the run's `ok` record (prepared beside it) in place.
ANCESTRY = """#!/usr/bin/env bash
run_dir="$(dirname "$0")"
pid=$PPID
while [ "$pid" -gt 1 ]; do
  tr '\\0' ' ' < /proc/$pid/cmdline; echo
  pid=$(awk '{print $4}' /proc/$pid/stat)
done > "$run_dir/ancestry.txt"
cp "$run_dir/ok.json" "$run_dir/../../records/$(basename "$run_dir").json"
"""


def snakemake(cwd: Path, cfg: Path, *args, site: Path = ROOT / "profiles" / "local" / "site.yaml"):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--profile",
           str(ROOT / "profiles" / "local"), "--config", f"site={site}",
           "--configfile", str(cfg), "--cores", "2", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)


def campaign_file(tmp_path: Path, ks: list[int]) -> tuple[Path, list[str]]:
    campaign = {"campaign": "light", "timeout_s": 120, "benchmarks": [{"name": "stream", "sweep": {"samples": ks}}]}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(campaign))
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    return cfg, [r.run_id for r in expand(validate(campaign, "config", str(cfg)), site, str(cfg))]


def prepare_ok(runs: Path, run_id: str) -> None:
    """The run's ok record and ANCESTRY as its ranks' stand-in, beside its spec."""
    spec = json.loads((runs / run_id / "spec.json").read_text())
    rec = {**base_record(spec), "status": "ok", "error": None, "checks": [],
           "metrics": {"elapsed_s": {"value": 0.0, "unit": "s", "higher_is_better": False, "samples": [0.0]}}}
    check_record(rec, "ok.json")
    (runs / run_id / "ok.json").write_text(json.dumps(rec))
    (runs / run_id / "stand-in.sh").write_text(ANCESTRY)


def ran(out: str) -> list[str]:
    return sorted(line.split("=", 1)[1] for line in out.splitlines() if line.strip().startswith("wildcards: run_id="))


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_each_run_is_a_process_with_no_workflow_that_renders_its_own_files(tmp_path):
    cfg, ids = campaign_file(tmp_path, [3, 4])
    site = stand_in_site(tmp_path)
    runs = tmp_path / "results" / "local" / "runs"
    render = snakemake(tmp_path, cfg, "--until", "render", site=site)  # the bundle scripts' input, alone
    assert render.returncode == 0, render.stdout[-3000:]
    assert render.stdout.count("rule render:") == 1, render.stdout[-3000:]  # one job for the campaign
    assert (runs / "run_ids.txt").read_text().split() == ids
    for run_id in ids:
        prepare_ok(runs, run_id)

    first = snakemake(tmp_path, cfg, *(f"results/local/records/{i}.json" for i in ids), site=site)
    assert first.returncode == 0, first.stdout[-3000:]
    assert ran(first.stdout) == sorted(ids) and "rule render:" not in first.stdout
    for run_id in ids:
        chain = (runs / run_id / "ancestry.txt").read_text().splitlines()
        # Above the ranks: the launcher, the job script, the run's execution (started by Snakemake's
        # shell from the campaign's own snakemake: no second snakemake, a `run:` job's, between).
        execute = next(c for c in chain if "-m exabench execute" in c)
        assert "--render-site" in execute and "--planned results/local/runs/run_ids.txt" in execute, chain
        snakemakes = [c for c in chain if "snakemake" in c]
        assert len(snakemakes) == 1 and "--configfile" in snakemakes[0] and "--target-jobs" not in snakemakes[0], chain
        log = (tmp_path / "logs" / "local" / "runs" / f"{run_id}.log").read_text()
        assert f"run {run_id}" not in log  # the execution wrote no error of its own: the record was the job's
    assert "runs finished" in first.stdout and "of 2 runs finished" in first.stdout, first.stdout[-3000:]
    # The same site named by another path runs nothing again (no spelling of it in the rule's params).
    other = Path(os.path.relpath(site, tmp_path))
    assert str(other) != str(site)
    again = snakemake(tmp_path, cfg, "-n", *(f"results/local/records/{i}.json" for i in ids), site=other)
    assert again.returncode == 0 and ran(again.stdout) == [], again.stdout[-3000:]

    # A run added to the plan runs alone; the finished runs do not run again, and no job renders
    # the campaign above them (the new run renders its own files).
    cfg, ids3 = campaign_file(tmp_path, [3, 4, 5])
    new = sorted(set(ids3) - set(ids))
    before = {i: (tmp_path / "results" / "local" / "records" / f"{i}.json").read_text() for i in ids}
    grown = snakemake(tmp_path, cfg, "-n", *(f"results/local/records/{i}.json" for i in ids3), site=site)
    assert grown.returncode == 0, grown.stdout[-3000:]
    assert ran(grown.stdout) == new and "rule render:" not in grown.stdout, grown.stdout[-3000:]
    for run_id, text in before.items():
        assert (tmp_path / "results" / "local" / "records" / f"{run_id}.json").read_text() == text


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_the_render_job_declares_a_stamp_and_what_reads_its_files_renders_a_deleted_one(tmp_path):
    # Snakemake's bookkeeping of every run's two files as declared outputs cost more than writing
    # them: the job declares a stamp, and a reader of the files renders again any deleted since.
    cfg, ids = campaign_file(tmp_path, [3, 4])
    runs = tmp_path / "results" / "local" / "runs"
    render = snakemake(tmp_path, cfg, "render")
    assert render.returncode == 0, render.stdout[-3000:]
    assert (runs / "rendered.txt").read_text() == "2 run(s) rendered, 4 file(s) written (the others were unchanged)\n"
    gone = runs / ids[0] / "spec.json"
    kept = (runs / ids[1] / "spec.json").stat().st_mtime_ns
    gone.unlink()
    script = snakemake(tmp_path, cfg, "every_node_script")
    assert script.returncode == 0 and "rule render:" not in script.stdout, script.stdout[-3000:]
    assert json.loads(gone.read_text())["run_id"] == ids[0]
    assert (runs / ids[1] / "spec.json").stat().st_mtime_ns == kept  # the others are not written again
    assert str(gone.resolve()) in (tmp_path / "results" / "local" / "nodes" / "every-node.sh").read_text()


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
