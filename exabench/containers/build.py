"""Building images from the recipes: `apptainer build` on a site with Apptainer; without it, the
same SIF file from a debootstrap + chroot build of the recipe, packed by mksquashfs and
assembled by siftool (exabench.containers.sif), or a Charliecloud directory image."""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from exabench.config import REPO_ROOT
from exabench.errors import ConfigError, ContainerError
import exabench.containers.runtimes as runtimes
from exabench.containers.digests import write_digest
from exabench.containers.recipes import Recipe, parse_recipe, recipe_path
from exabench.containers.runtime import built_image_path, runtime, stack_for, verified_digest
from exabench.containers.sif import (assemble_sif, build_labels, missing_build_tools, rootfs_arch,
                                     write_singularity_dir)
from exabench.containers.wheels import WheelSources, installed_labels, rewrite_pip, wheel_sources

DEBIAN_SUITE, DEBIAN_MIRROR = "bookworm", "http://deb.debian.org/debian"

def build_argv(site, stack: str, image: str | Path) -> list[str]:
    """`apptainer build [--fakeroot] IMAGE containers/<stack>.def` (or singularity)."""
    rt = runtime(site)
    if rt not in runtimes.names(builds_sif=True) + runtimes.names(converted=True):
        raise ConfigError(site.path or site.name, "container.runtime", rt,
                          "apptainer or singularity to build .sif images, pyxis or podman-hpc to convert them "
                          "(charliecloud: build_directory_image; shifter, cscs-edf: build the generated Dockerfile "
                          "and set container.image)",
                          "cannot build from the recipes here")
    fake = ["--fakeroot"] if (site.container or {}).get("fakeroot") else []
    builder = rt if runtimes.facts(rt).builds_sif else "apptainer"  # a converted image starts as Apptainer's SIF
    return [builder, "build", *fake, "--force", str(image), str(recipe_path(stack))]


def needed_images(site, frameworks, results_root: str | Path) -> list[str]:
    """The images this site builds from the recipes for runs of these frameworks: the SIF, or the
    image converted from it (pyxis: <stack>.sqsh, podman-hpc: <stack>.podman-hpc); none for a native
    site or one that names a prebuilt image."""
    built = runtimes.names(builds_sif=True) + runtimes.names(converted=True)
    if runtime(site) not in built or (site.container or {}).get("image"):
        return []
    return sorted({str(built_image_path(site, stack_for(site, f), results_root)) for f in frameworks})


def site_layers(site, recipe: Recipe) -> tuple[str, ...] | None:
    """The %post layers the site builds (`container.layers`; None = all of them)."""
    layers = tuple((site.container or {}).get("layers") or ())
    unknown = [name for name in layers if name not in recipe.layers]
    if unknown:
        raise ConfigError(site.path or site.name, "container.layers", list(layers),
                          f"layers of {recipe.path.name}: {', '.join(recipe.layers)}")
    return layers or None


