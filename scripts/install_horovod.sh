#!/usr/bin/env bash
# Build Horovod 0.28.1 (PyTorch + MPI + Gloo, no TensorFlow/MXNet) into a venv.
#
#   scripts/install_horovod.sh <venv>
#
# Idempotent: does nothing when `import horovod.torch` already works in <venv>.
# Why a patched sdist: 0.28.1 (the last release) pins C++14 in CMakeLists.txt and
# horovod/torch/CMakeLists.txt, while torch 2.x headers need C++17 (shared/PLATFORM.md).
# Needs cmake, g++ and an MPI with headers (openmpi-bin, libopenmpi-dev); torch must
# already be in <venv> (--no-build-isolation builds against that torch).
set -euo pipefail
venv=${1:?usage: scripts/install_horovod.sh <venv>}
python="$venv/bin/python"
version=0.28.1
[ -x "$python" ] || { echo "install_horovod: no python at $python" >&2; exit 1; }

if "$python" -c "import horovod.torch" 2>/dev/null; then
  echo "install_horovod: horovod.torch already importable in $venv"
  exit 0
fi
for tool in cmake g++ mpicxx; do
  command -v "$tool" >/dev/null || { echo "install_horovod: $tool not found (apt-get install cmake g++ libopenmpi-dev)" >&2; exit 1; }
done
"$python" -c "import torch" || { echo "install_horovod: torch must be installed in $venv first" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
echo "install_horovod: fetching horovod==$version sdist"
"$python" -m pip download --no-deps --no-binary :all: --no-build-isolation -d "$work" "horovod==$version" >"$log" 2>&1 \
  || { cat "$log" >&2; exit 1; }
tar -xzf "$work/horovod-$version.tar.gz" -C "$work"
src="$work/horovod-$version"
patch() { # file, sed expression, text that must be there first
  grep -qF "$3" "$1" || { echo "install_horovod: '$3' not in $1: sdist changed?" >&2; exit 1; }
  sed -i "$2" "$1"
}
# C++14 -> 17 for Horovod's core; its torch extension gets the standard torch's own headers
# demand (torch >= 2.10 refuses anything below C++20: torch/csrc/api/include/torch/all.h).
torch_std=$("$python" - <<'PY'
import pathlib, torch
header = pathlib.Path(torch.__file__).parent / "include/torch/csrc/api/include/torch/all.h"
print(20 if header.exists() and "202002L" in header.read_text() else 17)
PY
)
patch "$src/CMakeLists.txt" 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' 'CMAKE_CXX_STANDARD 14'
patch "$src/horovod/torch/CMakeLists.txt" "s/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD $torch_std/" 'CMAKE_CXX_STANDARD 14'
# torch's CUDA wheels plus a CUDA toolkit on a GPU-less host make Horovod try a CUDA build
# (FindPytorch: torch.version.cuda and CUDA_HOME). Build the GPU operations only where
# torch sees a GPU; elsewhere a CPU (MPI + Gloo) build.
patch "$src/cmake/Modules/FindPytorch.cmake" \
  's/(CUDA_HOME is not None)) else False/(CUDA_HOME is not None) and torch.cuda.is_available()) else False/' \
  '(CUDA_HOME is not None)) else False'

echo "install_horovod: building with C++$torch_std for the torch extension (minutes on 2 cores)"
if ! HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
     HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
     MAKEFLAGS="-j$(nproc)" \
     "$python" -m pip install --no-build-isolation --no-cache-dir "$src" >"$log" 2>&1; then
  keep="${TMPDIR:-/tmp}/install_horovod.$$.log"; cp "$log" "$keep"
  grep -n -m 20 -E 'error|Error' "$log" >&2 || true
  echo "install_horovod: build failed, full log in $keep" >&2; exit 1
fi
"$python" -c "import horovod.torch as hvd; assert hvd.mpi_built() and hvd.gloo_built(), 'horovod built without MPI or Gloo'"
echo "install_horovod: horovod $version installed in $venv (torch, MPI, Gloo)"
