# The front door: `make run` (the default sweep, creating .venv on first use) and `make test`.
# Both work offline on a Debian machine with the dataset-fashion-mnist package installed.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
CORES ?= $(shell nproc 2>/dev/null || echo 2)
BIN := $(abspath $(VENV))/bin
# Jobs run `python -m batchscope...`: the venv's python must come first on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: run report test lint format clean

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25"
	$(BIN)/python -m pip install --quiet -e ".[dev,slurm,models]"
	touch $@

run: $(VENV)/.installed
	$(BIN)/snakemake --cores $(CORES)
	$(BIN)/snakemake --cores $(CORES) --report results/report.html

report: $(VENV)/.installed
	$(BIN)/snakemake --cores $(CORES) --report results/report.html

test: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint
	$(BIN)/python -m pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint

format: $(VENV)/.installed
	$(BIN)/ruff format .
	$(BIN)/snakefmt Snakefile workflow/rules

clean:
	rm -rf results/* .snakemake logs benchmarks specs
	touch results/.gitkeep