def build_image(site, stack: str, image: str | Path, log_path: str | Path) -> str:
    """Build containers/<stack>.def into the SIF `image`, record its digest beside it, and check it
    against the site's pin (a stack-specific pin only makes sense with `stack`). With the site's
    runtime on the PATH: `apptainer build`; without it: build_sif_image (debootstrap, mksquashfs, siftool)."""
    recipe = parse_recipe(recipe_path(stack))
    layers = site_layers(site, recipe)
    wheels = wheel_sources(site)
    argv = build_argv(site, stack, image)
    if shutil.which(argv[0]) is not None and wheels is not None:
        raise ConfigError(site.path or site.name, "container.wheels", site.container.get("wheels"),
                          f"empty where {argv[0]} builds the image (local wheel sources are bound into the build "
                          "without it only: debootstrap + chroot)")
    if shutil.which(argv[0]) is None:
        missing = missing_build_tools()
        if not recipe.base.startswith("debian:bookworm"):
            missing.append(f"a debian:bookworm-* base (this recipe's is {recipe.base}; only Apptainer builds it)")
        if missing:
            raise ContainerError(site.path or site.name, "container.runtime", argv[0],
                                 f"a machine with {argv[0]} on its PATH to build {Path(image).name} (run "
                                 f"`snakemake --profile profiles/{site.name} containers` there, then copy the image "
                                 f"and its .sha256 to {Path(image).parent}), or container.image naming a prebuilt "
                                 f"image",
                                 f"is not installed here, so the image {image} cannot be built; building the SIF "
                                 f"without it needs: {'; '.join(missing)}")
        Path(image).parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as log:
            log.write(f"# {argv[0]} is not installed here: building {image} without it "
                      "(debootstrap + chroot, mksquashfs, siftool)\n")
            build_sif_image(recipe, image, layers, log=log, cache_dir=build_cache_dir(), wheels=wheels)
        return _sif_digest(site, image)
    Path(image).parent.mkdir(parents=True, exist_ok=True)
    if layers is not None:  # Apptainer builds the partial definition, kept beside the image
        from exabench.io import atomic_write_text
        partial = Path(str(image) + ".def")
        atomic_write_text(partial, recipe.definition(layers))
        argv[-1] = str(partial)
    with open(log_path, "w") as log:
        log.write("+ " + shlex.join(argv) + "\n")
        log.flush()
        subprocess.run(argv, check=True, stdout=log, stderr=subprocess.STDOUT,
                       cwd=REPO_ROOT)  # %files sources are relative to the repository
    write_digest(image)
    return _sif_digest(site, image)


def _sif_digest(site, image: str | Path) -> str:
    """The built SIF's digest, checked against the site's pin, except where the site runs an image
    converted from it (pyxis, podman-hpc: the pin is the converted image's, checked when a run renders)."""
    if runtimes.facts(runtime(site)).converted:
        return write_digest(image)
    return verified_digest(site, str(image)) or ""


def build_oci_image(sif: str | Path, image: str | Path, log_path: str | Path) -> str:
    """The OCI image layout `image` of the SIF `sif`'s root file system (exabench.containers.oci),
    its digest (the manifest's) recorded beside it as `<image>.sha256`; returns the digest."""
    from exabench.containers.oci import oci_from_sif
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write(f"# OCI image layout of {sif}'s root file system (unsquashfs, one gzip'd tar layer)\n")
        oci_from_sif(sif, image, log=log)
    return write_digest(image)


def build_sqsh_image(oci: str | Path, image: str | Path, log_path: str | Path) -> str:
    """Enroot's squashfs image `image` (`<stack>.sqsh`, what Pyxis runs) of the OCI image layout
    `oci` (exabench.containers.squashfs), its sha256 recorded beside it as `<image>.sha256`;
    returns that digest."""
    from exabench.containers.squashfs import squashfs_from_oci
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write(f"# enroot's squashfs image of the OCI image {oci} (umoci unpack, enroot's /etc files, mksquashfs)\n")
        squashfs_from_oci(oci, image, log=log)
    return write_digest(image)


def build_podman_hpc_store(oci: str | Path, store: str | Path, log_path: str | Path) -> str:
    """podman-hpc's migrated image store `store` (`<stack>.podman-hpc`, what `podman-hpc migrate`
    writes into its SQUASH_DIR) of the OCI image layout `oci` (exabench.containers.podman_hpc_store),
    its digest (the folder's canonical listing, squash included) recorded beside it as
    `<store>.sha256`; returns that digest."""
    from exabench.containers.podman_hpc_store import migrate_store
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write(f"# podman-hpc's migrated store of the OCI image {oci} (records, links, umoci unpack, mksquashfs)\n")
        log.write(f"# squash: {migrate_store(oci, store, log=log)}\n")
    return write_digest(store)


