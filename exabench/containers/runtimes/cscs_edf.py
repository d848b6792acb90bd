"""The CSCS container engine on Alps: no wrapper command; srun itself takes the container as
`srun ... --environment=FILE.toml env K=V ... program`. The environment definition file (EDF, a
TOML file) names the image (`image = "/capstor/.../x.sqsh"`, made by `enroot import`, or a
registry name), its mounts (`mounts = ["SRC:DST", ...]`: the results folder must be among them),
its working directory, and annotations that turn on the hooks injecting the host's software: the
CXI hook (Slingshot libfabric, `com.hooks.cxi.enabled`), the AWS OFI NCCL hook and the GPU CDI
devices. Hence no mount or GPU flag on the line: both are in the file, which exabench checks.

Sources: CSCS "Container Engine" (docs.cscs.ch/software/container-engine/run/: `srun --environment=
<name or absolute path to the .toml>`; .../edf/: the EDF entries `image`, `mounts`, `workdir`, `env`;
.../resource-hook/: `[annotations]` com.hooks.cxi.enabled, com.hooks.aws_ofi_nccl.enabled).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from exabench.containers.runtimes.facts import LAUNCHER_OPTIONS, RuntimeFacts, env_words

FACTS = RuntimeFacts(name="cscs-edf", position=LAUNCHER_OPTIONS, launchers=("srun",), gpu_flags=("",),
                     host_mpi="the EDF's hooks ([annotations] com.hooks.cxi.enabled, com.hooks.aws_ofi_nccl.enabled) "
                              "inject the host's libfabric/CXI and NCCL plug-in",
                     mounts="in the environment file (mounts = [\"SRC:DST\", ...]), not on the line",
                     image_form="an environment definition file (/path/env.toml) naming the image",
                     local_image=(".toml",), image_by_name=False)


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    return [f"--environment={image}"] + env_words(env)


def unmounted(image: str, binds: list[str]) -> list[str]:
    """The host paths a run needs (the results folder, the site's binds) that the environment file
    `image` does not mount: its `mounts` entries are SRC:DST strings, and a path under a mounted
    source is reached through it. The runtime has no option on the line to add them."""
    with open(image, "rb") as f:
        mounts = tomllib.load(f).get("mounts", [])
    sources = [Path(str(m).split(":")[0]) for m in mounts]
    return [b for b in binds if not any(Path(b.split(":")[0]).is_relative_to(src) for src in sources)]
