#!/usr/bin/env bash
# Real container check on a machine without Apptainer (CI, laptops): build the `cpu` stack's
# base, core and check layers from containers/cpu.def as a directory image (debootstrap of
# Debian bookworm minbase + the recipe's %files and %post run as root in an unshare+chroot),
# run K-Means tiny on 2 ranks inside it with Charliecloud's ch-run through the rendered launch
# line, and check the record carries the image's digest. The frameworks layer (torch +
# TensorFlow, about 5 GB) is left out on purpose. Needs root, user namespaces, and
#   apt-get install -y --no-install-recommends debootstrap charliecloud-runtime openmpi-bin
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
exec "$PY" -m pytest -ra -p no:cacheprovider tests/test_containers.py -k real_cpu_image
