"""MLPerf-HPC scores from MLLOG files: Time To Solution through mlperf-logging's result summarizer
and RCP checker, staging timed per ruleset, Throughput scored on logs the tests write (the rules' count of
converged instances, identical seeds left out), and a real run of 2 concurrent instances whose
row is checked against the logs' own timestamps and checker verdicts, whichever way they end."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from exabench.analysis import mlperf_scores as scores
from exabench.benchmarks.mlperf import harness as mlperf
from helpers_mlperf import oc20_log


def _stamps(path):
    lines = [json.loads(x.split(":::MLLOG ", 1)[1]) for x in open(path).read().splitlines()]
    return {x["key"]: x["time_ms"] for x in lines}


def test_time_to_solution_is_the_summarizers_olympic_average_of_the_logs(tmp_path):
    sleeps = [0.05, 0.25, 0.15, 0.35, 0.1]
    paths = [oc20_log(tmp_path / f"run{i}.log", [s, s], [0.1, 0.03], seed=i) for i, s in enumerate(sleeps)]
    runs = [scores.read_log(p) for p in paths]
    tts = scores.time_to_solution(runs, tmp_path / "sub")
    minutes = sorted((_stamps(p)["run_stop"] - _stamps(p)["run_start"]) / 60000 for p in paths)
    assert [r["minutes"] for r in tts.runs] == pytest.approx([(_stamps(p)["run_stop"] - _stamps(p)["run_start"])
                                                              / 60000 for p in paths])
    assert tts.olympic_minutes == pytest.approx(sum(minutes[1:-1]) / 3)
    assert tts.complete and tts.required == 5 and all(r["checker"] == "SUCCESS" for r in tts.runs)
    assert tts.rcp.startswith("no RCP for global batch 16 (RCPs at 256")
    assert sorted(p.name for p in (tmp_path / "sub/exabench/results/system/strong/oc20").iterdir()) == \
        [f"result_{i}.txt" for i in range(5)]
    # A run that missed the target fails the checker and is dropped: the summarizer then drops
    # only the best of the rest (the dropped run stands for the worst).
    oc20_log(tmp_path / "bad.log", [0.01], [0.2], seed=9)
    tts = scores.time_to_solution(runs + [scores.read_log(tmp_path / "bad.log")], tmp_path / "sub")
    assert [r["counted"] for r in tts.runs] == [True] * 5 + [False] and tts.runs[-1]["checker"] == "FAILED"
    assert tts.olympic_minutes == pytest.approx(sum(minutes[1:]) / 4)


def test_fewer_runs_than_required_are_scored_and_marked_partial(tmp_path):
    paths = [oc20_log(tmp_path / f"r{i}.log", [0.01 * (i + 1)], [0.03], seed=i) for i in range(3)]
    tts = scores.time_to_solution([scores.read_log(p) for p in paths], tmp_path / "sub")
    assert not tts.complete and tts.olympic_minutes is not None
    text = "\n".join(scores.tts_markdown([tts]))
    assert "3 of 5 (partial)" in text and "**olympic**" in text


def test_rcp_checker_judges_a_batch_it_ships_points_for(tmp_path):
    # Global batch 256 has reference convergence points: converging in 2 epochs is far faster
    # than the reference's runs, which the checker flags.
    paths = [oc20_log(tmp_path / f"r{i}.log", [0.0, 0.0], [0.1, 0.03], batch=256, seed=i) for i in range(5)]
    tts = scores.time_to_solution([scores.read_log(p) for p in paths], tmp_path / "sub")
    assert tts.rcp.startswith("fail: RCP found"), tts.rcp


def test_staging_counts_before_hpc_3_and_not_after(tmp_path):
    path = oc20_log(tmp_path / "staged.log", [0.05], [0.03], staging=True)
    t = _stamps(path)
    v3 = scores.read_log(path, "3.0.0")
    v2 = scores.read_log(path, "2.0.0")
    assert v3.minutes == pytest.approx((t["run_stop"] - t["run_start"]) / 60000)
    assert v2.minutes == pytest.approx((t["run_stop"] - t["staging_start"]) / 60000)
    assert v2.minutes > v3.minutes + 0.15 / 60
    assert v3.staging == "untimed (hpc 3.0.0)" and v2.staging == "timed (hpc 2.0.0)"
    assert mlperf.staging_timed("0.7.0") and mlperf.staging_timed("2.0.0") and not mlperf.staging_timed("3.0.0")


def test_a_truncated_log_is_named(tmp_path):
    path = oc20_log(tmp_path / "cut.log", [0.0], [0.03])
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(scores.LogError, match=r"cut\.log: no run_stop line"):
        scores.read_log(path)


def test_throughput_refuses_mixed_scales_and_pruning_every_instance(tmp_path):
    one, two = (scores.read_log(oc20_log(tmp_path / f"n{n}.log", [0.0], [0.03], nodes=n)) for n in (1, 2))
    with pytest.raises(scores.LogError, match=r"share one scale S .* got \[1, 2\]"):
        scores.throughput([one, two])
    with pytest.raises(scores.LogError, match="score_mlperf_prune = 2: must be between 0 and 1"):
        scores.throughput([one, one], prune=2)


def test_throughput_is_a_score_only_from_the_rules_count_of_converged_distinct_seeds(tmp_path):
    """Logs the test controls: the score needs M' >= 5 converged OC20 instances of distinct seeds
    (the rules' table; mlperf-logging's weak-scaling scorer checks the same count)."""
    from mlperf_logging.benchmark_meta import get_result_file_counts
    assert {b: scores.required_instances(b) for b in scores.REQUIRED_RUNS} == get_result_file_counts("hpc")
    good = [scores.read_log(oc20_log(tmp_path / f"ok{i}.log", [0.01 * (i + 1)], [0.03], seed=i + 1)) for i in range(5)]
    full = scores.throughput(good, tmp_path / "sub")
    span = (max(r.run_stop_ms for r in good) - min(r.run_start_ms for r in good)) / 60000
    assert full.complete and full.required == 5 and full.M == full.M_counted == 5
    assert full.TTTa_minutes == full.span_minutes == pytest.approx(span)
    assert full.models_per_minute == pytest.approx(5 / span) and full.verdict.startswith("score")
    assert sorted(p.name for p in (tmp_path / "sub/exabench/results/system/weak/oc20").iterdir()) == \
        [f"result_{i}.txt" for i in range(5)]

    # One instance missed the target: 4 converged is a span, not a score.
    missed = scores.read_log(oc20_log(tmp_path / "missed.log", [0.01], [0.2], seed=9))
    short = scores.throughput(good[:4] + [missed])
    assert (short.M, short.M_counted, short.complete) == (5, 4, False)
    assert short.TTTa_minutes is None and short.models_per_minute is None and short.span_minutes > 0
    assert short.verdict == "no score: 4 instance(s) counted, the rules need M' >= 5 for oc20"
    # Pruning a straggler below the count leaves no score either.
    assert not scores.throughput(good, prune=1).complete

    # Two instances with one seed: both are left out, whichever converged first.
    twin = scores.read_log(oc20_log(tmp_path / "twin.log", [0.0], [0.03], seed=3))
    six = scores.throughput(good + [twin])
    assert six.M == 6 and six.M_counted == 4 and not six.complete
    assert sorted(Path(r["log"]).name for r in six.rejected) == ["ok2.log", "twin.log"]
    assert six.rejected[0]["why"].startswith("seed 3 also used by ")
    # A further instance of a new seed brings M' back to 5: a score, with the twins named in the table.
    seven = scores.throughput(good + [twin, scores.read_log(oc20_log(tmp_path / "ok7.log", [0.0], [0.03], seed=7))])
    assert (seven.M, seven.M_counted, seven.complete) == (7, 5, True)
    text = "\n".join(scores.throughput_markdown([short, seven]))
    assert "4 of >= 5" in text and "| n/a |" in text and "- twin.log: left out, seed 3 also used by ok2.log" in text


TP_CAMPAIGN = """\
campaign: tp
preset: tiny
timeout_s: 600
results_store: none
score_mlperf: throughput
benchmarks:
  - name: oc20
    sweep: {ranks_per_node: [1], threads_per_rank: [1], seed: [1, 2]}
