"""podman-hpc's migrated image store, made from a small OCI image layout without Podman (rule
container_podman_hpc): the records agree with the layout's manifest and config, the link, its
symlink and the squash are named as podman-hpc names them, the squash holds the root file system,
the top layer has no `lower` file, a rebuild gives the same bytes, and a bad layout is refused
naming its path. The expected format is NERSC/podman-hpc's test store (test/storage at 01b02d6e)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from exabench.containers import oci
from exabench.containers.__main__ import main
from exabench.containers.digests import directory_digest, file_digest, recorded_digest
from exabench.containers.podman_hpc_store import big_data_file, link_id, migrate_store
from exabench.errors import ContainerError

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("umoci", "mksquashfs", "unsquashfs")),
                                reason="needs umoci and squashfs-tools (apt-get install -y umoci squashfs-tools)")


@pytest.fixture
def layout(tmp_path) -> Path:
    root = tmp_path / "root"
    for d in ("bin", "etc", "proc", "usr/share/doc"):
        (root / d).mkdir(parents=True)
    (root / "etc/hostname").write_text("exabench\n")
    (root / "bin/hello").write_text("#!/bin/sh\necho hello\n")
    (root / "bin/hello").chmod(0o755)
    (root / "usr/share/doc/README").write_text("small\n")
    (root / "proc/leftover").write_text("not image content\n")  # podman-hpc leaves /proc out
    config = oci.image_config({"org.exabench.stack": "cpu", "org.exabench.version": "0.1.0"}, "", "echo hi")
    oci.write_oci_layout(root, tmp_path / "cpu.oci", config, "0.1.0", {"org.opencontainers.image.title": "cpu"})
    return tmp_path / "cpu.oci"


def _blob(layout: Path, digest: str) -> bytes:
    return (layout / "blobs/sha256" / digest.split(":", 1)[1]).read_bytes()


def test_store_records_links_and_squash_match_the_layout(layout, tmp_path):
    store = tmp_path / "images/cpu.podman-hpc"
    squash_digest = migrate_store(layout, store)

    index = json.loads((layout / "index.json").read_text())
    manifest_digest = index["manifests"][0]["digest"]
    manifest_bytes = _blob(layout, manifest_digest)
    assert manifest_digest == "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    manifest = json.loads(manifest_bytes)
    config_bytes = _blob(layout, manifest["config"]["digest"])
    config = json.loads(config_bytes)
    image_id = hashlib.sha256(config_bytes).hexdigest()
    layer_id = config["rootfs"]["diff_ids"][0].split(":", 1)[1]
    blob = manifest["layers"][0]

    [image] = json.loads((store / "overlay-images/images.json").read_text())
    name = "localhost/exabench/cpu:0.1.0"
    keys = [f"sha256:{image_id}", f"manifest-{manifest_digest}", "manifest"]
    assert list(image) == ["id", "digest", "names", "names-history", "layer", "metadata", "big-data-names",
                           "big-data-sizes", "big-data-digests", "created"]  # the test store's order
    assert image == {
        "id": image_id, "digest": manifest_digest, "names": [name], "names-history": [name], "layer": layer_id,
        "metadata": "{}", "big-data-names": keys,
        "big-data-sizes": {"manifest": len(manifest_bytes), f"manifest-{manifest_digest}": len(manifest_bytes),
                           f"sha256:{image_id}": len(config_bytes)},
        "big-data-digests": {"manifest": manifest_digest, f"manifest-{manifest_digest}": manifest_digest,
                             f"sha256:{image_id}": f"sha256:{image_id}"},
        "created": config["created"]}
    images = store / "overlay-images" / image_id
    assert (images / "manifest").read_bytes() == manifest_bytes
    assert (images / big_data_file(f"manifest-{manifest_digest}")).read_bytes() == manifest_bytes
    assert (images / big_data_file(f"sha256:{image_id}")).read_bytes() == config_bytes
    assert len(list(images.iterdir())) == 3

    [layer] = json.loads((store / "overlay-layers/layers.json").read_text())
    plain = subprocess.run(["gzip", "-dc", str(layout / "blobs/sha256" / blob["digest"].split(":", 1)[1])],
                           capture_output=True, check=True, timeout=30).stdout
    assert layer == {"id": layer_id, "created": config["created"], "compressed-diff-digest": blob["digest"],
                     "compressed-size": blob["size"], "diff-digest": f"sha256:{layer_id}",
                     "diff-size": len(plain), "compression": 2, "uidset": layer["uidset"],
                     "gidset": layer["gidset"]}
    assert hashlib.sha256(plain).hexdigest() == layer_id and layer["uidset"] and layer["gidset"]
    assert sorted(p.name for p in (store / "overlay-layers").iterdir()) == ["layers.json", "layers.lock"]
    assert [(store / f).read_text() for f in ("overlay-images/images.lock", "overlay-layers/layers.lock")] == ["", ""]

    link = (store / "overlay" / layer_id / "link").read_text()
    assert re.fullmatch(r"[A-Z2-7]{26}", link) and link == link_id(layer_id)
    assert sorted(p.name for p in (store / "overlay" / layer_id).iterdir()) == ["diff", "link"]  # no `lower`
    assert list((store / "overlay" / layer_id / "diff").iterdir()) == []
    assert (store / "overlay/l" / link).readlink() == Path(f"../{layer_id}/diff")
    assert (store / "overlay/l" / link).resolve() == (store / "overlay" / layer_id / "diff").resolve()
    squash = store / "overlay/l" / f"{link}.squash"
    assert sorted(p.name for p in (store / "overlay/l").iterdir()) == [link, f"{link}.squash"]
    assert squash_digest == file_digest(squash) and squash.read_bytes()[:4] == b"hsqs"
    listing = subprocess.run(["unsquashfs", "-l", "-d", "", str(squash)], capture_output=True, text=True,
                             check=True, timeout=30).stdout.split()
    assert {"/bin/hello", "/etc/hostname", "/usr/share/doc/README"} <= set(listing)
    assert not [p for p in listing if p.startswith("/proc")]
    assert sorted(p.name for p in store.parent.iterdir()) == ["cpu.podman-hpc"]  # no build folder left


def test_a_rebuild_is_byte_identical_and_the_cli_records_its_digest(layout, tmp_path, capsys):
    first, second = tmp_path / "a/cpu.podman-hpc", tmp_path / "b/cpu.podman-hpc"
    assert migrate_store(layout, first) == migrate_store(layout, second)
    assert directory_digest(first) == directory_digest(second)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert len(files) == 9 and all((first / f).read_bytes() == (second / f).read_bytes() for f in files)

    assert main(["migrate-podman-hpc", str(layout), str(second)]) == 0  # replaces the store in place
    assert capsys.readouterr().out.splitlines()[-1] == recorded_digest(second) == directory_digest(first)
    # Snakemake's marker of a directory() output, written after the rule recorded the digest, is not
    # the image's: the digest stays; a file of the image's own changes it.
    (second / ".snakemake_timestamp").write_text("")
    assert directory_digest(second) == directory_digest(first)
    (second / "overlay" / ".snakemake_timestamp").write_text("")
    assert directory_digest(second) != directory_digest(first)


def test_a_bad_layout_is_refused_naming_its_path(layout, tmp_path):
    not_a_layout = tmp_path / "nothing.oci"
    not_a_layout.mkdir()
    with pytest.raises(ContainerError, match=re.escape(str(not_a_layout)) + ".*valid: an OCI image layout"):
        migrate_store(not_a_layout, tmp_path / "x.podman-hpc")

    manifest = json.loads(_blob(layout, json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]))
    layer = layout / "blobs/sha256" / manifest["layers"][0]["digest"].split(":", 1)[1]
    layer.write_bytes(layer.read_bytes() + b"\0")
    with pytest.raises(ContainerError, match=re.escape(str(layout)) + ".*layer 1.*does not match"):
        migrate_store(layout, tmp_path / "y.podman-hpc")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu.oci", "nothing.oci", "root"]  # nothing written


def test_big_data_file_names_match_podman_hpcs_test_store():
    """File names in NERSC/podman-hpc test/storage/overlay-images/9c6f0724.../ for its keys."""
    assert big_data_file("manifest") == "manifest"
    assert big_data_file("manifest-sha256:1304f174557314a7ed9eddb4eab12fed12cb0cd9809e4c28f29af86979a3c870") == (
        "=bWFuaWZlc3Qtc2hhMjU2OjEzMDRmMTc0NTU3MzE0YTdlZDllZGRiNGVhYjEyZmVkMTJjYjBjZDk4MDllNGMyOGYyOWFmODY5NzlhM2M4NzA=")
    assert big_data_file("sha256:9c6f0724472873bb50a2ae67a9e7adcb57673a183cea8b06eb778dca859181b5") == (
        "=c2hhMjU2OjljNmYwNzI0NDcyODczYmI1MGEyYWU2N2E5ZTdhZGNiNTc2NzNhMTgzY2VhOGIwNmViNzc4ZGNhODU5MTgxYjU=")
