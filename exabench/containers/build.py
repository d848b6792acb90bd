"""Building images from the recipes: `apptainer build` on a site with Apptainer, or a
Charliecloud directory image (debootstrap + chroot) without it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from exabench.config import REPO_ROOT
from exabench.errors import ConfigError, ContainerError
from exabench.containers.digests import write_digest
from exabench.containers.recipes import Recipe, recipe_path
from exabench.containers.runtime import built_image_path, runtime, stack_for, verified_digest

def build_argv(site, stack: str, image: str | Path) -> list[str]:
    """`apptainer build [--fakeroot] IMAGE containers/<stack>.def` (or singularity)."""
    rt = runtime(site)
    if rt not in ("apptainer", "singularity"):
        raise ConfigError(site.path or site.name, "container.runtime", rt,
                          "apptainer or singularity to build .sif images (charliecloud: build_directory_image; "
                          "podman/shifter: build the generated Dockerfile and set container.image)",
                          "cannot build from the recipes here")
    fake = ["--fakeroot"] if (site.container or {}).get("fakeroot") else []
    return [rt, "build", *fake, "--force", str(image), str(recipe_path(stack))]


def needed_images(site, frameworks, results_root: str | Path) -> list[str]:
    """The images this site builds from the recipes for runs of these frameworks (none for a
    native site or one that names a prebuilt image)."""
    if runtime(site) not in ("apptainer", "singularity") or (site.container or {}).get("image"):
        return []
    return sorted({str(built_image_path(site, stack_for(site, f), results_root)) for f in frameworks})


def build_image(site, stack: str, image: str | Path, log_path: str | Path) -> str:
    """Build containers/<stack>.def into `image` with the site's runtime, record its digest beside
    it, and check it against the site's pin (a stack-specific pin only makes sense with `stack`)."""
    argv = build_argv(site, stack, image)
    if shutil.which(argv[0]) is None:
        raise ContainerError(site.path or site.name, "container.runtime", argv[0],
                             f"a machine with {argv[0]} on its PATH to build {Path(image).name} (run "
                             f"`snakemake --profile profiles/{site.name} containers` there, then copy the image and "
                             f"its .sha256 to {Path(image).parent}), or container.image naming a prebuilt image",
                             f"is not installed here, so the image {image} cannot be built")
    Path(image).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        log.write("+ " + shlex.join(argv) + "\n")
        log.flush()
        subprocess.run(argv, check=True, stdout=log, stderr=subprocess.STDOUT,
                       cwd=REPO_ROOT)  # %files sources are relative to the repository
    write_digest(image)
    return verified_digest(site, str(image)) or ""


def build_directory_image(recipe: Recipe, dest: str | Path, layers: tuple[str, ...] | None = None,
                          mirror: str = "http://deb.debian.org/debian", log=None, timeout_s: int = 900) -> str:
    """Build a Debian-based recipe as a Charliecloud directory image, without Apptainer:
    debootstrap the base (bookworm minbase for `debian:bookworm-*`), copy %files, write the
    %environment to /ch/environment, and run each %post command of `layers` with `ch-run -w`.
    Returns the image's digest (also written to `<dest>.sha256`)."""
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
        run(["debootstrap", "--variant=minbase", "bookworm", str(dest), mirror])
    # %post runs as real root in a private mount+pid namespace (unshare + chroot): `ch-run -w`
    # maps the caller to root in a single-uid namespace, where dpkg's postinst `groupadd`
    # (openssh-client, libibverbs1) fails with code 10. ch-run then runs the image unprivileged.
    import shutil
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
    try:
        for cmd in recipe.commands(layers):
            run(["unshare", "--mount", "--pid", "--fork", f"--mount-proc={dest / 'proc'}", "chroot", str(dest),
                 "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                 "DEBIAN_FRONTEND=noninteractive", *ca_env, "/bin/sh", "-ec", cmd])
    finally:
        lent_ca.unlink(missing_ok=True)
    return write_digest(dest)
