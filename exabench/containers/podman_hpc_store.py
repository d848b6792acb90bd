"""podman-hpc's migrated image store of an OCI image: the folder `podman-hpc migrate` writes into
its SQUASH_DIR, made from the OCI image the rules already make (exabench.containers.oci) without
Podman, so that a podman-hpc site runs the same files as every other runtime.

Sources, NERSC/podman-hpc at 01b02d6e (v1.1.4): podman_hpc/migrate2scratch.py (M below) and its
test store test/storage/ (the records' fields and format). The store podman-hpc makes (M L95-117):

    overlay/ overlay/l/ overlay-images/ overlay-layers/       images.lock, layers.lock: empty
    overlay-images/images.json     one record per image; id = the config's digest (hex)
    overlay-images/<id>/           the image's big-data files (M L319-324): `manifest`, and
                                   "=" + base64(key) for keys such as sha256:<id> (the config)
    overlay-layers/layers.json     one record per layer (id = its diff_id, hex), chained by "parent"
    overlay/<layer>/link, diff/    a short link name, an empty diff/ (M L337-361), and the symlink
                                   overlay/l/<link> -> ../<layer>/diff; the top layer has no `lower`
                                   file (M copies none), so Podman's lowerdir is that link alone
    overlay/l/<link>.squash        the image's merged root file system; <link> is the top layer's
                                   (M L207-208, L371-377): bin/fuse-overlayfs-wrap L32-37 mounts
                                   <last lowerdir>.squash on that lowerdir with squashfuse

podman-hpc packs the squash inside a running container of the image (M L385-398): `mksquashfs /
<out> -comp lz4 -xattrs-exclude security.capability -e /sqout -e /mksq -e /proc -e /sys -e /dev`
(options M L228-229). Here umoci unpacks the image (exabench.containers.squashfs.unpack_oci) and
mksquashfs packs that tree with -comp lz4, /proc, /sys and /dev left out as podman-hpc leaves them
out, and the options that make it reproducible: every owner root (-all-root: a rootless unpack
owns every file by the builder, so that owners cannot depend on who built it), times 0,
-no-xattrs (Debian 12's mksquashfs 4.5.1 has no -xattrs-exclude, and a rootless umoci records
owners in user.rootlesscontainers attributes, which must not reach the image; the OCI layer
carries no extended attributes to lose).

Not made: overlay-layers/<layer>.tar-split.gz, which podman-hpc copies from the source store
(M L326-334). Podman only needs it to rebuild a layer's exact tar: running the image does not
read it, but `podman push`/`podman save` of the image from this store cannot work; push the OCI
layout instead. No Podman ran here: the layout is checked against podman-hpc's source and its test
store only.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from exabench.containers.digests import is_oci_layout, manifest_descriptor, oci_blob, oci_digest, sha256_file
from exabench.containers.squashfs import REPRODUCIBLE_OPTIONS, remove_tree, require_tools, run_logged, unpack_oci
from exabench.errors import ContainerError

SQUASH_OPTIONS = ("-comp", "lz4", "-all-root", *REPRODUCIBLE_OPTIONS)
EXCLUDED = ("proc", "sys", "dev")  # M L229, less /sqout and /mksq: podman-hpc's own mounts
GZIP = 2  # containers/storage's "compression" of a gzip'd layer (the test store's layers.json)
NAME = "localhost/exabench/{stack}:{version}"


def link_id(layer_id: str) -> str:
    """The 26-letter base32 link name of a layer (the test store's overlay/l/ZV7QWNQETS5AJXTGA6EY2FM2WE;
    Podman draws it at random): from the layer's id, so that a rebuild is identical."""
    return base64.b32encode(hashlib.sha256(f"exabench-link:{layer_id}".encode()).digest()).decode()[:26]


def big_data_file(key: str) -> str:
    """The file a big-data key is kept in: the key itself when it is lowercase letters, digits and
    dots (`manifest`), else "=" + standard base64 with padding (the test store's file names)."""
    if key and all(c == "." or c.isdigit() or "a" <= c <= "z" for c in key):
        return key
    return "=" + base64.b64encode(key.encode()).decode()


class _Reading:
    """A read-only stream that hashes and counts what is read from `inner`."""

    def __init__(self, inner):
        self.inner, self.sha, self.size = inner, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data


def _layer_record(layout: Path, descriptor: dict, diff_id: str, created: str) -> dict:
    """A layers.json record (the test store's fields and order) of a gzip'd tar layer, read once:
    its diff digest checked against the config's diff_id, its size, its owners' ids."""
    uids, gids = set(), set()
    with gzip.open(oci_blob(layout, descriptor["digest"]), "rb") as gz:
        plain = _Reading(gz)
        with tarfile.open(fileobj=plain, mode="r|") as tar:
            for member in tar:
                uids.add(member.uid)
                gids.add(member.gid)
        while plain.read(1 << 20):  # the tar's end blocks count in diff-size
            pass
    if "sha256:" + plain.sha.hexdigest() != diff_id:
        raise ContainerError(str(layout), "config rootfs.diff_ids", diff_id, f"the layer {descriptor['digest']}'s "
                             f"uncompressed digest (sha256:{plain.sha.hexdigest()})", "does not match")
    return {"id": diff_id.split(":", 1)[1], "created": created, "compressed-diff-digest": descriptor["digest"],
            "compressed-size": descriptor["size"], "diff-digest": diff_id, "diff-size": plain.size,
            "compression": GZIP, "uidset": sorted(uids), "gidset": sorted(gids)}


