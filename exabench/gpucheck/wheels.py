"""What a GPU machine needs beyond its own Python and torch to run the GPU check, pinned to the
versions of requirements.lock. scripts/gpu_wheels.sh downloads them (and what they depend on) as
wheels on a machine with network; scripts/gpu_check.sh installs them with `pip --no-index`.

    python -m exabench.gpucheck.wheels [requirements.lock]   # prints the pinned requirement lines
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# Distributions the planner, the runner and the checked benchmarks import (tests/test_gpucheck.py
# checks this list against what they really import). torch itself is the machine's own.
RUNTIME = ("PyYAML", "jsonschema", "Jinja2", "numpy", "h5py", "mlperf-logging", "google-crc32c")

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


if __name__ == "__main__":
    print("\n".join(requirement_lines(sys.argv[1] if len(sys.argv) > 1 else "requirements.lock")))
