#!/usr/bin/env bash
# A flakiness check: run the tests that start processes (MPI ranks, Snakemake, Slurm, containers,
# torch.distributed) REPEAT times in a row and say how many runs passed and which tests failed
# in which run. A test that fails in any run is a defect: fix it, do not rerun it.
#   make test-repeat                          # 3 runs of every process-starting test file
#   make test-repeat REPEAT=5 REPEAT_TESTS="tests/integration/test_oc20.py tests/integration/test_mlperf_scores.py"
# REPEAT_TESTS: the test files or node ids to repeat (default: every tests/integration/test_*.py that starts a
# process: subprocess, mpirun, Snakemake or the loopback Slurm); PYTEST_ARGS: more pytest options
# (e.g. -k or -m); logs of each run in REPEAT_DIR (default results/test-repeat/).
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${REPEAT:-3}"
python="${VENV:-.venv}/bin/python"
if [ -n "${REPEAT_TESTS:-}" ]; then
    read -r -a tests <<< "$REPEAT_TESTS"
else
    mapfile -t tests < <(grep -lE 'subprocess|mpirun|run_mpi|Popen|snakemake|helpers_slurm' tests/integration/test_*.py)
fi
if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "test-repeat: REPEAT=$runs is not valid; valid: a whole number of runs, at least 1" >&2
    exit 2
fi
logs="${REPEAT_DIR:-results/test-repeat}"
mkdir -p "$logs"
passed=0
for i in $(seq 1 "$runs"); do
    log="$logs/run-$i.log"
    start=$SECONDS
    # shellcheck disable=SC2086  # PYTEST_ARGS is a list of options
    if "$python" -m pytest -q -rfE -p no:cacheprovider ${PYTEST_ARGS:-} "${tests[@]}" > "$log" 2>&1; then
        passed=$((passed + 1))
        echo "run $i of $runs: passed: $(tail -n 1 "$log") ($((SECONDS - start)) s wall)"
    else
        echo "run $i of $runs: FAILED: $(tail -n 1 "$log") ($((SECONDS - start)) s wall)"
        grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /'
    fi
done
echo "test-repeat: $passed of $runs runs passed (${#tests[@]} test files; logs in $logs/)"
[ "$passed" -eq "$runs" ]
