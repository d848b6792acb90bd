"""The OCI image of a SIF: its root file system as an OCI image layout, the same digest from the
same SIF, unpacked by umoci (the OCI reference unpacker, which checks every blob) and run by
ch-run on 2 ranks under mpirun through the line exabench renders for `runtime: charliecloud`,
the ranks seeing the OCI digest. The SIF here is a small one of the host's /bin/sh, so the test
takes seconds; tests/integration/test_containers.py builds the real cpu stack's SIF and OCI image
and runs K-Means in the OCI image."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers_containers import missing_tools_or_userns, shell_rootfs

from exabench import containers
from exabench.campaign.site import load_site
from exabench.containers import oci
from exabench.containers.sif import assemble_sif, rootfs_arch

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"ch-run": "charliecloud-runtime", "mksquashfs": "squashfs-tools", "unsquashfs": "squashfs-tools",
         "siftool": "siftool", "umoci": "umoci", "mpirun": "openmpi-bin", "unshare": "util-linux", "ldd": "libc-bin"}
LABELS = {"org.exabench.stack": "cpu", "org.exabench.version": "0.1.0",
          "org.opencontainers.image.created": "2026-11-28T10:00:00Z", "org.opencontainers.image.architecture": "amd64"}


@pytest.fixture(scope="module")
def shell_sif(tmp_path_factory) -> Path:
    reason = missing_tools_or_userns(TOOLS)
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("oci")
    root = shell_rootfs(work / "rootfs")
    (root / "bin" / "hardlinked").hardlink_to(root / "bin" / "sh")
    (root / "bin" / "link").symlink_to("sh")
    metadata = {"data": {"attributes": {
        "labels": LABELS, "runscript": '#!/bin/sh\n\nexec /opt/venv/bin/python -m exabench "$@"',
        "environment": {"/.singularity.d/env/90-environment.sh":
                        "#!/bin/sh\nexport PATH=/opt/venv/bin:$PATH\nexport PYTHONPATH=/opt/exabench"}}},
        "type": "container"}
    sif = work / "images" / "cpu.sif"
    assemble_sif(root, sif, "Bootstrap: scratch\n", metadata, rootfs_arch(root))
    return sif


def _blob(layout: Path, digest: str) -> dict:
    return json.loads((layout / "blobs" / "sha256" / digest.split(":")[1]).read_bytes())


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_oci_image_of_a_sif_runs_two_ranks_with_its_digest(tmp_path, shell_sif):
    os.environ.setdefault("USER", "root")  # ch-run refuses to start without $USER
    layout = shell_sif.parent / "cpu.oci"
    digest = containers.build_oci_image(shell_sif, layout, tmp_path / "oci.log")
    assert containers.recorded_digest(layout) == digest == containers.image_digest(layout)
    # The layout as the OCI Image Layout specification has it, with the SIF's labels, environment, runscript.
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    [entry] = json.loads((layout / "index.json").read_text())["manifests"]
    assert entry["digest"] == digest and entry["annotations"] == {oci.REF_NAME: "0.1.0"}
    manifest = _blob(layout, digest)
    assert manifest["config"]["mediaType"] == oci.CONFIG_TYPE and [x["mediaType"] for x in manifest["layers"]] == \
        [oci.LAYER_TYPE]
    assert manifest["annotations"][oci.FROM_SIF] == containers.file_digest(shell_sif)
    config = _blob(layout, manifest["config"]["digest"])
    assert config["config"]["Env"] == ["PATH=/opt/venv/bin:" + oci.DEFAULT_PATH, "PYTHONPATH=/opt/exabench"]
    assert config["config"]["Cmd"] == ["/bin/sh", "-c", 'exec /opt/venv/bin/python -m exabench "$@"']
    assert config["config"]["Labels"] == LABELS and config["created"] == LABELS["org.opencontainers.image.created"]
    assert config["architecture"] == "amd64" and config["os"] == "linux"
    # The same SIF gives the same image, byte for byte.
    assert oci.oci_from_sif(shell_sif, tmp_path / "again.oci") == digest

    # A charliecloud site running the OCI image: ch-run gets the root file system umoci unpacked.
    raw = yaml.safe_load((REPO / "profiles/local/site.yaml").read_text())
    raw["container"] = {"runtime": "charliecloud", "image": str(layout), "stack": "cpu", "digest": digest}
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(raw))
    site = load_site(tmp_path / "site.yaml")
    results = tmp_path / "results"
    results.mkdir()
    argv = containers.wrap_program(site, results / "runs/probe/spec.json", None, {}, results)
    rootfs = Path(f"{layout}.bundle/rootfs")
    assert str(rootfs) in argv and not any(a.startswith("--mount") for a in argv)
    assert (rootfs / "bin" / "hardlinked").stat().st_ino == (rootfs / "bin" / "sh").stat().st_ino
    assert os.readlink(rootfs / "bin" / "link") == "sh"
    inside = argv[:argv.index("--") + 1] + [
        "/bin/sh", "-c", 'echo "$EXABENCH_CONTAINER_DIGEST" > "$0/rank-$OMPI_COMM_WORLD_RANK"', str(results)]
    launch = ["mpirun", "--oversubscribe", "-np", "2"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    proc = subprocess.run(launch + inside, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert {p.name: p.read_text().strip() for p in results.glob("rank-*")} == {"rank-0": digest, "rank-1": digest}

    # A changed layer is caught by its digest, and the pinned image refuses to render.
    layer = layout / "blobs" / "sha256" / manifest["layers"][0]["digest"].split(":")[1]
    layer.chmod(0o644)
    with open(layer, "ab") as f:
        f.write(b"x")
    with pytest.raises(containers.ContainerError, match="layer 1.*does not match: the image was changed"):
        oci.oci_digest(layout)
    with pytest.raises(containers.ContainerError, match="layer 1"):
        containers.wrap_program(site, results / "runs/probe/spec.json", None, {}, results)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_enroot_squashfs_of_the_oci_image_is_reproducible_and_ch_run_starts_its_rc(tmp_path, shell_sif):
    """Enroot's squashfs of the OCI image (what a Pyxis site runs, rule container_sqsh): the same
    OCI digest gives the same bytes whatever the file is called; every owner root, every time 0;
    /etc/environment and /etc/rc carry the config's Env and Cmd as `enroot import` writes them;
    ch-run runs the squashfs file itself, and /etc/rc, with only /etc/environment's variables set
    (as enroot sets them), starts a command in it."""
    os.environ.setdefault("USER", "root")  # ch-run refuses to start without $USER
    layout = tmp_path / "cpu.oci"
    oci_digest = containers.build_oci_image(shell_sif, layout, tmp_path / "oci.log")
    image = tmp_path / "images" / "cpu.sqsh"
    digest = containers.build_sqsh_image(layout, image, tmp_path / "sqsh.log")
    assert digest == containers.recorded_digest(image) == containers.file_digest(image)
    assert containers.build_sqsh_image(layout, tmp_path / "other.sqsh", tmp_path / "again.log") == digest
    assert image.read_bytes()[:4] == b"hsqs" and sorted(p.name for p in image.parent.iterdir()) == \
        ["cpu.sqsh", "cpu.sqsh.sha256"]  # nothing left beside it

    listing = subprocess.run(["unsquashfs", "-lln", str(image)], capture_output=True, text=True, check=True,
                             timeout=60, env={**os.environ, "TZ": "UTC"}).stdout.splitlines()
    entries = [line.split() for line in listing if line.startswith(("d", "-", "l"))]
    assert len(entries) > 10 and {(e[1], e[3]) for e in entries} == {("0/0", "1970-01-01")}

    def cat(path):
        return subprocess.run(["unsquashfs", "-cat", str(image), path], capture_output=True, text=True, check=True,
                              timeout=60).stdout
    assert cat("etc/environment") == f"PATH=/opt/venv/bin:{oci.DEFAULT_PATH}\nPYTHONPATH=/opt/exabench\n"
    rc = cat("etc/rc")
    assert rc.startswith(f"# enroot-provenance: oci:cpu:0.1.0@{oci_digest}\n# org.exabench.stack cpu\n")
    assert "    exec '/bin/sh' '-c' 'exec /opt/venv/bin/python -m exabench \"$@\"'\n" in rc
    assert cat("etc/fstab") == "" and cat("etc/rc.local").startswith("# This file is sourced by /etc/rc")

    (tmp_path / "mnt").mkdir()
    inside = 'set -a; . /etc/environment; set +a; exec /bin/sh /etc/rc /bin/sh -c \'echo "$PYTHONPATH $PWD"\''
    proc = subprocess.run(["ch-run", f"--mount={tmp_path / 'mnt'}", "--unset-env=*", str(image), "--",
                           "/bin/sh", "-c", inside], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "/opt/exabench /\n"), proc.stderr
