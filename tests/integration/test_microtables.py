"""Per-kernel matrices from fixed records: precision columns, reduced-precision speedups,
conv precision x algorithm, allreduce backends, and non-ok runs left out but listed."""

from __future__ import annotations

import math
import re

import pytest

from exabench.analysis.kernels import (algorithm_matrix, allreduce_matrix, kernel_rows, markdown, matrices, not_ok,
                                       precision_matrix)


def gemm(precision, tflops, run=1, status="ok"):
    return {"run_id": f"gemm.{precision}.{run}", "benchmark": "gemm", "status": status, "error": None,
            "params": {"precision": precision},
            "info": {"device": "cuda:0", "algorithm": "torch.matmul",
                     "shapes": [{"shape": "1760x16x1760.NN", "tflops": tflops, "time_s": 1.0},
                                {"shape": "4096x7000x4096.NN", "tflops": 10 * tflops, "time_s": 2.0}]}}


def conv(precision, algorithm, tflops):
    return {"run_id": f"conv.{precision}.{algorithm}", "benchmark": "conv", "status": "ok",
            "params": {"precision": precision, "algorithm": algorithm},
            "info": {"device": "cuda:0", "shapes": [{"shape": "n16c64h112w112k128r3s3p11u11", "direction": d,
                                                     "tflops": tflops * f, "time_s": 0.01}
                                                    for d, f in (("fwd", 1.0), ("bwd_data", 0.5))]}}


def rnn(precision, tflops):
    return {"run_id": f"rnn.{precision}", "benchmark": "rnn", "status": "ok", "params": {"precision": precision},
            "info": {"device": "cpu", "shape": "lstm h1024 b64 t25", "algorithm": "cuDNN fused RNN"},
            "metrics": {"tflops": {"value": tflops}, "time_fwd_bwd": {"value": 0.5}}}


def allreduce(backend, busbws, hierarchical=False, status="ok"):
    return {"run_id": f"ar.{backend}.{hierarchical}", "benchmark": "allreduce", "status": status,
            "error": None if status == "ok" else "backend nccl needs a CUDA GPU",
            "info": {"backend": backend, "hierarchical": hierarchical, "ranks": 2,
                     "sizes": [{"bytes": b, "busbw_GBps": v, "time_us": 1.0} for b, v in zip((8, 1024), busbws)]}}


def test_gemm_precision_matrix_with_speedups():
    records = [gemm("fp32", 1.0), gemm("fp16", 4.0), gemm("bf16", 3.0), gemm("tf32", 2.0),
               gemm("fp16", 6.0, run=2),  # a repeat: the median of 4 and 6
               gemm("fp16", 99.0, run=3, status="failed")]  # a failed run never reaches the matrix
    mat = precision_matrix(records, "gemm")
    assert list(mat.columns) == ["fp32", "tf32", "fp16", "bf16", "tf32_speedup", "fp16_speedup", "bf16_speedup"]
    row = mat.loc[("1760x16x1760.NN", "-")]
    assert row["fp16"] == 5.0 and row["fp16_speedup"] == 5.0
    assert row["bf16_speedup"] == 3.0 and row["tf32_speedup"] == 2.0
    assert mat.loc[("4096x7000x4096.NN", "-"), "fp32"] == 10.0
    assert list(mat.index.get_level_values(0)) == ["1760x16x1760.NN", "4096x7000x4096.NN"]  # record order kept


def test_no_speedup_without_fp32_and_empty_kernel():
    mat = precision_matrix([gemm("fp16", 4.0)], "gemm")
    assert list(mat.columns) == ["fp16"]
    assert precision_matrix([gemm("fp32", 1.0)], "conv").empty


