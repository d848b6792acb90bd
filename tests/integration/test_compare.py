"""Golden tests of every comparison table from fixed, hand-written records (tests/data/records:
sites `local` and `titan`, with failed, timed-out and missing runs), plus the scaling formulas
against hand-computed values.

Regenerate the golden files after a deliberate change (and review the diff):
    EXABENCH_REGEN_GOLDEN=1 python -m pytest tests/integration/test_compare.py
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pandas as pd
import pytest

from exabench.analysis import compare, scaling
from exabench.analysis.runs import run_table
from helpers_compare import GOLDEN, PLAN, record_paths

REGEN = os.environ.get("EXABENCH_REGEN_GOLDEN") == "1"


@pytest.fixture(scope="module")
def runs():
    return compare.load_runs(record_paths(), PLAN, "local")


@pytest.fixture(scope="module")
def tables(runs):
    return compare.all_tables(runs, "titan")


# -- formulas, hand-computed ----------------------------------------------------------------------

def test_strong_scaling_time():
    # 100 s on 2 workers, 30 s on 8: speedup 100/30 = 3.333, efficiency 100*2/(30*8) = 0.8333.
    assert scaling.speedup(30, 100, 8, 2, "strong", False) == pytest.approx(10 / 3)
    assert scaling.efficiency(30, 100, 8, 2, "strong", False) == pytest.approx(200 / 240)
    assert scaling.ideal_value(100, 8, 2, "strong", False) == pytest.approx(25)
    assert scaling.ideal_speedup(8, 2) == 4


def test_weak_scaling_time():
    # 10 s on 1 worker, 12.5 s on 4 (problem x4): efficiency 0.8, scaled speedup 0.8 * 4 = 3.2.
    assert scaling.efficiency(12.5, 10, 4, 1, "weak", False) == pytest.approx(0.8)
    assert scaling.speedup(12.5, 10, 4, 1, "weak", False) == pytest.approx(3.2)
    assert scaling.ideal_value(10, 4, 1, "weak", False) == 10


@pytest.mark.parametrize("mode", scaling.MODES)
def test_throughput_scaling_same_in_both_modes(mode):
    # 100 img/s on 1 worker, 360 on 4: speedup 3.6, efficiency 0.9, ideal 400.
    assert scaling.speedup(360, 100, 4, 1, mode, True) == pytest.approx(3.6)
    assert scaling.efficiency(360, 100, 4, 1, mode, True) == pytest.approx(0.9)
    assert scaling.ideal_value(100, 4, 1, mode, True) == 400


def test_scaling_rejects_bad_mode_and_counts():
    with pytest.raises(ValueError, match="valid: strong, weak"):
        scaling.efficiency(1, 1, 2, 1, "linear", True)
    with pytest.raises(ValueError, match="positive"):
        scaling.speedup(1, 1, 0, 1, "strong", True)


# -- tables: hand-computed cells ------------------------------------------------------------------

def _row(df, **where):
    hit = df
    for k, v in where.items():
        hit = hit[hit[k] == v]
    assert len(hit) == 1, f"{where}: {len(hit)} rows"
    return hit.iloc[0]


def test_every_run_and_planned_run_has_a_row(runs, tables):
    site = tables["site"]
    assert set(runs["run_id"]) == {i for ids in site["run_ids"] for i in ids.split(";")}
    assert _row(site, point="kmeans.tiny.float64.n2r4t1")["status"] == "missing"
    failed = _row(site, point="kmeans.tiny.float64.n1r4t1")
    # The failed run did report a time (0.09 s): it must not be shown as a figure.
    assert failed["status"] == "failed" and math.isnan(failed["value"]) and "centres_recovered" in failed["error"]
    timeout = _row(site, point="kmeans.smt.tiny.float64.size_per_node-2000rows.n1r1t2")
    assert timeout["status"] == "timeout" and timeout["metric"] == "time" and math.isnan(timeout["value"])
    repeats = _row(site, point="resnet50.tiny.fp32.n1r2t1")
    assert repeats["value"] == 19.0 and repeats["n_runs"] == 2
    assert repeats["run_ids"] == "resnet50.tiny.fp32.n1r2t1.rep1;resnet50.tiny.fp32.n1r2t1.rep2"


def test_cross_site_speedups(tables):
    x = tables["cross_site"]
    km = _row(x, run_ids="kmeans.tiny.float64.n1r1t1")
    assert (km["speedup"], km["speedup_per_node"], km["baseline_run_ids"]) == (4.0, 4.0, "kmeans.tiny.float64.n1r1t1")
    # 19 img/s on 1 CPU node vs 10 img/s on 2 Titan nodes of 1 GPU: 1.9 total, 3.8 per node and per device.
    rn = _row(x, workload="resnet50.tiny.fp32", nodes=1, value=19.0)
    assert rn["speedup"] == pytest.approx(1.9) and rn["speedup_per_node"] == pytest.approx(3.8)
    assert rn["speedup_per_device"] == pytest.approx(3.8) and rn["baseline_devices"] == 2
    missing = _row(x, run_ids="kmeans.tiny.float64.n2r4t1")
    assert missing["status"] == "missing" and math.isnan(missing["speedup"])
    none = _row(x, run_ids="resnet50-keras.tiny.fp32.n1r2t1")
    assert none["baseline_status"] == "no baseline run" and math.isnan(none["speedup"])


def test_weak_scaling_series(tables):
    s = tables["scaling"]
    km = s[s["series"] == "kmeans.tiny.float64.t1"].set_index("workers")
    assert list(km.index) == [1, 2, 4, 8]
    assert km.loc[2, "efficiency"] == pytest.approx(0.8) and km.loc[2, "speedup"] == pytest.approx(1.6)
    assert km.loc[4, "status"] == "failed" and math.isnan(km.loc[4, "efficiency"])
    assert km.loc[8, "status"] == "missing" and km.loc[8, "ideal_speedup"] == 8
    assert set(km["mode"]) == {"weak"} and set(km["ideal_value"]) == {0.1}
    rn = s[s["series"] == "resnet50.tiny.fp32.t1"].set_index("workers")
    assert rn.loc[2, "efficiency"] == pytest.approx(0.95) and rn.loc[2, "ideal_value"] == 20


def test_matrices(tables):
    m = tables["precision_x_algorithm"]
    assert _row(m, row="float32", col="random")["value"] == 0.03
    assert _row(m, row="float64", col="random")["status"] == "missing"
    assert _row(m, row="float64", col="kmeans++")["value"] == 0.05
    t = tables["threads_x_size"]
    assert _row(t, row="2", col="1000rows")["value"] == 0.006
    assert _row(t, row="2", col="2000rows")["status"] == "timeout"
    # Sizes with a unit in order of amount, not as text ('20000rows' sorts after '2000rows').
    assert t[t["row"] == "1"]["col"].tolist() == ["500rows", "1000rows", "2000rows", "20000rows"]


def test_frameworks(tables):
    f = tables["frameworks"]
    assert _row(f, framework="tensorflow")["relative"] == pytest.approx(0.5)
    assert _row(f, framework="pytorch")["relative"] == 1.0


# -- golden files ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(compare.TABLES))
def test_golden_tables(tables, name, tmp_path):
    compare.write_tables({name: tables[name]}, tmp_path, "titan")
    for ext in ("md", "csv"):
        got = (tmp_path / f"{name}.{ext}").read_text()
        golden = GOLDEN / f"{name}.{ext}"
        if REGEN:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(got)
        assert got == golden.read_text(), f"{name}.{ext} differs from {golden}"
    back = pd.read_parquet(tmp_path / f"{name}.parquet")
    pd.testing.assert_frame_equal(back, tables[name].reset_index(drop=True), check_dtype=False,
                                  check_index_type=False)


def test_markdown_never_shows_zero_for_a_hole(tables):
    md = compare.table_markdown("threads_x_size", tables["threads_x_size"])
    assert "TIMEOUT [" in md and "MISSING [" in md and "NOT PLANNED" in md


def test_cli_compare(tmp_path):
    out = tmp_path / "tables"
    res = subprocess.run([sys.executable, "-m", "exabench", "compare", "--out", str(out), "--plan", str(PLAN),
                          "--site-name", "local", "--baseline", "titan", str(PLAN.parent),
                          str(PLAN.parents[1] / "titan")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    titles = [ln for ln in (out / "comparison.md").read_text().splitlines() if ln.startswith("## ")]
    assert len(titles) == len(compare.TABLES)
    assert (out / "scaling.csv").read_text() == (GOLDEN / "scaling.csv").read_text()


def test_aggregate_summary_with_failed_and_ok_runs():
    # Regression: with pandas 3 a missing error is NaN, and the summary crashed on a campaign
    # that had both ok and failed runs.
    from exabench.records.tidy import load_records, markdown_summary, tidy_table
    md = markdown_summary(tidy_table(load_records(record_paths("local"))), "local")
    assert "| failed | sanity check 'centres_recovered' failed" in md
    assert "| kmeans.tiny.float64.n1r1t1 | kmeans |  | time | 0.1 | s |" in md
    assert md.rstrip().endswith("14 of 16 runs ok, 2 not ok.")


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_snakemake_cross_site_against_a_reference_baseline(tmp_path_factory, tmp_path):
    import json
    from helpers_compare import finished_campaign, scratch_copy, snakemake
    campaign = scratch_copy(finished_campaign(tmp_path_factory), tmp_path / "c")
    # A published baseline: the same runs on "oldsite", four times slower.
    ref_dir = campaign / "results/reference/oldsite"
    ref_dir.mkdir(parents=True)
    for p in (campaign / "results/local/records").glob("*.json"):
        rec = json.loads(p.read_text())
        rec["site"] = "oldsite"
        rec["metrics"]["time"]["value"] *= 4
        (ref_dir / p.name).write_text(json.dumps(rec))
    res = snakemake(campaign, "--config", "baseline_site=oldsite")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    table = pd.read_parquet(campaign / "results/local/tables/cross_site.parquet")
    assert len(table) == 2 and set(table["baseline_status"]) == {"ok"}
    assert table["speedup"].tolist() == pytest.approx([4.0, 4.0])
    assert "Baseline site: oldsite." in (campaign / "results/local/tables/comparison.md").read_text()


# -- the framework comparison: stacks matched on the workload, throughput and TTA side by side ------

def _ic_record(bench, framework, backend="auto", mode="throughput", batch=4, value=10.0, tta=None, status="ok",
               target=0.9, collectives=""):
    params = {"batch_size": batch, "image_size": 32, "precision": "fp32", "backend": backend, "mode": mode,
              "target_accuracy": target, "steps": 8}
    metrics = {"throughput": {"value": value, "unit": "images/s", "higher_is_better": True, "precision": "fp32"}}
    if tta is not None:
        metrics["time_to_accuracy"] = {"value": tta, "unit": "s", "higher_is_better": False, "precision": "fp32"}
    layout = {"nodes": 1, "ranks_per_node": 2, "ranks": 2, "threads_per_rank": 1, "gpus_per_rank": 0}
    run_id = f"{bench}.tiny.{backend}.{mode}.b{batch}.t{target}.n1r2t1"
    return {"run_id": run_id, "benchmark": bench, "framework": framework, "site": "local", "preset": "tiny",
            "params": params, "layout": layout, "status": status, "metrics": metrics if status == "ok" else {},
            "info": {"backend": collectives}, "error": None if status == "ok" else "boom",
            # the twin shares the task it declares (Benchmark.task), as its real records say
            "workload": {"headline": "throughput", "task": "resnet50", "scaling": "weak"}}


def test_framework_table_matches_workloads_and_puts_tta_beside_throughput():
    records = [
        _ic_record("resnet50", "pytorch", value=20.0, collectives="gloo"),
        _ic_record("resnet50", "pytorch", mode="time_to_accuracy", value=18.0, tta=30.0, collectives="gloo"),
        _ic_record("resnet50", "pytorch", backend="horovod", value=16.0, collectives="horovod"),
        _ic_record("resnet50-keras", "tensorflow", value=10.0, collectives="tf.distribute ring"),
        _ic_record("resnet50-keras", "tensorflow", mode="time_to_accuracy", value=9.0, tta=60.0),
        _ic_record("resnet50-keras", "tensorflow", backend="horovod", status="failed"),
        # another batch: a different workload, and with one stack only it has no row at all
        _ic_record("resnet50", "pytorch", batch=8, value=40.0),
        # a TTA run to another target cannot share a figure with the 0.9 one
        _ic_record("resnet50", "pytorch", backend="horovod", mode="time_to_accuracy", tta=25.0, target=0.5),
        _ic_record("resnet50", "pytorch", backend="horovod", mode="time_to_accuracy", tta=28.0, target=0.9),
    ]
    table = compare.framework_table(run_table(records)).set_index("stack")
    assert sorted(table.index) == ["pytorch+horovod", "pytorch+native", "tensorflow+horovod", "tensorflow+native"]
    assert set(table["workload"]) == {json.dumps({"image_size": 32, "batch_size": 4}, sort_keys=True)}
    torch_native, tf_native = table.loc["pytorch+native"], table.loc["tensorflow+native"]
    assert torch_native["value"] == 20.0 and torch_native["relative"] == 1.0
    assert torch_native["time_to_accuracy"] == 30.0 and torch_native["tta_relative"] == 1.0
    assert torch_native["collectives"] == "gloo"
    assert tf_native["relative"] == 0.5 and tf_native["tta_relative"] == 0.5
    assert tf_native["collectives"] == "tf.distribute ring"
    hvd = table.loc["pytorch+horovod"]
    assert hvd["value"] == 16.0 and hvd["target_accuracy"] == "0.5;0.9" and math.isnan(hvd["time_to_accuracy"])
    failed = table.loc["tensorflow+horovod"]
    assert failed["status"] == "failed" and math.isnan(failed["value"]) and math.isnan(failed["relative"])


def test_scaling_mode_comes_from_the_runs_own_parameter():
    # Fixed total work over 1 -> 2 ranks (scaling: strong): the efficiency of a run twice as fast on
    # twice the ranks is 1, and half as fast would be 0.5; as weak scaling the same times give 2x that.
    def rec(run_id, ranks, seconds, mode):
        return {"run_id": run_id, "benchmark": "kmeans", "framework": "mpi4py-numpy", "site": "local",
                "preset": "tiny", "params": {"k": 3, "scaling": mode},
                "layout": {"nodes": 1, "ranks_per_node": ranks, "ranks": ranks, "threads_per_rank": 1,
                           "gpus_per_rank": 0},
                "status": "ok", "metrics": {"time": {"value": seconds, "unit": "s", "higher_is_better": False}},
                "workload": {"headline": "time", "scaling": mode, "task": "kmeans"}}
    for mode, want in (("strong", 0.5), ("weak", 1.0)):
        runs = run_table([rec(f"kmeans.{mode}.n1r1t1", 1, 1.0, mode), rec(f"kmeans.{mode}.n1r2t1", 2, 1.0, mode)])
        table = compare.scaling_table(runs).set_index("workers")
        assert set(table["mode"]) == {mode} and table.loc[2, "efficiency"] == pytest.approx(want)
