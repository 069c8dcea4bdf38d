# SPDX-License-Identifier: BSD-3-Clause
# The two commands of the README:
#   make demo   set up, build, install to ./install, show the op from Python and from C++
#   make test   set up, build, install, run every C++ (ctest) and Python (pytest) test
#   make test-op OP=NAME  the same build, then every test of that one operator (scripts/new_op.py)
#   make format reformat our C++/CUDA (clang-format) and Python (ruff), apply ruff's safe fixes
#   make lint   check formatting, ruff's rules and clang-tidy's (the tools: requirements-lint.txt)
#   make wheel  a manylinux wheel of the Python package in dist/, named for its torch and CUDA
# Set-up (scripts/setup-env.sh) checks, before compiling, what the build needs: it uses python3 when
# its torch is in the supported range (make test adds the test tools it lacks, saying so), else makes
# .venv with the newest; TORCH=X.Y.Z builds and tests against that release instead (own build dirs).
# GPU architectures: TORCH_CUDA_ARCH_LIST (environment or CMAKE_ARGS; numbers, names such as Hopper,
# or native), as for PyTorch extensions; unset, the visible GPUs' (torch's list when none is visible).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

TORCH ?=
BUILD ?= build$(if $(TORCH),-torch-$(TORCH))
PREFIX ?= $(CURDIR)/install$(if $(TORCH),-torch-$(TORCH))
CUDA ?= AUTO
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
# The GoogleTest suite: built for make test; make demo builds only what the demo runs.
BUILD_TESTS ?= ON
PYTEST_ARGS ?=
# pytest-xdist processes for the Python tests (1: none), each taking whole test files: a file's
# session fixtures and its campaign's count test stay in one process. Without pytest-xdist: one.
PYTEST_WORKERS ?= 2
# make test: pip-install the test tools python3 lacks (no: print the command instead).
INSTALL_TEST_TOOLS ?= yes
SETUP_FOR ?=
PYTHON = $(shell cat $(BUILD)/python-path)

