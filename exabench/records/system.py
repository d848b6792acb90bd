"""The system description every record carries (provenance.system), read from the machine at run
time, the way MLPerf's system description and ReFrame's topology detection do: CPU, memory, GPUs,
network interfaces, kernel, MPI, framework versions, container. Never guessed: a field no source
reports is null (the key is always there), and `sources` says where each part came from.

Sources, in order: sysfs and procfs (CPU topology, memory, NUMA, NICs), platform/os (kernel,
architecture), nvidia-smi or rocm-smi when on PATH, torch.cuda when the workload already imported
torch, mpi4py's MPI library string when the workload already imported mpi4py.MPI (importing it
here would initialise MPI), else `mpirun --version`, package metadata for framework versions, and
the EXABENCH_CONTAINER_* variables the container exec line sets.

`fingerprint` hashes the hardware identity (CPU model and topology, memory to the GiB, GPU model
and count): campaigns with the same fingerprint ran on the same kind of machine, which is what
history and history-derived references compare against. Software (kernel, driver, MPI,
frameworks) is left out on purpose: an upgrade on the same hardware is what acceptance after a
maintenance window must judge against the history, not start a new one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")
SYS_NODE = Path("/sys/devices/system/node")
SYS_NET = Path("/sys/class/net")
SYS_IB = Path("/sys/class/infiniband")
FRAMEWORKS = ("torch", "torchvision", "tensorflow", "tensorflow-cpu", "keras", "horovod", "mpi4py", "numpy",
              "scikit-learn")
MPI_NAMES = (("Open MPI", "Open MPI"), ("MVAPICH", "MVAPICH"), ("Intel(R) MPI", "Intel MPI"),
             ("Intel MPI", "Intel MPI"), ("CRAY MPICH", "Cray MPICH"), ("MPICH", "MPICH"), ("HYDRA", "MPICH"),
             ("Spectrum MPI", "Spectrum MPI"))
# The keys of each part: always present, null when unknown (record.schema.yaml lists the same).
CPU_KEYS = ("model", "vendor", "architecture", "sockets", "cores_per_socket", "cores", "threads",
            "threads_per_core", "numa_nodes", "max_mhz")
GPU_KEYS = ("count", "model", "driver", "memory_gb", "cuda_driver", "cuda_runtime", "rocm")
OS_KEYS = ("kernel", "distribution")
MPI_KEYS = ("implementation", "version", "library")
CONTAINER_KEYS = ("image", "digest")
TOP_KEYS = ("cpu", "memory_gb", "gpus", "network", "os", "mpi", "frameworks", "container", "sources", "fingerprint")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _run(cmd: list[str], timeout: float = 10) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return (res.stdout + res.stderr).strip() if res.returncode == 0 else None


def _cpuinfo() -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per logical CPU."""
    text = _read(Path("/proc/cpuinfo")) or ""
    out = []
    for block in re.split(r"\n\s*\n", text):
        entry = {}
        for line in block.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                entry[k.strip()] = v.strip()
        if entry:
            out.append(entry)
    return out


def _online_cpus() -> list[int]:
    text = _read(SYS_CPU / "online")
    if not text:
        return []
    cpus = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus += range(int(lo), int(hi or lo) + 1)
    return cpus


