"""What a GPU machine needs beyond its own Python and torch to run the GPU check, pinned to the
versions of requirements.lock. scripts/gpu_wheels.sh downloads them (and what they depend on) as
wheels on a machine with network; scripts/gpu_check.sh installs, with `pip --no-index --no-deps
--target`, only the wheels of what the machine's Python lacks (a venv over that Python would not
do: where the machine's python3 is itself a venv, as on GPU images with torch in /opt, a new venv
sees the base interpreter's packages, not torch's venv).

    python -m exabench.gpucheck.wheels [requirements.lock]        # the pinned requirement lines
    python -m exabench.gpucheck.wheels --missing WHEEL_DIR        # wheels this Python lacks
"""

from __future__ import annotations

import re
import sys
import zipfile
from importlib import metadata
from pathlib import Path

# Distributions the planner, the runner and the checked benchmarks import (tests/integration/test_gpucheck.py
# checks this list against what they really import). torch itself is the machine's own. fastjsonschema:
# the record check's fast path (exabench/records/record.py; jsonschema alone where it is missing).
RUNTIME = ("PyYAML", "jsonschema", "fastjsonschema", "Jinja2", "numpy", "h5py", "mlperf-logging", "google-crc32c")

# Modules on the check's code path that only other backends use: the check runs torch with NCCL
# under torchrun, so Horovod, MPI and TensorFlow stay out, and so does the recipe linter (spython).
# torchvision (ResNet-50) must be the machine's own: it is built for one torch version.
NOT_USED = ("horovod", "mpi4py", "tensorflow", "spython")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_lines(lock: str | Path) -> list[str]:
    """The `name==version` lines of requirements.lock for RUNTIME; raises if one is missing."""
    pins = {}
    for line in Path(lock).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line.strip())
        if m:
            pins[normalise(m.group(1))] = f"{m.group(1)}=={m.group(2)}"
    missing = [name for name in RUNTIME if normalise(name) not in pins]
    if missing:
        raise SystemExit(f"{lock}: no pinned version of {', '.join(missing)}")
    return [pins[normalise(name)] for name in RUNTIME]


def _requirement(line: str):
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip always carries it
        from pip._vendor.packaging.requirements import Requirement
    return Requirement(line)


def _wheel_name(path: Path) -> str:
    return normalise(path.name.split("-")[0])


def _needs(wheel: Path) -> list[str]:
    """The distributions a wheel needs on this Python (its Requires-Dist whose marker holds, extras
    left out)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    out = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = _requirement(line.split(":", 1)[1].strip())
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            out.append(normalise(req.name))
    return out


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def missing_wheels(wheel_dir: str | Path) -> list[Path]:
    """The wheels in `wheel_dir` (requirements.txt beside them) of what this Python lacks: each
    RUNTIME distribution it cannot find, and what those need that it cannot find either."""
    wheel_dir = Path(wheel_dir)
    wheels = {_wheel_name(w): w for w in sorted(wheel_dir.glob("*.whl"))}
    wanted = [normalise(_requirement(line).name) for line in (wheel_dir / "requirements.txt").read_text().split()]
    chosen: dict[str, Path] = {}
    while wanted:
        name = wanted.pop()
        if name in chosen or _installed(name):
            continue
        if name not in wheels:
            raise SystemExit(f"{wheel_dir}: this Python lacks {name} and there is no wheel of it: run "
                             "scripts/gpu_wheels.sh with this machine's Python version and architecture")
        chosen[name] = wheels[name]
        wanted.extend(_needs(wheels[name]))
    return sorted(chosen.values())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--missing"]:
        print("\n".join(str(w) for w in missing_wheels(sys.argv[2])))
    else:
        print("\n".join(requirement_lines(sys.argv[1] if len(sys.argv) > 1 else "requirements.lock")))