# The lint and format tools, pinned, in their own venv (scripts/setup-lint.sh).
LINT_BIN = .venv-lint/bin
# Every C++/CUDA file of ours (clang-format); the library's C++ translation units (clang-tidy). Not
# the .cu files for clang-tidy: their compile commands are nvcc's, whose flags clang does not take,
# and parsing CUDA needs a toolkit clang supports; the headers they share are checked via the .cpp.
CXX_FILES = $(shell find ops kernels autograd batching tests/cpp bench/cpp examples/cpp \
  -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh')
TIDY_FILES = $(shell find ops kernels/cpu autograd batching -name '*.cpp')
PY_DIRS = python bench examples scripts tests

.PHONY: demo test install wheel sanitize clean format lint lint-tools lint-format lint-python lint-tidy

install:
	@mkdir -p $(BUILD)
	TORCH=$(TORCH) INSTALL_TEST_TOOLS=$(INSTALL_TEST_TOOLS) scripts/setup-env.sh $(SETUP_FOR) > $(BUILD)/python-path
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUSTOM_OPS_CUDA=$(CUDA) \
	  -DCUSTOM_OPS_BUILD_TESTS=$(BUILD_TESTS) -DPython3_EXECUTABLE=$$(cat $(BUILD)/python-path) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: BUILD_TESTS = OFF
demo: install
	PYTHON=$(PYTHON) PREFIX=$(PREFIX) EXAMPLE_BUILD=$(BUILD)/examples MODELS=$(BUILD)/models examples/run_demo.sh

test: SETUP_FOR = --test
test: install
	ctest --test-dir $(BUILD) --output-on-failure
	workers=$(PYTEST_WORKERS); \
	if [ "$$workers" -gt 1 ] && ! $(PYTHON) -c 'import xdist' 2>/dev/null; then \
	  echo "make test: pytest-xdist is not installed, so the Python tests run in one process (slower)"; workers=1; \
	fi; \
	CUSTOM_OPS_LIBRARY=$(PREFIX)/lib/libcustom_ops.so CUSTOM_OPS_PREFIX=$(PREFIX) CUSTOM_OPS_CUDA=$(CUDA) \
	  $(PYTHON) -m pytest tests/python -q -rs $$([ "$$workers" -gt 1 ] && echo -n "-n $$workers --dist loadfile") \
	  $(PYTEST_ARGS)

# One operator's tests: the C++ ones named ROW/NAME.TEST (tests/cpp/operator_table_test.cpp; its
# backward's too) and the Python ones whose id contains NAME (tests/python/operators.py). CUDA tests
# skip, saying so, without a GPU. Either half running no test is a failure: a typo in OP, or an
# operator the tables lack, must not pass.
ifneq ($(filter test-op,$(MAKECMDGOALS)),)
ifeq ($(shell [[ "$(OP)" =~ ^[a-z][a-z0-9_]*$$ ]] && echo ok),)
$(error make test-op: name the operator, OP=NAME (lower_snake_case), before anything is built)
endif
endif
.PHONY: test-op
test-op: SETUP_FOR = --test
test-op: install
	ctest --test-dir $(BUILD) --output-on-failure --no-tests=error -R '/$(OP)(_backward)?\.'
	workers=$(PYTEST_WORKERS); \
	if [ "$$workers" -gt 1 ] && ! $(PYTHON) -c 'import xdist' 2>/dev/null; then workers=1; fi; \
	CUSTOM_OPS_LIBRARY=$(PREFIX)/lib/libcustom_ops.so CUSTOM_OPS_PREFIX=$(PREFIX) CUSTOM_OPS_CUDA=$(CUDA) \
	  $(PYTHON) -m pytest tests/python -q -rs -k '$(OP)' $$([ "$$workers" -gt 1 ] && echo -n "-n $$workers --dist loadfile") \
	  $(PYTEST_ARGS)

# The Python package as a wheel for other machines (pip install dist/*.whl), built against the torch
# `make install` uses: CUDA kernels for every architecture torch 2.11-2.15's CUDA 13 wheels have (not
# the local GPU's), then a manylinux tag from auditwheel, which leaves torch's libraries out.
WHEEL_CUDA_ARCHS ?= 7.5;8.0;8.6;9.0;10.0;12.0+PTX
wheel:
	@mkdir -p $(BUILD)
	TORCH=$(TORCH) scripts/setup-env.sh > $(BUILD)/python-path
	rm -rf $(BUILD)/wheel
	TORCH_CUDA_ARCH_LIST="$(WHEEL_CUDA_ARCHS)" $$(cat $(BUILD)/python-path) -m pip wheel --no-deps -w $(BUILD)/wheel \
	  -C cmake.define.CUSTOM_OPS_CUDA=$(CUDA) .
	scripts/packaging/repair-wheel.sh $$(ls $(BUILD)/wheel/custom_ops-*.whl) dist

# The C++ tests again, built with AddressSanitizer and UndefinedBehaviorSanitizer (CPU kernels).
# -O1 and line tables only (-g1): what the sanitizers' reports need, and the build (every file
# includes torch's headers) is the longest part of the target.
sanitize: install
	$(MAKE) install BUILD=$(BUILD)-sanitize PREFIX=$(BUILD)-sanitize/install CUDA=OFF \
	  CMAKE_ARGS="-DCUSTOM_OPS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG' \
	    -DCUSTOM_OPS_SCRIPTING_LIBRARY=$(PREFIX)/lib/libcustom_ops.so"
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD)-sanitize --output-on-failure

# The tools, then a check that the pre-commit hooks (.pre-commit-config.yaml) pin the same ones.
lint-tools:
	scripts/setup-lint.sh
	for pin in $$(grep -E '^(clang-format|ruff)==' requirements-lint.txt); do \
	  grep -q -- "$$pin" .pre-commit-config.yaml || { echo "lint: .pre-commit-config.yaml lacks $$pin" >&2; exit 1; }; \
	done

format: lint-tools
	$(LINT_BIN)/clang-format -i $(CXX_FILES)
	$(LINT_BIN)/ruff check --fix --exit-zero $(PY_DIRS)
	$(LINT_BIN)/ruff format $(PY_DIRS)

# Three parts, each a target of its own (make -k lint reports all three; lint-tidy takes minutes).
lint: lint-format lint-python lint-tidy

lint-format: lint-tools
	$(LINT_BIN)/clang-format --dry-run -Werror $(CXX_FILES)

lint-python: lint-tools
	$(LINT_BIN)/ruff check $(PY_DIRS)
	$(LINT_BIN)/ruff format --check $(PY_DIRS)

# clang-tidy reads how each file is compiled from $(BUILD)/compile_commands.json, which install
# configures (CMAKE_EXPORT_COMPILE_COMMANDS); one process per file, $(JOBS) at a time. Those are
# GCC's flags: clang skips the GCC-only warning options (-Wno-maybe-uninitialized) instead of failing,
# and reads the OpenMP-compiled CPU loops without OpenMP (clang has no omp.h of GCC's runtime).
lint-tidy: install lint-tools
	printf '%s\n' $(TIDY_FILES) | xargs -P $(JOBS) -n 1 $(LINT_BIN)/clang-tidy -p $(BUILD) --quiet \
	  --extra-arg=-Wno-unknown-warning-option --extra-arg=-fno-openmp

clean:
	rm -rf $(BUILD) $(BUILD)-sanitize $(PREFIX)
