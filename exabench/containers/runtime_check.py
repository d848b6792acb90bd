"""A site's container setting checked against its runtime's facts (exabench.containers.runtimes),
so that a wrong one stops the site file from loading, one line naming file, key, value and what
the runtime takes, before anything is rendered or submitted: a runtime that does not exist, a
launcher it cannot ride on, a GPU flag it does not have, an image in a form it cannot run (a SIF
given to Pyxis) or none where it builds none; an image the rules convert (Pyxis' .sqsh) that is
not made yet.

The files themselves (a local image, a bind's source) are checked where they are: at render time
when their folder is on this machine (the login node that submits), and by check_files at job
start, before any rank starts (exabench.containers.runtime.check_before_start)."""

from __future__ import annotations

from pathlib import Path

import exabench.containers.runtimes as runtimes
from exabench.errors import ConfigError, ContainerError


def _shown(flags) -> str:
    return ", ".join(f"'{f}'" if f else "'' (none)" for f in flags)


# The GPU flags that bring one vendor's GPUs in (Apptainer User Guide, "GPU Support": --nv, --rocm;
# podman-hpc's and Docker's --gpu: NVIDIA's container toolkit). Intel GPUs need none (/dev/dri).
GPU_FLAG_VENDOR = {"--nv": "nvidia", "--rocm": "amd", "--gpu": "nvidia"}


def check_setting(path: str, container: dict, launcher: str, gpus: int = 0, gpu_vendor: str = "none") -> None:
    """Refuse a container setting the runtime it names cannot run, or that hides the node's GPUs from
    the container (ConfigError): `--nv` on AMD nodes, no flag where the runtime needs one."""
    name = (container or {}).get("runtime", runtimes.NONE) or runtimes.NONE
    if name == runtimes.NONE:
        return
    if name not in runtimes.RUNTIMES:
        raise ConfigError(path, "container.runtime", name, runtimes.valid_names())
    facts = runtimes.facts(name)
    if facts.launchers and launcher not in facts.launchers:
        raise ConfigError(path, "launcher", launcher, f"{', '.join(facts.launchers)} with container.runtime {name} "
                          f"(its container: {facts.position}; its image: {facts.image_form})", "cannot start it")
    gpu = container.get("gpu_flag", "")
    if gpu not in facts.gpu_flags:
        raise ConfigError(path, "container.gpu_flag", gpu, f"{_shown(facts.gpu_flags)} with container.runtime {name}",
                          f"is not a flag {name} has")
    _check_gpu_flag(path, name, gpu, facts.gpu_flags, gpus, gpu_vendor)
    image = container.get("image", "")
    if not image and not facts.runs_built:
        raise ConfigError(path, "container.image", image, f"the image {name} runs: {facts.image_form}",
                          f"is empty, and exabench builds no image {name} runs")
    if image and facts.local_image and (image.startswith("/") or not facts.image_by_name) \
            and not (image.startswith("/") and image.endswith(facts.local_image)):
        raise ConfigError(path, "container.image", image, f"{facts.image_form}: an absolute path ending "
                          f"{' or '.join(facts.local_image)}", f"is not an image {name} runs")


def _check_gpu_flag(path: str, runtime: str, flag: str, flags: tuple, gpus: int, vendor: str) -> None:
    wanted = [f for f in flags if GPU_FLAG_VENDOR.get(f) == vendor]
    meant = GPU_FLAG_VENDOR.get(flag)
    if meant and gpus and meant != vendor:
        raise ConfigError(path, "container.gpu_flag", flag, f"{_shown(wanted) if wanted else repr('')} with "
                          f"container.runtime {runtime} on {vendor} GPUs (node.gpu.vendor)",
                          f"brings {meant} GPUs in, and the nodes' are {vendor}")
    if not flag and gpus and wanted:
        raise ConfigError(path, "container.gpu_flag", flag, f"{_shown(wanted)} with container.runtime {runtime} on "
                          f"{vendor} GPUs (node.gpu.vendor)", f"hides the node's {gpus} GPUs from the container")


def local_files(site, image: str, binds: list[str]) -> list[tuple[str, str]]:
    """(key, path) of every file the runtime needs on the nodes: a local image it cannot fetch
    itself (a squashfs, an environment file) and each bind's source."""
    facts = runtimes.facts(site.container.get("runtime"))
    out = [("container.image", image)] if facts.local_image and image.startswith("/") else []
    return out + [("container.binds", b.partition(":")[0]) for b in binds if b.startswith("/")]


def check_files(site_file: str, runtime: str, files, here_only: bool = False) -> None:
    """Refuse a file the runtime needs that is not there (ContainerError). With `here_only`
    (render time), a file is checked only when its folder exists on this machine: a script rendered
    for another machine names files this one does not have."""
    for key, path in files:
        p = Path(path)
        if p.exists() or (here_only and not p.parent.is_dir()):
            continue
        raise ContainerError(site_file, key, path, f"a path that exists on the compute nodes ({runtime} mounts or "
                             "runs it; make it, or correct the site file)", "does not exist")


def check_built_image(site, image: str) -> None:
    """A site running the image the rules convert from the recipe (pyxis without container.image:
    `<image_dir>/<stack>.sqsh`; podman-hpc: `<stack>.podman-hpc`) whose image is not there, where its folder is on this machine:
    named with the rule that makes it (ContainerError), before anything is rendered."""
    facts = runtimes.facts(site.container.get("runtime"))
    path = Path(image)
    if site.container.get("image") or not facts.converted or path.exists() or not path.parent.is_dir():
        return
    raise ContainerError(site.path or site.name, "container.image_dir", str(path.parent),
                         f"a folder holding {path.name}, which rule {facts.built_by} makes from the stack's OCI image "
                         f"(`snakemake --profile profiles/{site.name} containers` builds the SIF, its OCI image and "
                         f"the {facts.built_suffix}), or container.image naming one: {facts.image_form}",
                         f"has no {path.name} for container.runtime {facts.name}")


def check_image_mounts(site, image: str, binds: list[str]) -> None:
    """An image file that mounts the run's paths itself (a CSCS environment file: the runtime's
    module has `unmounted`), when it is here, must mount every host path the run needs (the results
    folder first): the line has no mount option, so a path missing from its `mounts` would leave
    the ranks without their spec and record folder."""
    module = runtimes.RUNTIMES.get(site.container.get("runtime"))
    if not hasattr(module, "unmounted") or not Path(image).is_file():
        return
    try:
        missing = module.unmounted(image, binds)
    except (OSError, ValueError) as exc:  # tomllib.TOMLDecodeError is a ValueError
        raise ContainerError(site.path or site.name, "container.image", image,
                             f"a readable file: {module.FACTS.image_form}", f"cannot be read ({exc})") from None
    if missing:
        raise ContainerError(site.path or site.name, "container.image", image,
                             f"an environment file whose mounts include {', '.join(missing)} "
                             f"(mounts = [\"{missing[0]}:{missing[0]}\", ...])", "does not mount what the run needs")
