#!/usr/bin/env bash
# Prove every CUDA path of exabench on this GPU machine, within 10 minutes (4 with --quick), with no network and
# no scheduler: real runs, real records, and gpu-check.md beside the published figures.
# See docs/gpu-check.md. Arguments go to `python -m exabench.gpucheck` (--out, --only, --quick, --dry-run).
#
# Uses the machine's own Python and torch (PYTHON=..., default python3); where that Python lacks
# what exabench needs beyond torch, a venv over it is filled from .gpu-wheels/ (scripts/gpu_wheels.sh).
set -euo pipefail
# The check's time bound (600 s, 240 s with --quick) counts from here, set-up included.
export GPU_CHECK_STARTED=$(date +%s)
here=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
case " $* " in *" --dry-run "*|*" --cpu-rehearsal "*) rehearsal=1 ;; *) rehearsal=0 ;; esac
if [ "$rehearsal" = 0 ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: no nvidia-smi here, so no NVIDIA GPU: run this on a GPU node (docs/gpu-check.md)," \
       "or add --dry-run to see what it would run" >&2
  exit 3
fi
if ! "$PYTHON" -c 'import torch' >/dev/null 2>&1; then
  echo "gpu_check: $PYTHON cannot import torch: load the machine's PyTorch (module load ...) or set PYTHON" >&2
  exit 3
fi
if ! "$PYTHON" -c 'import torchvision' >/dev/null 2>&1; then
  echo "gpu_check: warning: $PYTHON has no torchvision (it must match the machine's torch): the ResNet-50" \
       "parts will fail and the report will say so" >&2
fi
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
needs='import yaml, jsonschema, jinja2, numpy, h5py, mlperf_logging, google_crc32c'
python=$PYTHON
if ! "$python" -c "$needs" >/dev/null 2>&1; then
  # Not all there: a venv over the machine's Python (it keeps seeing the machine's torch), filled
  # from the wheels scripts/gpu_wheels.sh downloaded.
  venv=${GPU_CHECK_VENV:-$here/.gpu-check-venv}
  python=$venv/bin/python
  if [ ! -x "$python" ]; then
    "$PYTHON" -m venv --system-site-packages "$venv"
  fi
  if ! "$python" -c "$needs" >/dev/null 2>&1; then
    if [ ! -f "$here/.gpu-wheels/requirements.txt" ]; then
      echo "gpu_check: exabench's dependencies are missing and there is no .gpu-wheels/ folder: run" \
           "scripts/gpu_wheels.sh on a machine with network and copy the folder here" >&2
      exit 3
    fi
    "$python" -m pip install --quiet --no-index --find-links "$here/.gpu-wheels" \
      -r "$here/.gpu-wheels/requirements.txt"
  fi
fi
cd "$here"
exec "$python" -m exabench.gpucheck "$@"
