"""Many ranks from one SIF with Charliecloud: the exec line exabench renders for `runtime:
charliecloud` starts 4 ranks at once from one SIF, with no race on ch-run's mount point.

ch-run, without --mount, makes /var/tmp/$USER.ch/mnt itself (check, then mkdir): ranks
starting together on a fresh node race and all but one die with "can't mkdir:
/var/tmp/<user>.ch: File exists". The rendered line names a mount point made at render time;
each results root here is new, as a fresh node's would be. The image is a small SIF of the
host's /bin/sh, assembled as the real build assembles one (mksquashfs + siftool), so the test
takes seconds; tests/integration/test_containers.py runs a benchmark in a real debootstrapped image."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers_containers import missing_tools_or_userns, shell_rootfs

from exabench import containers
from exabench.campaign.site import load_site
from exabench.containers.sif import assemble_sif, rootfs_arch

REPO = Path(__file__).resolve().parents[2]
RANKS = 4
TOOLS = {"ch-run": "charliecloud-runtime", "mksquashfs": "squashfs-tools", "siftool": "siftool",
         "mpirun": "openmpi-bin", "unshare": "util-linux", "ldd": "libc-bin"}


@pytest.fixture(scope="module")
def shell_sif(tmp_path_factory) -> Path:
    reason = missing_tools_or_userns(TOOLS)
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("shell-sif")
    root = shell_rootfs(work / "rootfs")
    sif = work / "images" / "shell.sif"
    assemble_sif(root, sif, "Bootstrap: scratch\n", {"data": {"attributes": {}}, "type": "container"},
                 rootfs_arch(root))
    return sif


def _charliecloud_site(tmp_path: Path, sif: Path):
    raw = yaml.safe_load((REPO / "profiles/local/site.yaml").read_text())
    raw["container"] = {"runtime": "charliecloud", "image": str(sif), "stack": "cpu"}
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(raw))
    return load_site(tmp_path / "site.yaml")


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_four_ranks_start_at_once_from_one_sif(tmp_path, shell_sif):
    os.environ.setdefault("USER", "root")  # ch-run refuses to start without $USER
    site = _charliecloud_site(tmp_path, shell_sif)
    results = tmp_path / "results"  # a new results root: its mount point does not exist yet
    spec = results / "runs" / "probe" / "spec.json"
    argv = containers.wrap_program(site, spec, None, {"EXABENCH_RUN_ID": "probe"}, results)
    # The line ch-run gets: the SIF's partition, and a mount point that exists before any rank starts.
    mounts = [a.split("=", 1)[1] for a in argv if a.startswith("--mount=")]
    assert mounts == [str(results.resolve() / "ch-mount")] and Path(mounts[0]).is_dir()
    assert f"{shell_sif}.squashfs" in argv
    # What each rank runs inside the image: it writes its rank number into the bound results folder.
    inside = argv[:argv.index("--") + 1] + [
        "/bin/sh", "-c", 'echo "$EXABENCH_CONTAINER_RUNTIME" > "$0/rank-$OMPI_COMM_WORLD_RANK"', str(results)]
    launch = ["mpirun", "--oversubscribe", "-np", str(RANKS)] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    proc = subprocess.run(launch + inside, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "can't mkdir" not in proc.stderr
    assert sorted(p.name for p in results.glob("rank-*")) == [f"rank-{i}" for i in range(RANKS)]
    assert {p.read_text().strip() for p in results.glob("rank-*")} == {"charliecloud"}


def test_mount_point_only_for_a_squashfs_image_under_charliecloud(tmp_path):
    sif = tmp_path / "images" / "x.sif"
    site = _charliecloud_site(tmp_path, sif)
    # Not built here (a script rendered for another machine): named, not made.
    assert containers.charliecloud_mount_point(site, f"{sif}.squashfs", tmp_path / "r") == \
        (tmp_path / "r").resolve() / "ch-mount"
    assert not (tmp_path / "r").exists()
    (tmp_path / "cpu.d").mkdir()
    assert containers.charliecloud_mount_point(site, str(tmp_path / "cpu.d"), tmp_path / "r") is None
    assert containers.charliecloud_mount_point(site, "docker://x/y:1", tmp_path / "r") is None
    argv = containers.exec_prefix(site, str(tmp_path / "cpu.d"), [], {})
    assert not any(a.startswith("--mount") for a in argv)
    apptainer = dataclasses.replace(site, container=dict(site.container, runtime="apptainer"))
    assert containers.charliecloud_mount_point(apptainer, f"{sif}.squashfs", tmp_path / "r") is None
