"""AMD GPUs through amdsmi (ROCm 6 and later; the `amdsmi` Python package that ships with ROCm).

Method: amdsmi_get_energy_count, the GPU's accumulated energy as a count times its resolution in
microjoules (64 bits: it does not wrap within a run), read at the region's edges. Devices are named
by their UUID, so ranks that share one count it once. rocm-smi's command line is not read."""

from __future__ import annotations

import importlib

from exabench.energy.source import Channel, SourceError, Unavailable

SOURCE = "amdsmi"


def energy_joules(reading: dict) -> float:
    """Joules from amdsmi_get_energy_count's answer (the count was `power` before ROCm 6.1)."""
    count = reading.get("energy_accumulator", reading.get("power"))
    return float(count) * float(reading["counter_resolution"]) / 1e6


class AmdReader:
    source = SOURCE
    poll_s = None

    def __init__(self, smi, handles: dict[str, object]):
        self._smi = smi
        self._handles = handles
        self.channels = [Channel(SOURCE, "gpu", uuid) for uuid in handles]

    def read(self) -> dict[str, float]:
        try:
            return {u: energy_joules(self._smi.amdsmi_get_energy_count(h)) for u, h in self._handles.items()}
        except self._smi.AmdSmiException as exc:
            raise SourceError(f"amdsmi: {exc}") from None

    def facts(self) -> dict:
        return {}

    def close(self) -> None:
        try:
            self._smi.amdsmi_shut_down()
        except self._smi.AmdSmiException:
            pass


def open_reader() -> AmdReader | Unavailable:
    try:  # optional and the machine's own (it must match its ROCm): by name, so no wheel list counts it
        smi = importlib.import_module("amdsmi")
    except ImportError:
        return Unavailable(SOURCE, "amdsmi (ROCm's Python package) is not installed")
    try:
        smi.amdsmi_init()
        handles = {}
        for h in smi.amdsmi_get_processor_handles():
            handles.setdefault(str(smi.amdsmi_get_gpu_device_uuid(h)), h)
        if not handles:
            smi.amdsmi_shut_down()
            return Unavailable(SOURCE, "amdsmi sees no GPU")
        reader = AmdReader(smi, handles)
        reader.read()
    except (smi.AmdSmiException, SourceError, KeyError, TypeError) as exc:
        return Unavailable(SOURCE, f"amdsmi could not read the GPU energy counters: {exc}")
    return reader
