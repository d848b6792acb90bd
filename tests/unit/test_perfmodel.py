"""Log-linear model: recovers known effects from synthetic records, fits interactions only where the
data support them, predicts unmeasured combinations with an interval, and cross-validates."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from exabench.records.tidy import tidy_table
from exabench.errors import ExabenchError
from exabench.perf.loglinear import (fit, leave_one_out, loo_summary, measured_speedup_matrix, model_frame, report,
                                     speedup_matrix, synthetic_records, write_report)

EFFECTS = {"site": {"a": 0.0, "b": 0.7}, "workload": {"w1": 0.0, "w2": -1.2, "w3": 0.3},
           "size": {"small": 0.0, "tiny": 0.9}, "config": {"n1r1t1": 0.0, "n1r2t1": 0.6, "n2r2t1": 1.2},
           "precision": {"fp32": 0.0, "bf16": 0.5}}
BASE = {f: next(iter(levels)) for f, levels in EFFECTS.items()}
FACTORS = {"site": "site", "workload": "benchmark", "size": "preset", "config": "layout", "precision": "precision"}


def frame_of(records):
    return model_frame(tidy_table(records), FACTORS)


def effect_table(model) -> dict[str, float]:
    return dict(zip(model.effects()["term"], model.effects()["estimate"]))


def test_recovers_known_main_effects_and_interaction():
    inter = {("site", "b", "precision", "bf16"): 0.4}
    recs = synthetic_records(EFFECTS, intercept=3.0, interactions=inter, sigma=0.02, repeats=2, seed=1)
    fr = frame_of(recs)
    m = fit(fr, list(FACTORS), [("site", "precision")], BASE)
    est = effect_table(m)
    assert est["intercept"] == pytest.approx(3.0, abs=0.03)
    for f, levels in EFFECTS.items():
        for lv, e in levels.items():
            if lv != BASE[f]:
                assert est[f"{f}={lv}"] == pytest.approx(e, abs=0.03), (f, lv)
    assert est["site=b:precision=bf16"] == pytest.approx(0.4, abs=0.03)
    assert m.interactions == [("site", "precision")] and m.dof == len(fr) - len(m.terms)
    assert np.sqrt(m.sigma2) == pytest.approx(0.02, rel=0.25)
    # The standard errors are honest: estimates lie within 4 se of the truth.
    eff = m.effects().set_index("term")
    assert abs(eff.loc["config=n2r2t1", "estimate"] - 1.2) < 4 * eff.loc["config=n2r2t1", "se"]


def test_noise_free_fit_is_exact_and_speedups_are_the_effects():
    fr = frame_of(synthetic_records(EFFECTS, intercept=1.0))
    m = fit(fr, list(FACTORS), "none", BASE)
    assert np.allclose(m.coef[0], 1.0)
    sp = speedup_matrix(m, "workload", "config")
    assert list(sp.columns) == ["n1r1t1", "n1r2t1", "n2r2t1"] and list(sp.index) == ["w1", "w2", "w3"]
    assert np.allclose(sp.to_numpy(), np.exp([0.0, 0.6, 1.2])[None, :].repeat(3, 0))
    meas = measured_speedup_matrix(fr, list(FACTORS), "workload", "config", "n1r1t1")
    assert np.allclose(meas.to_numpy(), sp.to_numpy())


def test_interactions_only_where_every_cell_was_measured():
    # Site b never ran bf16: no site x precision interaction can be estimated, the others can.
    recs = synthetic_records(EFFECTS, intercept=2.0, sigma=0.01, seed=2,
                             skip=lambda c: c["site"] == "b" and c["precision"] == "bf16")
    fr = frame_of(recs)
    m = fit(fr, list(FACTORS), "auto", BASE)
    assert ("site", "precision") not in m.interactions
    assert ("workload", "config") in m.interactions
    # The unmeasured combination is predicted (main effects add), with a finite interval around the truth.
    cell = pd.DataFrame([{"site": "b", "workload": "w2", "size": "tiny", "config": "n2r2t1", "precision": "bf16"}])
    p = m.predict(cell).iloc[0]
    truth = np.exp(2.0 + 0.7 - 1.2 + 0.9 + 1.2 + 0.5)
    assert p["perf_lo"] < truth < p["perf_hi"] and p["perf"] == pytest.approx(truth, rel=0.05)
    assert 0 < p["se_mean"] < p["se_pred"]


def test_time_metrics_enter_as_performance():
    recs = synthetic_records({"config": {"n1r1t1": 0.0, "n1r2t1": 0.5}}, intercept=0.0)
    for r in recs:  # turn the throughput into a time (lower is better): time = 1 / throughput
        t = r["metrics"].pop("throughput")
        r["metrics"]["time"] = {**t, "value": 1.0 / t["value"], "unit": "s", "higher_is_better": False}
    fr = model_frame(tidy_table(recs), {"config": "layout"}, metric="time")
    m = fit(fr, ["config"], "none", {"config": "n1r1t1"})
    assert effect_table(m)["config=n1r2t1"] == pytest.approx(0.5)  # 2 ranks: exp(0.5) faster


def test_leave_one_out_error_and_unpredictable_runs():
    recs = synthetic_records(EFFECTS, intercept=2.0, sigma=0.03, repeats=2, seed=3)
    fr = frame_of(recs)
    loo = leave_one_out(fr, list(FACTORS), "none", BASE)
    s = loo_summary(loo)
    assert s["predicted"] == s["n"] == len(fr)
    assert 0.02 < s["rmse_log"] < 0.05  # about sigma, inflated a little by the refits
    # The closed form equals a brute-force refit without the run.
    for i in (0, 17, len(fr) - 1):
        refit = fit(fr.drop(fr.index[i]), list(FACTORS), "none", BASE).predict(fr.iloc[[i]]).iloc[0]
        assert loo["predicted"].iloc[i] == pytest.approx(refit["perf"], rel=1e-9)
        assert loo["se_pred"].iloc[i] == pytest.approx(refit["se_pred"], rel=1e-9)
    # A level measured once cannot be predicted when that run is held out.
    lone = synthetic_records({"config": {"n1r1t1": 0.0, "n1r2t1": 0.5, "n4r1t1": 1.0}}, repeats=2,
                             skip=None)
    fr2 = model_frame(tidy_table(lone), {"config": "layout"})
    fr2 = fr2[~((fr2["config"] == "n4r1t1") & fr2["run_id"].str.endswith("rep1"))]
    loo2 = leave_one_out(fr2, ["config"], "none")
    row = loo2[loo2["run_id"].str.contains("n4r1t1")].iloc[0]
    assert np.isnan(row["predicted"]) and "n4r1t1" in row["reason"]


def test_errors_name_the_factor_and_valid_levels():
    fr = frame_of(synthetic_records(EFFECTS))
    m = fit(fr, list(FACTORS), "none", BASE)
    with pytest.raises(ExabenchError, match=r"factor config: level\(s\) \['n8r1t1'\] were never measured; valid"):
        m.predict(pd.DataFrame([{**BASE, "config": "n8r1t1"}]))
    with pytest.raises(ExabenchError, match="baseline level 'zz' was not measured"):
        fit(fr, list(FACTORS), "none", {"site": "zz"})
    with pytest.raises(ExabenchError, match="no metric 'nope'"):
        model_frame(tidy_table(synthetic_records(EFFECTS)), FACTORS, metric="nope")


def test_problem_factor_reads_swept_size_parameters():
    recs = synthetic_records({"config": {"n1r1t1": 0.0, "n1r2t1": 0.5}})
    for i, r in enumerate(recs):
        r["swept"] = {"rows_per_rank": 10 * (i + 1), "dtype": "float32", "ranks_per_node": 1}
    fr = model_frame(tidy_table(recs), {"size": "problem"})
    assert sorted(fr["size"]) == ["tiny,rows_per_rank=10", "tiny,rows_per_rank=20"]


def test_report_and_files(tmp_path):
    recs = synthetic_records(EFFECTS, intercept=2.0, sigma=0.02, seed=4,
                             skip=lambda c: c["site"] == "b" and c["workload"] == "w3")
    csv = tmp_path / "results.csv"
    tidy_table(recs).to_csv(csv, index=False)
    text = write_report(csv, tmp_path / "models", FACTORS)
    for name in ("loglinear.md", "effects.csv", "predictions.csv", "loo.csv", "speedups.csv",
                 "measured_speedups.csv"):
        assert (tmp_path / "models" / name).exists()
    preds = pd.read_csv(tmp_path / "models" / "predictions.csv")
    unmeasured = preds[~preds["measured"]]
    assert len(unmeasured) == 2 * 3 * 2 and set(unmeasured["workload"]) == {"w3"}
    assert "## Leave-one-out error" in text and "Predictions for unmeasured combinations (12)" in text
    out = report(tidy_table(recs), FACTORS)
    assert out["loo_summary"]["predicted"] == len(recs)
    assert json.loads(json.dumps(out["loo_summary"]))  # plain numbers, reportable


def test_one_factor_gives_a_one_row_speedup_matrix():
    recs = synthetic_records({"config": {"n1r1t1": 0.0, "n1r2t1": 0.5, "n2r2t1": 0.9}}, sigma=0.01, repeats=2)
    out = report(tidy_table(recs), {"config": "layout"}, baseline={"config": "n1r1t1"})
    sp = out["speedups"]
    assert sp.shape == (1, 3) and sp.iloc[0].to_numpy() == pytest.approx(np.exp([0.0, 0.5, 0.9]), rel=0.03)
    assert out["measured_speedups"] is None and "per all runs" in out["markdown"]


def test_a_missing_scaling_reference_is_named_not_a_traceback(tmp_path, monkeypatch):
    # `exabench model-validate` outside the repository's root: its default reference path is relative.
    from exabench.perf.reference import REFERENCE, Reference
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ExabenchError, match=r"results/reference/published_scaling.yaml: no such file; valid: .*"
                       + str(REFERENCE)):
        Reference("results/reference/published_scaling.yaml")
    assert Reference(REFERENCE).sources
