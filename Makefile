# Two commands for users: `make run` and `make test`. Both install what is missing first.
SHELL := /bin/bash
VENV  := $(CURDIR)/.venv
PY    := $(VENV)/bin/python
BUILD := $(CURDIR)/build
CORES ?= all
export PATH := $(VENV)/bin:$(PATH)

.PHONY: run test sensitivity bench-speed setup build build-simulator build-lu test-python test-cpp test-cpp-asan test-schedulers format-check lint lint-python clean

# Through `testbed workflow`: its lock refuses a second run started in this folder meanwhile.
run: setup build
	$(PY) -m testbed workflow --cores $(CORES) all

# Uncertainty of the predictions over the machine parameters' ranges (not part of `run`).
sensitivity: setup build
	$(PY) -m testbed workflow --cores $(CORES) sensitivity

# The speed figures in one run (bench/RESULTS.md; ~2 min on this 2-core machine, quiet):
# study scale with both mappings, cost growth with tiles and nodes, testbed simulate's overhead
# and StarPU-SimGrid at 20² and 40². JSON under bench/results/. The campaign's own time is
# `snakemake --cores 2 all --config scale=study` (about an hour; bench/data/campaign-study/).
bench-speed: setup build
	$(PY) bench/numasim_scale.py --factors '' --factors A=1,B=1,C=1,E=1 --out bench/results/numasim_scale_bc.json
	$(PY) bench/numasim_scale.py --factors '' --factors A=1,B=1,C=1,E=1 --distribution heterogeneous \
	  --out bench/results/numasim_scale_het.json
	$(PY) bench/numasim_growth.py --out bench/results/numasim_growth.json
	$(PY) bench/cli_overhead.py --out bench/results/cli_overhead.json

# Where numasim's time goes at the study's scale, per subsystem (perf, bench/numasim_profile.py;
# bench/RESULTS.md "Profile"), and numasim against 7c43ff8, results and speed (bench/numasim_vs_old.py).
.PHONY: profile-simulator bench-vs-old
profile-simulator: setup build-simulator
	$(PY) bench/numasim_profile.py
bench-vs-old: setup build-simulator
	$(PY) bench/numasim_vs_old.py

test: setup build
	$(MAKE) --no-print-directory -k lint-python format-check test-cpp test-cpp-asan test-python

setup:
	@bash envs/setup.sh

build: build-simulator build-lu

build-simulator:
	@cmake -S simulator -B $(BUILD)/simulator -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD)/simulator

# StarPU: STARPU_NATIVE_PREFIX / STARPU_SIMGRID_PREFIX (environment or `make VAR=...`) when
# given, else .deps/starpu-{native,simgrid} (apps/lu/Makefile; testbed/common/paths.py alike)
build-lu:
	@if [ -f apps/lu/Makefile ]; then $(MAKE) --no-print-directory -C apps/lu BUILD=$(BUILD) STARPU_DEPS=$(CURDIR)/.deps; fi

test-cpp:
	@cd $(BUILD)/simulator && if [ -x numasim_tests ]; then ctest --output-on-failure; else echo "no C++ tests built"; fi

# numasim's C++ tests again under AddressSanitizer and UndefinedBehaviorSanitizer (a heap overflow
# and a signed overflow found by hand were of this kind), in a build directory of
# its own; only numasim_tests is built there. UBSan findings are fatal. SimGrid switches actor
# stacks by hand: ASan warns once about it, and detect_stack_use_after_return must be off.
# tcmalloc is left out (it replaces the allocator ASan instruments).
ASAN_BUILD := $(BUILD)/simulator-asan
test-cpp-asan:
	@cmake -S simulator -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
	  -DNUMASIM_TCMALLOC=OFF "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined >/dev/null
	@ASAN_OPTIONS=detect_stack_use_after_return=0 cmake --build $(ASAN_BUILD) --target numasim_tests numasim
	@cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_stack_use_after_return=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure
	@# the fuzz corpus of run descriptions on the sanitized numasim (200 of tests/test_fuzz.py's 500 cases, ~30 s)
	ASAN_OPTIONS=detect_stack_use_after_return=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  FUZZ_NUMASIM=$(ASAN_BUILD)/numasim FUZZ_SCALE=0.4 $(PY) -m pytest -q tests/test_fuzz.py -k numasim_run_json

# -rs: the reason of every skipped test (e.g. no SLURM or OAR cluster can start here);
# --durations=15: the slowest tests (`-m "not slow"` leaves out those marked slow in pyproject.toml)
test-python:
	$(PY) -m pytest -q -rs --durations=15

# the campaigns on one-node SLURM and OAR clusters only (tests/test_slurm.py, tests/test_oar.py;
# TESTBED_SLURM=1 TESTBED_OAR=1 bash envs/setup.sh installs them)
test-schedulers:
	$(PY) -m pytest -q -rs -m "slurm or oar"

# numasim's C++ sources follow the repository's .clang-format (Debian's clang-format, envs/setup.sh);
# `clang-format -i` on a file fixes what this reports.
CXX_SOURCES = $(shell find simulator/src simulator/tests simulator/tools \( -name '*.cpp' -o -name '*.hpp' \) | sort)
format-check:
	@clang-format --dry-run -Werror $(CXX_SOURCES) && echo "format-check: $(words $(CXX_SOURCES)) C++ files follow .clang-format"

lint:
	snakemake --lint

# Python lint (rules and line length: [tool.ruff] in pyproject.toml; ruff pinned in envs/requirements.txt)
lint-python:
	$(VENV)/bin/ruff check testbed tests bench workflows

clean:
	rm -rf $(BUILD) results .snakemake
