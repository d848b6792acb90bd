"""NERSC's podman-hpc: `podman-hpc run --rm [--gpu] [--mpi] --volume=SRC:DST --env=K=V IMAGE
program`, after srun (one container per rank). `--gpu` and `--mpi` are podman-hpc's own modules:
the first brings the host's NVIDIA driver and devices in, the second the host's Cray MPICH and
Slingshot (libfabric, libcxi) libraries. The image is one migrated to the compute nodes' squashed
store (`podman-hpc migrate NAME`) and named as podman names it (localhost/name:tag).

Sources: NERSC "Podman at NERSC" (docs.nersc.gov/development/containers/podman-hpc/overview/:
`srun -n 2 podman-hpc run --rm --mpi ...`, `--gpu`, `podman-hpc migrate`); github.com/NERSC/podman-hpc.
"""

from __future__ import annotations

from exabench.containers.runtimes.facts import WRAPS, RuntimeFacts, volume

FACTS = RuntimeFacts(name="podman-hpc", position=WRAPS, command="podman-hpc", launchers=("srun",),
                     gpu_flags=("", "--gpu"),
                     host_mpi="--mpi (podman-hpc's module: the host's Cray MPICH and libfabric), when site.mpi "
                              "is not none",
                     mounts="--volume=SRC:DST",
                     image_form="an image migrated with `podman-hpc migrate`, by name (localhost/name:tag)")


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    gpu = (site.container or {}).get("gpu_flag", "")
    out = ["podman-hpc", "run", "--rm"] + ([gpu] if gpu else []) + (["--mpi"] if site.mpi != "none" else [])
    out += [volume(b) for b in binds]
    return out + [f"--env={k}={v}" for k, v in sorted(env.items())] + [image]
