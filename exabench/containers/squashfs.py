"""Enroot's squashfs image of an OCI image: what Pyxis (`srun --container-image=/path/x.sqsh`) and
`enroot create` run, made from the OCI image the rules already make (exabench.containers.oci), so
that a Pyxis site runs the same files as every other runtime.

An enroot image is a squashfs of the image's root file system holding three files that carry the
OCI config (enroot doc/image-format.md): `/etc/environment` (the config's Env, one K=V a line),
`/etc/rc` (the start script: working directory, then `exec` of Entrypoint and Cmd, or the
arguments given) and `/etc/fstab` (the config's Volumes as bind mounts), plus an empty
`/etc/rc.local` that /etc/rc sources. They are written here as `enroot import` writes them
(src/docker.sh, docker::configure, github.com/NVIDIA/enroot at 8ea147d); the tree is packed with
the mksquashfs options `enroot import` uses (ENROOT_SQUASH_OPTIONS' default `-comp lzo -noD`,
enroot.in; `-all-root`, src/docker.sh), and like `enroot import` it leaves /dev empty.

Reproducible: every owner root (-all-root), every time and the file system's own time 0
(-all-time, -mkfs-time: what enroot passes when SOURCE_DATE_EPOCH is set), no extended
attributes, a new file (-noappend); mksquashfs stores each directory's entries sorted and, since
4.4, packs in a fixed order whatever its thread count. The provenance line names the OCI image
by its manifest digest, not its path, so the same OCI digest gives the same bytes.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from exabench.containers.digests import manifest_descriptor, oci_blob, oci_digest
from exabench.containers.oci import oci_config
from exabench.errors import ContainerError

# `enroot import`'s mksquashfs options (ENROOT_SQUASH_OPTIONS' default, and -all-root), then ours
# for reproducibility. lzo with uncompressed data blocks (-noD): fast to build and to read on the
# nodes, larger than gzip.
ENROOT_OPTIONS = ("-comp", "lzo", "-noD", "-all-root")
REPRODUCIBLE_OPTIONS = ("-noappend", "-all-time", "0", "-mkfs-time", "0", "-no-xattrs", "-no-progress")


def _quoted(word: str) -> str:
    """A word quoted as bash's ${word@Q} quotes it (enroot's /etc/rc uses @Q)."""
    return "'" + word.replace("'", "'\\''") + "'"


def enroot_configure(rootfs: str | Path, config: dict, provenance: str) -> None:
    """Write /etc/environment, /etc/rc, /etc/rc.local and /etc/fstab into `rootfs` from the OCI
    image `config` (its JSON), as enroot's docker::configure does."""
    rootfs = Path(rootfs)
    cfg = config.get("config") or {}
    etc = rootfs / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "fstab").write_text("".join(f"${{ENROOT_ROOTFS}}{v} {v} none x-create=dir,bind,rw,nosuid,nodev\n"
                                       for v in (cfg.get("Volumes") or {})))
    (etc / "environment").write_text("".join(f"{e}\n" for e in cfg.get("Env") or []))
    labels = "".join(f"# {k} {str(v).replace(chr(10), ' ')}\n" for k, v in (cfg.get("Labels") or {}).items())
    entrypoint, cmd = list(cfg.get("Entrypoint") or []), list(cfg.get("Cmd") or [])
    if not entrypoint and not cmd:
        cmd = ["/bin/sh"]
    workdir = cfg.get("WorkingDir") or "/"
    (rootfs / workdir.lstrip("/")).mkdir(parents=True, exist_ok=True)
    ep = "".join(f"{_quoted(w)} " for w in entrypoint)
    (etc / "rc").write_text(
        f"# enroot-provenance: {provenance}\n{labels}\n"
        f'mkdir -p "{workdir}" 2> /dev/null\n'
        f'cd "{workdir}" && unset OLDPWD || exit 1\n\n'
        "if [ -s /etc/rc.local ]; then\n    . /etc/rc.local\nfi\n\n"
        "if [ $# -gt 0 ]; then\n"
        f'    exec {ep}"$@"\n'
        "else\n"
        f"    exec {ep}{' '.join(_quoted(w) for w in cmd)}\n"
        "fi\n")
    (etc / "rc.local").write_text("# This file is sourced by /etc/rc when the container starts.\n"
                                  "# It can be used to manipulate the entrypoint or the command of the container.\n")


