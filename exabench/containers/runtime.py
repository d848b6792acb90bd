"""A site's image and the command that runs one rank inside it: the stack a run needs, where
its image lives, the runtime's words on the launch line (one module per runtime in runtimes/:
`apptainer exec ... IMAGE`, Pyxis' `--container-image=...`) with binds and environment, and the
digest check before a job starts. The digest travels to the record through EXABENCH_CONTAINER_* variables."""

from __future__ import annotations

import os
from pathlib import Path

from exabench.errors import ConfigError, ContainerError
from exabench.containers.digests import DIGEST, digest_file, recorded_digest, write_digest
import exabench.containers.runtimes as runtimes
from exabench.containers.recipes import gpu_arch_supported, recipe_labels
from exabench.containers.runtime_check import check_built_image, check_image_mounts, check_files, local_files

URI_SCHEMES = ("oras://", "docker://", "library://", "shub://")
# Environment variables the exec line sets; the runner's provenance() reads them back.
ENV_RUNTIME, ENV_IMAGE, ENV_DIGEST, ENV_STACK = ("EXABENCH_CONTAINER_RUNTIME", "EXABENCH_CONTAINER_IMAGE",
                                                "EXABENCH_CONTAINER_DIGEST", "EXABENCH_CONTAINER_STACK")
ENV_VERIFIED = "EXABENCH_CONTAINER_VERIFIED"  # 1: digest computed from the image at render time
CONTAINER_PYTHON = "python3"  # on PATH through the recipe's %environment (/opt/venv/bin)


def runtime(site) -> str:
    return (site.container or {}).get("runtime", "none") or "none"


def uses_container(site) -> bool:
    return runtime(site) != "none"


def _candidates(site, framework: str | None) -> tuple[str, ...]:
    """The stacks that could serve a run, in STACKS order: those whose recipe carries the run's
    framework (org.exabench.torch / .tensorflow) and the GPU vendor's toolkit (.cuda / .rocm)."""
    from exabench.containers.recipes import STACKS
    vendor = site.node.gpu_vendor if site.node.gpus else "none"
    toolkit = {"nvidia": "org.exabench.cuda", "amd": "org.exabench.rocm"}.get(vendor)
    wanted = "org.exabench.tensorflow" if framework and "tensorflow" in framework else "org.exabench.torch"
    out = []
    for stack in STACKS:
        labels = recipe_labels(stack)
        has_toolkit = {k: labels.get(k, "none") != "none" for k in ("org.exabench.cuda", "org.exabench.rocm")}
        if (has_toolkit.get(toolkit, False) if toolkit else not any(has_toolkit.values())) \
                and labels.get(wanted, "none") != "none":
            out.append(stack)
    return tuple(out) or (("cpu",) if vendor == "none" else ())


def image_mismatch(site, stack: str) -> str:
    """Why the image of `stack` cannot run on the site's nodes ("" when it can): the CPU
    architecture its recipe declares (org.exabench.arch) and the GPU generations its framework
    build ships kernels for (org.exabench.gpu_arch)."""
    labels = recipe_labels(stack)
    problems = []
    archs = labels.get("org.exabench.arch", "").split()
    if site.node.arch not in archs:
        problems.append(f"it is built for {', '.join(archs) or 'no declared architecture'}, the nodes are "
                        f"{site.node.arch}")
    gpu_archs = labels.get("org.exabench.gpu_arch", "none").split()
    if site.node.gpus and site.node.gpu_arch and not gpu_arch_supported(gpu_archs, site.node.gpu_arch):
        problems.append(f"its framework ships GPU kernels for {' '.join(gpu_archs)}, not the nodes' "
                        f"{site.node.gpu_arch} ({site.node.gpu_model or site.node.gpu_vendor})")
    return "; ".join(problems)


def stack_for(site, framework: str | None) -> str:
    """The stack a run needs: the site's `container.stack`, else the first stack for the GPU vendor
    and framework whose image runs on the site's nodes (check_image_runs stops a plan with none)."""
    chosen = (site.container or {}).get("stack", "")
    if chosen:
        return chosen
    candidates = _candidates(site, framework)
    if not candidates:  # no stack carries this framework for this GPU vendor: check_image_runs says so
        return "pytorch-rocm" if site.node.gpu_vendor == "amd" else "cpu"
    return next((s for s in candidates if not image_mismatch(site, s)), candidates[0])


