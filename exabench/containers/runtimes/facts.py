"""What a container runtime module declares about itself (its FACTS), so that every list of
runtimes (the site file's valid names, those the recipes build a SIF for, those that need a given
launcher) is derived from the modules, as launchers' facts are.

A runtime is one module in exabench/containers/runtimes/ with `FACTS = RuntimeFacts(...)` and
`argv(site, image, binds, env, mount=None) -> list[str]`: the words that sit between the
launcher's own options and the program. For a runtime that wraps the program (`apptainer exec
... IMAGE`) they start with its command; for one that is a set of launcher options (Pyxis'
`--container-image=...`, CSCS' `--environment=...`) they are those options, which the launcher
reads because its options end only at the program's first word, then `env K=V` to set the rank's
variables inside the container. A runtime whose image is named in the batch header (Shifter's
`#SBATCH --image=...`) also has `directives(site, image) -> list[str]`; one whose image is a file
that must mount the run's paths itself (a CSCS environment file) has `unmounted(image, binds)`.
"""

from __future__ import annotations

from dataclasses import dataclass

WRAPS, LAUNCHER_OPTIONS = "wraps the program", "launcher options"


@dataclass(frozen=True)
class RuntimeFacts:
    name: str                 # the site file's `container.runtime` value
    position: str             # WRAPS (`apptainer exec IMAGE program`) or LAUNCHER_OPTIONS (`srun --container-image=`)
    command: str = ""         # the wrapper's first word (argv); "" for launcher options
    launchers: tuple = ()     # the launchers it works with (): any
    gpu_flags: tuple = ("",)  # the container.gpu_flag values it takes ("": none; GPUs come in by themselves)
    host_mpi: str = ""        # how the host's MPI and interconnect reach the ranks, in its own words
    mounts: str = ""          # how host paths are mounted, in its own words
    image_form: str = ""      # the image reference it takes, in its own words
    local_image: tuple = ()   # suffixes an image given as a path must end with (() : any path)
    image_by_name: bool = True  # it also takes an image by name or URI (else only a local file, ending local_image)
    builds_sif: bool = False  # the container rules build the recipes' SIF for it (apptainer build or without it)
    runs_built: bool = False  # it runs the image the rules build; else the site names one (container.image)
    built_suffix: str = ".sif"  # the image file the rules make for it, under image_dir
    converted: bool = False   # the rules make its image from the SIF they build (via the OCI image: pyxis' .sqsh)
    built_by: str = ""        # the rule that converts it (converted: container_sqsh, container_podman_hpc)


def volume(bind: str) -> str:
    """`--volume=SRC:DST` (podman, docker, shifter) for a bind given as a path (mounted where it is)
    or as SRC:DST already."""
    return f"--volume={bind}:{bind}" if ":" not in bind else f"--volume={bind}"


def env_words(env: dict[str, str]) -> list[str]:
    """`env K=V ...`: the rank's variables set inside the container by the program's own first
    words (a runtime that is launcher options has no flag of its own for them)."""
    return ["env", *[f"{k}={v}" for k, v in sorted(env.items())]] if env else []
