"""Docker (a workstation or a cloud node, not a batch system): `docker run --rm [--gpus=all]
--volume=SRC:DST --env=K=V IMAGE program`.

Source: Docker reference, "docker container run" (docs.docker.com/reference/cli/docker/container/run/:
--gpus, --volume, --env).
"""

from __future__ import annotations

from exabench.containers.runtimes.facts import WRAPS, RuntimeFacts, volume

FACTS = RuntimeFacts(name="docker", position=WRAPS, command="docker", gpu_flags=("", "--gpu"),
                     host_mpi="none (the image's own MPI)", mounts="--volume=SRC:DST",
                     image_form="an image name (name:tag)")


def argv(site, image: str, binds: list[str], env: dict[str, str], mount=None) -> list[str]:
    gpu = (site.container or {}).get("gpu_flag", "")
    out = ["docker", "run", "--rm"] + (["--gpus=all"] if gpu else [])
    out += [volume(b) for b in binds]
    return out + [f"--env={k}={v}" for k, v in sorted(env.items())] + [image]
