# Two entry points (README): `make run` and `make test`. Both set up first;
# set-up is idempotent and reinstalls nothing when requirements.lock is unchanged.
VENV ?= .venv
PROFILE ?= profiles/local
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup setup-horovod run test lint dry-run gpu-check
setup:
	bash scripts/setup.sh

# Horovod (built from source against the venv's torch and tensorflow, several minutes): the studies and
# configs that train over Horovod need it (docs/studies.md); `make test` builds it too.
setup-horovod: setup
	bash scripts/install_horovod.sh $(VENV)

run: setup
	$(VENV)/bin/snakemake --profile $(PROFILE)

dry-run: setup
	$(VENV)/bin/snakemake --profile $(PROFILE) -n

lint: setup
	$(VENV)/bin/snakemake --profile $(PROFILE) --lint
	$(VENV)/bin/snakefmt --check Snakefile workflow/rules

test:
	bash scripts/setup.sh --test
	@echo "campaign scale at 1,000 runs (figures printed, not asserted; bench/campaign_scale.py):"
	$(VENV)/bin/python bench/campaign_scale.py --sizes 1000 --repeats 1
	$(VENV)/bin/python -m pytest -ra $(PYTEST_ARGS)

# On a GPU machine (docs/gpu-check.md): every CUDA path, real records, gpu-check/gpu-check.md.
gpu-check:
	bash scripts/gpu_check.sh $(GPU_CHECK_ARGS)
