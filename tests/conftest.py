"""Shared fixtures: the repository, the interpreter, and small configs/sites written to tmp."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from alone import ALONE

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


# How the integration tests share the machine when `make test` runs them two at a time (pytest-xdist,
# --dist loadgroup). A module runs whole on one worker (its module-scoped fixtures are built once).
# Modules that run Snakemake or exabench inside the checkout itself (its .snakemake/ and results/) run
# on one worker, one after another. The modules in tests/alone.py run in a second pass, alone.
IN_THE_CHECKOUT = re.compile(r"cwd=(?:str\()?(?:REPO|ROOT)\b")


def _runs_in_the_checkout(path: Path, seen: dict[Path, bool] = {}) -> bool:  # noqa: B006 (a cache)
    if path not in seen:
        seen[path] = bool(IN_THE_CHECKOUT.search(path.read_text()))
    return seen[path]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        path = Path(str(item.path))
        if path.name in ALONE:
            item.add_marker(pytest.mark.alone)
        group = "the-checkout" if _runs_in_the_checkout(path) else path.name
        item.add_marker(pytest.mark.xdist_group(group))
