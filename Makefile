# The two commands of the README, and a few more.
#   make run    install what is missing, build, install the Python module into a
#               venv, and run the demo (a PyTorch training loop fed by ferry)
#   make test   install, build, and run the whole suite: a normal build, an
#               ASan+UBSan build, a TSan build of the concurrent tests, and the
#               Python tests against the module installed into a throwaway venv
#   make bench  the side-by-side benchmarks (not part of make test)

BUILD ?= build
PYTHON ?= /usr/bin/python3
VENV = $(BUILD)/pyvenv
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CTEST = ctest --output-on-failure -j$(JOBS)

.PHONY: all deps build python run test test-release test-asan test-tsan test-python bench fuzz \
	format clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# The Python module, installed the way the README says: a venv that sees Debian's
# packages (numpy, torch), and pip building from this checkout, offline.
python: deps
	@rm -rf $(VENV)
	@$(PYTHON) -m venv --system-site-packages $(VENV)
	@$(VENV)/bin/pip install -q --no-index --no-build-isolation .

run: build python
	@scripts/demo.sh $(BUILD)/ferry $(BUILD)/demo $(VENV)/bin/python

# the suite also opens ferry report's page in a headless browser (Debian's chromium)
test: deps
	@scripts/install-deps.sh browser
	@$(MAKE) --no-print-directory test-release test-asan test-tsan test-python

test-release:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS)
	$(CTEST) --test-dir $(BUILD)

test-asan:
	cmake -S . -B $(BUILD)-asan -DCMAKE_BUILD_TYPE=Debug -DFERRY_SANITIZE=address,undefined >/dev/null
	cmake --build $(BUILD)-asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  $(CTEST) --test-dir $(BUILD)-asan -LE install

test-tsan:
	cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_SANITIZE=thread \
	  -DFERRY_WITH_ROCKSDB=OFF >/dev/null
	cmake --build $(BUILD)-tsan -j$(JOBS)
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  $(CTEST) --test-dir $(BUILD)-tsan -L concurrent

# The Python tests run from outside the source tree, against the installed module.
test-python: python
	cd $$(mktemp -d) && $(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider \
	  $(CURDIR)/python/tests

bench: build python
	@scripts/install-deps.sh bench
	bench/run.sh $(BUILD)/ferry

# libFuzzer targets (clang); each runs for FUZZ_SECONDS.
FUZZ_SECONDS ?= 60
fuzz:
	@scripts/install-deps.sh fuzz
	CC=clang cmake -S . -B $(BUILD)-fuzz -DCMAKE_BUILD_TYPE=Debug -DFERRY_FUZZ=ON >/dev/null
	cmake --build $(BUILD)-fuzz -j$(JOBS)
	@for t in $(BUILD)-fuzz/tests/fuzz_*; do case $$t in *_replay) continue;; esac; \
	  n=$$(basename $$t | sed 's/^fuzz_//'); new=$(BUILD)-fuzz/found/$$n; mkdir -p $$new; \
	  echo "== $$t (new inputs go to $$new; the seeds stay as they are)"; \
	  $$t -max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(BUILD)-fuzz/ $$new tests/fuzz/corpus/$$n || exit 1; done

format:
	clang-format -i include/ferry/*.h src/*/*.c src/*/*.h cli/*.c cli/*.h tests/*.c tests/*.h tests/fuzz/*.c \
	  python/ferry/*.c python/ferry/*.h

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz
