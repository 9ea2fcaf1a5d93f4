# The contract (DESIGN.md): `make demo` and `make test` are the two set-up commands.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
DEMO_DIR ?= runs/demo

.PHONY: install install-test test demo bench lint clean

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

install-test: $(VENV)/.installed-test

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
