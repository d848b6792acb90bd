"""CPU packages and DRAM through Linux powercap (RAPL): /sys/class/powercap/intel-rapl:*.

The kernel lists every zone flat under /sys/class/powercap as a link to its directory under
/sys/devices/virtual/powercap/intel-rapl/ (intel-rapl:0 is package-0, its subzones intel-rapl:0:0 ...
are core, uncore or dram). Each zone has `name`, `energy_uj` (a counter in microjoules that wraps to
zero past `max_energy_range_uj`) and power limits. AMD processors expose the same tree (the zones are
still called intel-rapl). Since Linux 5.10 energy_uj is readable by root only on many distributions
(a side channel, CVE-2020-8694): a reason here, not an error.

Read: package-N and dram zones. Not read: core and uncore (inside the package figure: adding them
would count twice) and psys (the platform domain, which overlaps the packages)."""

from __future__ import annotations

import re
from pathlib import Path

from exabench.energy.source import Channel, FileReader, SourceError, Unavailable, read_text

ROOT = Path("/sys/class/powercap")
SOURCE = "powercap"
_ZONE = re.compile(r"^intel-rapl:\d+(:\d+)?$")
# A counter wraps after max_energy_range_uj: ~262 kJ on most parts, 11 min at 400 W. Reading it
# every few seconds keeps each step under one wrap, whatever the run's length.
POLL_S = 5.0


def _domain(name: str) -> str | None:
    if re.fullmatch(r"package-\d+", name):
        return "cpu_package"
    if name == "dram":
        return "dram"
    return None  # core, uncore (inside a package), psys (overlaps the packages)


class PowercapReader(FileReader):
    source = SOURCE
    poll_s = POLL_S

    def __init__(self, zones: dict[str, tuple[Path, Channel]]):
        self._zones = zones  # device -> (energy_uj path, channel)
        self.channels = [ch for _, ch in zones.values()]

    def read(self) -> dict[str, float]:
        out = {}
        for device, (path, _) in self._zones.items():
            text = read_text(path)
            try:
                out[device] = int(text) / 1e6
            except ValueError:
                raise SourceError(f"{path}: {text!r} is not a count of microjoules") from None
        return out

    def facts(self) -> dict:
        return {"zones": {dev: str(path.parent) for dev, (path, _) in self._zones.items()}}


def open_reader(root: Path = ROOT) -> PowercapReader | Unavailable:
    """A reader of every package and dram zone under `root`, or why there is none."""
    if not root.is_dir():
        return Unavailable(SOURCE, f"no {root} (the kernel has no powercap framework here)")
    zones = {}
    skipped = []
    for zone in sorted(p for p in root.iterdir() if _ZONE.match(p.name)):
        try:
            name = read_text(zone / "name")
            domain = _domain(name)
            if domain is None:
                continue
            # Zone names repeat across sockets (each package has its own "dram"): the zone id tells them apart.
            device = name if domain == "cpu_package" else f"{name}@{zone.name}"
            energy = zone / "energy_uj"
            int(read_text(energy))  # readable now, or the reason why not
            wrap = int(read_text(zone / "max_energy_range_uj")) / 1e6
        except (SourceError, ValueError) as exc:
            hint = " (energy_uj is root-only on this kernel: CVE-2020-8694)" if "Permission denied" in str(exc) else ""
            skipped.append(f"{exc}{hint}")
            continue
        zones[device] = (energy, Channel(SOURCE, domain, device, "counter", wrap))
    if not zones:
        why = "; ".join(skipped) if skipped else f"no intel-rapl package or dram zone under {root}"
        return Unavailable(SOURCE, why)
    return PowercapReader(zones)
