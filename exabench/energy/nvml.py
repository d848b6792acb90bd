"""NVIDIA GPUs through NVML (the nvidia-ml-py package, imported as `pynvml`; without it, the
driver's libnvidia-ml.so.1 through ctypes: nvml_ctypes).

Method: nvmlDeviceGetTotalEnergyConsumption, the board's energy in millijoules since the driver
loaded (Volta and later), read at the region's edges. Where a GPU lacks that counter, its power
(nvmlDeviceGetPowerUsage, milliwatts) is sampled every SAMPLE_S and integrated (trapezoids): the
record then says `sampling`, with the rate reached and the coverage. On A100/H100 a power value
averages only about a quarter of each update period (arXiv:2312.02741), so sampling can miss short
peaks; the counter does not.

The GPUs read are those this process may use: CUDA_VISIBLE_DEVICES (indices or UUIDs) when set,
else every GPU NVML sees; a rank of a run reads the one it computes on (the visible GPU at its
local rank mod their count, as training.devices picks it; NVML numbers GPUs in PCI bus order, as
CUDA does on a node of one GPU model). Each GPU is named by its UUID, so ranks that share a GPU
count it once."""

from __future__ import annotations

import importlib
import os
import time

from exabench.energy.nvml_ctypes import LIBRARY, Nvml
from exabench.energy.source import Channel, SourceError, Unavailable

SOURCE = "nvml"
SAMPLE_S = 0.1  # 10 Hz: CARAML's rate, and ten times MLPerf Power's minimum of one sample per second


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def visible(handles: list, uuids: list[str], environ=None) -> list[int]:
    """Indices (NVML order) of the GPUs CUDA_VISIBLE_DEVICES names; all of them when it is unset."""
    env = os.environ if environ is None else environ
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return list(range(len(handles)))
    out = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        if item.isdigit():
            if int(item) >= len(handles):
                break  # CUDA stops at the first invalid entry too
            out.append(int(item))
        else:
            match = [i for i, u in enumerate(uuids) if u.startswith(item) or u.startswith(f"GPU-{item}")]
            if not match:
                break
            out.append(match[0])
    return out


class NvmlReader:
    source = SOURCE

    def __init__(self, nvml, handles: dict[str, object], counters: dict[str, bool], names: dict[str, str]):
        self._nvml = nvml
        self._handles = handles  # uuid -> handle
        self._counter = counters  # uuid -> has the energy counter
        self.names = names
        self.channels = [Channel(SOURCE, "gpu", uuid, "counter" if counters[uuid] else "sampling")
                         for uuid in handles]
        self.poll_s = None if all(counters.values()) else SAMPLE_S
        self.sample_s = SAMPLE_S
        self._integral = {u: 0.0 for u in handles}
        self._last: dict[str, tuple[float, float]] = {}  # uuid -> (time, watts) of the last sample
        self.samples = {u: 0 for u in handles if not counters[u]}

    def read(self) -> dict[str, float]:
        out = {}
        for uuid, handle in self._handles.items():
            try:
                if self._counter[uuid]:
                    out[uuid] = self._nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3
                    continue
                watts, now = self._nvml.nvmlDeviceGetPowerUsage(handle) / 1e3, time.monotonic()
            except self._nvml.NVMLError as exc:
                raise SourceError(f"NVML on GPU {uuid}: {exc}") from None
            if uuid in self._last:
                t0, w0 = self._last[uuid]
                self._integral[uuid] += (now - t0) * (w0 + watts) / 2
            self._last[uuid] = (now, watts)
            self.samples[uuid] += 1
            out[uuid] = self._integral[uuid]
        return out

    def facts(self) -> dict:
        return {"gpus": self.names}

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def _library(library: str):
    """pynvml where nvidia-ml-py is installed, else the driver's library through ctypes, else why not."""
    try:  # optional and the machine's own: by name, so no wheel list counts it as required
        return importlib.import_module("pynvml")
    except ImportError:
        pass
    try:
        return Nvml(library)
    except OSError:
        return None


def open_reader(environ=None, library: str = LIBRARY, local_rank: int | None = None) -> NvmlReader | Unavailable:
    """The GPUs this process may use; with `local_rank`, the one GPU a rank computes on, as
    training.devices picks it (the visible GPU at local rank mod their count)."""
    nvml = _library(library)
    if nvml is None:
        return Unavailable(SOURCE, f"nvidia-ml-py (pynvml) is not installed and there is no {library} "
                                   "(no NVIDIA driver here)")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Unavailable(SOURCE, f"NVML did not start ({exc}): no NVIDIA driver or GPU here")
    try:
        all_handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in all_handles]
        chosen = visible(all_handles, uuids, environ)
        if chosen and local_rank is not None:
            chosen = [chosen[local_rank % len(chosen)]]
        if not chosen:
            nvml.nvmlShutdown()
            return Unavailable(SOURCE, "NVML sees no GPU this process may use")
        handles, counters, names = {}, {}, {}
        for i in chosen:
            uuid, h = uuids[i], all_handles[i]
            handles[uuid], names[uuid] = h, _text(nvml.nvmlDeviceGetName(h))
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(h)
                counters[uuid] = True
            except nvml.NVMLError:  # NotSupported before Volta, or withheld by the driver
                nvml.nvmlDeviceGetPowerUsage(h)
                counters[uuid] = False
    except nvml.NVMLError as exc:
        nvml.nvmlShutdown()
        return Unavailable(SOURCE, f"NVML could not read the GPUs: {exc}")
    return NvmlReader(nvml, handles, counters, names)
