"""The few NVML calls the energy reader makes, straight from the driver's libnvidia-ml.so.1, for
machines whose Python lacks nvidia-ml-py (a GPU machine whose torch came without it). Same names
and units as pynvml; every call raises NVMLError on a non-zero nvmlReturn_t."""

from __future__ import annotations

import ctypes

LIBRARY = "libnvidia-ml.so.1"  # the driver's own library, present wherever the driver is
_BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_BUFFER_SIZE


class NVMLError(Exception):
    def __init__(self, code: int, text: str):
        super().__init__(f"{text} (nvmlReturn_t {code})")
        self.code = code


class Nvml:
    """nvmlInit ... nvmlShutdown over ctypes; `load` raises OSError where the library is absent."""

    NVMLError = NVMLError

    def __init__(self, library: str = LIBRARY):
        self._lib = ctypes.CDLL(library)
        self._lib.nvmlErrorString.restype = ctypes.c_char_p

    def _call(self, name: str, *args) -> None:
        code = getattr(self._lib, name)(*args)
        if code != 0:
            raise NVMLError(code, self._lib.nvmlErrorString(code).decode())

    def nvmlInit(self) -> None:
        self._call("nvmlInit_v2")

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        n = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(n))
        return n.value

    def nvmlDeviceGetHandleByIndex(self, index: int) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        return handle

    def _text(self, name: str, handle) -> str:
        buf = ctypes.create_string_buffer(_BUFFER)
        self._call(name, handle, buf, ctypes.c_uint(_BUFFER))
        return buf.value.decode()

    def nvmlDeviceGetUUID(self, handle) -> str:
        return self._text("nvmlDeviceGetUUID", handle)

    def nvmlDeviceGetName(self, handle) -> str:
        return self._text("nvmlDeviceGetName", handle)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle) -> int:
        mj = ctypes.c_ulonglong()
        self._call("nvmlDeviceGetTotalEnergyConsumption", handle, ctypes.byref(mj))
        return mj.value

    def nvmlDeviceGetPowerUsage(self, handle) -> int:
        mw = ctypes.c_uint()
        self._call("nvmlDeviceGetPowerUsage", handle, ctypes.byref(mw))
        return mw.value
