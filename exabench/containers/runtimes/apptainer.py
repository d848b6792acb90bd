"""Apptainer: `apptainer exec [--nv|--rocm] --bind=... --env=... IMAGE program`, after the launcher
(OLCF Frontier, ALCF Polaris and Aurora). The host's MPI (Cray MPICH) and interconnect libraries
(libfabric, libcxi) are bound in (container.binds) and put on LD_LIBRARY_PATH (container.env);
`--nv` / `--rocm` bring the host's NVIDIA / AMD driver libraries and devices in. Intel GPUs (Aurora)
have no flag: /dev/dri is visible inside by default.

Sources: Apptainer User Guide, "GPU Support" (apptainer.org/docs/user/latest/gpu.html: --nv, --rocm)
and "Bind Paths and Mounts" (--bind src[:dest]); OLCF "Containers on Frontier"
(docs.olcf.ornl.gov/software/containers_on_frontier.html: Cray MPICH, libfabric and libcxi bound
from the host); ALCF "Containers on Aurora" (docs.alcf.anl.gov/aurora/containers/containers/).
"""

from __future__ import annotations

from exabench.containers.runtimes.facts import WRAPS, RuntimeFacts

FACTS = RuntimeFacts(name="apptainer", position=WRAPS, command="apptainer", gpu_flags=("", "--nv", "--rocm"),
                     host_mpi="the host's MPI and interconnect libraries bound in (container.binds) and put on "
                              "LD_LIBRARY_PATH (container.env)",
                     mounts="--bind=SRC[:DST]", image_form="a SIF file (/path/x.sif) or a URI (docker://, oras://)",
                     builds_sif=True, runs_built=True)


def exec_argv(command: str, site, image: str, binds: list[str], env: dict[str, str]) -> list[str]:
    """`<command> exec [gpu flag] --bind=... --env=... IMAGE`: Apptainer's and SingularityCE's shared form."""
    gpu = (site.container or {}).get("gpu_flag", "")
    argv = [command, "exec"] + ([gpu] if gpu else [])
    argv += [f"--bind={b}" for b in binds] + [f"--env={k}={v}" for k, v in sorted(env.items())]
    return argv + [image]


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    return exec_argv(FACTS.command, site, image, binds, env)