def build_cache_dir() -> Path | None:
    """Where debootstrap bases are kept between builds: $EXABENCH_BUILD_CACHE (empty: no cache),
    else $XDG_CACHE_HOME/exabench (~/.cache/exabench)."""
    if "EXABENCH_BUILD_CACHE" in os.environ:
        return Path(os.environ["EXABENCH_BUILD_CACHE"]) if os.environ["EXABENCH_BUILD_CACHE"] else None
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "exabench"


def build_sif_image(recipe: Recipe, image: str | Path, layers: tuple[str, ...] | None = None, log=None,
                    cache_dir: Path | None = None, timeout_s: int = 1800, wheels: WheelSources | None = None) -> str:
    """The SIF Apptainer would build from `recipe`, made without it: the root file system by
    build_directory_image, /.singularity.d as Apptainer writes it, packed and assembled by
    exabench.containers.sif. Returns the image's digest (also written to `<image>.sha256`)."""
    image = Path(image)
    image.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{image.name}.build.", dir=image.parent) as tmp:
        root = Path(tmp) / "rootfs"
        build_directory_image(recipe, root, layers, log=log, timeout_s=timeout_s, cache_dir=cache_dir, digest=False,
                              wheels=wheels)
        arch = rootfs_arch(root)
        definition = built_definition(recipe, layers, wheels)
        labels = build_labels(recipe.labels, recipe.header(), arch, _dt.datetime.now().astimezone(),
                              list(layers) if layers is not None else None)
        if wheels is not None:  # where pip's wheels came from, and what torch build that gave
            labels = dict(sorted({**labels, "org.exabench.wheels": wheels.label(), **installed_labels(root)}.items()))
        metadata = write_singularity_dir(root, definition, recipe.section("environment"), recipe.section("runscript"),
                                         labels)
        assemble_sif(root, image, definition, metadata, arch, log=log, timeout_s=timeout_s)
    return write_digest(image)


def built_definition(recipe: Recipe, layers: tuple[str, ...] | None, wheels: WheelSources | None) -> str:
    """The definition as built: recipe.definition with each pip install as it ran (local wheel sources)."""
    text = recipe.definition(layers)
    if wheels is None:
        return text
    commands = set(recipe.commands(layers))
    return "".join(line.replace(line.strip(), rewrite_pip(line.strip(), wheels)) if line.strip() in commands
                   else line for line in text.splitlines(keepends=True))


def debootstrap_base(dest: Path, base: str, run, cache_dir: Path | None, mirror: str = DEBIAN_MIRROR) -> None:
    """`debootstrap --variant=minbase bookworm DEST` for the recipe's `base`, copied from the cache
    when an earlier build made the same one (key: the base tag and the debootstrap command), and
    kept there otherwise. The recipe pins a dated base tag, so a kept base is the pinned one."""
    argv = ["debootstrap", "--variant=minbase", DEBIAN_SUITE, str(dest), mirror]
    key = hashlib.sha256(shlex.join([base, *argv[:3], mirror]).encode()).hexdigest()[:16]
    cached = cache_dir / "debootstrap" / key if cache_dir else None
    if cached is not None and (cached / "etc" / "debian_version").exists():
        dest.mkdir(parents=True, exist_ok=True)
        run(["cp", "-a", f"{cached}/.", str(dest)])
        return
    run(argv)
    if cached is None:
        return
    partial = None
    try:  # best effort: a read-only or full cache only costs the next build its debootstrap
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cached.parent))
        run(["cp", "-a", f"{dest}/.", str(partial)])
        os.replace(partial, cached)  # a concurrent build's copy already there: keep that one
    except (OSError, subprocess.SubprocessError):
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)