def test_conv_precision_by_algorithm():
    records = [conv("fp32", "benchmark", 10.0), conv("fp16", "benchmark", 40.0),
               conv("fp32", "deterministic", 8.0), conv("fp16", "deterministic", 16.0)]
    mat = algorithm_matrix(records)
    fwd = mat.loc[("n16c64h112w112k128r3s3p11u11", "fwd")]
    assert fwd[("fp16", "benchmark")] == 40.0 and fwd[("fp16_speedup", "benchmark")] == 4.0
    assert fwd[("fp16_speedup", "deterministic")] == 2.0
    assert mat.loc[("n16c64h112w112k128r3s3p11u11", "bwd_data"), ("fp32", "deterministic")] == 4.0
    by_alg = precision_matrix(records, "conv", by_algorithm=True)
    assert by_alg.loc[("n16c64h112w112k128r3s3p11u11", "fwd", "benchmark"), "fp16_speedup"] == 4.0


def test_rnn_rows_and_long_form():
    mat = precision_matrix([rnn("fp32", 2.0), rnn("fp16", 5.0)], "rnn")
    assert mat.loc[("lstm h1024 b64 t25", "fwd+bwd"), "fp16_speedup"] == 2.5
    df = kernel_rows([rnn("fp32", 2.0), gemm("fp32", 1.0)])
    assert sorted(df["kernel"]) == ["gemm", "gemm", "rnn"]


def test_allreduce_matrix_and_not_ok():
    records = [allreduce("gloo", (0.01, 0.5)), allreduce("mpi", (0.02, 1.5)), allreduce("mpi", (0.01, 1.0), True),
               allreduce("nccl", (0, 0), status="skipped")]
    mat = allreduce_matrix(records)
    assert list(mat.index) == [8, 1024]
    assert mat.loc[1024, ("mpi", 2)] == 1.5 and mat.loc[1024, ("mpi+hier", 2)] == 1.0
    assert ("nccl", 2) not in mat.columns
    left_out = not_ok(records + [gemm("fp16", 1.0, status="failed")])
    assert list(left_out["status"]) == ["skipped", "failed"]
    assert math.isnan(allreduce_matrix(records, "time_us").get(("nccl", 2), float("nan")))


def test_from_real_records(tmp_path):
    from helpers_micro import run_in_process
    records = [run_in_process(tmp_path / p, "gemm", {"precision": p, "samples": 2}) for p in ("fp32", "bf16")]
    mat = precision_matrix(records, "gemm")
    assert mat.shape[0] == 4 and (mat["bf16_speedup"] > 0).all()
    assert mat["bf16_speedup"].tolist() == pytest.approx((mat["bf16"] / mat["fp32"]).tolist())


def test_markdown_has_every_nonempty_matrix():
    records = [gemm("fp32", 1.0), gemm("fp16", 4.0), conv("fp32", "benchmark", 1.0), allreduce("mpi", (0.1, 1.0)),
               allreduce("nccl", (0, 0), status="skipped")]
    titles = list(matrices(records))
    assert titles == ["gemm TFLOP/s by precision", "conv TFLOP/s by precision", "conv TFLOP/s by precision x algorithm",
                      "allreduce busbw (GB/s) by backend", "allreduce time (us) by backend", "runs left out (not ok)"]
    text = markdown(records)
    assert "## gemm TFLOP/s by precision" in text and "fp16_speedup" in text
    assert re.search(r"\| 1760x16x1760.NN +\| - +\| +1 \| +4 \| +4 \|", text)


def test_summary_with_skipped_and_ok_runs(tmp_path):
    from helpers_micro import run_in_process

    from exabench.records.tidy import markdown_summary, tidy_table
    ok = run_in_process(tmp_path / "a", "gemm", {"samples": 1})
    skipped = run_in_process(tmp_path / "b", "allreduce", {"backend": "nccl"})
    text = markdown_summary(tidy_table([ok, skipped]), "local")
    gemm_line = next(line for line in text.splitlines() if line.startswith(f"| {ok['run_id']} "))
    assert "| tflops |" in gemm_line and gemm_line.endswith("| ok |  |")
    assert "| skipped | backend nccl needs a CUDA GPU" in text
    assert "1 of 2 runs ok, 1 not ok." in text
