"""Shared fixtures: the repository, the interpreter, and small configs/sites written to tmp."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# suite_clock: the ten slowest tests and the suite's time against its limit (make test); helpers_slurm:
# the loopback Slurm (slurm_cluster), one for the whole session whichever test files ask for it.
pytest_plugins = ["suite_clock", "helpers_slurm"]
sys.path.insert(0, str(REPO))  # tests import the checkout's package even without the editable install

# Open MPI refuses root without these; harmless otherwise.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")


def has_mpirun() -> bool:
    return shutil.which("mpirun") is not None


requires_mpi = pytest.mark.skipif(not has_mpirun(), reason="mpirun (Open MPI) not installed")


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def write_yaml(tmp_path):
    def _write(name: str, data) -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path
    return _write


@pytest.fixture
def local_site_dict() -> dict:
    return yaml.safe_load((REPO / "profiles" / "local" / "site.yaml").read_text())


@pytest.fixture
def two_core_site(write_yaml, local_site_dict):
    """The local site pinned to 2 cores, so tests do not depend on the machine they run on."""
    from exabench.campaign.site import load_site
    data = dict(local_site_dict)
    data["node"] = {**data["node"], "cores_per_socket": 2}
    return load_site(write_yaml("site.yaml", data))
