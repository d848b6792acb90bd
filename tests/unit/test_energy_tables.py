"""Energy in the tables: the tidy table's energy columns, the MLPerf Time To Solution's Energy
(averaged over the runs the time score keeps, by the result summarizer's own code), and the
energy-to-solution figure."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from exabench.analysis import mlperf_scores as scores
from exabench.analysis.figures import NothingToDraw
from exabench.analysis.plots import plot_energy_to_solution
from exabench.records.tidy import ENERGY_COLUMNS, tidy_table
from helpers_mlperf import oc20_log as _log
from helpers_png import pixels, shows_data


def _record(run_id, energy):
    return {"run_id": run_id, "benchmark": "resnet50", "status": "ok", "energy": energy,
            "metrics": {"throughput": {"value": 100.0, "unit": "images/s"}}}


def test_the_tidy_table_carries_the_timed_regions_energy_or_the_reason():
    measured = {"format": "exabench.energy/1", "measured": True, "reason": None,
                "timed": {"joules": 500.0, "watts": 250.0, "seconds": 2.0, "covers": ["gpu", "cpu_package"],
                          "reason": None}, "run": None, "sources": [], "unavailable": {}}
    none = {"format": "exabench.energy/1", "measured": False, "timed": None, "run": None, "sources": [],
            "reason": "no energy source on this machine: powercap: no /sys/class/powercap", "unavailable": {}}
    df = tidy_table([_record("a", measured), _record("b", none), _record("c", None)]).set_index("run_id")
    assert set(ENERGY_COLUMNS) <= set(df.columns)
    assert (df.loc["a", "energy_j"], df.loc["a", "power_w"], df.loc["a", "energy_covers"]) == (500.0, 250.0,
                                                                                               "gpu+cpu_package")
    assert math.isnan(df.loc["b", "energy_j"]) and df.loc["b", "energy_note"].startswith("no energy source")
    assert df.loc["c", "energy_note"].startswith("no energy section")


def test_time_to_solution_energy_is_averaged_over_the_runs_the_time_score_keeps(tmp_path):
    sleeps = [0.05, 0.25, 0.15, 0.35, 0.1]
    runs = [scores.read_log(_log(tmp_path / f"run{i}.log", [s, s], [0.1, 0.03], seed=i)) for i, s in enumerate(sleeps)]
    for run, joules in zip(runs, (1000.0, 5000.0, 3000.0, 7000.0, 2000.0)):
        run.energy_j = joules
    tts = scores.time_to_solution(runs, tmp_path / "sub")
    # Sorted by time the runs are 0.05, 0.1, 0.15, 0.25, 0.35 s: the fastest and slowest are dropped.
    assert tts.olympic_energy_j == pytest.approx((2000.0 + 3000.0 + 5000.0) / 3)
    assert "| energy (J) |" in "\n".join(scores.tts_markdown([tts]))
    runs[2].energy_j = None
    tts = scores.time_to_solution(runs, tmp_path / "sub2")
    assert tts.olympic_energy_j is None and "no measured energy for 1 of the counted runs" in tts.energy_note
    assert "n/a (no measured energy for 1" in "\n".join(scores.tts_markdown([tts]))


def test_the_energy_to_solution_figure_draws_measured_runs_only(tmp_path):
    runs = pd.DataFrame([{"benchmark": "cosmoflow", "site": "s", "metric": "time_to_train", "status": "ok",
                          "value": v, "unit": "s", "energy_j": e} for v, e in ((100, 5e4), (110, 5.5e4), (105, math.nan))])
    drawn = plot_energy_to_solution(runs, tmp_path / "energy.png")
    assert shows_data(pixels(drawn), min_pixels=60)  # two points: the measured runs
    # Without a measured energy: no picture, the reason for the plots index instead.
    with pytest.raises(NothingToDraw, match="^3 MLPerf runs, none with measured energy"):
        plot_energy_to_solution(runs.assign(energy_j=math.nan), tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_regression_verdicts_judge_energy_like_any_metric(tmp_path):
    """Five campaigns of five repeats: the last uses 30 % more energy for the same work, which the
    history's regression verdict flags (energy: lower is better), while its time is unchanged. The
    campaign is the unit that varies between campaigns, so the history needs several of them (two
    give one degree of freedom and no verdict at alpha 0.01)."""
    import json

    from exabench.analysis import history
    from exabench.records import store
    from helpers_compare import RECORDS

    # A golden record (it has no system description, hence same_system=False below).
    template = json.loads((RECORDS / "local" / "kmeans.prec.tiny.float32.init-kmeans.n1r1t1.json").read_text())
    db = tmp_path / "history.duckdb"
    for k, joules in enumerate((100.0, 101.0, 99.5, 100.5, 130.0)):
        folder = tmp_path / f"c{k}" / "records"
        folder.mkdir(parents=True)
        for rep in range(1, 6):
            rec = json.loads(json.dumps(template))
            rec.update(run_id=f"{template['run_id']}.rep{rep}", repeat=rep, campaign=f"energy-{k}")
            rec["provenance"]["start_time"] = f"2026-0{k + 1}-01T00:00:0{rep}+00:00"
            j = joules + 0.2 * rep
            rec["metrics"]["energy"] = {"value": j, "unit": "J", "samples": [j], "higher_is_better": False}
            (folder / f"{rec['run_id']}.json").write_text(json.dumps(rec))
        store.ingest([tmp_path / f"c{k}"], db)
    verdicts = history.regressions(db, current="latest", metric="all", same_system=False).set_index("metric")
    assert verdicts.loc["energy", "verdict"] == "regressed"
    assert verdicts.loc["energy", "change"] == pytest.approx(0.29, abs=0.02)
    assert verdicts.loc["time", "verdict"] == "unchanged"


def test_the_gpu_checks_energy_section_shows_joules_and_per_joule_or_why_none():
    from exabench.gpucheck import plan, report

    part = next(p for p in plan.parts(1, "NVIDIA H100 80GB HBM3") if p.key == "resnet50-fp16")
    measured = {"status": "ok", "metrics": {"throughput_per_joule": {"value": 4.25, "unit": "images/J"}},
                "energy": {"timed": {"joules": 12000.0, "watts": 640.0, "covers": ["gpu"], "reason": None},
                           "sources": [{"method": "counter"}], "reason": None}}
    none = {"status": "ok", "metrics": {}, "energy": {"timed": None, "sources": [],
                                                      "reason": "no energy source on this machine: powercap: no"}}
    rows = report.energy_rows([(part, measured, 40.0), (part, none, 40.0), (part, {"status": "failed"}, 1.0)])
    assert rows[0] == ["resnet50-fp16", "12,000", "640", "4.25 images/J", "gpu", "counter", ""]
    assert rows[1][1:4] == ["-", "-", "-"] and rows[1][6].startswith("no energy source")
    assert rows[2][6] == "the record has no energy section"
