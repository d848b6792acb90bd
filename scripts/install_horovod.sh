#!/usr/bin/env bash
# Build Horovod 0.28.1 (MPI + Gloo; PyTorch, and TensorFlow where it imports) into a venv.
#
#   scripts/install_horovod.sh <venv>
#   EXABENCH_HOROVOD_TF=0 scripts/install_horovod.sh <venv>   # PyTorch only, even with tensorflow
#
# Idempotent: does nothing when horovod.torch (and horovod.tensorflow, where tensorflow
# imports) already import in <venv> with MPI and Gloo built; otherwise builds a wheel from the
# patched sdist and (re)installs it. Needs cmake, g++ and an MPI with headers (openmpi-bin,
# libopenmpi-dev); torch (and tensorflow) must already be in <venv>: --no-build-isolation
# builds against them. <venv> may be an overlay venv whose .pth reaches another venv's
# packages: pip installs into <venv> and leaves the other venv's horovod alone.
# Why a patched sdist (0.28.1 is the last release), see docs/horovod.md:
#   - it pins C++14, while torch 2.x needs C++17 (>= 2.10: C++20) and TF 2.10+ abseil C++17;
#   - its XLA file includes headers the TF wheels ship without their dependencies.
set -euo pipefail
venv=${1:?usage: scripts/install_horovod.sh <venv>}
python="$venv/bin/python"
version=0.28.1
[ -x "$python" ] || { echo "install_horovod: no python at $python" >&2; exit 1; }

with_tf=0
if [ "${EXABENCH_HOROVOD_TF:-auto}" != 0 ] && "$python" -c "import tensorflow" >/dev/null 2>&1; then
  with_tf=1
fi
frameworks=torch; [ "$with_tf" = 1 ] && frameworks="torch tensorflow"
built() { # framework: imports with MPI and Gloo (one process per framework: never torch and TF together)
  TF_CPP_MIN_LOG_LEVEL=2 "$python" -c "import horovod.$1 as hvd; assert hvd.mpi_built() and hvd.gloo_built(), 'horovod.$1 built without MPI or Gloo'"
}
all_built() { for fw in $frameworks; do built "$fw" >/dev/null 2>&1 || return 1; done; }
if all_built; then
  echo "install_horovod: horovod ($frameworks) already importable in $venv"
  exit 0
fi
for tool in cmake g++ mpicxx; do
  command -v "$tool" >/dev/null || { echo "install_horovod: $tool not found (apt-get install cmake g++ libopenmpi-dev)" >&2; exit 1; }
done
"$python" -c "import torch" || { echo "install_horovod: torch must be installed in $venv first" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$work/build.log"
install_wheel() { # --force-reinstall --no-deps replaces an older horovod build (same version) in <venv>;
  # the second install then brings in Horovod's own dependencies where they are missing.
  "$python" -m pip install --no-cache-dir --force-reinstall --no-deps "$1" >"$log" 2>&1 \
    && "$python" -m pip install --no-cache-dir "$1" >>"$log" 2>&1 || { cat "$log" >&2; exit 1; }
}
# A wheel built before for the same Horovod, Python, torch, TensorFlow and this script is reused (the
# build is 4-8 minutes of every fresh clone's set-up): kept per user, and used only where this user
# owns it and no one else may write it (it is code this venv will run).
stamp=$( { echo "$version $frameworks"; "$python" -c "import sys, torch; print(sys.version, torch.__version__)";
           [ "$with_tf" = 1 ] && "$python" -c "import tensorflow as tf; print(tf.__version__)" 2>/dev/null;
           cat "$0"; } | sha256sum | cut -c1-16)
cache="${EXABENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/exabench}/horovod/$stamp"
cached=$(ls "$cache"/horovod-"$version"-*.whl 2>/dev/null | head -1 || true)
if [ -n "$cached" ] && [ "$(stat -c %u "$cached")" = "$(id -u)" ] && [ "$(stat -c %u "$cache")" = "$(id -u)" ] \
   && [ -z "$(find "$cache" "$cached" -maxdepth 0 -perm /022)" ]; then
  echo "install_horovod: reusing the wheel built before for this torch and Python ($cached)"
  install_wheel "$cached"
  if all_built; then echo "install_horovod: horovod $version installed in $venv ($frameworks; MPI, Gloo)"; exit 0; fi
  echo "install_horovod: the reused wheel does not import here: building again" >&2
fi
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
# Its TF extension already switches to C++17 for TF >= 2.10 (horovod/tensorflow/CMakeLists.txt).
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
if [ "$with_tf" = 1 ]; then
  # xla_mpi_ops.cc holds only GPU XLA custom calls (inside #if HAVE_GPU), yet includes XLA
  # headers first; TF >= 2.16 wheels ship those without their dependencies (xla/printer.h:
  # highwayhash/arch_specific.h not found) and moved xla_builder.h. Skip it on CPU builds.
  patch "$src/horovod/tensorflow/xla_mpi_ops.cc" \
    's/^#if TENSORFLOW_VERSION >= 2006000000$/#if TENSORFLOW_VERSION >= 2006000000 \&\& HAVE_GPU/' \
    '#if TENSORFLOW_VERSION >= 2006000000'
  tf_flags="HOROVOD_WITH_TENSORFLOW=1"
else
  tf_flags="HOROVOD_WITHOUT_TENSORFLOW=1"
fi

echo "install_horovod: building for $frameworks, C++$torch_std for the torch extension (minutes on 2 cores)"
start=$SECONDS
if ! env HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 "$tf_flags" HOROVOD_WITHOUT_MXNET=1 \
     MAKEFLAGS="-j$(nproc)" \
     "$python" -m pip wheel --no-deps --no-build-isolation --no-cache-dir -w "$work/wheel" "$src" >"$log" 2>&1; then
  keep="${TMPDIR:-/tmp}/install_horovod.$$.log"; cp "$log" "$keep"
  grep -n -m 20 -E 'error|Error' "$log" >&2 || true
  echo "install_horovod: build failed, full log in $keep" >&2; exit 1
fi
echo "install_horovod: built in $((SECONDS - start)) s"
wheel=$(ls "$work"/wheel/horovod-"$version"-*.whl)
install_wheel "$wheel"
for fw in $frameworks; do built "$fw"; done
(umask 022 && mkdir -p "$cache" && cp "$wheel" "$cache/") || echo "install_horovod: could not keep the wheel in $cache" >&2
echo "install_horovod: horovod $version installed in $venv ($frameworks; MPI, Gloo)"
