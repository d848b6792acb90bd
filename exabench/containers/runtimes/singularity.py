"""SingularityCE: `singularity exec [--nv|--rocm] --bind=... --env=... IMAGE program`, the same form
as Apptainer (its fork), after the launcher (Summit, Theta, Stampede2 ran Singularity).

Sources: SingularityCE User Guide, "GPU Support" (docs.sylabs.io/guides/latest/user-guide/gpu.html:
--nv, --rocm) and "Bind Paths and Mounts"; OLCF Summit "Containers" (Singularity with --nv, Spectrum
MPI from the host).
"""

from __future__ import annotations

from exabench.containers.runtimes.apptainer import exec_argv
from exabench.containers.runtimes.facts import WRAPS, RuntimeFacts

FACTS = RuntimeFacts(name="singularity", position=WRAPS, command="singularity", gpu_flags=("", "--nv", "--rocm"),
                     host_mpi="the host's MPI libraries bound in (container.binds, container.env)",
                     mounts="--bind=SRC[:DST]", image_form="a SIF file (/path/x.sif) or a URI (docker://, library://)",
                     builds_sif=True, runs_built=True)


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    return exec_argv(FACTS.command, site, image, binds, env)