def check_image_runs(site, framework: str | None) -> None:
    """Stop the plan when the image a run would get cannot run on the site's nodes."""
    if not uses_container(site):
        return
    stack = stack_for(site, framework)
    why = image_mismatch(site, stack)
    if not (site.container or {}).get("stack") and stack not in _candidates(site, framework):
        why = f"it has no {framework} for {site.node.gpu_vendor} GPUs" + (f"; {why}" if why else "")
    if not why:
        return
    node = f"{site.node.arch}" + (f", GPU {site.node.gpu_arch}" if site.node.gpus and site.node.gpu_arch else "")
    if (site.container or {}).get("stack"):
        raise ConfigError(site.path, "container.stack", stack, "a stack built for the site's nodes "
                          "(docs/containers.md, 'Architectures')",
                          f"cannot run on site '{site.name}' ({node}): containers/{stack}.def: {why}")
    tried = _candidates(site, framework)
    valid = (f"nodes one of the stacks {', '.join(tried)} is built for" if tried else
             f"a campaign without {framework} benchmarks on this site (no stack ships {framework} for "
             f"{site.node.gpu_vendor} GPUs)")
    raise ConfigError(site.path, "node", node, f"{valid}, or a prebuilt container.image with container.stack "
                      "(docs/containers.md, 'Architectures')",
                      f"has no {framework or 'cpu'} image: containers/{stack}.def cannot run there: {why}")


def image_dir(site, results_root: str | Path) -> Path:
    configured = (site.container or {}).get("image_dir", "")
    return Path(configured) if configured else Path(results_root) / "images"


def built_image_path(site, stack: str, results_root: str | Path) -> Path:
    suffix = runtimes.facts(runtime(site)).built_suffix  # ch-run runs a directory image (.d)
    return (image_dir(site, results_root) / f"{stack}{suffix}").resolve()


def site_image(site, stack: str, results_root: str | Path) -> str:
    """The image reference a site runs: its prebuilt `container.image`, else the built one."""
    return (site.container or {}).get("image", "") or str(built_image_path(site, stack, results_root))


def is_uri(image: str) -> bool:
    return image.startswith(URI_SCHEMES) or "://" in image or not image.startswith("/")


def verified_digest(site, image: str) -> str | None:
    """The image's digest, checked against the site's pin; raises ContainerError on a mismatch.

    A file or directory image is hashed when its recorded digest (`<image>.sha256`) is missing
    or older than the image (for a directory, than anything in it); an image not built yet
    gives None (nothing to check). A URI is trusted to resolve to the digest it names
    (`docker://name@sha256:...`) or the site's pin; with neither, the digest is unknown (None).
    """
    where, pinned = site.path or site.name, (site.container or {}).get("digest", "")
    if is_uri(image):
        named = DIGEST.search(image)
        if named and pinned and named.group(0) != pinned:
            raise ContainerError(where, "container.digest", pinned, f"the digest the image names ({named.group(0)})",
                                 f"does not match container.image {image}")
        return (named.group(0) if named else None) or pinned or None
    path = Path(image)
    if not path.exists():
        # Not built yet (a script rendered for another machine, a dry run): the pin, if any,
        # travels unverified; the container rules build the image before a real run renders.
        return None
    side = digest_file(path)
    fresh = side.exists() and side.stat().st_mtime >= _newest_mtime(path)
    actual = recorded_digest(path) if fresh else None
    actual = actual or write_digest(path)
    if pinned and actual != pinned:
        raise ContainerError(where, "container.digest", pinned, f"the image's actual digest {actual}",
                             f"does not match {image}: the image changed since it was pinned; refusing to run "
                             "(rebuild or re-pull the pinned image, or pin the new digest on purpose)")
    return actual


