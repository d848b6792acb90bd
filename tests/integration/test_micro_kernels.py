"""GEMM, convolution and RNN micro-benchmarks: real kernels at tiny sizes, each result
checked against float64, and the check shown to fail on a wrong result."""

from __future__ import annotations

import math

import pytest
import torch
from helpers_micro import metric, run_in_process, run_launched

from exabench.benchmarks.micro.conv import SHAPES as CONV_SHAPES
from exabench.benchmarks.micro.conv import ConvShape, conv_directions
from exabench.benchmarks.micro.gemm import SHAPES as GEMM_SHAPES
from exabench.benchmarks.micro.gemm import operands
from exabench.benchmarks.micro import gemm as gemm_module
from exabench.benchmarks.micro.rnn import rnn_flop
from exabench.benchmarks.timing import TOLERANCE, float64_check, relative_error


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16", "tf32"])
def test_gemm_tiny_matches_float64_and_reports_tflops(tmp_path, precision):
    rec = run_in_process(tmp_path, "gemm", {"precision": precision, "samples": 3, "peak_tflops": 1.0})
    assert rec["status"] == "ok", rec["error"]
    assert rec["checks"][0]["name"] == "matches_float64" and rec["checks"][0]["passed"]
    shapes = rec["info"]["shapes"]
    assert len(shapes) == len(GEMM_SHAPES["tiny"])
    for s in shapes:
        assert s["rel_error"] <= TOLERANCE[precision]
        assert rec["metrics"][f"tflops.{s['shape']}"]["unit"] == "TFLOP/s"
        assert s["tflops"] == pytest.approx(s["flop"] / s["time_s"] / 1e12)
    total = sum(s["flop"] for s in shapes) / sum(s["time_s"] for s in shapes) / 1e12
    assert metric(rec, "tflops") == pytest.approx(total)
    assert metric(rec, "peak_fraction") == pytest.approx(total / 1.0)
    assert rec["metrics"]["tflops"]["precision"] == precision
    assert rec["info"]["tf32_effective"] is False  # no CUDA here: tf32 runs as fp32, and says so


def test_gemm_operands_honour_transposes():
    gen = torch.Generator().manual_seed(0)
    a, b = operands(torch, 5, 3, 4, True, True, torch.float32, "cpu", gen)
    assert a.shape == (5, 4) and b.shape == (4, 3)
    assert not a.is_contiguous() and not b.is_contiguous()  # stored transposed, used through a view


@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, False), (False, True)])
def test_gemm_sampled_check_above_the_full_check_size(monkeypatch, a_t, b_t):
    """Above FULL_CHECK_MAX the check compares sampled entries with their float64 dot products: an
    exact product passes at fp32 tolerance, one wrong by a little everywhere does not."""
    monkeypatch.setattr(gemm_module, "FULL_CHECK_MAX", 1000)  # 64 x 48 x 40 is then "large"
    gen = torch.Generator().manual_seed(3)
    a, b = operands(torch, 64, 48, 40, a_t, b_t, torch.float32, "cpu", gen)
    c = a @ b
    assert gemm_module.product_error(torch, a, b, c, gen) < 1e-6
    assert gemm_module.product_error(torch, a, b, c * 1.01, gen) == pytest.approx(0.01, rel=1e-3)


def test_float64_check_fails_on_a_wrong_result():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(32, 32, generator=gen), torch.randn(32, 32, generator=gen)
    ref = a.double() @ b.double()
    good = relative_error(torch, a @ b, ref)
    wrong = a @ b
    wrong[3, 4] += 1.0  # one wrong element
    bad = relative_error(torch, wrong, ref)
    assert good < TOLERANCE["fp32"] < bad
    assert float64_check([("ok", good)], "fp32").passed
    failed = float64_check([("ok", good), ("corrupt", bad)], "fp32")
    assert not failed.passed and "corrupt" in failed.detail
    assert not float64_check([("nan", math.nan)], "bf16").passed


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_conv_tiny_all_directions_match_float64(tmp_path, precision):
    rec = run_in_process(tmp_path, "conv", {"precision": precision, "samples": 2, "algorithm": "benchmark"})
    assert rec["status"] == "ok", rec["error"]
    rows = rec["info"]["shapes"]
    assert {r["direction"] for r in rows} == {"fwd", "bwd_data", "bwd_filter"}
    assert len(rows) == 3 * len(CONV_SHAPES["tiny"])
    assert all(r["rel_error"] <= TOLERANCE[precision] for r in rows)
    for d in ("fwd", "bwd_data", "bwd_filter", ""):
        assert metric(rec, f"tflops.{d}" if d else "tflops") > 0
    assert "CPU" in rec["info"]["algorithm_selection"]


def test_conv_shapes_follow_deepbench_and_summit():
    summit = [ConvShape.from_deepbench(t) for t in CONV_SHAPES["summit"]]
    assert [(s.n, s.c, s.h, s.w, s.k, s.r, s.s) for s in summit] == [(16, 64, 112, 112, 128, 3, 3),
                                                                     (8, 64, 112, 112, 128, 3, 3)]
    assert summit[0].out_hw == (112, 112)
    assert summit[0].flop == 2.0 * 16 * 128 * 112 * 112 * 64 * 9
    speech = ConvShape.from_deepbench((700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2))
    assert (speech.r, speech.s, speech.stride) == (5, 20, (2, 2)) and speech.out_hw == (79, 341)


def test_conv_directions_agree_with_autograd():
    sh = ConvShape.from_deepbench(CONV_SHAPES["tiny"][1])
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(sh.n, sh.c, sh.h, sh.w, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(sh.k, sh.c, sh.r, sh.s, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.conv2d(x, w, stride=sh.stride, padding=sh.pad)
    gy = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    y.backward(gy)
    calls = conv_directions(torch, x.detach(), w.detach(), sh, gy)
    assert torch.allclose(calls["fwd"](), y)
    assert torch.allclose(calls["bwd_data"](), x.grad)
    assert torch.allclose(calls["bwd_filter"](), w.grad)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_rnn_tiny_fwd_bwd_matches_float64(tmp_path, cell):
    rec = run_in_process(tmp_path, "rnn", {"cell": cell, "hidden": 32, "batch": 2, "steps": 6, "samples": 2})
    assert rec["status"] == "ok", rec["error"]
    assert all(c["passed"] for c in rec["checks"]) and len(rec["checks"]) == 2
    assert metric(rec, "time_fwd_bwd") > metric(rec, "time_fwd") > 0
    assert metric(rec, "tflops") == pytest.approx(3 * rnn_flop(cell, 32, 2, 6) / metric(rec, "time_fwd_bwd") / 1e12)


def test_rnn_steps_zero_means_the_slides_values(tmp_path):
    rec = run_in_process(tmp_path, "rnn", {"cell": "lstm", "hidden": 8, "batch": 2, "steps": 0, "samples": 1})
    assert rec["info"]["steps"] == 25
    assert rnn_flop("gru", 1024, 64, 1500) == 2.0 * 64 * 3 * 1024 * 2048 * 1500


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_gemm_two_ranks_by_mpirun_reports_slowest_rank(tmp_path):
    rec = run_launched(tmp_path, "gemm", {"samples": 2}, ranks=2)
    assert rec["status"] == "ok", rec["error"]
    assert rec["layout"]["ranks"] == 2
    assert metric(rec, "tflops_total") == pytest.approx(2 * metric(rec, "tflops"))
