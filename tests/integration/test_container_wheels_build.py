"""A build with local wheel sources (container.wheels), for real: the %post pip install runs in the
chroot as build_directory_image runs it, reads the folder bound read-only at its own path, and the
image keeps no trace of the bind. The root file system is the host's /bin/sh (seconds, no
debootstrap); its `pip` is a shell script that writes down what it was given and what it saw."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers_containers import shell_rootfs

from exabench.containers.build import build_directory_image
from exabench.containers.recipes import parse_recipe
from exabench.containers.wheels import WheelSources

RECIPE = """Bootstrap: docker
From: debian:bookworm-20250520-slim

%labels
    org.exabench.stack tiny

%post
    # exabench-layer: core
    /opt/venv/bin/pip install --no-cache-dir --extra-index-url https://unreachable.invalid/whl demo==1.0
"""
# $1 install, $2 --no-index, $3 --find-links, $4 the folder: list it, and try to write to it.
PIP = """#!/bin/sh
echo "$@" > /pip-args
for f in "$4"/*; do echo "$f" >> /pip-saw; done
(: > "$4/written") 2>> /pip-saw && echo writable >> /pip-saw || echo read-only >> /pip-saw
"""


def _copy_with_libs(binary: str, root: Path) -> None:
    path = Path(os.path.realpath(shutil.which(binary)))
    dest = root / Path(shutil.which(binary)).relative_to("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, dest)
    ldd = subprocess.run(["ldd", str(path)], capture_output=True, text=True, timeout=30).stdout
    for lib in {w for line in ldd.splitlines() for w in line.split() if w.startswith("/")}:
        (root / lib.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), root / lib.lstrip("/"))


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_pip_in_the_build_reads_the_bound_wheel_folder_only(tmp_path):
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("unshare", "chroot", "env", "ldd")):
        pytest.skip("needs root, unshare and chroot (the build's %post runs as root in a chroot)")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "demo-1.0-py3-none-any.whl").write_bytes(b"")
    root = shell_rootfs(tmp_path / "rootfs")
    _copy_with_libs("env", root)
    (root / "etc" / "debian_version").write_text("12.0\n")  # the base is there: no debootstrap
    pip = root / "opt/venv/bin/pip"
    pip.parent.mkdir(parents=True)
    pip.write_text(PIP)
    pip.chmod(0o755)
    (tmp_path / "tiny.def").write_text(RECIPE)
    before = {p.relative_to(root) for p in root.rglob("*")}

    build_directory_image(parse_recipe(tmp_path / "tiny.def"), root, digest=False,
                          wheels=WheelSources((str(wheels),), (), True), timeout_s=60)
    assert (root / "pip-args").read_text() == \
        f"install --no-index --find-links {wheels} --no-cache-dir demo==1.0\n"
    saw = (root / "pip-saw").read_text().splitlines()
    assert saw[0] == f"{wheels}/demo-1.0-py3-none-any.whl" and "Read-only file system" in saw[1] and \
        saw[2:] == ["read-only"]
    assert sorted(p.name for p in wheels.iterdir()) == ["demo-1.0-py3-none-any.whl"]
    # Nothing else left in the image: the mount point folders made for the bind are gone.
    assert {p.relative_to(root) for p in root.rglob("*")} - before == {Path("pip-args"), Path("pip-saw")}
