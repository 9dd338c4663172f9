# refgrad: `make demo` and `make test` on a fresh machine; see README.md.
SHELL := /bin/bash
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
PYTHON := $(VENV)/bin/python
BUILD := build
STAGE := $(CURDIR)/$(BUILD)/stage
# The editable install of the Python package configures and builds $(BUILD)
# once; after that ninja keeps it up to date (and so does `import refgrad`).
EDITABLE_STAMP := $(BUILD)/.editable-installed

.PHONY: all bootstrap build test test-cpp test-python test-slow test-planted test-notebooks test-embed test-docs test-fuzz fuzz fuzz-build \
        fuzz-seeds fuzz-campaign demo bench docs notebooks conformance aten-coverage clean

all: build

bootstrap:
	@tools/bootstrap.sh

# The first build (or one after pyproject.toml or the venv changed) is the
# editable install, which configures $(BUILD) and builds everything once.
# Each step prints one line; its output goes to a log in $(BUILD)/logs/, shown when it fails.
build: bootstrap
	@if [ ! -f $(EDITABLE_STAMP) ] || [ pyproject.toml -nt $(EDITABLE_STAMP) ] \
	    || [ $(VENV)/.refgrad-requirements -nt $(EDITABLE_STAMP) ]; then \
	  tools/logged.sh $(BUILD)/logs/editable-install.log \
	    "build: configuring $(BUILD) and installing refgrad into $(VENV) (editable)" \
	    $(PYTHON) -m pip install --no-build-isolation --disable-pip-version-check -e . -Cbuild-dir=$(BUILD) \
	    && touch $(EDITABLE_STAMP); \
	fi
	@tools/logged.sh $(BUILD)/logs/ninja.log "build: ninja -C $(BUILD)" ninja -C $(BUILD)

# The sanitizer build of the fuzzers (fuzz-build, minutes of clang) runs beside the Python tests, at the
# lowest CPU priority: it takes the cores pytest leaves idle and never slows a test down.
test: build
	@$(MAKE) --no-print-directory test-cpp
	@$(MAKE) --no-print-directory -j2 test-python fuzz-build FUZZ_NICE="nice -n 19"
	@$(MAKE) --no-print-directory test-notebooks test-embed test-docs test-fuzz
	@cpp=$$(grep -h "^\[doctest\] test cases" $(BUILD)/meson-logs/testlog.txt | awk '{s += $$6} END {print s}'); \
	  py=$$(grep -oE "[0-9]+ passed" $(BUILD)/pytest.log | awk '{print $$1}'); \
	  nb=$$(grep -oE "[0-9]+ passed" $(BUILD)/pytest-notebooks.log | awk '{print $$1}'); \
	  ex=$$(meson test -C $(BUILD) --list --suite examples 2>/dev/null | grep -c examples); \
	  echo "make test: all suites passed ($$cpp doctest cases, $$py pytest tests, $$nb notebook tests, $$ex example runs, 2 embedding builds, docs/nodes.md check, 4 fuzzers)"; \
	  echo "refgrad: $$((cpp + py + nb + ex + 6)) passed, 0 failed"

test-cpp:
	meson test -C $(BUILD) --print-errorlogs
	@grep -h "^\[doctest\] test cases" $(BUILD)/meson-logs/testlog.txt

test-python:
	set -o pipefail; $(PYTHON) -m pytest -q -rs tests/python | tee $(BUILD)/pytest.log

# The tests marked `slow`, which the default run deselects (tests/python/conftest.py): compiled autograd on
# every model of the transformers zoo (tests/python/test_hf_zoo.py), minutes each.
test-slow: build
	$(PYTHON) -m pytest -q -rs -m slow tests/python

# Planted bugs at every position of tests/python/test_planted_matrix.py for every engine kind, and the
# accuracy table (make test runs the MLP's positions); and the slow cases of compiled autograd's graph
# localization and swap mode (Inductor, two wrong calls).
test-planted: build
	REFGRAD_PLANTED_MATRIX=1 $(PYTHON) -m pytest -q -s tests/python/test_planted_matrix.py \
	  tests/python/test_compiled_autograd_localize.py

# torch's OpInfo database: every sample of every autograd op, in each dtype its backward supports, captured
# and run by refgrad and compared with torch; prints ops right / attempted per dtype and the missing nodes,
# and fails where the run differs from tests/python/opinfo_expectations.py (docs/conformance.md; make test
# runs the first sample of each op in float64 and float32).
conformance: build
	$(PYTHON) tools/conformance.py

# Every ATen op in the backward graphs AOTAutograd makes for the zoo, the transformers models and the first
# float32 sample of each OpInfo autograd op (aot_eager's graphs, then Inductor's after its decompositions),
# run by refgrad against torch op by op: calls right / attempted per op, the missing ops ranked (docs/aot.md;
# make test runs the zoo's, tests/python/test_aten.py). A few minutes.
aten-coverage: build
	$(PYTHON) tools/aten_coverage.py --markdown $(BUILD)/aten_coverage.md
	$(PYTHON) tools/aten_coverage.py --decompositions inductor --markdown $(BUILD)/aten_coverage_inductor.md

# Each notebook in notebooks/ runs twice in a fresh kernel: with the solutions of notebooks/solutions/
# (every check prints ✓) and as committed (every check prints ○). Executed copies: build/notebooks/.
test-notebooks:
	set -o pipefail; $(PYTHON) -m pytest -q tests/notebooks | tee $(BUILD)/pytest-notebooks.log