def build_directory_image(recipe: Recipe, dest: str | Path, layers: tuple[str, ...] | None = None,
                          mirror: str = DEBIAN_MIRROR, log=None, timeout_s: int = 900,
                          cache_dir: Path | None = None, digest: bool = True,
                          wheels: WheelSources | None = None) -> str | None:
    """Build a Debian-based recipe as a Charliecloud directory image, without Apptainer:
    debootstrap the base (bookworm minbase for `debian:bookworm-*`; kept in `cache_dir`), copy
    %files, write the %environment to /ch/environment, and run each %post command of `layers`
    as root in a private mount and pid namespace (unshare + chroot), with `wheels`' folders bound
    read-only at their own paths and each pip install reading them (exabench.containers.wheels).
    Returns the image's digest (also written to `<dest>.sha256`), or None with digest=False."""
    dest = Path(dest)
    if not recipe.base.startswith("debian:bookworm"):
        raise ConfigError(str(recipe.path), "From", recipe.base, "a debian:bookworm-* base for a directory build")
    env = {**os.environ, "USER": os.environ.get("USER") or "root", "DEBIAN_FRONTEND": "noninteractive"}

    def run(argv):
        if log is not None:
            log.write("+ " + shlex.join(argv) + "\n")
            log.flush()
        subprocess.run(argv, check=True, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                       timeout=timeout_s)

    if not (dest / "etc" / "debian_version").exists():
        debootstrap_base(dest, recipe.base, run, cache_dir, mirror)
    # %post runs as real root in a private mount+pid namespace (unshare + chroot): `ch-run -w`
    # maps the caller to root in a single-uid namespace, where dpkg's postinst `groupadd`
    # (openssh-client, libibverbs1) fails with code 10. ch-run then runs the image unprivileged.
    shutil.copy("/etc/resolv.conf", dest / "etc" / "resolv.conf")
    for src, target in recipe.files:
        run(["mkdir", "-p", str(dest / Path(target).parent.relative_to("/"))])
        run(["cp", "-r", str(REPO_ROOT / src), str(dest / Path(target).relative_to("/"))])
    (dest / "ch").mkdir(exist_ok=True)
    (dest / "ch" / "environment").write_text(
        "".join(f"{k}={v}\n" for k, v in recipe.environment.items()))
    # A build machine behind a TLS-intercepting proxy trusts its own CA (PIP_CERT, as here): lend
    # that bundle to pip for the build only; it is removed before the digest is taken.
    host_ca = os.environ.get("PIP_CERT") or os.environ.get("REQUESTS_CA_BUNDLE") or ""
    lent_ca = dest / "tmp" / "exabench-build-ca.crt"
    ca_env = []
    if host_ca and Path(host_ca).is_file():
        shutil.copy(host_ca, lent_ca)
        ca_env = ["PIP_CERT=/tmp/exabench-build-ca.crt"]
    mounts = wheels.mounts() if wheels is not None else []
    made = _mount_points(dest, mounts)
    # The binds live in the command's private mount namespace: gone when it ends.
    binds = "".join(f"mount --bind {shlex.quote(m)} {shlex.quote(str(dest) + m)} && mount -o remount,bind,ro "
                    f"{shlex.quote(str(dest) + m)} && " for m in mounts)
    try:
        for cmd in recipe.commands(layers):
            inside = ["chroot", str(dest), "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                      "DEBIAN_FRONTEND=noninteractive", *ca_env, "/bin/sh", "-ec", rewrite_pip(cmd, wheels)]
            if binds:
                inside = ["/bin/sh", "-ec", binds + "exec " + shlex.join(inside)]
            run(["unshare", "--mount", "--pid", "--fork", f"--mount-proc={dest / 'proc'}", *inside])
    finally:
        lent_ca.unlink(missing_ok=True)
        for d in reversed(made):  # the empty mount points made for the binds
            d.rmdir()
    return write_digest(dest) if digest else None


def _mount_points(root: Path, mounts: list[str]) -> list[Path]:
    """Make `root/<m>` for each mount, returning the folders made (parents first)."""
    made = []
    for m in mounts:
        missing = [p for p in [root / m.lstrip("/"), *(root / m.lstrip("/")).parents] if not p.exists()]
        for p in reversed(missing):
            p.mkdir()
            made.append(p)
    return made
