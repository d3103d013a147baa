# Two commands for users: `make run` and `make test`. Both install what is missing first.
SHELL := /bin/bash
VENV  := $(CURDIR)/.venv
PY    := $(VENV)/bin/python
BUILD := $(CURDIR)/build
CORES ?= all
export PATH := $(VENV)/bin:$(PATH)

.PHONY: run test sensitivity setup build build-simulator build-lu test-python test-cpp test-schedulers lint clean

run: setup build
	snakemake --cores $(CORES) all

# Uncertainty of the predictions over the machine parameters' ranges (not part of `run`).
sensitivity: setup build
	snakemake --cores $(CORES) sensitivity

test: setup build
	$(MAKE) --no-print-directory -k test-cpp test-python

setup:
	@bash envs/setup.sh

build: build-simulator build-lu

build-simulator:
	@cmake -S simulator -B $(BUILD)/simulator -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD)/simulator

build-lu:
	@if [ -f apps/lu/Makefile ]; then $(MAKE) --no-print-directory -C apps/lu BUILD=$(BUILD) STARPU_DEPS=$(CURDIR)/.deps; fi

test-cpp:
	@cd $(BUILD)/simulator && if [ -x numasim_tests ]; then ctest --output-on-failure; else echo "no C++ tests built"; fi

# -rs: the reason of every skipped test (e.g. no SLURM or OAR cluster can start here)
test-python:
	$(PY) -m pytest -q -rs

# the campaigns on one-node SLURM and OAR clusters only (tests/test_slurm.py, tests/test_oar.py;
# TESTBED_SLURM=1 TESTBED_OAR=1 bash envs/setup.sh installs them)
test-schedulers:
	$(PY) -m pytest -q -rs -m "slurm or oar"

lint:
	snakemake --lint

clean:
	rm -rf $(BUILD) results .snakemake