def cpu() -> tuple[dict, str]:
    """CPU model and topology: sysfs topology (every architecture), else /proc/cpuinfo ids."""
    info = _cpuinfo()
    first = info[0] if info else {}
    model = first.get("model name") or first.get("Model") or first.get("cpu") or None
    vendor = first.get("vendor_id") or first.get("CPU implementer") or None
    packages, cores, source = set(), set(), "sysfs"
    online = _online_cpus()
    for n in online:
        topo = SYS_CPU / f"cpu{n}" / "topology"
        pkg, core = _read(topo / "physical_package_id"), _read(topo / "core_id")
        if pkg is None or core is None:
            packages, cores = set(), set()
            break
        packages.add(pkg)
        cores.add((pkg, core))
    if not cores and info and all("physical id" in e and "core id" in e for e in info):
        source = "/proc/cpuinfo"
        packages = {e["physical id"] for e in info}
        cores = {(e["physical id"], e["core id"]) for e in info}
    threads = len(online) or len(info) or os.cpu_count()
    mhz = _read(SYS_CPU / "cpu0" / "cpufreq" / "cpuinfo_max_freq")
    nodes = [p for p in SYS_NODE.glob("node[0-9]*")] if SYS_NODE.is_dir() else []
    out = {"model": model, "vendor": vendor, "architecture": platform.machine() or None,
           "sockets": len(packages) or None, "cores_per_socket": (len(cores) // len(packages)) if packages else None,
           "cores": len(cores) or None, "threads": threads,
           "threads_per_core": (threads // len(cores)) if cores and threads else None,
           "numa_nodes": len(nodes) or None, "max_mhz": round(int(mhz) / 1000) if mhz and mhz.isdigit() else None}
    return out, source + " + /proc/cpuinfo"


def memory_gb() -> float | None:
    """Physical memory (MemTotal) in GB (1e9 bytes)."""
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read(Path("/proc/meminfo")) or "", re.M)
    return round(int(m.group(1)) * 1024 / 1e9, 2) if m else None


def _nvidia_smi() -> dict | None:
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader,nounits"])
    if not out:
        return None
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.count(",") >= 2]
    if not rows:
        return None
    header = _run(["nvidia-smi"]) or ""
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
    mem = rows[0][2]
    return {"count": len(rows), "model": rows[0][0], "driver": rows[0][1],
            "memory_gb": round(float(mem) * 2**20 / 1e9, 2) if re.fullmatch(r"[\d.]+", mem) else None,
            "cuda_driver": cuda.group(1) if cuda else None}


def _rocm_smi() -> dict | None:
    out = _run(["rocm-smi", "--showproductname", "--showdriverversion", "--json"])
    if not out:
        return None
    try:
        data = json.loads(out[out.index("{"):])
    except (ValueError, json.JSONDecodeError):
        return None
    cards = {k: v for k, v in data.items() if k.lower().startswith("card")}
    if not cards:
        return None
    first = next(iter(cards.values()))
    model = first.get("Card Series") or first.get("Card series") or first.get("Card model")
    driver = (data.get("system") or {}).get("Driver version") or first.get("Driver version")
    return {"count": len(cards), "model": model, "driver": driver}


def gpus() -> tuple[dict, str | None]:
    out = dict.fromkeys(GPU_KEYS)
    source = None
    found = _nvidia_smi()
    if found:
        source = "nvidia-smi"
    else:
        found = _rocm_smi()
        source = "rocm-smi" if found else None
    out.update(found or {})
    torch = sys.modules.get("torch")  # only if the workload brought it in (importing torch takes seconds)
    if torch is not None:
        try:
            if torch.cuda.is_available():
                out["count"] = out["count"] or torch.cuda.device_count()
                out["model"] = out["model"] or torch.cuda.get_device_name(0)
                source = source or "torch.cuda"
            out["cuda_runtime"] = torch.version.cuda
            out["rocm"] = out["rocm"] or getattr(torch.version, "hip", None)
        except Exception:  # noqa: BLE001 - a broken driver must not lose the record
            pass
    rocm = _read(Path("/opt/rocm/.info/version"))
    if rocm and out["count"]:
        out["rocm"] = out["rocm"] or rocm
    if out["count"] is None:
        out["count"] = 0  # no tool and no framework saw a GPU (the reason is in `sources`)
    return out, source


def network() -> list[dict]:
    """Visible interfaces (loopback aside): kind, link speed, driver; InfiniBand/RoCE ports too."""
    nics = []
    if SYS_NET.is_dir():
        for dev in sorted(SYS_NET.iterdir()):
            if dev.name == "lo":
                continue
            kind = {"1": "ethernet", "32": "infiniband", "772": "loopback"}.get(_read(dev / "type") or "", "other")
            speed = _read(dev / "speed")
            driver = (dev / "device" / "driver")
            nics.append({"name": dev.name, "kind": kind,
                         "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0
                         else None,
                         "driver": driver.resolve().name if driver.exists() else None})
    if SYS_IB.is_dir():
        for dev in sorted(SYS_IB.iterdir()):
            for port in sorted((dev / "ports").glob("*")):
                rate = _read(port / "rate")
                nics.append({"name": f"{dev.name}/{port.name}", "kind": "rdma", "speed_mbps":
                             int(float(rate.split()[0]) * 1000) if rate and rate.split()[0].replace(".", "").isdigit()
                             else None, "driver": _read(dev / "hca_type") or dev.name})
    return nics


