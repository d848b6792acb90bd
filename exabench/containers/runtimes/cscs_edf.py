"""The CSCS container engine on Alps: no wrapper command; srun itself takes the container as
`srun ... --environment=FILE.toml env K=V ... program`. The environment definition file (EDF, a
TOML file) names the image (`image = "/capstor/.../x.sqsh"`, made by `enroot import`, or a
registry name), its mounts (`mounts = ["SRC:DST", ...]`: the results folder must be among them),
its working directory, and annotations that turn on the hooks injecting the host's software: the
CXI hook (Slingshot libfabric, `com.hooks.cxi.enabled`), the AWS OFI NCCL hook and the GPU CDI
devices. Hence no mount or GPU flag on the line: both are in the file, which exabench checks.

Sources: CSCS "Container Engine" (docs.cscs.ch/software/container-engine/: `srun --environment=
<name or absolute path to the .toml>`, `image`, `mounts`, `workdir`, `[annotations]`
com.hooks.aws_ofi_nccl.enabled, com.hooks.cxi.enabled).
"""

from __future__ import annotations

from exabench.containers.runtimes.facts import LAUNCHER_OPTIONS, RuntimeFacts, env_words

FACTS = RuntimeFacts(name="cscs-edf", position=LAUNCHER_OPTIONS, launchers=("srun",), gpu_flags=("",),
                     host_mpi="the EDF's hooks ([annotations] com.hooks.cxi.enabled, com.hooks.aws_ofi_nccl.enabled) "
                              "inject the host's libfabric/CXI and NCCL plug-in",
                     mounts="in the environment file (mounts = [\"SRC:DST\", ...]), not on the line",
                     image_form="an environment definition file (/path/env.toml) naming the image",
                     local_image=(".toml",))


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    return [f"--environment={image}"] + env_words(env)
