#!/usr/bin/env bash
# Download, on a machine with network, every wheel the GPU check needs beyond the GPU machine's own
# Python and torch (exabench/gpucheck/wheels.py), into .gpu-wheels/ (ignored by git). Copy the
# checkout with that folder to the GPU machine; scripts/gpu_check.sh installs from it offline.
#
#   GPU_WHEELS_PYTHONS="3.10 3.11 3.12" GPU_WHEELS_ARCHS="x86_64 aarch64" scripts/gpu_wheels.sh
#
# Defaults: this machine's Python version and architecture. The GPU machine's may differ: name its
# own (`python3 -V`, `uname -m` there).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
PYTHON=${PYTHON:-$here/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
out=$here/.gpu-wheels
pythons=${GPU_WHEELS_PYTHONS:-$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')}
archs=${GPU_WHEELS_ARCHS:-$(uname -m)}
mkdir -p "$out"
PYTHONPATH=$here "$PYTHON" -m exabench.gpucheck.wheels requirements.lock > "$out/requirements.txt"
for py in $pythons; do
  for arch in $archs; do
    echo "gpu_wheels: Python $py on $arch"
    "$PYTHON" -m pip download --quiet --only-binary=:all: --python-version "$py" \
      --platform "manylinux_2_28_$arch" --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" \
      -d "$out" -r "$out/requirements.txt" -c requirements.lock
  done
done
echo "gpu_wheels: $(ls "$out"/*.whl | wc -l) wheels in $out"
