"""What the machine has: its GPUs as torch sees them, and what nvidia-smi says of the driver and
of the links between GPUs. Nothing here needs the network or root."""

from __future__ import annotations

import re
import shutil
import subprocess


def _smi(*args: str) -> str:
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def links() -> dict:
    """GPU 0's active NVLink links (GB/s each) and its PCIe generation and width."""
    nvlink = _smi("nvlink", "-s", "-i", "0")
    out: dict = {"nvlink_GBps": [float(x) for x in re.findall(r"Link \d+: ([\d.]+) GB/s", nvlink)]}
    pcie = _smi("--query-gpu=pcie.link.gen.current,pcie.link.width.current", "--format=csv,noheader,nounits", "-i", "0")
    parts = [p.strip() for p in pcie.split(",")]
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        out["pcie_gen"], out["pcie_width"] = int(parts[0]), int(parts[1])
    return out


def probe() -> dict:
    """The machine's GPUs and software, or {"gpus": 0, "why": ...} where torch sees no CUDA device."""
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": 0}
    if not torch.cuda.is_available():
        why = "torch was built without CUDA" if torch.version.cuda is None else "torch sees no CUDA device"
        return {**info, "why": why}
    props = torch.cuda.get_device_properties(0)
    driver = _smi("--query-gpu=driver_version", "--format=csv,noheader", "-i", "0").strip()
    return {**info, "gpus": torch.cuda.device_count(), "name": torch.cuda.get_device_name(0),
            "capability": f"{props.major}.{props.minor}", "memory_GiB": round(props.total_memory / 2**30, 1),
            "driver": driver or "unknown", "cudnn": torch.backends.cudnn.version(),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "links": links()}


def assumed(name: str, gpus: int) -> dict:
    """A machine described on the command line (for --dry-run and --cpu-rehearsal where no GPU is)."""
    import torch

    return {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus, "name": name,
            "capability": "assumed", "memory_GiB": None, "driver": "none (assumed GPU)", "cudnn": None,
            "nccl": None, "links": {}, "assumed": True}
