#!/usr/bin/env bash
# One-time (and idempotent) set-up of the native environment:
#   - Debian packages: OpenMPI (mpirun + headers for mpi4py),
#   - .venv with the exact pinned set from requirements.lock, exabench installed editable.
# A second run checks stamps and installs nothing when nothing changed.
#   --test: also what the test suite drives for real: a two-node Slurm on loopback (munge,
#           slurmctld, slurmd, PMIx) and a container build (debootstrap, mksquashfs, siftool for the
#           SIF; umoci to unpack its OCI image; charliecloud's ch-run to run both); Chromium, which
#           opens the campaign's HTML page headless (tests/integration/test_report_browser.py).
set -euo pipefail
cd "$(dirname "$0")/.."
with_test_tools=0
[ "${1:-}" = "--test" ] && with_test_tools=1
root=$(pwd)
venv=${EXABENCH_VENV:-$root/.venv}
python=${PYTHON:-python3}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  echo "setup: need root (or sudo) to run: $*" >&2; exit 1; fi; }

# --- Debian packages -------------------------------------------------------
need_apt=()
command -v mpirun >/dev/null || need_apt+=(openmpi-bin)
[ -e /usr/include/x86_64-linux-gnu/mpi/mpi.h ] || [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] \
  || dpkg -s libopenmpi-dev >/dev/null 2>&1 || need_apt+=(libopenmpi-dev)
if [ "$with_test_tools" = 1 ]; then
  for pkg in munge slurmctld slurmd slurm-client libpmix-dev debootstrap squashfs-tools siftool umoci \
      charliecloud-runtime cmake g++ chromium; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
  done
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# --- Python virtual environment -------------------------------------------
install_test_tools() { # Horovod is built from source against this torch (scripts/install_horovod.sh)
  if [ "$with_test_tools" = 1 ]; then bash scripts/install_horovod.sh "$venv"; fi
  return 0
}
stamp="$venv/.exabench-installed"
want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
pip_install() { # quiet on success; the whole log on failure
  local log; log=$(mktemp)
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log" >&2; rm -f "$log"; exit 1
  fi
  rm -f "$log"
}
# The package's bytecode, written now: every run job is a Python process that imports exabench, and
# where it cannot write __pycache__ (PYTHONDONTWRITEBYTECODE, a read-only install) it would compile
# the modules it imports again each time (a tenth of a run job's start). Files already current are skipped.
compile_package() { "$venv/bin/python" -m compileall -q exabench >/dev/null; }
# Where the venv's exabench comes from, asked outside the tree (so that the current folder cannot
# answer): a venv copied or moved from another clone keeps importing that clone's code.
home=$( (cd / && "$venv/bin/python" -c "import exabench, pathlib; print(pathlib.Path(exabench.__file__).resolve().parents[1])") 2>/dev/null || true)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -n "$home" ]; then
  if [ "$home" != "$(pwd -P)" ]; then
    echo "setup: $venv imports exabench from $home, not this tree: installing this one (editable)"
    pip_install --no-deps --no-build-isolation -e .
  else
    echo "setup: $venv is up to date (requirements.lock unchanged)"
  fi
  compile_package
  install_test_tools
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
echo "setup: installing requirements.lock into $venv (first time: a few minutes)"
pip_install -r requirements.lock
pip_install --no-deps --no-build-isolation -e .
"$venv/bin/python" -c "import exabench, torch, mpi4py, snakemake" # fail loudly if anything is missing
echo "$want" > "$stamp"
compile_package
install_test_tools
echo "setup: done"
