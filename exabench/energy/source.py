"""What every reader shares: the channels it reads (one counter of one device) and why it cannot read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# What a channel's joules cover. A node counter includes the others: summing it with them counts twice.
DOMAINS = {
    "node": "the whole node (board: CPUs, memory, accelerators, NICs, fans as the vendor wires them)",
    "gpu": "one GPU board or package (its memory included)",
    "cpu_package": "one CPU package (cores, caches, uncore; not DRAM)",
    "dram": "the DRAM attached to a CPU package or node",
}
METHODS = ("counter", "sampling")
# The most power one device of a domain can draw: a joule figure above it over a region is garbage
# (a counter misread, a reset taken for a wrap), refused with the reason, never recorded as measured.
# No site describes its nodes' power, so these are generous physical bounds, above the largest
# parts shipped: node 20 kW (an 8-GPU DGX B200 is rated 14.3 kW), GPU 1.5 kW (B200 1 kW, MI355X
# 1.4 kW), CPU package and its DRAM 1 kW each (the largest server CPUs are rated about 500 W).
MAX_WATTS = {"node": 20_000.0, "gpu": 1_500.0, "cpu_package": 1_000.0, "dram": 1_000.0}
# Counters step at their update period (Cray pm_counters 10 Hz, NVML about 100 ms): a step read just
# after an update may hold that period's energy on top of the seconds since the last reading.
UPDATE_SLACK_S = 1.0


@dataclass(frozen=True)
class Channel:
    """One energy figure of one device: its source, what it covers, how it is read and where its raw
    value wraps to zero (None: it does not wrap within any run)."""

    source: str
    domain: str
    device: str
    method: str = "counter"
    wrap_j: float | None = None

    def key(self) -> tuple[str, str]:
        return (self.source, self.device)


@dataclass(frozen=True)
class Unavailable:
    """A source this rank cannot read, and why (reported in the record, never raised)."""

    source: str
    reason: str


class SourceError(OSError):
    """A source that stopped answering during a run: its figures become null with this reason."""


class FileReader:
    """A reader of counters in plain files (sysfs): it opens each file only while reading it, so
    there is nothing to close."""

    def close(self) -> None:
        pass


def read_text(path: Path) -> str:
    """A sysfs file's text; SourceError naming the file and the reason when it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise SourceError(f"{path}: {exc.strerror or exc}") from None


def implausible(domain: str, joules: float, seconds: float, devices: int = 1) -> str | None:
    """Why `joules` over `seconds` on `devices` devices of `domain` cannot have been drawn (None: it
    can): more than MAX_WATTS per device over the seconds plus one counter update period."""
    watts = MAX_WATTS[domain] * devices
    if joules <= watts * (seconds + UPDATE_SLACK_S):
        return None
    return (f"implausible: {joules:.4g} J in {seconds:.3g} s is {joules / max(seconds, 1e-9):.3g} W, beyond the "
            f"{watts:,.0f} W that {devices} {domain} device(s) can draw (exabench.energy.source.MAX_WATTS, a "
            "generous physical bound): not recorded as measured")
