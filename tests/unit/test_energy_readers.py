"""The energy readers over the files and answers the real sources give: a powercap tree laid out as
the kernel writes it, a Cray pm_counters folder as the node controller writes it, sacct's parsable
output; the NVML and amdsmi readers where their library is absent (this machine)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from exabench.energy import amd, cray, nvml, powercap, slurm
from exabench.energy.meter import Meter
from exabench.energy.source import Unavailable
from helpers_energy import MAX_RANGE_UJ, powercap_tree, rapl_zone, write

def test_powercap_reads_packages_and_dram_and_leaves_out_what_they_contain(tmp_path):
    reader = powercap.open_reader(powercap_tree(tmp_path))
    assert not isinstance(reader, Unavailable)
    got = {(c.domain, c.device): c.wrap_j for c in reader.channels}
    assert got == {("cpu_package", "package-0"): MAX_RANGE_UJ / 1e6, ("cpu_package", "package-1"): MAX_RANGE_UJ / 1e6,
                   ("dram", "dram@intel-rapl:0:1"): 65712999613 / 1e6, ("dram", "dram@intel-rapl:1:0"): 65712999613 / 1e6}
    assert reader.read() == {"package-0": 1.0, "package-1": 2.0, "dram@intel-rapl:0:1": 0.2, "dram@intel-rapl:1:0": 0.3}


def test_a_powercap_counter_that_wraps_is_counted_across_its_range(tmp_path):
    klass = powercap_tree(tmp_path)
    energy = klass / "intel-rapl:0" / "energy_uj"
    write(energy, str(MAX_RANGE_UJ - 1_000_000))  # 1 J before the wrap
    meter = Meter([powercap.open_reader(klass)], [])
    meter.begin("timed")
    write(energy, str(2_500_000))  # past the wrap, 2.5 J after it
    meter.end("timed")
    meter.close()
    (pkg0,) = [c for c in meter.report()["channels"] if c["device"] == "package-0"]
    assert pkg0["timed"]["joules"] == pytest.approx(3.5)
    (pkg1,) = [c for c in meter.report()["channels"] if c["device"] == "package-1"]
    assert pkg1["timed"]["joules"] == 0.0


def test_a_region_entered_many_times_adds_up_and_a_nested_one_counts_once(tmp_path):
    klass = powercap_tree(tmp_path)
    energy = klass / "intel-rapl:1" / "energy_uj"
    meter = Meter([powercap.open_reader(klass)], [])
    for start in (10_000_000, 20_000_000):
        write(energy, str(start))
        with meter.region("timed"):
            with meter.region("timed"):
                write(energy, str(start + 4_000_000))
        write(energy, str(start + 9_000_000))  # between regions: not timed
    meter.close()
    (pkg1,) = [c for c in meter.report()["channels"] if c["device"] == "package-1"]
    assert pkg1["timed"]["joules"] == pytest.approx(8.0)
    assert pkg1["timed"]["entries"] == 2


def test_missing_or_unreadable_powercap_is_a_reason(tmp_path):
    missing = powercap.open_reader(tmp_path / "nowhere")
    assert isinstance(missing, Unavailable) and "no " in missing.reason
    klass = powercap_tree(tmp_path)
    for zone in ("intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1", "intel-rapl:1:0"):
        target = klass / zone / "energy_uj"
        target.unlink()
        target.mkdir()  # a path that exists but cannot be read as a file
    why = powercap.open_reader(klass)
    assert isinstance(why, Unavailable)
    assert "energy_uj" in why.reason and "Is a directory" in why.reason


def test_a_powercap_zone_that_vanishes_mid_run_gives_null_joules_with_the_reason(tmp_path):
    klass = powercap_tree(tmp_path)
    meter = Meter([powercap.open_reader(klass)], [])
    meter.begin("timed")
    (klass / "intel-rapl:0" / "energy_uj").unlink()
    meter.end("timed")
    meter.close()
    channels = meter.report()["channels"]
    assert all(c["timed"]["joules"] is None for c in channels)
    assert "intel-rapl:0/energy_uj" in channels[0]["error"]


def pm_counters(root: Path, energy: int = 1_000_000, accel: tuple[int, ...] = (100_000, 110_000)) -> Path:
    """/sys/cray/pm_counters as on an HPE Cray EX node with accelerators."""
    stamp = "1700000000123456 us"
    folder = root / "sys/cray/pm_counters"
    write(folder / "energy", f"{energy} J {stamp}")
    write(folder / "power", f"1400 W {stamp}")
    write(folder / "cpu_energy", f"300000 J {stamp}")
    write(folder / "cpu_power", f"250 W {stamp}")
    write(folder / "memory_energy", f"50000 J {stamp}")
    write(folder / "memory_power", f"40 W {stamp}")
    for i, j in enumerate(accel):
        write(folder / f"accel{i}_energy", f"{j} J {stamp}")
        write(folder / f"accel{i}_power", f"280 W {stamp}")
    write(folder / "freshness", "8830521")
    write(folder / "generation", "41")
    write(folder / "startup", "1699990000123456")
    write(folder / "version", "2")
    write(folder / "raw_scan_hz", "10")
    write(folder / "power_cap", "0 W")
    return folder


def test_cray_pm_counters_are_read_as_node_cpu_memory_and_each_accelerator(tmp_path):
    reader = cray.open_reader(pm_counters(tmp_path))
    assert not isinstance(reader, Unavailable)
    assert {(c.device, c.domain) for c in reader.channels} == {
        ("node", "node"), ("cpu", "cpu_package"), ("memory", "dram"), ("accel0", "gpu"), ("accel1", "gpu")}
    assert reader.read() == {"node": 1e6, "cpu": 3e5, "memory": 5e4, "accel0": 1e5, "accel1": 1.1e5}
    assert reader.facts()["raw_scan_hz"] == 10


def test_a_cray_controller_restart_is_not_taken_for_energy(tmp_path):
    folder = pm_counters(tmp_path)
    meter = Meter([cray.open_reader(folder)], [])
    meter.begin("timed")
    write(folder / "startup", "1700000099000000")
    write(folder / "energy", "12 J 1700000099100000 us")
    meter.end("timed")
    meter.close()
    channels = meter.report()["channels"]
    assert all(c["timed"]["joules"] is None for c in channels)
    assert "startup changed" in channels[0]["error"]


def test_a_cray_counter_that_is_not_joules_is_a_reason(tmp_path):
    folder = pm_counters(tmp_path)
    write(folder / "energy", "garbage")
    why = cray.open_reader(folder)
    assert isinstance(why, Unavailable) and "'garbage' is not '<joules> J <timestamp> us'" in why.reason
    assert isinstance(cray.open_reader(tmp_path / "nope"), Unavailable)


def test_nvml_and_amdsmi_without_their_library_are_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    got = nvml.open_reader(library=str(Path("/nonexistent/libnvidia-ml.so.1")))  # and no driver library
    assert got == Unavailable("nvml", "nvidia-ml-py (pynvml) is not installed and there is no "
                                      "/nonexistent/libnvidia-ml.so.1 (no NVIDIA driver here)")
    assert amd.open_reader() == Unavailable("amdsmi", "amdsmi (ROCm's Python package) is not installed")


def test_cuda_visible_devices_picks_the_gpus_by_index_or_uuid():
    handles = ["h0", "h1", "h2", "h3"]
    uuids = [f"GPU-{c * 8}-1111" for c in "abcd"]
    assert nvml.visible(handles, uuids, {}) == [0, 1, 2, 3]
    assert nvml.visible(handles, uuids, {"CUDA_VISIBLE_DEVICES": "2,0"}) == [2, 0]
    assert nvml.visible(handles, uuids, {"CUDA_VISIBLE_DEVICES": "GPU-dddddddd,1"}) == [3, 1]
    assert nvml.visible(handles, uuids, {"CUDA_VISIBLE_DEVICES": "1,7,2"}) == [1]  # CUDA stops at an invalid one
    assert nvml.visible(handles, uuids, {"CUDA_VISIBLE_DEVICES": ""}) == []


def test_amdsmi_energy_count_in_joules_under_both_key_names():
    assert amd.energy_joules({"energy_accumulator": 1_000_000, "counter_resolution": 15.3,
                              "timestamp": 1}) == pytest.approx(15.3)
    assert amd.energy_joules({"power": 2_000_000, "counter_resolution": 15.3, "timestamp": 1}) == pytest.approx(30.6)


def test_sacct_consumed_energy_of_the_job_line():
    text = "81234|5400000|01:00:00|COMPLETED\n81234.batch|5400000|01:00:00|COMPLETED\n81234.0|5100000|00:58:00|COMPLETED\n"
    assert slurm.parse_sacct("81234", text) == {"joules": 5.4e6, "seconds": 3600, "state": "COMPLETED", "reason": None}
    two_days = slurm.parse_sacct("7", "7|10|2-01:00:00|TIMEOUT\n")
    assert two_days["seconds"] == 2 * 86400 + 3600
    none = slurm.parse_sacct("81234", "81234|0|00:10:00|COMPLETED\n")
    assert none["joules"] is None and "gathers no energy" in none["reason"]
    assert "no line for job 5" in slurm.parse_sacct("5", text)["reason"]
    assert "sacct did not run" in slurm.job_energy("5", sacct=str(Path("/nonexistent/sacct")))["reason"]


def test_a_counter_reading_garbage_is_refused_as_implausible_with_the_reason(tmp_path):
    # A package counter that jumped by 1e14 J within a second (3.2 TW over a 31 s run once went into
    # a record as measured): no CPU package draws that; the figure is null, the reason says why.
    klass = powercap_tree(tmp_path)
    meter = Meter([powercap.open_reader(klass)], [])
    meter.begin("run")
    write(klass / "intel-rapl:0" / "energy_uj", str(10**20))
    meter.end("run")
    meter.close()
    channels = meter.report()["channels"]
    assert all(c["run"]["joules"] is None for c in channels)
    assert "package-0 stepped from 1 J to 1e+14 J: implausible" in channels[0]["error"]
    assert "beyond the 1,000 W that 1 cpu_package device(s) can draw" in channels[0]["error"]


def test_a_counter_that_went_back_a_little_is_not_taken_for_a_262_kJ_wrap(tmp_path):
    # 1 J -> 0.999 J: taken as a wrap it would add 262 kJ within a second; only a wrapped step the
    # package could draw in the time since the last reading is a wrap.
    klass = powercap_tree(tmp_path)
    meter = Meter([powercap.open_reader(klass)], [])
    meter.begin("run")
    write(klass / "intel-rapl:0" / "energy_uj", str(999_000))
    meter.end("run")
    meter.close()
    (pkg0,) = [c for c in meter.report()["channels"] if c["device"] == "package-0"]
    assert pkg0["run"]["joules"] is None
    assert "went back from 1 J to 0.999 J (reset); not a wrap: implausible: 2.621e+05 J" in pkg0["error"]


def test_a_wrap_over_the_time_it_needs_is_still_counted(tmp_path):
    # The same 1 J -> 0.999 J read 20 minutes later: the whole 262 kJ range went by at 218 W, which a
    # package can draw: a wrap, counted across the range.
    klass = powercap_tree(tmp_path)
    now = [0.0]
    meter = Meter([powercap.open_reader(klass)], [], clock=lambda: now[0])
    meter.begin("run")
    write(klass / "intel-rapl:0" / "energy_uj", str(999_000))
    now[0] = 1200.0
    meter.end("run")
    meter.close()
    (pkg0,) = [c for c in meter.report()["channels"] if c["device"] == "package-0"]
    assert pkg0["run"]["joules"] == pytest.approx(MAX_RANGE_UJ / 1e6 - 0.001) and "error" not in pkg0


def test_a_record_with_energy_no_device_can_draw_says_it_is_not_measured():
    from exabench.energy.summary import summarise
    garbage = {"source": "cray_pm", "domain": "node", "device": "node", "method": "counter", "facts": {},
               "timed": {"seconds": 31.0, "entries": 1, "joules": 1.0e14},
               "run": {"seconds": 40.0, "entries": 1, "joules": 1.0e14}}
    energy = summarise([{"rank": 0, "host": "n1", "channels": [garbage], "unavailable": {}}], ["n1"])
    assert energy["measured"] is False and energy["timed"]["joules"] is None
    assert "cray_pm node timed: implausible: 1e+14 J in 31 s is 3.23e+12 W" in energy["reason"]
    assert energy["sources"][0]["timed"]["joules"] is None
