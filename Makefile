# Thin wrapper around CMake. `make` = CPU build, `make test` = everything CI runs.
JOBS ?= $(shell nproc)
CUDA_ARCH ?= 90
# nvcc is often installed outside PATH.
export PATH := $(PATH):/usr/local/cuda/bin
GENERATOR := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")
CMAKE_FLAGS ?=

.PHONY: all setup build test test-asan test-clients cuda demo fuzz bench clean

all: build

setup:
	@[ -n "$$DS4_SKIP_SETUP" ] || bash scripts/setup.sh

build/CMakeCache.txt:
	cmake -S . -B build $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS)

build: setup build/CMakeCache.txt
	cmake --build build -j $(JOBS)

# Sanitizer build of the input-facing parsers; the main test suite runs its binaries.
build-asan/CMakeCache.txt:
	cmake -S . -B build-asan $(GENERATOR) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDS4_SANITIZE=ON -DDS4_BENCH=OFF $(CMAKE_FLAGS)

test-asan: setup build-asan/CMakeCache.txt
	cmake --build build-asan -j $(JOBS) --target ds4_asan_targets

# Codex and opencode (label clients_extra) run only in test-clients, which also installs them.
test: build test-asan
	cd build && ctest --output-on-failure -j $(JOBS) -LE clients_extra

# The four coding-agent CLIs against ds4-server (docs/CLIENTS.md).
test-clients: build
	@[ -n "$$DS4_SKIP_SETUP" ] || DS4_SETUP_EXTRA_AGENTS=1 bash scripts/setup.sh
	cd build && ctest --output-on-failure -L clients

cuda: setup
	@command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || { echo 'make cuda: nvcc not found (install the CUDA toolkit)'; exit 1; }
	cmake -S . -B build-cuda $(GENERATOR) -DCMAKE_BUILD_TYPE=Release -DDS4_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCH) -DDS4_TESTS=OFF -DDS4_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-cuda -j $(JOBS)

# Builds the libFuzzer targets, then runs each for FUZZ_SECONDS on a scratch corpus seeded from
# the committed one (docs/TESTING.md has the long runs).
FUZZ_SECONDS ?= 60
fuzz: setup
	CC=clang CXX=clang++ cmake -S . -B build-fuzz $(GENERATOR) -DDS4_FUZZ=ON -DDS4_TESTS=OFF -DDS4_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target ds4_fuzz_targets
	mkdir -p build-fuzz/corpus/gguf build-fuzz/corpus/request
	build-fuzz/fuzz/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) build-fuzz/corpus/gguf tests/fixtures/gguf
	build-fuzz/fuzz/fuzz_request -max_total_time=$(FUZZ_SECONDS) -max_len=4096 build-fuzz/corpus/request tests/fuzz/corpus/request

bench: build
	@for b in build/bench/*; do [ -x "$$b" ] && "$$b"; done

demo: build
	@bash scripts/demo.sh

clean:
	rm -rf build build-asan build-cuda build-fuzz