# Jupyter on notebooks/, from .venv (JupyterLab is installed on first use: requirements-jupyter.txt).
JUPYTER_ARGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)
notebooks: build
	@$(PYTHON) -c "import jupyterlab" 2>/dev/null \
	  || $(PYTHON) -m pip install -q --disable-pip-version-check -r requirements-jupyter.txt
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(JUPYTER_ARGS)

# Install under build/stage (never into the system) and build examples/embed against it.
test-embed:
	@rm -rf $(STAGE) $(BUILD)/embed $(BUILD)/embed-cmake  # CMake caches what pkg-config said
	meson install -C $(BUILD) --destdir $(STAGE) --tags devel --quiet
	PKG_CONFIG_PATH=$$(find $(STAGE) -name refgrad.pc -printf '%h') \
	  meson setup --reconfigure $(BUILD)/embed examples/embed > $(BUILD)/embed-setup.log || { cat $(BUILD)/embed-setup.log; exit 1; }
	ninja -C $(BUILD)/embed
	$(BUILD)/embed/embed
	PKG_CONFIG_PATH=$$(find $(STAGE) -name refgrad.pc -printf '%h') \
	  cmake -S examples/embed -B $(BUILD)/embed-cmake -G Ninja > $(BUILD)/embed-cmake.log || { cat $(BUILD)/embed-cmake.log; exit 1; }
	cmake --build $(BUILD)/embed-cmake
	$(BUILD)/embed-cmake/embed

demo: build
	@tools/demo.sh

bench: build
	$(BUILD)/bench/bench_tensor
	REFGRAD_TORCH_PYTHON=$(PYTHON) $(BUILD)/bench/bench_interpreter
	$(PYTHON) bench/bench_models.py
	$(PYTHON) bench/memory.py
	$(PYTHON) bench/noise.py

# docs/nodes.md is generated from the node registry; test-docs checks it is current.
docs: build
	$(BUILD)/tools/nodes_md > docs/nodes.md

test-docs:
	@$(BUILD)/tools/nodes_md | diff -u docs/nodes.md - > /dev/null \
	  || { echo "docs/nodes.md is out of date with the node registry: run make docs"; exit 1; }
	@echo "docs/nodes.md matches the node registry"

# The libFuzzer harnesses (fuzz/), built by clang-14 with ASan and UBSan in
# their own build directory. test-fuzz replays the committed corpus and runs
# FUZZ_RUNS more inputs per harness with a fixed seed; `make fuzz` explores
# for FUZZ_SECONDS per harness.
FUZZ_BUILD := build-fuzz
FUZZ_NICE ?=
FUZZ_RUNS ?= 20000
FUZZ_SECONDS ?= 60
fuzz-build: bootstrap
	@if [ ! -f $(FUZZ_BUILD)/build.ninja ]; then \
	  echo "fuzz: configuring $(FUZZ_BUILD) (clang-14, ASan + UBSan, libFuzzer)"; mkdir -p $(BUILD)/logs; \
	  CC=clang-14 CXX=clang++-14 meson setup $(FUZZ_BUILD) -Dfuzz=true -Dtests=false -Dpython=false \
	    -Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false \
	    "-Dcpp_args=-fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined -D_GLIBCXX_ASSERTIONS" \
	    > $(BUILD)/logs/fuzz-setup.log \
	    || { cat $(BUILD)/logs/fuzz-setup.log; exit 1; }; \
	fi
	@tools/logged.sh $(BUILD)/logs/fuzz-ninja.log "fuzz: ninja -C $(FUZZ_BUILD)" \
	  $(FUZZ_NICE) ninja -C $(FUZZ_BUILD) fuzz/fuzz_text fuzz/fuzz_bytecode fuzz/fuzz_bundle fuzz/fuzz_run

test-fuzz: fuzz-build
	@tools/fuzz.sh replay $(FUZZ_RUNS)

# `make fuzz` also explores the Python property tests (tests/python/test_hostile_inputs.py) with
# FUZZ_PY_EXAMPLES random examples per test.
FUZZ_PY_EXAMPLES ?= 2000
fuzz: fuzz-build build
	@tools/fuzz.sh explore $(FUZZ_SECONDS)
	REFGRAD_HYPOTHESIS_EXPLORE=1 REFGRAD_HYPOTHESIS_EXAMPLES=$(FUZZ_PY_EXAMPLES) \
	  $(PYTHON) -m pytest -q tests/python/test_hostile_inputs.py

# A modest differential fuzzing campaign (refgrad-fuzz, docs/fuzzing.md): CAMPAIGN_CASES generated programs
# from seed CAMPAIGN_SEED against CAMPAIGN_ENGINES in CAMPAIGN_WORKERS processes; one folder per distinct
# finding in $(BUILD)/fuzz-findings/, and its markdown report in $(BUILD)/fuzz-findings/report.md.
CAMPAIGN_CASES ?= 50
CAMPAIGN_SEED ?= 0
CAMPAIGN_ENGINES ?= eager,compiled_autograd:aot_eager
CAMPAIGN_WORKERS ?= 2
fuzz-campaign: build
	$(PYTHON) -m refgrad.fuzz --engines $(CAMPAIGN_ENGINES) --cases $(CAMPAIGN_CASES) --seed-start $(CAMPAIGN_SEED) \
	  --workers $(CAMPAIGN_WORKERS) --findings $(BUILD)/fuzz-findings
	$(PYTHON) -m refgrad.fuzz report $(BUILD)/fuzz-findings > $(BUILD)/fuzz-findings/report.md
	@echo "fuzz-campaign: report in $(BUILD)/fuzz-findings/report.md"

# Regenerates the fuzzers' seed corpus (fuzz/corpus/) from examples/programs/.
fuzz-seeds: build
	$(BUILD)/tools/fuzz_seeds examples/programs fuzz/corpus

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