def _newest_mtime(path: Path) -> float:
    """A file's mtime; for a directory image the newest over its tree (stat only, no reading)."""
    newest = path.lstat().st_mtime
    if path.is_dir():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                newest = max(newest, (Path(dirpath) / name).lstat().st_mtime)
    return newest


def _literal_prefix(path: str) -> str:
    """The part of a path before its first $VAR component (a bind must be known at render time)."""
    parts = []
    for part in path.split("/"):
        if "$" in part:
            break
        parts.append(part)
    prefix = "/".join(parts)
    return prefix if prefix.startswith("/") and prefix != "/" else ""


def bind_paths(site, results_root: str | Path) -> list[str]:
    """Host paths the container needs: results (spec in, record out), scratch, node-local storage,
    the data set, and the site's own binds (host MPI libraries among them)."""
    storage, cont = site.storage or {}, site.container or {}
    wanted = [str(Path(results_root).resolve())]
    wanted += [_literal_prefix(storage.get(k, "")) for k in ("pfs", "node_local", "stage_in_from")]
    wanted += list(cont.get("binds", []))
    out = []
    for b in wanted:
        if b and b not in out:
            out.append(b)
    return out


def container_env(site, stack: str, image: str, digest: str | None, env: dict | None = None) -> dict[str, str]:
    out = {k: str(v) for k, v in (env or {}).items()}
    out.update({k: str(v) for k, v in (site.container or {}).get("env", {}).items()})
    out.update({ENV_RUNTIME: runtime(site), ENV_IMAGE: image, ENV_STACK: stack, ENV_DIGEST: digest or ""})
    return out


def exec_prefix(site, image: str, binds: list[str], env: dict[str, str], mount: str | Path | None = None) -> list[str]:
    """The runtime's words between the launcher's options and the program (its module's argv:
    a wrapper such as `apptainer exec ... IMAGE`, or launcher options such as Pyxis'
    `--container-image=IMAGE`); `mount`: where ch-run mounts a squashfs image."""
    rt = runtime(site)
    if rt not in runtimes.RUNTIMES:
        raise ConfigError(site.path or site.name, "container.runtime", rt, runtimes.valid_names())
    return runtimes.RUNTIMES[rt].argv(site, image, binds, env, mount)


def wrap_program(site, spec_path: str | Path, framework: str | None, env: dict | None,
                 results_root: str | Path) -> list[str]:
    """The argv one rank runs: the runner inside the site's image, its digest checked first."""
    stack = stack_for(site, framework)
    image = site_image(site, stack, results_root)
    digest = verified_digest(site, image)
    verified = digest is not None and not is_uri(image)
    digest = digest or (site.container or {}).get("digest", "") or None
    binds = bind_paths(site, results_root)
    # a squashfs or environment file missing on the machine that submits stops the render here
    check_built_image(site, image)
    check_files(site.path or site.name, runtime(site), local_files(site, image, []), here_only=True)
    check_image_mounts(site, image, binds)
    program = [CONTAINER_PYTHON, "-m", "exabench.runner", "--spec", str(Path(spec_path).resolve())]
    cenv = container_env(site, stack, image, digest, env)
    cenv[ENV_VERIFIED] = "1" if verified else "0"
    runnable = runnable_image(site, image, digest if verified else None)
    mount = charliecloud_mount_point(site, runnable, results_root)
    return exec_prefix(site, runnable, binds, cenv, mount) + program


def runnable_image(site, image: str, digest: str | None = None) -> str:
    """What the runtime is handed: the image itself, except for ch-run, which runs directories
    and squashfs files but neither SIF nor OCI images: a SIF's primary system partition, copied
    beside it as `<image>.squashfs` (the same bytes), or an OCI image's root file system, unpacked
    by umoci into `<image>.bundle/rootfs` (its blobs checked against `digest`). The record names
    the image itself and its digest."""
    if runtime(site) != "charliecloud" or is_uri(image):
        return image
    if image.endswith(".sif"):
        from exabench.containers.sif import extract_partition
        partition = Path(image + ".squashfs")
        if Path(image).is_file():
            extract_partition(image, partition)
        return str(partition)
    from exabench.containers.digests import is_oci_layout
    from exabench.containers.oci import unpacked_rootfs
    if is_oci_layout(image):
        return str(unpacked_rootfs(image, digest or verified_digest(site, image) or ""))
    if image.rstrip("/").endswith(".oci"):  # not here (a script rendered for another machine): named
        return image.rstrip("/") + ".bundle/rootfs"
    return image


