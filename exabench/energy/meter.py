"""The readers of one rank, and the regions they meter: the whole run and its timed region.

A region reads every counter at its start and end; the joules between are the counter's steps,
a wrap-around taken back where the counter has a range. A reader that wraps (powercap) or samples
(NVML power) is also read by a background thread, often enough that no wrap is missed and the
samples keep their rate. The timed region is what a benchmark times: it enters `timed_region()`
around its timed loop (a no-op when no meter is active); entered many times, its seconds and
joules add up, and a region inside another one is not counted twice."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field

import exabench.energy.amd as amd  # the modules, not the package: its __init__ re-exports this one
import exabench.energy.cray as cray
import exabench.energy.nvml as nvml
import exabench.energy.powercap as powercap
from exabench.energy.source import SourceError, Unavailable, implausible

REGIONS = ("run", "timed")


@dataclass
class _Tally:
    """One region's accumulated seconds, joules per channel and samples per sampled channel."""

    seconds: float = 0.0
    entries: int = 0
    joules: dict = field(default_factory=dict)
    samples: dict = field(default_factory=dict)
    _open: tuple | None = None
    depth: int = 0


class Meter:
    """The readers this rank opened and the regions they measured (see `report`)."""

    def __init__(self, readers: list, unavailable: list[Unavailable], clock=time.monotonic):
        self.readers = readers
        self.unavailable = list(unavailable)
        self.failed: dict[str, str] = {}  # source -> why it stopped answering mid-run
        self._clock = clock
        self._lock = threading.Lock()
        self._raw: dict[tuple, float] = {}
        self._total: dict[tuple, float] = {}
        self._tallies = {name: _Tally() for name in REGIONS}
        self._read_at = clock()  # when the counters were last read: a step is judged over the time since
        self._stop = threading.Event()
        self._thread = None
        self._snapshot()  # the first reading: every later step is counted from it
        polls = [r.poll_s for r in self.readers if getattr(r, "poll_s", None)]
        if polls:
            self._thread = threading.Thread(target=self._poll, args=(min(polls),), daemon=True,
                                            name="exabench-energy")
            self._thread.start()

    # -- counting ----------------------------------------------------------------------------
    def _snapshot(self) -> tuple[float, dict, dict]:
        """Read every live reader: (time, joules so far per channel, samples so far per channel)."""
        with self._lock:
            now = self._clock()
            for reader in self.readers:
                if reader.source in self.failed:
                    continue
                try:
                    values = reader.read()
                except Exception as exc:  # noqa: BLE001 - a meter never fails a run: the figure becomes null
                    self.failed[reader.source] = str(exc) if isinstance(exc, SourceError) else \
                        f"{type(exc).__name__}: {exc}"
                    continue
                for ch in reader.channels:
                    key = ch.key()
                    raw = values[ch.device]
                    if key in self._raw:
                        why = self._bad_step(ch, self._raw[key], raw, now - self._read_at)
                        if why:
                            self.failed[reader.source] = why
                            break
                        step = raw - self._raw[key]
                        self._total[key] = self._total.get(key, 0.0) + (step if step >= 0 else step + ch.wrap_j)
                    else:
                        self._total[key] = 0.0
                    self._raw[key] = raw
            self._read_at = now
            samples = {}
            for reader in self.readers:
                for device, n in getattr(reader, "samples", {}).items():
                    samples[(reader.source, device)] = n
            return self._clock(), dict(self._total), samples

    @staticmethod
    def _bad_step(ch, before: float, after: float, seconds: float) -> str | None:
        """Why a counter's step from `before` to `after` over `seconds` is not energy (None: it is).
        A counter that went back wrapped past its range (powercap) only where the wrapped step is
        energy the part could draw in that time; else it was reset or misread."""
        step = after - before
        counter = f"{ch.source} counter of {ch.device}"
        if step < 0:
            wrapped = None if ch.wrap_j is None else step + ch.wrap_j
            if wrapped is None or implausible(ch.domain, wrapped, seconds):
                wrap = "" if wrapped is None else f"; not a wrap: {implausible(ch.domain, wrapped, seconds)}"
                return f"{counter} went back from {before:.6g} J to {after:.6g} J (reset){wrap}"
            return None
        why = implausible(ch.domain, step, seconds)
        return f"{counter} stepped from {before:.6g} J to {after:.6g} J: {why}" if why else None

    def _poll(self, period: float) -> None:
        while not self._stop.wait(period):
            self._snapshot()

    # -- regions -----------------------------------------------------------------------------
    def begin(self, region: str) -> None:
        tally = self._tallies[region]
        tally.depth += 1
        if tally.depth == 1:
            tally._open = self._snapshot()

    def end(self, region: str) -> None:
        tally = self._tallies[region]
        tally.depth -= 1
        if tally.depth:
            return
        t1, joules1, samples1 = self._snapshot()
        t0, joules0, samples0 = tally._open
        tally.seconds += t1 - t0
        tally.entries += 1
        for key, j in joules1.items():
            tally.joules[key] = tally.joules.get(key, 0.0) + j - joules0.get(key, 0.0)
        for key, n in samples1.items():
            tally.samples[key] = tally.samples.get(key, 0) + n - samples0.get(key, 0)

    @contextlib.contextmanager
    def region(self, region: str):
        self.begin(region)
        try:
            yield self
        finally:
            self.end(region)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for reader in self.readers:
            try:
                reader.close()
            except Exception:  # noqa: BLE001 - closing a vendor library must not fail a finished run
                pass

    # -- what this rank measured ---------------------------------------------------------------
    def report(self, rank: int = 0, host: str | None = None) -> dict:
        """This rank's readings as plain data: every channel with its joules per region (null with
        the reason where its source failed), and every source it could not read, with why."""
        channels = []
        for reader in self.readers:
            failed = self.failed.get(reader.source)
            try:
                facts = reader.facts()
            except Exception as exc:  # noqa: BLE001 - facts are extras: a vanished file costs only them
                facts = {"error": str(exc)}
            for ch in reader.channels:
                key = ch.key()
                entry = {"source": ch.source, "domain": ch.domain, "device": ch.device, "method": ch.method,
                         "facts": facts}
                if ch.method == "sampling":
                    entry["sample_s"] = reader.sample_s
                for name, tally in self._tallies.items():
                    entry[name] = {"seconds": tally.seconds, "entries": tally.entries,
                                   "joules": None if failed or not tally.entries else tally.joules.get(key, 0.0)}
                    if ch.method == "sampling":
                        entry[name]["samples"] = tally.samples.get(key, 0)
                if failed:
                    entry["error"] = failed
                channels.append(entry)
        return {"rank": rank, "host": host or socket.gethostname(), "channels": channels,
                "unavailable": {u.source: u.reason for u in self.unavailable}}


