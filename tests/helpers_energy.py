"""Energy counter trees laid out as the kernel writes them (/sys/class/powercap), for the reader
tests and the record tests."""

from __future__ import annotations

import os
from pathlib import Path

MAX_RANGE_UJ = 262143328850  # max_energy_range_uj of a Xeon package zone


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def rapl_zone(folder: Path, name: str, energy_uj: int, max_uj: int = MAX_RANGE_UJ) -> Path:
    """One zone as intel_rapl_common writes it (the files a reader may meet, not only the ones it reads)."""
    write(folder / "name", name)
    write(folder / "energy_uj", str(energy_uj))
    write(folder / "max_energy_range_uj", str(max_uj))
    write(folder / "enabled", "1")
    write(folder / "constraint_0_name", "long_term")
    write(folder / "constraint_0_power_limit_uw", "205000000")
    write(folder / "constraint_0_time_window_us", "999424")
    return folder


def powercap_tree(root: Path) -> Path:
    """/sys/devices/virtual/powercap/intel-rapl/... and the flat links of /sys/class/powercap: two
    packages with core and dram subzones, and psys (the platform) as a top-level zone."""
    devices = root / "sys/devices/virtual/powercap/intel-rapl"
    write(devices / "enabled", "1")
    zones = {
        "intel-rapl:0": rapl_zone(devices / "intel-rapl:0", "package-0", 1_000_000),
        "intel-rapl:0:0": rapl_zone(devices / "intel-rapl:0/intel-rapl:0:0", "core", 500_000),
        "intel-rapl:0:1": rapl_zone(devices / "intel-rapl:0/intel-rapl:0:1", "dram", 200_000, 65712999613),
        "intel-rapl:1": rapl_zone(devices / "intel-rapl:1", "package-1", 2_000_000),
        "intel-rapl:1:0": rapl_zone(devices / "intel-rapl:1/intel-rapl:1:0", "dram", 300_000, 65712999613),
        "intel-rapl:2": rapl_zone(devices / "intel-rapl:2", "psys", 9_000_000),
    }
    klass = root / "sys/class/powercap"
    klass.mkdir(parents=True)
    (klass / "intel-rapl").symlink_to(os.path.relpath(devices, klass))
    for name, folder in zones.items():
        (klass / name).symlink_to(os.path.relpath(folder, klass))
    return klass