def os_release() -> dict:
    text = _read(Path("/etc/os-release")) or ""
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
    return {"kernel": platform.release() or None, "distribution": m.group(1) if m else None}


def parse_mpi(text: str | None) -> dict:
    """Implementation and version from an MPI library string or `mpirun --version` output."""
    out = dict.fromkeys(MPI_KEYS)
    if not text:
        return out
    out["library"] = text.splitlines()[0].strip()[:200]
    upper = text.upper()
    out["implementation"] = next((name for key, name in MPI_NAMES if key.upper() in upper), None)
    m = (re.search(r"(?:Open MPI|MPICH|MVAPICH2?|Intel\(R\) MPI Library|Spectrum MPI)[^\d\n]*v?(\d+(?:\.\d+)+\w*)",
                   text, re.I) or re.search(r"Version:\s*(\d+(?:\.\d+)+\w*)", text))
    out["version"] = m.group(1) if m else None
    return out


def mpi() -> tuple[dict, str | None]:
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None:
        try:
            return parse_mpi(mod.Get_library_version()), "mpi4py"
        except Exception:  # noqa: BLE001
            pass
    text = _run(["mpirun", "--version"]) or _run(["mpiexec", "--version"])
    return parse_mpi(text), ("mpirun --version" if text else None)


def frameworks() -> dict:
    out = {"python": platform.python_version()}
    for name in FRAMEWORKS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def container() -> dict:
    from exabench.containers import provenance_from_env
    c = provenance_from_env() or {}
    return {"image": c.get("image"), "digest": c.get("digest")}


def fingerprint(desc: dict) -> str:
    """A short hash of the hardware identity (see the module docstring)."""
    c, g = desc["cpu"], desc["gpus"]
    ident = {"cpu": [c.get("model"), c.get("sockets"), c.get("cores"), c.get("threads")],
             "memory_gib": round(desc["memory_gb"] * 1e9 / 2**30) if desc.get("memory_gb") else None,
             "gpus": [g.get("model"), g.get("count")]}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def describe() -> dict:
    """The system description, read now (uncached)."""
    cpu_desc, cpu_src = cpu()
    gpu_desc, gpu_src = gpus()
    mpi_desc, mpi_src = mpi()
    desc = {"cpu": cpu_desc, "memory_gb": memory_gb(), "gpus": gpu_desc, "network": network(), "os": os_release(),
            "mpi": mpi_desc, "frameworks": frameworks(), "container": container(),
            "sources": {"cpu": cpu_src, "memory": "/proc/meminfo", "gpus": gpu_src, "mpi": mpi_src,
                        "network": str(SYS_NET)}}
    desc["fingerprint"] = fingerprint(desc)
    return desc


@functools.cache
def _cached() -> str:
    return json.dumps(describe())


def system_description() -> dict:
    """The system description, read once per process (a fresh copy each call)."""
    return json.loads(_cached())


def summary(desc: dict | None) -> str:
    """One line for tables: '2x Intel Xeon ... (2 cores), 8 GB, 4x NVIDIA H100'."""
    if not desc:
        return ""
    c, g = desc.get("cpu") or {}, desc.get("gpus") or {}
    text = f"{c.get('sockets') or '?'}x {c.get('model') or 'unknown CPU'} ({c.get('cores') or '?'} cores)"
    if desc.get("memory_gb"):
        text += f", {desc['memory_gb']:.0f} GB"
    if g.get("count"):
        text += f", {g['count']}x {g.get('model') or 'GPU'}"
    return text