"""


@pytest.mark.timeout(600)
def test_throughput_run_of_two_instances_of_one_rank(tmp_path):
    """Real, by docs/mlperf-hpc.md's three commands: Snakemake renders the concurrent bundle of 2 OC20
    instances (1 rank each), bash starts them at once, and the campaign's plain command scores them
    (records only aggregated, no run started again); TTTa from their logs."""
    from exabench.records.record import read_record
    from helpers_compare import copy_workflow
    from helpers_docs import run_documented
    d = copy_workflow(tmp_path / "w")
    (d / "tp.yaml").write_text(TP_CAMPAIGN)
    bundle, results = d / "results/local/bundles/tp.throughput.sh", d / "results/local"
    for command in ("snakemake --profile profiles/local throughput_bundle --configfile tp.yaml",
                    "bash results/local/bundles/tp.throughput.sh",
                    "snakemake --profile profiles/local --configfile tp.yaml"):
        if command.startswith("bash"):
            assert bundle.read_text().count(" & pids+=($!)") == 2
        proc = run_documented(command, cwd=d, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        if command.startswith("bash"):
            assert "0 run(s) failed" in proc.stdout, proc.stdout + proc.stderr
    assert "run_benchmark" not in proc.stdout + proc.stderr  # the bundle's records, scored as they are
    records = [read_record(p) for p in sorted((results / "records").glob("oc20.*.json"))]
    assert len(records) == 2
    (row,) = json.loads((results / "tables" / "mlperf.json").read_text())["throughput"]
    logs = [rec["info"]["mlperf_log"] for rec in records]
    stamps = [_stamps(p) for p in logs]
    compliant = [{c["name"]: c["passed"] for c in rec["checks"]}["mlperf_compliance"] for rec in records]
    counted = [s for s, ok in zip(stamps, compliant) if ok]
    # Whatever each instance's convergence, the row counts exactly the logs the checker passed, and
    # 2 instances are never a score (OC20 needs M' >= 5): the span is shown, TTTa is not.
    assert row["M"] == 2 and row["S"] == 1 and row["T"] == 2 and row["M_counted"] == len(counted)
    assert row["required"] == 5 and not row["complete"] and row["TTTa_minutes"] is None
    assert row["models_per_minute"] is None and row["verdict"].startswith("no score")
    if counted:
        assert row["span_minutes"] == pytest.approx(
            (max(s["run_stop"] for s in counted) - min(s["run_start"] for s in counted)) / 60000)
    # The instances ran at once: each started before the other stopped.
    assert stamps[0]["run_start"] < stamps[1]["run_stop"] and stamps[1]["run_start"] < stamps[0]["run_stop"]
    md = (results / "tables" / "mlperf.md").read_text()
    assert "## Throughput" in md and f"{len(counted)} of >= 5" in md and "no score" in md


def _olympic(minutes: list[float], failed: int) -> float | None:
    """MLPerf-HPC's olympic average, written out: a failed run stands for the worst one; the best
    and the worst are dropped; more than one failure leaves no score."""
    if failed > 1:
        return None
    kept = sorted(minutes)[1:len(minutes) - (1 - failed)]
    return sum(kept) / len(kept) if kept else None


@pytest.mark.timeout(1500)
def test_time_to_solution_campaign_of_3_seeds_x_4_benchmarks_through_snakemake(tmp_path):
    """Real: the quick submission campaign (CosmoFlow, DeepCAM, OC20, OpenFold at the tiny preset,
    seeds 1, 2, 3) runs through Snakemake; tables/mlperf.json and .md hold every run's minutes
    from its own log, each log's checker verdict and the olympic average of each benchmark."""
    import shutil
    import sys

    from helpers_compare import REPO, env
    for name in ("Snakefile", "workflow", "profiles", "config"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy2)(REPO / name, tmp_path / name)
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--cores", "2",
           "--configfile", "config/mlperf_submission_quick.yaml", "--config", "results_store=none"]
    res = subprocess.run(cmd, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=1450)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    results = tmp_path / "results" / "local"
    scored = json.loads((results / "tables" / "mlperf.json").read_text())
    assert scored["mode"] == "time_to_solution" and scored["logs"] == 12
    by_benchmark = {s["benchmark"]: s for s in scored["time_to_solution"]}
    assert sorted(by_benchmark) == ["cosmoflow", "deepcam", "oc20", "openfold"]
    md = (results / "tables" / "mlperf.md").read_text()
    for bench, tts in by_benchmark.items():
        assert sorted(r["seed"] for r in tts["runs"]) == [1, 2, 3]
        assert tts["required"] == scores.REQUIRED_RUNS[bench] and not tts["complete"]
        minutes, failed = [], 0
        for run in tts["runs"]:
            record = json.loads((results / "records" / f"{bench}.tiny.seed-{run['seed']}.n1r1t2.json").read_text())
            assert run["log"] == record["info"]["mlperf_log"]
            # The checker's verdict is the one the run's record carries.
            compliant = {c["name"]: c["passed"] for c in record["checks"]}["mlperf_compliance"]
            assert (run["checker"] == "SUCCESS") == compliant
            t = _stamps(run["log"])
            assert run["minutes"] == pytest.approx((t["run_stop"] - t["run_start"]) / 60000, abs=1e-4)
            if compliant and run["status"] == "success":
                minutes.append((t["run_stop"] - t["run_start"]) / 60000)
            else:
                failed += 1
        expected = _olympic(minutes, failed)
        if expected is None:
            assert tts["olympic_minutes"] is None
        else:
            assert tts["olympic_minutes"] == pytest.approx(expected, abs=1e-3)
            assert f"{tts['olympic_minutes']:.4f}" in md
        assert f"3 of {tts['required']} (partial)" in md


@pytest.mark.parametrize("cut", [1, 3])  # the seed crashed before run_stop, or before the first epoch ended
def test_a_crashed_seed_refused_by_the_score_is_named_with_its_run_and_status(tmp_path, cut):
    records = []
    for seed in (1, 2, 3):
        path = oc20_log(tmp_path / f"s{seed}.log", [0.0], [0.03], seed=seed)
        status, error = "ok", None
        if seed == 2:
            lines = path.read_text().splitlines()
            path.write_text("\n".join(lines[:-cut]) + "\n")
            status, error = "failed", "rank 0: RuntimeError: NCCL watchdog"
        records.append({"run_id": f"oc20.tiny.seed-{seed}.n1r1t1", "params": {"seed": seed}, "status": status,
                        "error": error, "info": {"mlperf_log": str(path)}})
    with pytest.raises(scores.LogError) as err:
        scores.write_scores(records, tmp_path / "tables")
    assert "run oc20.tiny.seed-2.n1r1t1 (seed 2, failed: rank 0: RuntimeError: NCCL watchdog)" in str(err.value)
    assert "s2.log: no " in str(err.value)
