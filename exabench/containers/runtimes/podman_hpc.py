"""NERSC's podman-hpc: `podman-hpc run --rm [--gpu] [--mpi] --volume=SRC:DST --env=K=V IMAGE
program`, after srun (one container per rank). `--gpu` and `--mpi` are podman-hpc's own modules:
the first brings the host's NVIDIA driver and devices in, the second the host's Cray MPICH and
Slingshot (libfabric, libcxi) libraries. The image is one migrated to the compute nodes' squashed
store (`podman-hpc migrate NAME`) and named as podman names it (localhost/name:tag); without
container.image, the store the rules make from the recipe (rule container_podman_hpc,
exabench.containers.podman_hpc_store: `<image_dir>/<stack>.podman-hpc`, what `podman-hpc migrate`
writes into its squash directory), named to podman-hpc by its group option `--squash-dir` before
`run` (NERSC/podman-hpc podman_hpc/podman_hpc.py, the `podhpc` group's options), and the image by
the name its images.json gives it.

Sources: NERSC "Podman at NERSC" (docs.nersc.gov/development/containers/podman-hpc/overview/:
`srun -n 2 podman-hpc run --rm --mpi ...`, `--gpu`, `podman-hpc migrate`); github.com/NERSC/podman-hpc.
"""

from __future__ import annotations

import json
from pathlib import Path

from exabench import __version__
from exabench.containers.runtimes.facts import WRAPS, RuntimeFacts, volume

FACTS = RuntimeFacts(name="podman-hpc", position=WRAPS, command="podman-hpc", launchers=("srun",),
                     gpu_flags=("", "--gpu"),
                     host_mpi="--mpi (podman-hpc's module: the host's Cray MPICH and libfabric), when site.mpi "
                              "is not none",
                     mounts="--volume=SRC:DST",
                     image_form="an image migrated with `podman-hpc migrate`, by name (localhost/name:tag), or "
                                "the store rule container_podman_hpc makes (/path/<stack>.podman-hpc)",
                     local_image=(".podman-hpc",), runs_built=True, built_suffix=".podman-hpc", converted=True,
                     built_by="container_podman_hpc")


def store_image(store: str) -> str:
    """The name podman-hpc finds the image by in a store the rules made: its images.json's first
    name; before the store is built (a script rendered elsewhere), the name the rule gives it."""
    records = Path(store) / "overlay-images" / "images.json"
    if records.is_file():
        names = (json.loads(records.read_text()) or [{}])[0].get("names") or []
        if names:
            return names[0]
    return f"localhost/exabench/{Path(store).name.removesuffix('.podman-hpc')}:{__version__}"


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    gpu = (site.container or {}).get("gpu_flag", "")
    # a store folder (absolute path): podman-hpc's squash directory, the image its name in it
    store = ["--squash-dir", image] if image.startswith("/") else []
    out = ["podman-hpc", *store, "run", "--rm"] + ([gpu] if gpu else []) + (["--mpi"] if site.mpi != "none" else [])
    out += [volume(b) for b in binds]
    return out + [f"--env={k}={v}" for k, v in sorted(env.items())] + [store_image(image) if store else image]
