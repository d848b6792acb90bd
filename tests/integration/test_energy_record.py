"""The record's energy: summed over ranks and nodes without counting a device twice, the headline
per joule, null with the reason where nothing measured it; and a real run on this machine, which
has no energy source, says so."""

from __future__ import annotations

import json

import pytest

from exabench.energy.summary import energy_metrics, summarise
from exabench.records.record import check_record
from helpers_docs import run_documented
from helpers_micro import run_in_process


def channel(source, domain, device, timed_j, run_j, seconds=10.0, method="counter", **extra):
    return {"source": source, "domain": domain, "device": device, "method": method, "facts": {},
            "timed": {"seconds": seconds, "entries": 1, "joules": timed_j},
            "run": {"seconds": 2 * seconds, "entries": 1, "joules": run_j}, **extra}


def report(rank, host, channels, unavailable=None):
    return {"rank": rank, "host": host, "channels": channels, "unavailable": unavailable or {}}


def test_a_gpu_two_ranks_share_and_a_node_counter_read_once_per_node():
    gpu = channel("nvml", "gpu", "GPU-aaaa", 2000.0, 3000.0)
    pkg = channel("powercap", "cpu_package", "package-0", 1000.0, 1500.0)
    energy = summarise([report(0, "n1", [gpu, pkg]), report(1, "n1", [gpu]),  # rank 1 sees the same GPU
                        report(2, "n2", [channel("nvml", "gpu", "GPU-bbbb", 2500.0, 3500.0),
                                         channel("powercap", "cpu_package", "package-0", 900.0, 1200.0)])],
                       ["n1", "n2"])
    assert energy["measured"] is True
    assert energy["timed"]["joules"] == pytest.approx(2000 + 1000 + 2500 + 900)
    assert energy["timed"]["watts"] == pytest.approx(6400 / 10.0)
    assert energy["timed"]["covers"] == ["gpu", "cpu_package"]
    assert energy["run"]["joules"] == pytest.approx(3000 + 1500 + 3500 + 1200)
    assert len(energy["sources"]) == 4


def test_a_node_counter_on_every_node_is_the_total_and_the_parts_are_not_added_to_it():
    node = [channel("cray_pm", "node", "node", 9000.0, 12000.0), channel("cray_pm", "gpu", "accel0", 4000.0, 5000.0),
            channel("nvml", "gpu", "GPU-cccc", 4100.0, 5100.0)]
    energy = summarise([report(0, "x1000c0s0b0n0", node), report(4, "x1000c0s0b0n1", node)],
                       ["x1000c0s0b0n0", "x1000c0s0b0n1"])
    assert energy["timed"]["covers"] == ["node"]
    assert energy["timed"]["joules"] == pytest.approx(18000.0)
    # NVML wins the gpu domain over Cray's accel counter: one source per part and node.
    assert energy["timed"]["by_domain"]["gpu"]["sources"] == ["nvml"]


def test_a_node_counter_on_some_nodes_only_falls_back_to_the_parts():
    energy = summarise([report(0, "a", [channel("cray_pm", "node", "node", 900.0, 1000.0),
                                        channel("cray_pm", "cpu_package", "cpu", 300.0, 400.0)]),
                        report(1, "b", [channel("powercap", "cpu_package", "package-0", 250.0, 350.0)])], ["a", "b"])
    assert energy["timed"]["covers"] == ["cpu_package"]
    assert energy["timed"]["joules"] == pytest.approx(550.0)


def test_sampling_states_its_rate_and_coverage():
    sampled = channel("nvml", "gpu", "GPU-dddd", 500.0, 800.0, seconds=10.0, method="sampling", sample_s=0.1)
    sampled["timed"]["samples"], sampled["run"]["samples"] = 100, 150
    (row,) = summarise([report(0, "n", [sampled])], ["n"])["sources"]
    assert row["method"] == "sampling"
    assert row["timed"]["sample_hz"] == pytest.approx(10.0)
    assert row["timed"]["coverage"] == pytest.approx(1.0)
    assert row["run"]["coverage"] == pytest.approx(0.75)


