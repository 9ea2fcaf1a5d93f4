# The contract (DESIGN.md): `make demo` and `make test` are the two set-up commands.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEMO_DIR ?= runs/demo

.PHONY: install install-test kernels test demo bench lint clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Stamp files so that a second `make test` does not reinstall; they are rebuilt when
# pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e '.[serve]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e '.[test]'
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
	@$(MAKE) --no-print-directory kernels

install-test: $(VENV)/.installed-test
	@$(MAKE) --no-print-directory kernels

# The compiled CPU products (kernels/, docs/cpu-kernels.md), built into the venv after jax is
# there. Without a C++ compiler, or when the build fails (an older build is then removed), one
# line says so and t5forge runs XLA's products. The stamp is rebuilt when kernels/ changes; a missing compiler leaves no
# stamp, so a later run with one builds. onednn-devel carries only headers: --no-deps keeps
# its SYCL runtime (hundreds of MB, not used) out.
KERNEL_SOURCES := kernels/pyproject.toml kernels/CMakeLists.txt $(wildcard kernels/src/*)
KERNEL_LOG := $(VENV)/kernels-build.log

kernels: $(VENV)/.installed-kernels

$(VENV)/.installed-kernels: $(KERNEL_SOURCES) | $(VENV)/bin/python
	@if ! command -v $(CXX) >/dev/null 2>&1; then \
	  echo "t5forge_kernels: no C++ compiler ($(CXX)); skipped, t5forge runs XLA's CPU products"; \
	elif { $(PIP) install -q scikit-build-core nanobind cmake ninja onednn-cpu-gomp==2023.2.0 \
	  && $(PIP) install -q --no-deps onednn-devel==2026.1.0 \
	  && $(PIP) install -q --no-build-isolation ./kernels \
	  && $(PY) -c "import t5forge_kernels"; } >$(KERNEL_LOG) 2>&1; then \
	  echo "t5forge_kernels: built; t5forge runs oneDNN's bf16 and int8 products and its decode attention"; \
	  touch $@; \
	else \
	  echo "t5forge_kernels: build failed (see $(KERNEL_LOG)); t5forge runs XLA's CPU products"; \
	  $(PIP) uninstall -q -y t5forge-kernels >>$(KERNEL_LOG) 2>&1; \
	  touch $@; \
	fi

# Two workers, a test file each at a time (module fixtures train once): most tests wait on
# one single-threaded XLA compile or a tiny subprocess run, so a 2-core machine runs two.
test: install-test
	$(PY) -m ruff check t5forge tests benchmarks examples
	$(PY) -m ruff format --check t5forge tests benchmarks examples
	$(PY) -m pytest -q -n 2 --dist loadfile --durations=25 tests

demo: install
	$(VENV)/bin/t5forge demo --model_dir=$(DEMO_DIR)

bench: install-test
	$(PIP) install -q -e '.[bench]'
	$(PY) benchmarks/run_all.py

lint: install-test
	$(PY) -m ruff check t5forge tests benchmarks examples
	$(PY) -m ruff format --check t5forge tests benchmarks examples

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
