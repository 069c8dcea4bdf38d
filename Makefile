# The two commands of the README:
#   make demo   set up, build, install to ./install, show the op from Python and from C++
#   make test   set up, build, install, run every C++ (ctest) and Python (pytest) test
# Set-up (scripts/setup-env.sh) uses python3 when its torch is in the supported range, else makes
# .venv with the newest; TORCH=X.Y.Z builds and tests against that release instead (own build dirs).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

TORCH ?=
BUILD ?= build$(if $(TORCH),-torch-$(TORCH))
PREFIX ?= $(CURDIR)/install$(if $(TORCH),-torch-$(TORCH))
CUDA ?= AUTO
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
PYTEST_ARGS ?=
PYTHON = $(shell cat $(BUILD)/python-path)

.PHONY: demo test install sanitize clean

install:
	@mkdir -p $(BUILD)
	TORCH=$(TORCH) scripts/setup-env.sh > $(BUILD)/python-path
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUSTOM_OPS_CUDA=$(CUDA) \
	  -DPython3_EXECUTABLE=$$(cat $(BUILD)/python-path) $(CMAKE_ARGS)
	cmake --build $(BUILD) -j $(JOBS)
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: install
	PYTHON=$(PYTHON) PREFIX=$(PREFIX) EXAMPLE_BUILD=$(BUILD)/examples MODELS=$(BUILD)/models examples/run_demo.sh

test: install
	ctest --test-dir $(BUILD) --output-on-failure
	CUSTOM_OPS_LIBRARY=$(PREFIX)/lib/libcustom_ops.so CUSTOM_OPS_PREFIX=$(PREFIX) CUSTOM_OPS_CUDA=$(CUDA) \
	  $(PYTHON) -m pytest tests/python -q -rs $(PYTEST_ARGS)

# The C++ tests again, built with AddressSanitizer and UndefinedBehaviorSanitizer (CPU kernels).
sanitize: install
	$(MAKE) install BUILD=$(BUILD)-sanitize PREFIX=$(BUILD)-sanitize/install CUDA=OFF \
	  CMAKE_ARGS="-DCUSTOM_OPS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCUSTOM_OPS_SCRIPTING_LIBRARY=$(PREFIX)/lib/libcustom_ops.so"
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(BUILD)-sanitize --output-on-failure

clean:
	rm -rf $(BUILD) $(BUILD)-sanitize $(PREFIX)
