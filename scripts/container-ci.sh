#!/usr/bin/env bash
# Real container check on a machine without Apptainer (CI, laptops): Snakemake's container_image
# rule builds the `cpu` stack's base, core and check layers from containers/cpu.def as a SIF
# (debootstrap of Debian bookworm minbase + the recipe's %files and %post run as root in an
# unshare+chroot, Apptainer's /.singularity.d, mksquashfs, siftool), siftool checks its layout,
# K-Means tiny runs on 2 ranks from its squashfs partition with Charliecloud's ch-run through
# the rendered launch line, and the record must carry the SIF's digest; the container_oci rule
# writes the SIF's root file system as an OCI image, and a K-Means campaign runs in it (umoci
# unpacks it for ch-run), its record carrying the OCI digest. The frameworks layer
# (torch + TensorFlow, about 5 GB) is left out on purpose. Needs root, user namespaces, and
#   apt-get install -y --no-install-recommends debootstrap squashfs-tools siftool umoci charliecloud-runtime openmpi-bin
# The debootstrap base is kept under ~/.cache/exabench (EXABENCH_BUILD_CACHE= to build it afresh).
# Usage: scripts/container-ci.sh [image-dir]   (default: a temporary directory, removed after)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export USER="${USER:-$(id -un)}"   # ch-run refuses to start without it
if [[ $# -ge 1 ]]; then
    mkdir -p "$1"
    export EXABENCH_CI_IMAGE_DIR="$(cd "$1" && pwd)"
fi
"$PY" -m exabench.containers lint
exec "$PY" -m pytest -ra -p no:cacheprovider tests/integration/test_containers.py -k "real_cpu or sif_has"
