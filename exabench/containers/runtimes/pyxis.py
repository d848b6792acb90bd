"""Pyxis (NVIDIA's Slurm SPANK plugin) with enroot, on DGX SuperPODs and many NVIDIA-based Slurm
clusters: no wrapper command; srun itself takes the container as options,
`srun ... --container-image=IMAGE --container-mounts=SRC:DST[,SRC:DST...] --no-container-mount-home
env K=V ... program`. The image is a squashfs file made by `enroot import docker://...` (a path on
the compute nodes) or an enroot URI (`nvcr.io#nvidia/pytorch:24.01-py3`), imported at the step's
start. Without container.image, the image is the one the rules make from the recipe:
`<image_dir>/<stack>.sqsh`, enroot's squashfs of the stack's OCI image (rule container_sqsh,
exabench.containers.squashfs). The host's MPI is not injected: the image's MPI (HPC-X, Open MPI) is started by Slurm through
PMIx (`srun --mpi=pmix`: launcher_options.srun_mpi), enroot's PMIx hook passing the PMIx socket in;
enroot's NVIDIA hook brings every GPU the step was given (no flag). Variables are set by `env`
inside the container: pyxis lets the image's own ENV override the host's.

Sources: NVIDIA pyxis README and wiki "Usage" (github.com/NVIDIA/pyxis/wiki/Usage:
--container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH, --container-mounts=SRC:DST[:FLAGS][,...],
--no-container-mount-home; "Supports multi-node MPI jobs through PMI2 or PMIx"); pyxis FAQ
("srun --mpi=pmix"); enroot "import" (github.com/NVIDIA/enroot/blob/master/doc/cmd/import.md).
"""

from __future__ import annotations

from exabench.containers.runtimes.facts import LAUNCHER_OPTIONS, RuntimeFacts, env_words

FACTS = RuntimeFacts(name="pyxis", position=LAUNCHER_OPTIONS, launchers=("srun",), gpu_flags=("",),
                     host_mpi="none: the image's MPI through Slurm's PMIx (srun --mpi=pmix, launcher_options.srun_mpi)",
                     mounts="--container-mounts=SRC:DST[,SRC:DST...]",
                     image_form="a squashfs file from `enroot import` or rule container_sqsh (/path/x.sqsh) or an "
                                "enroot URI (nvcr.io#nvidia/pytorch:24.01-py3)",
                     local_image=(".sqsh", ".squashfs"), runs_built=True, built_suffix=".sqsh", converted=True,
                     built_by="container_sqsh")


def _mount(bind: str) -> str:
    return bind if ":" in bind else f"{bind}:{bind}"


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    out = [f"--container-image={image}"]
    out += [f"--container-mounts={','.join(_mount(b) for b in binds)}"] if binds else []
    return out + ["--no-container-mount-home"] + env_words(env)