# One reader per device per node: each rank reads the NVIDIA GPU it computes on (named by UUID, so a
# GPU two ranks share counts once); node-wide counters by the node's first rank only.
def open_meter(local_rank: int = 0, powercap_root=powercap.ROOT, cray_root=cray.ROOT, environ=None,
               every_gpu: bool = False) -> Meter:
    """A meter with every source this rank should read; the others are listed with the reason.
    `every_gpu`: every visible NVIDIA GPU rather than the rank's own (a machine-wide reading)."""
    opened = [_opened(nvml.SOURCE, nvml.open_reader, environ, local_rank=None if every_gpu else local_rank),
              _opened(amd.SOURCE, amd.open_reader)]
    if local_rank == 0:
        opened += [_opened(powercap.SOURCE, powercap.open_reader, powercap_root),
                   _opened(cray.SOURCE, cray.open_reader, cray_root)]
    else:
        opened += [Unavailable(s, f"read by the node's local rank 0, not rank-local {local_rank}")
                   for s in (powercap.SOURCE, cray.SOURCE)]
    return Meter([r for r in opened if not isinstance(r, Unavailable)],
                 [r for r in opened if isinstance(r, Unavailable)])


def _opened(source: str, open_reader, *args, **kwargs):
    """A reader, or why not: whatever a vendor library raises while opening becomes a reason."""
    try:
        return open_reader(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - a meter never fails a run
        return Unavailable(source, f"opening it failed: {type(exc).__name__}: {exc}")


_ACTIVE: Meter | None = None


def activate(meter: Meter) -> None:
    """Make `meter` the one `timed_region()` reports to (the runner does this around a run)."""
    global _ACTIVE
    _ACTIVE = meter


def deactivate() -> None:
    global _ACTIVE
    _ACTIVE = None


def timed_region():
    """Around a benchmark's timed loop: the active meter's timed region, or nothing."""
    return _ACTIVE.region("timed") if _ACTIVE is not None else contextlib.nullcontext()
