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
