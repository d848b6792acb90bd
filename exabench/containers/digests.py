"""Image digests: sha256 of a .sif file, an OCI image's manifest digest, or a directory image's
canonical listing, recorded beside the image as `<image>.sha256`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path

from exabench.errors import ContainerError


DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"  # the OCI image manifest's media type


def sha256_file(path: str | Path) -> str:
    """The hex sha256 of a file's content, read in 1 MiB blocks (images run to gigabytes)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_digest(path: str | Path) -> str:
    return "sha256:" + sha256_file(path)


SNAKEMAKE_MARKER = ".snakemake_timestamp"  # in every directory() output, written after its job


def directory_digest(path: str | Path) -> str:
    """A directory image's digest: sha256 over a canonical listing (path, type, mode, link target
    or content digest), in sorted order; owners and times are left out, so an unpacked copy of
    the same tree has the same digest. Snakemake's marker of a directory() output is left out too:
    Snakemake writes it after the rule that built the image recorded the digest."""
    root = Path(path)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        if Path(dirpath) == root:
            filenames = [f for f in filenames if f != SNAKEMAKE_MARKER]
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = p.lstat()
            rel = p.relative_to(root).as_posix()
            if stat.S_ISLNK(st.st_mode):
                entry = f"L {rel} {os.readlink(p)}"
            elif stat.S_ISREG(st.st_mode):
                entry = f"F {rel} {stat.S_IMODE(st.st_mode):o} {file_digest(p)}"
            elif stat.S_ISDIR(st.st_mode):
                entry = f"D {rel} {stat.S_IMODE(st.st_mode):o}"
            else:  # device nodes, fifos: their kind only
                entry = f"O {rel} {stat.S_IFMT(st.st_mode):o}"
            h.update(entry.encode("utf-8", "surrogateescape") + b"\n")
    return "sha256:" + h.hexdigest()


# --- OCI image layouts (written by exabench.containers.oci) ---------------------------------------


def is_oci_layout(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / "oci-layout").is_file() and (path / "index.json").is_file()


def oci_blob(layout: Path, digest: str) -> Path:
    algo, _, hexdigest = digest.partition(":")
    return layout / "blobs" / algo / hexdigest


def _verified(layout: Path, descriptor: dict, what: str) -> Path:
    digest = descriptor.get("digest", "")
    path = oci_blob(layout, digest)
    if not digest.startswith("sha256:") or not path.is_file():
        raise ContainerError(str(layout), what, digest, "a blob under blobs/sha256/", "is missing")
    actual = "sha256:" + sha256_file(path)
    if actual != digest or path.stat().st_size != descriptor.get("size"):
        raise ContainerError(str(layout), what, digest, f"the blob's own digest ({actual}, "
                             f"{path.stat().st_size} bytes)", "does not match: the image was changed")
    return path


def manifest_descriptor(layout: str | Path) -> dict:
    """The one manifest an exabench OCI image layout's index names."""
    layout = Path(layout)
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError) as exc:
        raise ContainerError(str(layout), "index.json", "?", "an OCI image index", f"cannot be read ({exc})") from None
    manifests = [m for m in index.get("manifests", []) if m.get("mediaType") == MANIFEST_TYPE]
    if len(manifests) != 1:
        raise ContainerError(str(layout), "index.json manifests", len(manifests), "exactly one image manifest")
    return manifests[0]


def oci_digest(layout: str | Path) -> str:
    """The image's digest (its manifest's), after checking the manifest, config and every layer
    against the digests and sizes that name them."""
    layout = Path(layout)
    descriptor = manifest_descriptor(layout)
    manifest = json.loads(_verified(layout, descriptor, "manifest").read_bytes())
    for i, d in enumerate([manifest.get("config", {}), *manifest.get("layers", [])]):
        _verified(layout, d, "config" if i == 0 else f"layer {i}")
    return descriptor["digest"]


def image_digest(path: str | Path) -> str:
    """A SIF's (any file's) sha256; an OCI image layout's manifest digest, its blobs checked
    (above); another directory image's canonical listing."""
    path = Path(path)
    if is_oci_layout(path):
        return oci_digest(path)
    return directory_digest(path) if path.is_dir() else file_digest(path)


def digest_file(image: str | Path) -> Path:
    """Where an image's digest is recorded: beside it, `<image>.sha256`."""
    return Path(str(image).rstrip("/") + ".sha256")


def write_digest(image: str | Path) -> str:
    from exabench.io import atomic_write_text
    digest = image_digest(image)
    atomic_write_text(digest_file(image), f"{digest}  {Path(image).name}\n")
    return digest


def recorded_digest(image: str | Path) -> str | None:
    f = digest_file(image)
    if not f.exists():
        return None
    word = f.read_text().split()[0] if f.read_text().split() else ""
    return word if DIGEST.fullmatch(word) else None
