# hpo — two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hpo-installed
DEV_STAMP := $(VENV)/.hpo-dev-installed
DEPS := pyproject.toml requirements/stack.txt requirements/cuda.txt patches/horovod-0.28.1.patch \
	patches/petastorm-0.13.1.patch scripts/install.sh scripts/install_horovod.sh scripts/build_horovod.sh \
	scripts/install_petastorm.sh scripts/cuda.sh
export MAKEFLAGS := -j2
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# The tests' processes keep their compiled modules (and pytest its rewritten test modules) in __pycache__,
# even where the environment says not to write bytecode: each of them would compile them again.
TEST_ENV := PYTHONDONTWRITEBYTECODE=

.PHONY: install install-dev demo test test-fast lint bench clean notebook notebook-outputs check-gpu-build

# The stack a sweep needs (what `make demo` and the cluster image install).
install: $(STAMP)

$(STAMP): $(DEPS)
	VENV=$(VENV) PYTHON=$(PYTHON) bash scripts/install.sh
	touch $(STAMP)

# Plus what the tests need: pytest, ruff, moto's S3 server, torch (optuna-gp), Debian's chromium.
install-dev: $(DEV_STAMP)

$(DEV_STAMP): $(DEPS) requirements/dev.txt
	VENV=$(VENV) PYTHON=$(PYTHON) HPO_DEV=1 bash scripts/install.sh
	touch $(STAMP) $(DEV_STAMP)

demo: install
	$(BIN)/hpo tune search_spaces/digits_mlp.yaml --overwrite

# Two test processes, one test module each at a time (module fixtures stay in one process): most of the
# suite's time is process start-up (TensorFlow, Ray, MLflow), which two processes overlap on 2 cores.
# Modules go out slowest first (tests/conftest.py SLOWEST_FIRST), so both processes end together.
test: install-dev
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 --dist loadscope --no-loadscope-reorder -rs --durations=25

# Opens notebooks/ in Jupyter from the venv (JupyterLab is not part of the stack: install it once).
notebook: install
	@if [ -x $(BIN)/jupyter-lab ]; then $(BIN)/jupyter-lab notebooks/; \
	else echo "JupyterLab is not installed: run '$(BIN)/pip install jupyterlab', then 'make notebook'" >&2; exit 2; fi

# Runs both notebooks (as make test does) and stores them with their outputs.
notebook-outputs: install-dev
	HPO_STORE_NOTEBOOKS=1 $(BIN)/python -m pytest -q -n 0 tests/integration/test_notebooks.py

# Compile-and-link check of the GPU Horovod build (NCCL) on a machine without GPU or CUDA toolkit, from
# PyPI's CUDA wheels (scripts/check_gpu_build.sh): about 0.5 GB of downloads and a long compile once, then
# cached (seconds) until Horovod, the patch, TensorFlow or the CUDA pins change.
check-gpu-build: install
	VENV=$(VENV) bash scripts/check_gpu_build.sh

test-fast: install-dev
	$(TEST_ENV) $(BIN)/python -m pytest -q -n 2 tests/unit

lint: install-dev
	$(BIN)/ruff check hpo tests benchmarks search_spaces notebooks

bench: install-dev
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/scaling.py
	$(BIN)/python benchmarks/search.py
	$(BIN)/python benchmarks/data.py
	$(BIN)/python benchmarks/stats.py
	$(BIN)/python benchmarks/progress.py
	$(BIN)/python benchmarks/progress_sweeps.py

clean:
	rm -rf $(VENV) hpo_runs mlflow.db
