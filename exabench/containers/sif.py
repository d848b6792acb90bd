"""SIF images without Apptainer: the Singularity Image Format as Apptainer's `build` writes it.

Apptainer's SIF assembler (apptainer/apptainer internal/pkg/build/assemblers/sif.go, with the
sylabs/apptainer `sif` library) writes, in this order, all in object group 1:
  1. the definition file, unnamed (data type Deffile, 0x4001);
  2. one Generic JSON object (0x4006) per JSON document, sorted by name: `inspect-metadata.json`
     (what `apptainer inspect` reads: labels, environment, runscript, definition) and, for
     images pulled from a registry, `oci-config.json`;
  3. the root file system as a squashfs (`mksquashfs ROOTFS OUT -noappend -comp gzip`), a
     Partition object (0x4004) of file system Squash, type primary system, and the architecture
     of the root file system's /bin/sh (4096-byte aligned); the header's primary architecture follows it;
and the header's launch script `#!/usr/bin/env run-singularity` (the file is executable).
Environment and labels are not SIF objects in Apptainer's images (the EnvVar and Labels data
types exist but Apptainer never writes them): they live inside the root file system under
/.singularity.d (env/90-environment.sh, labels.json), where its runtime reads them.

Here: the root file system comes from exabench.containers.build.build_directory_image, this
module adds /.singularity.d, packs it with mksquashfs and assembles the file with `siftool`
(Debian's package of the format's reference tool); `read_sif` reads a SIF's header and
descriptors back. docs/containers.md lists where the result differs from Apptainer's.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from exabench import __version__
from exabench.errors import ContainerError
from exabench.io import removed_on_error

# Descriptor data types (sif.DataType) by value; `siftool add --datatype N` takes value - 0x4000.
DATA_TYPES = {
    0x4001: "deffile",
    0x4002: "envvar",
    0x4003: "labels",
    0x4004: "partition",
    0x4005: "signature",
    0x4006: "generic-json",
    0x4007: "generic",
    0x4008: "crypto-message",
    0x4009: "sbom",
    0x400A: "oci-root-index",
    0x400B: "oci-blob",
}
FS_TYPES = {
    1: "squashfs",
    2: "ext3",
    3: "immutable-archive",
    4: "raw",
    5: "encrypted-squashfs",
    6: "gocryptfs-squashfs",
}
PART_TYPES = {1: "system", 2: "primary-system", 3: "data", 4: "overlay"}
FS_SQUASH, PART_PRIMARY_SYSTEM = 1, 2
# Architectures in the format's order: the header's code is "%02d" of position + 1, which is
# also the number `siftool add --partarch` takes.
ARCHES = (
    "386",
    "amd64",
    "arm",
    "arm64",
    "ppc64",
    "ppc64le",
    "mips",
    "mipsle",
    "mips64",
    "mips64le",
    "s390x",
    "riscv64",
    "loong64",
)
# ELF (e_machine, 64-bit, little-endian) of the root file system's /bin/sh -> Go architecture name,
# as Apptainer's machine.ArchFromContainer decides it.
ELF_ARCHES = {
    (3, False, True): "386",
    (62, True, True): "amd64",
    (40, False, True): "arm",
    (183, True, True): "arm64",
    (21, True, False): "ppc64",
    (21, True, True): "ppc64le",
    (22, True, False): "s390x",
    (243, True, True): "riscv64",
    (258, True, True): "loong64",
}
OBJECT_GROUP = 1  # sif.DefaultObjectGroup: every object Apptainer's build adds
LAUNCH_SCRIPT = b"#!/usr/bin/env run-singularity\n"
INSPECT_METADATA = "inspect-metadata.json"  # the object `apptainer inspect` reads, by name
MKSQUASHFS_FLAGS = ("-noappend", "-comp", "gzip")  # Apptainer's defaults (gzip: every squashfs reader has it)
HEADER = struct.Struct("<32s10s3s3s16sqqqqqqqq")  # launch, magic, version, arch, id, times, descriptor/data extents
DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")  # type, used, id, group, link, offset, size, padded size, ...
GROUP_MASK = 0xF0000000
SIF_PACKAGES = {
    "debootstrap": "debootstrap",
    "mksquashfs": "squashfs-tools",
    "siftool": "siftool",
    "unshare": "util-linux",
    "chroot": "coreutils",
}


@dataclass(frozen=True)
class Descriptor:
    id: int
    data_type: str
    group: int
    link: int
    offset: int
    size: int
    name: str
    fs_type: str | None = None  # partitions only
    part_type: str | None = None
    arch: str | None = None


@dataclass(frozen=True)
class SifFile:
    launch_script: bytes
    version: str
    arch: str
    id: str
    descriptors: list

    def primary_partition(self) -> Descriptor | None:
        return next((d for d in self.descriptors if d.part_type == "primary-system"), None)


def _arch_name(code: bytes) -> str:
    text = code.rstrip(b"\0").decode("ascii", "replace")
    return ARCHES[int(text) - 1] if text.isdigit() and 1 <= int(text) <= len(ARCHES) else "unknown"


def read_sif(path: str | Path) -> SifFile:
    """The header and the used descriptors of a SIF file (raises ContainerError when it is not one)."""
    with open(path, "rb") as f:
        head = f.read(HEADER.size)
        if len(head) < HEADER.size or head[32:42] != b"SIF_MAGIC\0":
            raise ContainerError(
                str(path), "image", Path(path).name, "a SIF file (magic SIF_MAGIC at byte 32)", "is not a SIF file"
            )
        launch, _, version, arch, uid, _, _, _, total, offset, _, _, _ = HEADER.unpack(head)
        f.seek(offset)
        table = f.read(total * DESCRIPTOR.size)
    descriptors = []
    for i in range(total):
        (dtype, used, did, group, link, off, size, _, _, _, _, _, name, extra) = DESCRIPTOR.unpack_from(
            table, i * DESCRIPTOR.size
        )
        if not used:
            continue
        fs = part = arch_of = None
        if DATA_TYPES.get(dtype) == "partition":
            fs_code, part_code = struct.unpack_from("<ii", extra)
            fs, part, arch_of = (
                FS_TYPES.get(fs_code, str(fs_code)),
                PART_TYPES.get(part_code, str(part_code)),
                _arch_name(extra[8:11]),
            )
        descriptors.append(
            Descriptor(
                did,
                DATA_TYPES.get(dtype, hex(dtype)),
                group & ~GROUP_MASK,
                link,
                off,
                size,
                name.rstrip(b"\0").decode("utf-8", "replace"),
                fs,
                part,
                arch_of,
            )
        )
    uuid = uid.hex()
    return SifFile(
        launch.rstrip(b"\0"),
        version.rstrip(b"\0").decode(),
        _arch_name(arch),
        f"{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:20]}-{uuid[20:]}",
        descriptors,
    )


def elf_arch(path: str | Path) -> str | None:
    """The Go architecture name of an ELF executable, or None when it is not one we know."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    is64, little = head[4] == 2, head[5] == 1
    machine = struct.unpack_from("<H" if little else ">H", head, 18)[0]
    return ELF_ARCHES.get((machine, is64, little))


