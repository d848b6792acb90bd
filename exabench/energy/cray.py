"""HPE Cray node counters: /sys/cray/pm_counters (XC and EX compute nodes).

Each energy file holds one line "<joules> J <timestamp> us": `energy` (the node, accelerators
included), `cpu_energy`, `memory_energy`, and `accel<N>_energy` per accelerator (EX) or
`accel_energy` (XC). `freshness` is a free-running count that steps at about 10 Hz as the node
controller refreshes the files; `raw_scan_hz` is that rate; `startup` changes when the controller
restarts (its counters start over); `generation` steps when a power cap changes. A reading is taken
between two equal `freshness` values, so all files come from one refresh."""

from __future__ import annotations

import re
from pathlib import Path

from exabench.energy.source import Channel, FileReader, SourceError, Unavailable, read_text

ROOT = Path("/sys/cray/pm_counters")
SOURCE = "cray_pm"
_ENERGY_FILE = re.compile(r"^(energy|cpu_energy|memory_energy|accel\d*_energy)$")
_LINE = re.compile(r"^(\d+)\s+J(\s+\d+\s+us)?$")
RETRIES = 5


def _domain(name: str) -> str:
    return {"energy": "node", "cpu_energy": "cpu_package", "memory_energy": "dram"}.get(name, "gpu")


def parse_joules(path: Path, text: str) -> int:
    m = _LINE.match(text)
    if not m:
        raise SourceError(f"{path}: {text!r} is not '<joules> J <timestamp> us'")
    return int(m.group(1))


class CrayPmReader(FileReader):
    source = SOURCE
    poll_s = None  # 64-bit joule counters: they do not wrap

    def __init__(self, root: Path, names: list[str]):
        self.root = root
        self._names = names
        self.channels = [Channel(SOURCE, _domain(n), n.removesuffix("_energy") if n != "energy" else "node")
                         for n in names]
        self._startup = self._counter("startup")
        self.generations: set[str | None] = {self._counter("generation")}

    def _counter(self, name: str) -> str | None:
        path = self.root / name
        return read_text(path) if path.exists() else None

    def read(self) -> dict[str, float]:
        for _ in range(RETRIES):
            before = self._counter("freshness")
            values = {ch.device: float(parse_joules(self.root / n, read_text(self.root / n)))
                      for ch, n in zip(self.channels, self._names)}
            if before is None or self._counter("freshness") == before:
                break
        else:
            raise SourceError(f"{self.root}/freshness changed during each of {RETRIES} readings")
        if self._startup is not None and self._counter("startup") != self._startup:
            raise SourceError(f"{self.root}/startup changed: the node controller restarted and its counters "
                              "started over during the run")
        self.generations.add(self._counter("generation"))
        return values

    def facts(self) -> dict:
        hz = self._counter("raw_scan_hz")
        out = {"raw_scan_hz": int(hz) if hz and hz.isdigit() else None, "version": self._counter("version")}
        if len(self.generations) > 1:
            out["power_cap_changed"] = True  # `generation` stepped during the run
        return out


def open_reader(root: Path = ROOT) -> CrayPmReader | Unavailable:
    if not root.is_dir():
        return Unavailable(SOURCE, f"no {root} (not an HPE Cray compute node)")
    names = sorted(p.name for p in root.iterdir() if _ENERGY_FILE.match(p.name))
    if not names:
        return Unavailable(SOURCE, f"{root} has no energy files")
    # On EX nodes accel_energy may sit beside accel0_energy... as their sum: read the per-device ones only.
    if any(re.fullmatch(r"accel\d+_energy", n) for n in names):
        names = [n for n in names if n != "accel_energy"]
    try:
        reader = CrayPmReader(root, names)
        reader.read()
    except SourceError as exc:
        return Unavailable(SOURCE, str(exc))
    return reader
