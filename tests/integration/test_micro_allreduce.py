"""Allreduce micro-benchmark: the nccl-tests arithmetic, the sweep, exact sums over 2 real
ranks (mpirun; Gloo through torch.distributed, MPI through mpi4py, flat and
hierarchical), and clean `skipped` records for NCCL without GPUs and Horovod when absent."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from helpers_micro import metric, run_in_process, run_launched

from exabench.benchmarks.micro.allreduce import (DEEPBENCH_FLOATS, bus_factor, expected_sum, host_groups,
                                                 message_counts, pattern)


def test_bus_factor_is_nccl_tests_allreduce():
    assert bus_factor(2) == 1.0
    assert bus_factor(8) == pytest.approx(1.75)
    assert bus_factor(1) == 0.0


def test_message_counts_doubling_and_deepbench():
    assert message_counts("doubling", 8, 64) == [2, 4, 8, 16]
    assert message_counts("doubling", 4, 4) == [1]
    assert message_counts("deepbench", 8, 64) == list(DEEPBENCH_FLOATS)
    both = message_counts("both", 8, 2**27)
    assert both[0] == 2 and 2**25 in both and both[-1] == 64_500_000 and set(DEEPBENCH_FLOATS) <= set(both)
    assert both == sorted(set(both))


def test_pattern_sum_is_exact_in_float32():
    n, count = 64, 1000
    total = expected_sum(count, n)
    exact = sum(pattern(count, r).astype(np.int64) for r in range(n))
    assert total.dtype == np.float32 and np.array_equal(total.astype(np.int64), exact)
    assert len({pattern(count, r).tobytes() for r in range(4)}) == 4  # ranks contribute different data


def test_host_groups_by_first_appearance():
    members, leaders = host_groups(["b", "a", "b", "a", "c"])
    assert members == [[0, 2], [1, 3], [4]] and leaders == [0, 1, 4]


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_one_rank_sweep(tmp_path, backend):
    params = {"backend": backend, "max_bytes": 1024, "iters": 3}
    # MPI in a child: MPI_Init in the pytest process would leak its variables into later mpirun jobs.
    rec = run_in_process(tmp_path, "allreduce", params) if backend != "mpi" else \
        run_launched(tmp_path, "allreduce", params, ranks=1)
    assert rec["status"] == "ok", rec["error"]
    sizes = rec["info"]["sizes"]
    assert [s["bytes"] for s in sizes] == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert all(s["wrong_elements"] == 0 and s["iterations"] == 3 for s in sizes)
    assert metric(rec, "busbw") == 0.0  # one rank moves nothing over a bus (nccl-tests)


def test_nccl_without_gpus_is_skipped(tmp_path):
    rec = run_in_process(tmp_path, "allreduce", {"backend": "nccl"})
    assert rec["status"] == "skipped" and "CUDA" in rec["error"] and rec["metrics"] == {}


@pytest.mark.skipif(importlib.util.find_spec("horovod") is not None, reason="Horovod installed: covered below")
def test_horovod_absent_is_skipped(tmp_path):
    rec = run_in_process(tmp_path, "allreduce", {"backend": "horovod"})
    assert rec["status"] == "skipped" and "horovod" in rec["error"]


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend,hierarchical", [("gloo", False), ("mpi", False), ("mpi", True), ("gloo", True)])
def test_two_ranks_exact_sums_and_busbw(tmp_path, backend, hierarchical):
    params = {"backend": backend, "hierarchical": hierarchical, "max_bytes": 2**16, "iters": 4, "iters_large": 2}
    rec = run_launched(tmp_path, "allreduce", params, ranks=2)
    assert rec["status"] == "ok", rec["error"]
    check = rec["checks"][0]
    assert check["name"] == "sums_exact" and check["passed"], check["detail"]
    info = rec["info"]
    assert info["ranks"] == 2 and info["nodes"] == 1 and info["bus_factor"] == 1.0
    for s in info["sizes"]:
        assert s["wrong_elements"] == 0
        assert s["algbw_GBps"] == pytest.approx(s["bytes"] / (s["time_us"] * 1e-6) / 1e9)
        assert s["busbw_GBps"] == pytest.approx(s["algbw_GBps"] * 2 * (2 - 1) / 2)
    assert metric(rec, "busbw") == pytest.approx(info["sizes"][-1]["busbw_GBps"])
    assert rec["metrics"]["time.8B"]["unit"] == "us"
    if hierarchical:
        assert "degenerates" in info["hierarchical_note"]


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("horovod") is None, reason="horovod.torch is not installed")
def test_two_ranks_horovod(tmp_path):
    rec = run_launched(tmp_path, "allreduce", {"backend": "horovod", "max_bytes": 2**12, "iters": 3}, ranks=2)
    assert rec["status"] == "ok", rec["error"]
    assert rec["checks"][0]["passed"]


def test_nccl_tests_style_timing_beside_the_per_op_figure_over_gloo(tmp_path):
    """Both methods in the record, each named: back-to-back ops with one synchronisation, divided
    (nccl-tests), and the per-op figure; over Gloo on the CPU there are no CUDA graphs, and the
    record says why."""
    rec = run_in_process(tmp_path, "allreduce", {"backend": "gloo", "max_bytes": 1024, "iters": 5})
    assert rec["status"] == "ok", rec["error"]
    info, m = rec["info"], rec["metrics"]
    assert set(info["timing_methods"]) == {"per_op", "back_to_back"}
    assert "nccl-tests" in info["timing_methods"]["back_to_back"]
    assert "host memory" in info["cuda_graph"] and "one rank" in info["one_rank_note"]
    for s in info["sizes"]:
        assert s["time_us_b2b"] > 0 and s["time_us_graph"] is None
        assert m[f"time_b2b.{s['bytes']}B"]["value"] == pytest.approx(s["time_us_b2b"])
        assert "back to back" in m[f"time_b2b.{s['bytes']}B"]["description"]
    assert m["latency_small_b2b"]["value"] == pytest.approx(info["sizes"][0]["time_us_b2b"])
    assert "latency_small_graph" not in m


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_two_ranks_back_to_back_over_gloo_keeps_exact_sums(tmp_path):
    rec = run_launched(tmp_path, "allreduce", {"backend": "gloo", "max_bytes": 2**12, "iters": 4, "iters_large": 2},
                       ranks=2)
    assert rec["status"] == "ok", rec["error"]
    assert rec["checks"][0]["passed"]
    sizes = rec["info"]["sizes"]
    assert all(s["time_us_b2b"] > 0 and s["busbw_GBps_b2b"] > 0 for s in sizes)
    assert rec["metrics"]["busbw_b2b"]["value"] == pytest.approx(sizes[-1]["busbw_GBps_b2b"])
