# Two entry points (README): `make run` and `make test`. Both set up first;
# set-up is idempotent and reinstalls nothing when requirements.lock is unchanged.
VENV ?= .venv
PROFILE ?= profiles/local
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup setup-horovod run rerun test test-full test-unit test-repeat lint dry-run gpu-check
setup:
	bash scripts/setup.sh

# Horovod (built from source against the venv's torch and tensorflow, several minutes): the studies and
# configs that train over Horovod need it (docs/studies.md); `make test` builds it too.
setup-horovod: setup
	bash scripts/install_horovod.sh $(VENV)

run: setup
	$(VENV)/bin/exabench run --profile $(PROFILE) $(SNAKEMAKE_ARGS)

# A fresh campaign of the same config (docs/history.md, "Re-running a campaign"): every run again;
# the replaced records stay under records/archive/ and in the results store, where the new
# campaign joins the history that `exabench history regress` judges it against.
# SNAKEMAKE_ARGS passes more, e.g. SNAKEMAKE_ARGS="--configfile config/analytics.yaml".
rerun: setup
	$(VENV)/bin/exabench run --profile $(PROFILE) --forcerun run_benchmark $(SNAKEMAKE_ARGS)

dry-run: setup
	$(VENV)/bin/exabench run --profile $(PROFILE) -n

lint: setup
	$(VENV)/bin/snakemake --profile $(PROFILE) --lint
	$(VENV)/bin/snakefmt --check Snakefile workflow/rules

# Unit tests first (no process started, about a minute), before the test tools are built, so a
# unit failure stops in minutes; then the integration tests (MPI ranks, Snakemake campaigns, the
# loopback Slurm, containers, Horovod).
# Each pytest run adds its durations to one file; the last ends with the ten slowest tests and the
# suite's time since this target started; it warns past EXABENCH_SUITE_BUDGET_MIN and fails past
# EXABENCH_SUITE_LIMIT_MIN (tests/suite_clock.py), both scaled by this machine's
# slowness, timed against the machine the limit was set on before each pass and averaged (a machine's speed
# drifts within the hour; tests/suite_clock.py).
# The integration tests run in two passes: those that share nothing (TEST_WORKERS at a time, a module
# whole on one worker), then those that time what they judge or start what there is one of per machine,
# alone (tests/alone.py). One at a time by default: on 2 cores, two at a time was slower, since most
# tests keep both cores busy with 2 ranks (measured: the first pass 27.5 min two at a time, its two
# largest campaigns 909 s and 968 s side by side against 231 s and 175 s alone). TEST_WORKERS=N suits
# a machine with spare cores.
TEST_WORKERS ?= 0
SUITE_START := $(shell date +%s)
SUITE_TIMES := .pytest_cache/exabench-suite-times.json
test: export EXABENCH_SUITE_START = $(SUITE_START)
test: export EXABENCH_SUITE_TIMES = $(CURDIR)/$(SUITE_TIMES)
test:
	rm -f $(SUITE_TIMES) $(dir $(SUITE_TIMES))exabench-suite-machine.json
	bash scripts/tree_check.sh before
	bash scripts/setup.sh
	$(VENV)/bin/python tests/suite_clock.py calibrate
	$(VENV)/bin/python -m pytest -ra tests/unit $(PYTEST_ARGS)
	bash scripts/setup.sh --test
	@echo "campaign scale at 1,000 runs (figures printed, not asserted; bench/campaign_scale.py):"
	$(VENV)/bin/python bench/campaign_scale.py --sizes 1000 --repeats 1
	$(VENV)/bin/python tests/suite_clock.py calibrate
	$(VENV)/bin/python -m pytest -ra -n $(TEST_WORKERS) --dist loadgroup -m "not alone" tests/integration $(PYTEST_ARGS) \
	  || [ $$? = 5 ]  # 5: PYTEST_ARGS left no test in this pass
	$(VENV)/bin/python tests/suite_clock.py calibrate
	$(VENV)/bin/python -m pytest -ra $$(python3 tests/alone.py) $(PYTEST_ARGS) || [ $$? = 5 ]
	bash scripts/tree_check.sh after

# `make test` and the tiny runs it leaves out (docs/studies.md, "What study=all costs").
test-full:
	EXABENCH_ALL_STUDIES=1 $(MAKE) test

test-unit:
	bash scripts/setup.sh
	$(VENV)/bin/python -m pytest -ra tests/unit $(PYTEST_ARGS)

# The flakiness check (README, "Testing"): the process-starting tests REPEAT times in a row (default 3);
# says how many runs passed and which tests failed in which run. REPEAT_TESTS narrows it.
test-repeat:
	bash scripts/setup.sh --test
	VENV=$(VENV) bash scripts/test_repeat.sh

# On a GPU machine (docs/gpu-check.md): every CUDA path, real records, gpu-check/gpu-check.md.
gpu-check:
	bash scripts/gpu_check.sh $(GPU_CHECK_ARGS)
