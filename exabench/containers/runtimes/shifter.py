"""NERSC's Shifter: the image named in the batch header (`#SBATCH --image=docker:name:tag`, so
Slurm stages it on every node before the job starts) and on the line (`srun ... shifter
--image=docker:name:tag [--module=gpu,mpich] --volume=SRC:DST --env=K=V program`; the line's
`--image` is the header's, repeated so that the line also runs in an allocation made without it).
Shifter's modules inject the host's software: `gpu` the NVIDIA driver and CUDA libraries
(container.gpu_flag --gpu), `mpich` the host's Cray MPICH in place of the image's MPICH-ABI
library (container.mpi host). Images are pulled beforehand with `shifterimg pull docker:name:tag`.

Sources: NERSC "How to use Shifter" (docs.nersc.gov/development/containers/shifter/how-to-use/:
`#SBATCH --image=docker:image_name:latest`, `srun -n 64 shifter python3 ...`, `--module=gpu`,
`--module=mpich`, `--volume`, `--env`); shifter(1) (github.com/NERSC/shifter).
"""

from __future__ import annotations

import re

from exabench.containers.runtimes.facts import WRAPS, RuntimeFacts, volume

FACTS = RuntimeFacts(name="shifter", position=WRAPS, command="shifter", launchers=("srun",),
                     gpu_flags=("", "--gpu"),
                     host_mpi="--module=mpich (Shifter's module: the host's Cray MPICH), when container.mpi is host",
                     mounts="--volume=SRC:DST",
                     image_form="a pulled image, type:name:tag (docker:name:tag; a bare name:tag is docker:)")


def reference(image: str) -> str:
    """Shifter's type:name form of an image (a bare name is a Docker one)."""
    return image if re.match(r"^(docker|custom|id):", image) else f"docker:{image}"


def modules(site) -> list[str]:
    cont = site.container or {}
    wanted = ([cont["gpu_flag"].lstrip("-")] if cont.get("gpu_flag") else [])
    return wanted + (["mpich"] if cont.get("mpi") == "host" and site.mpi != "none" else [])


def directives(site, image: str) -> list[str]:
    """`#SBATCH --image=docker:name:tag`: Slurm stages the image on the job's nodes."""
    return [f"--image={reference(image)}"]


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    wanted = modules(site)
    out = ["shifter", f"--image={reference(image)}"] + ([f"--module={','.join(wanted)}"] if wanted else [])
    out += [volume(b) for b in binds]
    return out + [f"--env={k}={v}" for k, v in sorted(env.items())]