def test_the_headline_per_joule_and_energy_to_solution_are_metrics():
    energy = summarise([report(0, "n", [channel("nvml", "gpu", "GPU-e", 3000.0, 4000.0, seconds=10.0)])], ["n"])
    images = energy_metrics(energy, {"throughput": {"value": 2400.0, "unit": "images/s"}}, "throughput")
    assert images["power"]["value"] == pytest.approx(300.0) and images["power"]["unit"] == "W"
    assert images["throughput_per_joule"]["value"] == pytest.approx(8.0)
    assert images["throughput_per_joule"]["unit"] == "images/J"
    assert images["throughput_per_joule"]["higher_is_better"] is True
    assert images["energy"]["higher_is_better"] is False
    ttt = energy_metrics(energy, {"time_to_train": {"value": 10.0, "unit": "s"}}, "time_to_train")
    assert set(ttt) == {"energy", "power", "energy_run"}  # the energy to solution is `energy`
    assert ttt["energy"]["value"] == pytest.approx(3000.0)


def test_a_counter_that_did_not_step_and_a_failed_source_are_null_with_the_reason():
    flat = summarise([report(0, "n", [channel("cray_pm", "node", "node", 0.0, 0.0, seconds=0.05)])], ["n"])
    assert flat["timed"]["joules"] is None and "did not step" in flat["timed"]["reason"]
    assert energy_metrics(flat, {"throughput": {"value": 1.0, "unit": "images/s"}}, "throughput") == {}
    broken = channel("powercap", "cpu_package", "package-0", None, None, error="intel-rapl:0/energy_uj: gone")
    failed = summarise([report(0, "n", [broken])], ["n"])
    assert failed["measured"] is False and "energy_uj: gone" in failed["run"]["reason"]


def test_a_run_here_records_that_no_energy_source_exists_and_why(tmp_path):
    record = run_in_process(tmp_path, "gemm", {"shapes": "tiny", "samples": 3, "warmup": 1})
    check_record(record, "(in memory)")
    energy = record["energy"]
    assert energy["measured"] is False and energy["timed"] is None
    assert energy["reason"].startswith("no energy source on this machine: ")
    assert set(energy["unavailable"]) == {"nvml", "amdsmi", "powercap", "cray_pm"}
    assert "powercap" in energy["reason"] and "nvml" in energy["reason"]
    assert not {"energy", "power", "energy_run"} & set(record["metrics"])  # nothing measured, nothing made up


def test_the_timed_samples_of_a_micro_benchmark_are_the_meters_timed_region(tmp_path):
    import torch

    from exabench.benchmarks.timing import Device, timed_samples
    from exabench.energy import activate, deactivate, open_meter
    from helpers_energy import powercap_tree

    meter = open_meter(0, powercap_root=powercap_tree(tmp_path), cray_root=tmp_path / "no-cray")
    activate(meter)
    try:
        with meter.region("run"):
            timed_samples(lambda: None, Device(torch, torch.device("cpu")), warmup=2, samples=3)
            timed_samples(lambda: None, Device(torch, torch.device("cpu")), warmup=0, samples=2)
    finally:
        deactivate()
        meter.close()
    rep = meter.report()
    assert {c["device"] for c in rep["channels"]} == {"package-0", "package-1", "dram@intel-rapl:0:1",
                                                      "dram@intel-rapl:1:0"}
    assert all(c["timed"]["entries"] == 2 and c["run"]["entries"] == 1 for c in rep["channels"])
    assert rep["unavailable"]["cray_pm"].startswith("no ")
    # The files did not change: a counter that never stepped is not zero joules.
    energy = summarise([rep], [rep["host"]])
    assert energy["timed"]["joules"] is None and "did not step" in energy["timed"]["reason"]


def test_two_ranks_launched_by_mpirun_give_one_energy_section(tmp_path):
    from helpers_micro import run_launched

    record = run_launched(tmp_path, "gemm", {"shapes": "tiny", "samples": 3, "warmup": 1}, ranks=2)
    assert record["status"] == "ok", record.get("error")
    assert record["energy"]["measured"] is False and "ranks_missing" not in record["energy"]
    assert record["energy"]["reason"].startswith("no energy source on this machine: ")


def test_the_documented_energy_probe_says_what_this_machine_measures():
    """docs/energy.md's probe: the record's energy section of 2 idle seconds, as JSON: joules where a
    source measured them, else null with the reason (this machine has none)."""
    res = run_documented("python -m exabench.energy --seconds 2", timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    energy = json.loads(res.stdout)
    assert energy["format"] == "exabench.energy/1"
    if energy["measured"]:
        assert energy["timed"]["joules"] >= 0 and energy["sources"]
    else:
        assert energy["timed"] is None and energy["reason"].startswith("no energy source on this machine: ")
