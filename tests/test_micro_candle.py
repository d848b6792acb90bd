"""CANDLE pilots: the real architectures and widths, training that converges on the
synthetic data, and DDP over 2 real ranks (mpirun, Gloo)."""

from __future__ import annotations

import pytest
import torch
from helpers_micro import metric, run_in_process, run_launched

from exabench.benchmarks.candle import MODELS, build_model

SMALL = {"max_features": 256, "batch_size": 16, "samples_per_rank": 160, "epochs": 2, "val_samples_per_rank": 64}


def test_real_widths_and_layers():
    assert {m: s["features"] for m, s in MODELS.items()} == {"p1b1": 60483, "p1b2": 28205, "p3b1": 400}
    p1b2 = build_model(torch, "p1b2", 28205)
    widths = [(m.in_features, m.out_features) for m in p1b2 if isinstance(m, torch.nn.Linear)]
    assert widths == [(28205, 1024), (1024, 512), (512, 256), (256, 10)]
    assert sum(isinstance(m, torch.nn.Sigmoid) for m in p1b2) == 3
    p1b1 = build_model(torch, "p1b1", 1000)
    assert [m.out_features for m in p1b1 if isinstance(m, torch.nn.Linear)] == [2000, 600, 2000, 1000]
    p3b1 = build_model(torch, "p3b1", 400)
    out = p3b1(torch.zeros(2, 400))
    assert {t: o.shape[1] for t, o in out.items()} == MODELS["p3b1"]["tasks"]
    assert p3b1.shared[0].out_features == 1200


@pytest.mark.parametrize("model", ["p1b1", "p1b2", "p3b1"])
def test_one_rank_trains(tmp_path, model):
    rec = run_in_process(tmp_path, "candle", {"model": model, **SMALL})
    assert rec["status"] == "ok", rec["error"]
    assert all(c["passed"] for c in rec["checks"])
    assert metric(rec, "throughput") > 0 and rec["metrics"]["throughput"]["unit"] == "samples/s"
    assert metric(rec, "val_loss") < rec["info"]["val_loss_before"]
    assert rec["info"]["features"] == min(256, MODELS[model]["features"])
    if model != "p1b1":
        assert {c["name"] for c in rec["checks"]} >= {"accuracy_above_chance"}
        assert 0 <= metric(rec, "accuracy") <= 1


def test_p3b1_default_batch_is_ten(tmp_path):
    rec = run_in_process(tmp_path, "candle", {"model": "p3b1", "max_features": 0, "batch_size": 0,
                                              "samples_per_rank": 40, "epochs": 1, "warmup_steps": 1,
                                              "val_samples_per_rank": 16})
    assert rec["info"]["batch_size"] == 10 and rec["info"]["features"] == 400 and rec["info"]["steps"] == 4


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_two_ranks_ddp(tmp_path):
    rec = run_launched(tmp_path, "candle", {"model": "p1b2", **SMALL}, ranks=2)
    assert rec["status"] == "ok", rec["error"]
    assert rec["info"]["global_batch"] == 32 and rec["info"]["backend"] == "gloo"
    assert metric(rec, "accuracy") >= 0.15