def _inside(root: Path, path: str) -> Path:
    """`path` resolved inside the root file system `root`: its links point into it, not the host."""
    parts, resolved = list(Path(path).parts[1:]), []
    for _ in range(256):  # bounded: a link loop gives up where it is
        if not parts:
            break
        part = parts.pop(0)
        if part == "..":
            resolved = resolved[:-1]
        elif part not in ("", "."):
            candidate = root.joinpath(*resolved, part)
            if candidate.is_symlink():
                target = Path(os.readlink(candidate))
                resolved = [] if target.is_absolute() else resolved
                parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
            else:
                resolved.append(part)
    return root.joinpath(*resolved)


def rootfs_arch(root: str | Path) -> str:
    shell = _inside(Path(root), "/bin/sh")
    arch = elf_arch(shell) if shell.is_file() else None
    if arch is None:
        raise ContainerError(
            str(root),
            "/bin/sh",
            "?",
            ", ".join(ARCHES),
            "is missing or of an architecture the SIF format does not name",
        )
    return arch


def missing_build_tools() -> list[str]:
    """What a SIF build without Apptainer lacks here, each as `tool (Debian package)`."""
    missing = [f"{tool} (apt-get install -y {pkg})" for tool, pkg in SIF_PACKAGES.items() if not shutil.which(tool)]
    if os.geteuid() != 0:
        missing.append(
            "root (debootstrap and the chroot that runs %post need it; or build with "
            "`apptainer build --fakeroot` where Apptainer is installed)"
        )
    return missing


# --- what Apptainer keeps inside the image (/.singularity.d) ------------------------------------


