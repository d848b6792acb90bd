#!/usr/bin/env bash
# Prove every CUDA path of exabench on this GPU machine, within 10 minutes (4 with --quick), with no network and
# no scheduler: real runs, real records, and gpu-check.md beside the published figures.
# See docs/gpu-check.md. Arguments go to `python -m exabench.gpucheck` (--out, --only, --quick, --dry-run).
#
# Uses the machine's own Python and torch (PYTHON=..., default python3); where that Python lacks
# what exabench needs beyond torch, the wheels of just what it lacks are installed from .gpu-wheels/
# (scripts/gpu_wheels.sh) into .gpu-check-site/, put first on PYTHONPATH.
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
if ! "$PYTHON" -c "$needs" >/dev/null 2>&1; then
  # Not all there: the wheels of what this Python lacks (and only those: the machine's numpy,
  # pandas and torch stay), from the folder scripts/gpu_wheels.sh downloaded, into a folder put
  # first on PYTHONPATH. Not a venv: where python3 is itself a venv, a venv over it would not see
  # the packages of the machine's venv (torch's own, for one).
  site=${GPU_CHECK_SITE:-$here/.gpu-check-site}
  if [ ! -f "$here/.gpu-wheels/requirements.txt" ]; then
    echo "gpu_check: exabench's dependencies are missing and there is no .gpu-wheels/ folder: run" \
         "scripts/gpu_wheels.sh on a machine with network and copy the folder here" >&2
    exit 3
  fi
  export PYTHONPATH=$site:$PYTHONPATH
  wheels=$("$PYTHON" -m exabench.gpucheck.wheels --missing "$here/.gpu-wheels") || exit 3
  if [ -n "$wheels" ]; then
    # shellcheck disable=SC2086  # one wheel path per word
    "$PYTHON" -m pip install --quiet --no-index --no-deps --no-compile --upgrade --target "$site" $wheels
  fi
  if ! "$PYTHON" -c "$needs"; then
    echo "gpu_check: $PYTHON still cannot import what exabench needs (above), after installing" \
         "from .gpu-wheels/ into $site" >&2
    exit 3
  fi
fi
python=$PYTHON
cd "$here"
exec "$python" -m exabench.gpucheck "$@"
