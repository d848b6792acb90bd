"""Faults during a campaign (issue 21): a corrupt record is a `corrupt` row, never an abort; a run in
progress holds a lock; signals to Snakemake stop the ranks. Real processes throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from exabench.campaign.plan import expand
from exabench.campaign.render import RunPaths, write_run_files
from exabench.config import validate
from exabench.records.record import base_record, write_record

ROOT = Path(__file__).resolve().parents[1]


def exabench(*args, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "exabench", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=timeout)


# -- corrupt records -------------------------------------------------------------------------------

@pytest.fixture
def campaign(tmp_path, two_core_site):
    """Four planned kmeans runs (rendered, plan.json written) and an ok record for each."""
    cfg = validate({"benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1, 2]}}], "repeats": 2,
                    "timeout_s": 30}, "config", "c.yaml")
    runs = expand(cfg, two_core_site, "c.yaml")
    results = tmp_path / "results" / "local"
    (results / "records").mkdir(parents=True)
    (results / "plan.json").write_text(json.dumps([r.to_dict() for r in runs]))
    texts = {}
    for i, run in enumerate(runs):
        paths = RunPaths(results, run.run_id)
        write_run_files(run, two_core_site, paths)
        rec = {**base_record(json.loads(paths.spec.read_text())), "status": "ok", "checks": [],
               "metrics": {"time": {"value": 1.0 + i, "unit": "s", "samples": [1.0 + i], "higher_is_better": False}}}
        write_record(rec, paths.record)
        texts[run.run_id] = paths.record.read_text()
    return results, [r.run_id for r in runs], texts


def corrupt(results: Path, ids: list[str], texts: dict) -> dict[str, str]:
    """Damage three of the four records, each its own way; returns run id -> the reason shown."""
    a, b, c, d = ids
    rec_dir = results / "records"
    (rec_dir / f"{b}.json").write_text(texts[b][: len(texts[b]) // 2])  # truncated mid-write
    (rec_dir / f"{c}.json").write_text(texts[a])  # another run's record under this run's name
    wrong = json.loads(texts[d])
    wrong["metrics"]["time"]["value"] = "fast"  # the wrong shape
    (rec_dir / f"{d}.json").write_text(json.dumps(wrong))
    return {b: "not JSON", c: f"run_id '{a}' does not match the file name", d: "key 'metrics.time.value'"}


def test_corrupt_records_are_corrupt_rows_in_the_tidy_table_and_summary(campaign, tmp_path):
    results, ids, texts = campaign
    reasons = corrupt(results, ids, texts)
    csv, md = tmp_path / "tables" / "results.csv", tmp_path / "tables" / "summary.md"
    csv.parent.mkdir()
    csv.write_text("previous table\n")
    md.write_text("previous summary\n")
    proc = exabench("aggregate", "--site-name", "local", "--csv", csv, "--markdown", md,
                    *sorted((results / "records").glob("*.json")))
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(csv)
    assert sorted(df["run_id"]) == sorted(ids)  # every file is one row: none merged into another run's
    assert df.set_index("run_id").loc[ids[0], "status"] == "ok"
    for run_id, reason in reasons.items():
        row = df.set_index("run_id").loc[run_id]
        assert row["status"] == "corrupt" and pd.isna(row["value"])
        assert str(results / "records" / f"{run_id}.json") in row["error"] and reason in row["error"]
        assert row["benchmark"] == "kmeans"
    summary = md.read_text()
    assert "1 of 4 runs ok, 3 not ok." in summary and summary.count("| corrupt |") == 3
    assert "Traceback" not in proc.stderr


def test_corrupt_records_are_corrupt_cells_in_comparisons_and_plots_and_fail_acceptance(campaign, tmp_path):
    results, ids, texts = campaign
    reasons = corrupt(results, ids, texts)
    plan = results / "plan.json"
    proc = exabench("compare", "--out", tmp_path / "tables", "--plan", plan, "--site-name", "local",
                    results / "records")
    assert proc.returncode == 0, proc.stderr
    site = pd.read_csv(tmp_path / "tables" / "site.csv")
    statuses = dict(zip(site["run_ids"], site["status"]))
    # repeats 1 and 2 of each layout share a cell; every run is in exactly one, none is `missing`
    assert sorted(";".join(statuses).split(";")) == sorted(ids)
    assert "missing" not in statuses.values()
    assert set(statuses.values()) <= {"partial", "corrupt"} and "corrupt" in statuses.values()

    from exabench.analysis.runs import load_runs
    runs = load_runs(sorted((results / "records").glob("*.json")), plan, "local").set_index("run_id")
    for run_id in reasons:  # the plan's facts fill the row: its layout, its parameters
        assert runs.loc[run_id, "status"] == "corrupt" and runs.loc[run_id, "ranks"] > 0
        assert runs.loc[run_id, "params"] != "{}"

    proc = exabench("plots", "--out", tmp_path / "plots", "--plan", plan, "--site-name", "local", results / "records")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "plots" / "scaling.png").stat().st_size > 0

    refs = tmp_path / "references.yaml"
    refs.write_text("references:\n  - {benchmark: kmeans, metric: time, value: 1, lower: 0.5, upper: 0.5, unit: s}\n")
    out = tmp_path / "acceptance"
    proc = exabench("accept", "--references", refs, "--plan", plan, "--site-name", "local", "--markdown",
                    out / "v.md", "--csv", out / "v.csv", "--junit", out / "j.xml", "--strict", results / "records")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdicts = pd.read_csv(out / "v.csv").set_index("run_id")
    assert verdicts.loc[ids[0], "verdict"] == "pass"
    for run_id in reasons:
        assert verdicts.loc[run_id, "verdict"] == "fail" and verdicts.loc[run_id, "status"] == "corrupt"
        assert "corrupt record" in verdicts.loc[run_id, "detail"]


def test_a_record_under_another_runs_name_is_refused_on_read(tmp_path):
    from exabench.records.record import RecordError, read_record
    rec = {"schema": "exabench.result/1", "run_id": "kmeans.tiny.n1r1t1", "benchmark": "kmeans", "status": "ok",
           "metrics": {}}
    write_record(rec, tmp_path / "kmeans.tiny.n1r1t1.json")
    assert read_record(tmp_path / "kmeans.tiny.n1r1t1.json")["run_id"] == "kmeans.tiny.n1r1t1"
    (tmp_path / "kmeans.tiny.n1r2t1.json").write_text(json.dumps(rec))
    with pytest.raises(RecordError, match=r"kmeans.tiny.n1r2t1.json: run_id 'kmeans.tiny.n1r1t1' does not match"):
        read_record(tmp_path / "kmeans.tiny.n1r2t1.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RecordError, match="bin.json: not UTF-8"):
        read_record(tmp_path / "bin.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(RecordError, match="dir.json: not readable"):
        read_record(tmp_path / "dir.json")