def _go_json(obj, indent: str | None = None) -> str:
    """JSON as Go's encoding/json writes it: maps sorted by key, <, > and & escaped."""
    text = json.dumps(obj, indent=indent, ensure_ascii=False, separators=None if indent else (",", ":"))
    for char, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(char, escaped)
    return text


def build_labels(recipe_labels: dict, header: dict, arch: str, now: _dt.datetime, layers: list[str] | None) -> dict:
    """labels.json: the labels Apptainer's build adds (schema version, creation time, the
    definition's header, architecture), then the recipe's %labels; a partial build says which
    %post layers it ran in org.exabench.layers."""
    utc = now.utcoffset() == _dt.timedelta(0)
    created = now.strftime("%Y-%m-%dT%H:%M:%S") + (
        "Z" if utc else now.strftime("%z")[:3] + ":" + now.strftime("%z")[3:]
    )
    labels = {
        "org.label-schema.schema-version": "1.0",
        "org.opencontainers.image.created": created,
        "org.label-schema.build-date": (
            f"{now:%A}_{now.day}_{now:%B}_{now.year}_{now.hour}:{now.minute}:{now.second}_{now.tzname() or 'UTC'}"
        ),
        "org.opencontainers.image.architecture": arch,
        "org.label-schema.build-arch": arch,
        "org.exabench.sif-builder": f"exabench {__version__} (debootstrap, mksquashfs, siftool)",
    }
    labels.update({f"org.label-schema.usage.singularity.deffile.{k.lower()}": v for k, v in header.items()})
    labels.update(recipe_labels)
    if layers is not None:
        labels["org.exabench.layers"] = ",".join(layers)
    return dict(sorted(labels.items()))


def _shell_script(body: str) -> str:
    return f"#!/bin/sh\n\n{body.strip()}\n"


# Files a runtime sources or runs, in exabench's words. Apptainer >= 3.x runs its own action script
# (sourcing env/*.sh in order); older runtimes run /.singularity.d/actions/*; both need these.
_ENV_SOURCE = 'for script in /.singularity.d/env/*.sh; do\n    [ -f "$script" ] && . "$script"\ndone'
_ACTIONS = {
    "exec": f'{_ENV_SOURCE}\nexec "$@"',
    "run": f'{_ENV_SOURCE}\nexec /.singularity.d/runscript "$@"',
    "shell": f'{_ENV_SOURCE}\nexec /bin/sh "$@"',
    "test": f'{_ENV_SOURCE}\n[ -x /.singularity.d/test ] && exec /.singularity.d/test "$@"\nexit 0',
    "start": f"{_ENV_SOURCE}\n[ -x /.singularity.d/startscript ] && exec /.singularity.d/startscript\nexit 0",
}
_ENV_FILES = {
    # Sourced first: nothing to set here; kept so images sort their scripts like Apptainer's.
    "01-base.sh": "# exabench: base environment (empty).",
    # Sourced last among the image's scripts: Apptainer injects its --env variables right after it.
    "99-base.sh": (
        "# exabench: libraries a runtime binds in (--nv, --rocm) are searched last.\n"
        'LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/.singularity.d/libs"\n'
        "export LD_LIBRARY_PATH"
    ),
}


def write_singularity_dir(
    root: str | Path, definition: str, environment_script: str, runscript: str, labels: dict
) -> dict:
    """Write /.singularity.d as Apptainer's build leaves it (definition, labels.json,
    env/90-environment.sh, runscript, action scripts, the top-level links) and return the
    inspect metadata that goes into the SIF's `inspect-metadata.json` object."""
    root = Path(root)
    sd = root / ".singularity.d"
    for d in (
        sd / "libs",
        sd / "actions",
        sd / "env",
        root / "dev",
        root / "proc",
        root / "root",
        root / "var/tmp",
        root / "tmp",
        root / "etc",
        root / "sys",
        root / "home",
    ):
        d.mkdir(parents=True, exist_ok=True)
    files = {
        sd / "Singularity": (definition, 0o644),
        sd / "labels.json": (_go_json(labels, "\t"), 0o644),
        sd / "env/90-environment.sh": (
            f"#!/bin/sh\n# exabench: the recipe's %environment\n\n{environment_script.strip()}\n",
            0o755,
        ),
        sd / "runscript": (_shell_script(runscript or 'echo "this image has no runscript"'), 0o755),
    }
    files.update({sd / "env" / name: (_shell_script(text), 0o755) for name, text in _ENV_FILES.items()})
    files.update({sd / "actions" / name: (_shell_script(text), 0o755) for name, text in _ACTIONS.items()})
    for path, (text, mode) in files.items():
        path.write_text(text)
        path.chmod(mode)
    for target, link in (
        (".singularity.d/runscript", "singularity"),
        (".singularity.d/actions/run", ".run"),
        (".singularity.d/actions/exec", ".exec"),
        (".singularity.d/actions/test", ".test"),
        (".singularity.d/actions/shell", ".shell"),
        (".singularity.d/env/90-environment.sh", "environment"),
    ):
        (root / link).unlink(missing_ok=True)
        (root / link).symlink_to(target)
    for name in ("hosts", "resolv.conf"):  # empty: the runtime binds the host's over them, the build host's stay out
        (root / "etc" / name).write_text("")
    env_path = "/.singularity.d/env/90-environment.sh"
    attributes = {
        "environment": {env_path: (sd / "env/90-environment.sh").read_text().rstrip("\n")},
        "labels": labels,
        "runscript": (sd / "runscript").read_text().rstrip("\n"),
        "deffile": definition.rstrip("\n"),
    }
    return {"data": {"attributes": attributes}, "type": "container"}


