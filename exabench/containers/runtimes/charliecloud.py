"""Charliecloud: `ch-run --set-env --bind=... [--mount=DIR] --set-env=K=V IMAGE -- program`, after
the launcher. ch-run runs a directory image or a squashfs file: for a SIF, its system partition,
which exabench copies beside the SIF; for an OCI image layout, its root file system, which umoci
unpacks beside it (exabench.containers.runtime.runnable_image); a bare --set-env
reads the image's /ch/environment. No GPU flag: the host's libraries are injected once into the
image (`ch-fromhost --nvidia`), and the host MPI likewise (`ch-fromhost --cray-mpi`).

Sources: Charliecloud documentation, "ch-run" (hpc.github.io/charliecloud/ch-run.html: --bind,
--mount, --set-env) and "ch-fromhost" (--nvidia, --cray-mpi).
"""

from __future__ import annotations

from exabench.containers.runtimes.facts import WRAPS, RuntimeFacts

FACTS = RuntimeFacts(name="charliecloud", position=WRAPS, command="ch-run", gpu_flags=("",),
                     host_mpi="injected into the image beforehand (ch-fromhost --cray-mpi)",
                     mounts="--bind=SRC[:DST]",
                     image_form="a directory image, a squashfs file, a SIF (its partition runs) or an OCI image "
                                "layout (unpacked by umoci)",
                     builds_sif=False, built_suffix=".d", runs_built=True)


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    out = ["ch-run", "--set-env"] + [f"--bind={b}" for b in binds]  # bare --set-env: the image's /ch/environment
    out += [f"--mount={mount}"] if mount else []
    return out + [f"--set-env={k}={v}" for k, v in sorted(env.items())] + [image, "--"]
