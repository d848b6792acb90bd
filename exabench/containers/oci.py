"""OCI images from the SIF: the same root file system, packed as an OCI image layout.

A stack has one definition (containers/<stack>.def); its SIF (built by Apptainer, or without it
by exabench.containers.build) holds the root file system as a squashfs partition. The OCI image
is made from that partition, so the two images cannot drift apart: one layer, the root file
system as a tar (entries sorted, owner names and sub-second times left out, gzip without name or
time), an image config whose Env, Cmd and Labels are the SIF's %environment, %runscript and
labels, a manifest and an index, written as the OCI Image Layout specification lays them out:

    <stack>.oci/oci-layout                  {"imageLayoutVersion": "1.0.0"}
    <stack>.oci/index.json                  the manifest, tagged org.opencontainers.image.ref.name
    <stack>.oci/blobs/sha256/<hex>          the layer, the config, the manifest

The image's digest is its manifest's (what `podman images --digests` and registries show); the
same SIF always gives the same digest. Source: OCI Image Format Specification v1.1
(github.com/opencontainers/image-spec: image-layout.md, manifest.md, config.md, layer.md).

Running it: `umoci unpack` (Debian's package of the OCI reference unpacker, which checks every
blob's digest) turns the layout into a runtime bundle whose `rootfs` Charliecloud's ch-run runs.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from exabench import __version__
from exabench.containers.digests import (MANIFEST_TYPE, file_digest, is_oci_layout, manifest_descriptor,  # noqa: F401
                                         oci_blob, oci_digest)
from exabench.errors import ContainerError

LAYOUT_VERSION = {"imageLayoutVersion": "1.0.0"}
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
FROM_SIF = "org.exabench.from-sif"  # manifest annotation: the digest of the SIF the layer came from
# The PATH an image's Env starts from when %environment extends $PATH (Docker's and Podman's default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
UNPACKED_MARK = "exabench-unpacked-from"  # in a bundle: the manifest digest it was unpacked from


# --- writing -------------------------------------------------------------------------------------


class _Hashing:
    """A write-only stream that hashes and counts what passes through it to `out`."""

    def __init__(self, out):
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.out.write(data) if self.out is not None else len(data)

    def flush(self) -> None:
        if self.out is not None:
            self.out.flush()

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


def _tar_entry(tar: tarfile.TarFile, path: Path, name: str) -> None:
    info = tar.gettarinfo(str(path), name)
    if info is None:  # sockets: not image content
        return
    info.mtime = int(info.mtime)
    info.uname = info.gname = ""  # numeric owners only: the host's names mean nothing in the image
    if info.isreg():
        with open(path, "rb") as f:
            tar.addfile(info, f)
    else:
        tar.addfile(info)


def _write_layer(root: Path, blobs: Path) -> tuple[str, str, int]:
    """The root file system as one gzip'd tar blob: (digest, diff_id, size). Entries in sorted
    order, parents first, hard links as links; the same tree gives the same bytes."""
    fd, tmp = tempfile.mkstemp(prefix=".layer.", dir=blobs)
    try:
        with os.fdopen(fd, "wb") as raw:
            packed = _Hashing(raw)
            # Level 1: under half the time of level 6 for about 15 % more bytes (240 MB of site-packages:
            # 10.2 s and 80.7 MB against 22.8 s and 70.5 MB). A build on a login node is the wait a
            # user sees; the layer is pulled once per site.
            with gzip.GzipFile(filename="", mode="wb", fileobj=packed, compresslevel=1, mtime=0) as gz:
                plain = _Hashing(gz)
                with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    for dirpath, dirnames, filenames in os.walk(root):
                        dirnames.sort()
                        here = Path(dirpath)
                        for name in sorted(dirnames + filenames):
                            p = here / name
                            _tar_entry(tar, p, p.relative_to(root).as_posix())
        blob = blobs / packed.digest.split(":", 1)[1]
        os.replace(tmp, blob)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return packed.digest, plain.digest, packed.size


def _write_blob(blobs: Path, data: bytes) -> dict:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.split(":", 1)[1]).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def environment_list(script: str) -> list[str]:
    """`export K=V` lines of an %environment (as the SIF keeps it) as OCI Env entries, with $K and
    ${K} expanded against what came before (PATH starting from Docker's default), as a Dockerfile's
    ENV lines are."""
    env = {"PATH": DEFAULT_PATH}
    for line in script.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip().strip('"').strip("'")
        env[key.strip()] = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m.group(1), ""), value)
    return [f"{k}={v}" for k, v in env.items()]


def image_config(labels: dict, environment: str, runscript: str) -> dict:
    """The OCI image config (without rootfs): Env from %environment, Cmd the %runscript in a shell
    (the generated Dockerfile's shell-form CMD), Labels and creation time from the SIF's labels."""
    body = "\n".join(line for line in runscript.splitlines() if not line.startswith("#!")).strip()
    config = {"Env": environment_list(environment), "Labels": dict(sorted(labels.items())), "WorkingDir": "/"}
    if body:
        config["Cmd"] = ["/bin/sh", "-c", body]
    return {"created": labels.get("org.opencontainers.image.created", "1970-01-01T00:00:00Z"),
            "architecture": labels.get("org.opencontainers.image.architecture", "amd64"), "os": "linux",
            "config": config}


def write_oci_layout(root: str | Path, dest: str | Path, config: dict, ref: str,
                     annotations: dict | None = None) -> str:
    """Write `root` as a one-layer OCI image layout at `dest` (replaced atomically); returns the
    manifest digest."""
    root, dest = Path(root), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        blobs = tmp / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        layer_digest, diff_id, layer_size = _write_layer(root, blobs)
        full = {**config, "rootfs": {"type": "layers", "diff_ids": [diff_id]},
                "history": [{"created": config.get("created"),
                             "created_by": f"exabench {__version__}: the SIF's root file system as one layer"}]}
        cfg = _write_blob(blobs, _canonical(full))
        manifest = {"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                    "config": {"mediaType": CONFIG_TYPE, **cfg},
                    "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": layer_size}]}
        if annotations:
            manifest["annotations"] = dict(sorted(annotations.items()))
        man = _write_blob(blobs, _canonical(manifest))
        index = {"schemaVersion": 2, "mediaType": INDEX_TYPE,
                 "manifests": [{"mediaType": MANIFEST_TYPE, **man, "annotations": {REF_NAME: ref}}]}
        (tmp / "index.json").write_bytes(_canonical(index))
        (tmp / "oci-layout").write_bytes(_canonical(LAYOUT_VERSION))
        for p in [tmp, *tmp.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return man["digest"]


def oci_from_sif(sif: str | Path, dest: str | Path, log=None, timeout_s: int = 1800) -> str:
    """The OCI image layout of a SIF's root file system (its primary squashfs partition, unpacked by
    unsquashfs) with the SIF's labels, %environment and %runscript; returns the manifest digest
    (the `<dest>.sha256` beside it is the caller's: digests.write_digest)."""
    from exabench.containers.sif import INSPECT_METADATA, extract_partition, read_sif
    sif, dest = Path(sif), Path(dest)
    if shutil.which("unsquashfs") is None:
        raise ContainerError(str(sif), "image", sif.name, "unsquashfs on the PATH (apt-get install -y squashfs-tools)",
                             "cannot be unpacked into an OCI image here")
    layout = read_sif(sif)
    meta = next((d for d in layout.descriptors if d.name == INSPECT_METADATA), None)
    attributes = {}
    if meta is not None:
        with open(sif, "rb") as f:
            f.seek(meta.offset)
            attributes = json.loads(f.read(meta.size))["data"]["attributes"]
    labels = attributes.get("labels") or {}
    environment = "\n".join((attributes.get("environment") or {}).values())
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{dest.name}.build.", dir=dest.parent) as tmp:
        squashfs = extract_partition(sif, Path(tmp) / "rootfs.squashfs")
        root = Path(tmp) / "rootfs"
        argv = ["unsquashfs", "-no-progress", "-d", str(root), str(squashfs)]
        if log is not None:
            log.write("+ " + " ".join(argv) + "\n")
            log.flush()
        subprocess.run(argv, check=True, timeout=timeout_s, stdout=log or subprocess.DEVNULL,
                       stderr=subprocess.STDOUT if log else None)
        config = image_config(labels, environment, attributes.get("runscript", ""))
        ref = labels.get("org.exabench.version") or "latest"
        annotations = {FROM_SIF: file_digest(sif), "org.opencontainers.image.created": config["created"],
                       "org.opencontainers.image.title": labels.get("org.exabench.stack", sif.stem)}
        if labels.get("org.exabench.version"):
            annotations["org.opencontainers.image.version"] = labels["org.exabench.version"]
        return write_oci_layout(root, dest, config, ref, annotations)


# --- reading -------------------------------------------------------------------------------------


def oci_config(layout: str | Path) -> dict:
    layout = Path(layout)
    manifest = json.loads(oci_blob(layout, manifest_descriptor(layout)["digest"]).read_bytes())
    return json.loads(oci_blob(layout, manifest["config"]["digest"]).read_bytes())


def unpacked_rootfs(layout: str | Path, digest: str, timeout_s: int = 900) -> Path:
    """The root file system of the OCI image `layout` for ch-run: `umoci unpack` into the bundle
    `<layout>.bundle` (kept while it was unpacked from `digest`), its `rootfs` given a
    /ch/environment from the image's Env (ch-run's bare --set-env reads it) when it has none."""
    layout = Path(layout)
    bundle = Path(str(layout) + ".bundle")
    mark = bundle / UNPACKED_MARK
    if mark.is_file() and mark.read_text().strip() == digest:
        return bundle / "rootfs"
    if shutil.which("umoci") is None:
        raise ContainerError(str(layout), "image", layout.name, "umoci on the PATH (apt-get install -y umoci), "
                             "which unpacks an OCI image for ch-run", "cannot be unpacked here")
    ref = manifest_descriptor(layout).get("annotations", {}).get(REF_NAME, "latest")
    tmp = Path(tempfile.mkdtemp(prefix=f".{bundle.name}.", dir=layout.parent))
    try:
        target = tmp / "bundle"
        rootless = ["--rootless"] if os.geteuid() != 0 else []
        proc = subprocess.run(["umoci", "unpack", *rootless, "--image", f"{layout}:{ref}", str(target)],
                              capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise ContainerError(str(layout), "image", f"{layout.name}:{ref}", "an OCI image umoci unpacks",
                                 f"cannot be unpacked: {proc.stderr.strip()[-500:]}")
        rootfs = target / "rootfs"
        env_file = rootfs / "ch" / "environment"
        if not env_file.exists():
            env_file.parent.mkdir(exist_ok=True)
            env_file.write_text("".join(f"{e}\n" for e in oci_config(layout)["config"].get("Env", [])))
        (target / UNPACKED_MARK).write_text(digest + "\n")
        if bundle.exists() and not mark.is_file() or mark.is_file() and mark.read_text().strip() != digest:
            os.replace(bundle, tmp / "stale")  # unpacked from another digest: replaced
        try:
            os.replace(target, bundle)
        except OSError:  # a render running at once put its bundle there first: the same, or an error
            if not (mark.is_file() and mark.read_text().strip() == digest):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return bundle / "rootfs"
