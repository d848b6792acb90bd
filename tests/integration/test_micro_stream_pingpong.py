"""STREAM triad and the MPI ping-pong (the node and link tests of cluster-wide acceptance):
real runs, one rank in process and two ranks started by mpirun, with figures that add up."""

from __future__ import annotations

import pytest

from helpers_micro import metric, run_in_process, run_launched


def test_stream_triad_tiny_is_correct_and_counts_24_bytes_per_element(tmp_path):
    rec = run_in_process(tmp_path, "stream", {"elements": 100_000})
    assert rec["status"] == "ok", rec.get("error")
    assert [c["passed"] for c in rec["checks"]] == [True]
    gbs, t = metric(rec, "triad_gbs"), metric(rec, "triad_time_s")
    assert gbs > 0 and t > 0
    # the median rate is the rate of the median sample: 24 B x elements / time (odd sample count)
    assert gbs == pytest.approx(24 * 100_000 / t / 1e9, rel=1e-9)
    assert rec["workload"]["headline"] == "triad_gbs"


def test_pingpong_needs_two_ranks_and_is_skipped_alone(tmp_path):
    rec = run_in_process(tmp_path, "pingpong", {})
    assert rec["status"] == "skipped" and "two ranks" in rec["error"]


def test_pingpong_two_ranks_by_mpirun_reports_bandwidth_and_latency(tmp_path):
    rec = run_launched(tmp_path, "pingpong", {"large_bytes": 65536, "iters_small": 20}, ranks=2)
    assert rec["status"] == "ok", rec.get("error")
    assert [c["passed"] for c in rec["checks"]] == [True]
    bw, lat = rec["metrics"]["bandwidth"], rec["metrics"]["latency"]
    assert bw["unit"] == "GB/s" and lat["unit"] == "us" and not lat["higher_is_better"]
    assert len(bw["samples"]) == 5 and sorted(bw["samples"])[2] == pytest.approx(bw["value"])
    assert bw["value"] > 0 and lat["value"] > 0


def test_samples_go_on_until_they_span_the_window(tmp_path):
    """window_s: more samples than `samples` where they take less time; the record keeps every one, the
    ping-pong's two message sizes as many each (taken in turn)."""
    rec = run_in_process(tmp_path / "stream", "stream", {"elements": 100_000, "samples": 3, "window_s": 0.5})
    assert rec["status"] == "ok", rec.get("error")
    times = rec["metrics"]["triad_time_s"]["samples"]
    assert len(times) > 3 and len(rec["metrics"]["triad_gbs"]["samples"]) == len(times)
    rec = run_launched(tmp_path / "pp", "pingpong", {"large_bytes": 65536, "iters_small": 20, "samples": 3,
                                                     "window_s": 0.5}, ranks=2)
    assert rec["status"] == "ok", rec.get("error")
    bw, lat = rec["metrics"]["bandwidth"]["samples"], rec["metrics"]["latency"]["samples"]
    assert len(bw) == len(lat) > 3 and [c["passed"] for c in rec["checks"]] == [True]
