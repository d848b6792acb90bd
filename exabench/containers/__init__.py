"""Containers: the Apptainer recipes (containers/*.def), their Dockerfile equivalents, image
digests, and the command that runs one rank inside a site's image.

Recipes are parsed with spython (the Singularity/Apptainer recipe parser) and converted to
Dockerfiles with its DockerWriter, so Docker, Podman and Charliecloud users get the same
stack. A run executes inside its image when the site names a container runtime: the launcher
starts `apptainer exec [--nv|--rocm] --bind ... --env ... IMAGE python3 -m exabench.runner`
on every rank, and the image's digest travels to the record through EXABENCH_CONTAINER_*
variables (exabench.records.record.provenance reads them). An image whose digest differs from the
site's pin is refused before any script is written. Without Apptainer, the SIF it would build is
made by debootstrap + chroot, mksquashfs and siftool (sif.py), and run with Charliecloud's ch-run;
the OCI image of a stack is the SIF's root file system as an OCI image layout (oci.py).
"""

from exabench.containers.build import *  # noqa: F401,F403 - the package's API, by submodule
from exabench.containers.digests import *  # noqa: F401,F403
from exabench.containers.oci import oci_from_sif, unpacked_rootfs  # noqa: F401
from exabench.containers.recipes import *  # noqa: F401,F403
from exabench.containers.runtime import *  # noqa: F401,F403
from exabench.containers.sif import *  # noqa: F401,F403
from exabench.errors import ContainerError  # noqa: F401
