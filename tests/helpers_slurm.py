"""A real two-node Slurm on loopback for the tests (scripts/slurm-local.sh), started once per
session and stopped at the end even when tests fail. Skips, saying why, where it cannot run:
not root, or Slurm/munge neither installed nor installable."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
# profiles/slurm-local/site.yaml names this config (the plugin's job step drops SLURM_CONF).
SLURM_DIR = Path("/tmp/exabench-slurm")
CONF = SLURM_DIR / "slurm.conf"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def daemon_pids() -> list[int]:
    pids = []
    for f in (SLURM_DIR / "run").glob("*.pid"):
        text = f.read_text().strip()
        if text.isdigit() and _alive(int(text)):
            pids.append(int(text))
    return pids


def slurm_env() -> dict[str, str]:
    env = dict(os.environ)
    env["SLURM_CONF"] = str(CONF)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


@pytest.fixture(scope="session")
def slurm_cluster():
    if os.geteuid() != 0:
        pytest.skip("the loopback Slurm needs root (slurmd and munged run as root; apt-get installs them)")
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        pytest.skip("Slurm is not installed and apt-get is not available to install it")
    start = subprocess.run(["bash", str(SCRIPT), "start", str(SLURM_DIR)], capture_output=True, text=True,
                           timeout=300)
    if start.returncode != 0:
        subprocess.run(["bash", str(SCRIPT), "stop", str(SLURM_DIR)], capture_output=True, timeout=120)
        pytest.fail(f"scripts/slurm-local.sh start failed:\n{start.stdout}\n{start.stderr}")
    try:
        yield slurm_env()
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(SLURM_DIR)], capture_output=True, timeout=120)
        left = daemon_pids()
        assert not left, f"Slurm daemons still alive after stop: {left}"