# --- packing and assembling ----------------------------------------------------------------------


def _run(argv: list[str], log, timeout_s: int) -> None:
    if log is not None:
        log.write("+ " + shlex.join(argv) + "\n")
        log.flush()
    subprocess.run(argv, check=True, timeout=timeout_s, stdout=log, stderr=subprocess.STDOUT if log else None)


def assemble_sif(
    root: str | Path,
    image: str | Path,
    definition: str,
    inspect_metadata: dict,
    arch: str,
    log=None,
    timeout_s: int = 1800,
) -> None:
    """Pack `root` as squashfs and write the SIF `image` (atomically: a temp file beside it, renamed)."""
    image = Path(image)
    image.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{image.name}.", dir=image.parent) as tmp:
        tmp = Path(tmp)
        squashfs, deffile, metadata, sif = (
            tmp / "rootfs.squashfs",
            tmp / "definition",
            tmp / INSPECT_METADATA,
            tmp / image.name,
        )
        deffile.write_text(definition)
        metadata.write_text(_go_json(inspect_metadata))
        _run(["mksquashfs", str(root), str(squashfs), *MKSQUASHFS_FLAGS, "-quiet", "-no-progress"], log, timeout_s)
        group = ["--groupid", str(OBJECT_GROUP)]
        _run(["siftool", "new", str(sif)], log, 60)
        _run(["siftool", "add", str(sif), str(deffile), "--datatype", "1", *group], log, 60)
        _run(
            ["siftool", "add", str(sif), str(metadata), "--datatype", "6", "--filename", INSPECT_METADATA, *group],
            log,
            60,
        )
        _run(
            [
                "siftool",
                "add",
                str(sif),
                str(squashfs),
                "--datatype",
                "4",
                "--partfs",
                str(FS_SQUASH),
                "--parttype",
                str(PART_PRIMARY_SYSTEM),
                "--partarch",
                str(ARCHES.index(arch) + 1),
                *group,
            ],
            log,
            timeout_s,
        )
        with open(sif, "r+b") as f:  # siftool leaves the launch script empty; Apptainer's makes the file runnable
            f.write(LAUNCH_SCRIPT.ljust(32, b"\0"))
            f.flush()
            os.fsync(f.fileno())
        sif.chmod(0o755)
        os.replace(sif, image)


def extract_partition(image: str | Path, dest: str | Path) -> Path:
    """Copy a SIF's primary system partition (a squashfs, runnable by `ch-run` or mountable by
    squashfuse) to `dest`, atomically; kept while it is newer than the image."""
    image, dest = Path(image), Path(dest)
    if dest.exists() and dest.stat().st_mtime >= image.stat().st_mtime:
        return dest
    part = read_sif(image).primary_partition()
    if part is None or part.fs_type != "squashfs":
        raise ContainerError(
            str(image),
            "primary system partition",
            part and part.fs_type,
            "a squashfs partition",
            "is missing, so the image cannot run without Apptainer",
        )
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    with removed_on_error(tmp):
        with open(image, "rb") as src, os.fdopen(fd, "wb") as out:
            src.seek(part.offset)
            left = part.size
            while left:
                block = src.read(min(left, 1 << 22))
                if not block:
                    raise ContainerError(str(image), "partition", part.id, "a complete SIF file", "is truncated")
                out.write(block)
                left -= len(block)
        os.replace(tmp, dest)
    return dest
