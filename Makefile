# hpo — two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hpo-installed
export MAKEFLAGS := -j2
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install demo test test-fast lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml requirements/stack.txt requirements/dev.txt patches/horovod-0.28.1.patch patches/petastorm-0.13.1.patch scripts/install.sh scripts/install_horovod.sh scripts/install_petastorm.sh
	VENV=$(VENV) PYTHON=$(PYTHON) bash scripts/install.sh
	touch $(STAMP)

demo: install
	$(BIN)/hpo tune search_spaces/digits_mlp.yaml --overwrite

test: install
	$(BIN)/python -m pytest -q --durations=25

test-fast: install
	$(BIN)/python -m pytest -q tests/unit

lint: install
	$(BIN)/ruff check hpo tests benchmarks

bench: install
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/scaling.py
	$(BIN)/python benchmarks/search.py
	$(BIN)/python benchmarks/data.py

clean:
	rm -rf $(VENV) hpo_runs mlflow.db