def _records(layout: Path, digest: str) -> tuple[dict, list[dict], dict[str, bytes]]:
    """images.json's record, layers.json's records (bottom first) and the big-data files by key."""
    manifest_bytes = oci_blob(layout, digest).read_bytes()
    manifest = json.loads(manifest_bytes)
    config_bytes = oci_blob(layout, manifest["config"]["digest"]).read_bytes()
    config = json.loads(config_bytes)
    created = config.get("created", "1970-01-01T00:00:00Z")
    diff_ids = config.get("rootfs", {}).get("diff_ids", [])
    if len(diff_ids) != len(manifest.get("layers", [])) or not diff_ids:
        raise ContainerError(str(layout), "config rootfs.diff_ids", len(diff_ids),
                             f"one per manifest layer ({len(manifest.get('layers', []))}), at least one")
    layers = []
    for descriptor, diff_id in zip(manifest["layers"], diff_ids):
        if not descriptor.get("mediaType", "").endswith("tar+gzip"):
            raise ContainerError(str(layout), "manifest layers", descriptor.get("mediaType"),
                                 "gzip'd tar layers (what exabench.containers.oci writes)")
        layers.append(_layer_record(layout, descriptor, diff_id, created))
        if len(layers) > 1:
            layers[-1]["parent"] = layers[-2]["id"]
    image_id = manifest["config"]["digest"].split(":", 1)[1]
    stack = manifest.get("annotations", {}).get("org.opencontainers.image.title") or layout.name.split(".")[0]
    version = manifest_descriptor(layout).get("annotations", {}).get("org.opencontainers.image.ref.name", "latest")
    name = NAME.format(stack=stack, version=version)
    data = {f"sha256:{image_id}": config_bytes, f"manifest-{digest}": manifest_bytes, "manifest": manifest_bytes}
    image = {"id": image_id, "digest": digest, "names": [name], "names-history": [name], "layer": layers[-1]["id"],
             "metadata": "{}", "big-data-names": list(data),
             "big-data-sizes": {k: len(v) for k, v in sorted(data.items())},
             "big-data-digests": {k: "sha256:" + hashlib.sha256(v).hexdigest() for k, v in sorted(data.items())},
             "created": created}
    return image, layers, data


def _write_store(store: Path, image: dict, layers: list[dict], data: dict[str, bytes]) -> Path:
    """The store's folders, records and links (M L95-117, L319-361); returns where the squash goes."""
    for sub in ("overlay/l", "overlay-images", "overlay-layers"):
        (store / sub).mkdir(parents=True)
    (store / "overlay-images/images.lock").write_text("")
    (store / "overlay-layers/layers.lock").write_text("")
    # json.dump's default separators, as podman-hpc writes both files (M L203)
    (store / "overlay-images/images.json").write_text(json.dumps([image]))
    (store / "overlay-layers/layers.json").write_text(json.dumps(layers))
    (store / "overlay-images" / image["id"]).mkdir()
    for key, value in data.items():
        (store / "overlay-images" / image["id"] / big_data_file(key)).write_bytes(value)
    for layer in layers:
        link = link_id(layer["id"])
        (store / "overlay" / layer["id"] / "diff").mkdir(parents=True)
        (store / "overlay" / layer["id"] / "link").write_text(link)  # no newline, as the test store's
        os.symlink(f"../{layer['id']}/diff", store / "overlay/l" / link)
    for p in [store, *store.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    return store / "overlay/l" / f"{link_id(image['layer'])}.squash"


def migrate_store(layout: str | Path, squash_dir: str | Path, log=None, timeout_s: int = 1800) -> str:
    """Write podman-hpc's migrated store of the OCI image `layout` to the folder `squash_dir`
    (replaced atomically); returns the squash's sha256 ("sha256:<hex>")."""
    layout, squash_dir = Path(layout), Path(squash_dir)
    if not is_oci_layout(layout):
        raise ContainerError(str(layout), "image", layout.name, "an OCI image layout folder (oci-layout, index.json "
                             "and blobs/sha256/, as `python -m exabench.containers build-oci` writes)",
                             "is not an OCI image layout")
    require_tools(layout, "cannot be migrated to a podman-hpc store here")
    digest = oci_digest(layout)  # checks manifest, config and layers before anything is written
    image, layers, data = _records(layout, digest)
    squash_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{squash_dir.name}.build.", dir=squash_dir.parent))
    try:
        squash = _write_store(tmp / "store", image, layers, data)
        unpack_oci(layout, tmp / "rootfs", log, timeout_s)
        excluded = [w for name in EXCLUDED for w in ("-e", name)]  # relative to the packed folder
        run_logged(["mksquashfs", str(tmp / "rootfs"), str(squash), *SQUASH_OPTIONS, *excluded], log, timeout_s,
                   "a root file system mksquashfs packs", squash_dir)
        squash.chmod(0o644)
        if squash_dir.exists():
            shutil.rmtree(squash_dir)
        os.replace(tmp / "store", squash_dir)
    finally:
        remove_tree(tmp, timeout_s)
    return "sha256:" + sha256_file(squash_dir / "overlay/l" / squash.name)