def run_logged(argv: list[str], log, timeout_s: int, what: str, image: Path) -> None:
    if log is not None:
        log.write("+ " + shlex.join(argv) + "\n")
        log.flush()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
    if log is not None:
        log.write(proc.stdout)
    if proc.returncode != 0:
        raise ContainerError(str(image), "image", image.name, what, f"failed: {proc.stdout.strip()[-500:]}")


def require_tools(layout: Path, what: str) -> None:
    """Refuse, naming the packages, when umoci or mksquashfs is not on the PATH."""
    missing = [f"{tool} (apt-get install -y {pkg})" for tool, pkg in
               (("umoci", "umoci"), ("mksquashfs", "squashfs-tools")) if shutil.which(tool) is None]
    if missing:
        raise ContainerError(str(layout), "image", layout.name, f"{' and '.join(missing)} on the PATH", what)


def unpack_oci(layout: Path, rootfs: Path, log, timeout_s: int) -> str:
    """The merged root file system of the OCI image `layout` (checked first by the caller:
    digests.oci_digest), unpacked by umoci into `rootfs` (umoci checks every blob again); returns
    the ref name the index tags it with."""
    ref = manifest_descriptor(layout).get("annotations", {}).get("org.opencontainers.image.ref.name", "latest")
    rootless = ["--rootless"] if os.geteuid() != 0 else []
    # `raw unpack`: the root file system only, without the bundle's mtree manifest (a sha256 of
    # every file: 30 s against 12 s for the cpu stack's 780 MB, under load)
    run_logged(["umoci", "raw", "unpack", *rootless, "--image", f"{layout}:{ref}", str(rootfs)], log, timeout_s,
               "an OCI image umoci unpacks", layout)
    return ref


def squashfs_from_oci(layout: str | Path, dest: str | Path, log=None, timeout_s: int = 1800) -> str:
    """Write the enroot squashfs image of the OCI image `layout` to `dest` (replaced atomically):
    unpacked by umoci (which checks every blob again), configured as enroot does, packed by mksquashfs.
    Returns the OCI digest it was made from (the `<dest>.sha256` beside it is the caller's)."""
    layout, dest = Path(layout), Path(dest)
    require_tools(layout, "cannot be converted to a squashfs image here")
    digest = oci_digest(layout)  # checks manifest, config and layers before anything is unpacked
    config = oci_config(layout)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{dest.name}.build.", dir=dest.parent)
    try:
        rootfs = Path(tmp) / "rootfs"
        ref = unpack_oci(layout, rootfs, log, timeout_s)
        manifest = json.loads(oci_blob(layout, digest).read_bytes())
        title = manifest.get("annotations", {}).get("org.opencontainers.image.title", "image")
        for entry in (rootfs / "dev").glob("*"):  # `enroot import` extracts with --exclude='dev/*'
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        enroot_configure(rootfs, config, f"oci:{title}:{ref}@{digest}")  # from the manifest: not the path
        out = Path(tmp) / dest.name
        run_logged(["mksquashfs", str(rootfs), str(out), *ENROOT_OPTIONS, *REPRODUCIBLE_OPTIONS], log, timeout_s,
                   "a root file system mksquashfs packs", dest)
        out.chmod(0o644)
        os.replace(out, dest)
    finally:
        remove_tree(tmp, timeout_s)
    return digest


def remove_tree(path: str | Path, timeout_s: int) -> None:
    """rm -rf: a third of the time shutil.rmtree takes over the 22,000 files of the cpu stack."""
    subprocess.run(["rm", "-rf", "--", str(path)], check=False, timeout=timeout_s)