def charliecloud_mount_point(site, image: str, results_root: str | Path) -> Path | None:
    """Where every rank's ch-run mounts a squashfs image: `<results>/ch-mount`, made here, at
    render time, before any rank starts; None when nothing is mounted (another runtime, a
    directory image, an image by name).

    Without --mount, each ch-run makes its default mount point /var/tmp/$USER.ch/mnt itself,
    checking for it and then calling mkdir: two ranks starting together on a node where it does
    not exist yet both try, and the loser dies with "can't mkdir: /var/tmp/<user>.ch: File
    exists". A point that already exists is shared safely: each ch-run mounts the image in its
    own mount namespace, so any number of ranks, on any number of nodes, use the same empty
    folder. It is made only where the image is (a script rendered for another machine names it).
    """
    if runtime(site) != "charliecloud" or is_uri(image) or Path(image).is_dir() \
            or image.endswith((".d", "/", ".bundle/rootfs")):
        return None
    point = Path(results_root).resolve() / "ch-mount"
    if Path(image).is_file():
        try:
            point.mkdir(parents=True, exist_ok=True)  # exist_ok: renders running at once agree
        except OSError as exc:
            raise ContainerError(site.path or site.name, "container.runtime", "charliecloud",
                                 "a results folder this user can write", f"needs the mount point {point} for "
                                 f"{image}, which cannot be made ({exc.strerror})") from None
    return point


def pin_for_run(site, framework: str | None, results_root: str | Path) -> dict | None:
    """The image and digest a run was rendered against (kept in its spec), or None when native."""
    if not uses_container(site):
        return None
    image = site_image(site, stack_for(site, framework), results_root)
    digest = verified_digest(site, image) or (site.container or {}).get("digest", "") or None
    return {"image": image, "digest": digest, "site_file": site.path or site.name, "runtime": runtime(site),
            "files": local_files(site, image, bind_paths(site, results_root))}


def check_before_start(pin: dict | None) -> None:
    """Refuse to start a run whose local image no longer has the digest it was rendered with
    (the image was rebuilt or replaced between rendering and the job starting), or one whose
    runtime misses a file it needs on the nodes (a squashfs image, an environment file, a bind's
    source), before any rank starts."""
    if not pin:
        return
    _check_pinned_digest(pin)
    if os.environ.get("EXABENCH_REHEARSAL_SITE"):
        return  # a rehearsal (exabench.rehearsal) runs the ranks bare here: the nodes' files are the centre's
    check_files(pin["site_file"], pin.get("runtime", ""), pin.get("files", ()))


def _check_pinned_digest(pin: dict) -> None:
    if not pin.get("digest") or is_uri(pin["image"]) or not Path(pin["image"]).exists():
        return
    path = Path(pin["image"])
    side = digest_file(path)
    fresh = side.exists() and side.stat().st_mtime >= _newest_mtime(path)
    actual = (recorded_digest(path) if fresh else None) or write_digest(path)
    if actual != pin["digest"]:
        raise ContainerError(pin["site_file"], "container.digest", pin["digest"], f"the image's actual digest {actual}",
                             f"does not match {pin['image']} at job start: the image changed after the job "
                             "script was rendered; refusing to run (re-render, or pin the new digest on purpose)")


def provenance_from_env(environ=None) -> dict | None:
    """The container a rank runs in, as the exec line told it; None when native."""
    environ = os.environ if environ is None else environ
    if not environ.get(ENV_RUNTIME):
        return None
    return {"runtime": environ[ENV_RUNTIME], "image": environ.get(ENV_IMAGE) or None,
            "stack": environ.get(ENV_STACK) or None, "digest": environ.get(ENV_DIGEST) or None,
            "digest_verified": environ.get(ENV_VERIFIED) == "1"}
