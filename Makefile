# Everything that needs the environment depends on `setup`, so a fresh clone's
# `make test` or `make grade` sets itself up first.
SHELL := /bin/bash
PYTHON_SYS ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
PY := $(BIN)/python
# The venv's bin/ must be on PATH for nbgrader: it shells out to `alembic`.
export PATH := $(BIN):$(PATH)
# torch and torchvision pinned to releases that install without a network download here;
# override e.g. `make setup TORCH_PINS="torch==2.6.0 torchvision==0.21.0"`.
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
# Debian packages: bubblewrap sandboxes learner code during grading; chromium drives the
# browser tests. Installed when missing (as root, or through passwordless sudo).
SYSTEM_PACKAGES := bubblewrap chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
STAMP := $(VENV)/.setup-done
ASSIGNMENT ?=
WORKERS ?= 1
SIZE ?= ci

.PHONY: setup test test-oldest lab bench gpu-check release grade bench-grade clean help

help:
	@echo "make grade     grade submitted/ (or the bundled demo cohort) into the gradebook"
	@echo "make test      set up and run the test suite"
	@echo "make test-oldest  the grader's tests and the chapters on the oldest supported torch"
	@echo "make lab       JupyterLab on the course with nbgrader's extensions"
	@echo "make release   regenerate release/ from source/"
	@echo "make bench     grader and workload figures for this machine (bench-results/)"
	@echo "make gpu-check the same at full size on CUDA, plus every chapter"
	@echo "make clean     remove the venv and generated files"

setup: $(STAMP)

# Re-run only when the dependency list changes; a second `make setup` does nothing.
$(STAMP): pyproject.toml
	@command -v bwrap >/dev/null && command -v chromium >/dev/null || \
	  { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(SYSTEM_PACKAGES) >/dev/null; } || \
	  echo "WARNING: could not install $(SYSTEM_PACKAGES): grading runs without a sandbox, browser tests fail"
	test -x $(PY) || $(PYTHON_SYS) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS)
	$(PY) -m pip install -q -e '.[course,dev]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	$(BIN)/jupyter labextension enable --level=sys_prefix nbgrader >/dev/null 2>&1 || true
	touch $@

test: setup
	$(PY) -m pytest -q --durations=15 tests

# The oldest torch the course supports (pyproject.toml: torch>=2.6), in a venv of its own: the
# grader's tests and the chapters at CI size. Not part of `make test` (it downloads ~3 GB).
OLDEST_PINS ?= torch==2.6.0 torchvision==0.21.0
OLDEST_VENV := .venv-oldest
OLDEST_TESTS ?= tests --ignore=tests/test_browser.py --ignore=tests/test_colab_runtime.py --ignore=tests/test_packaging.py
$(OLDEST_VENV)/.setup-done: pyproject.toml
	test -x $(OLDEST_VENV)/bin/python || $(PYTHON_SYS) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(OLDEST_VENV)/bin/python -m pip install -q $(OLDEST_PINS)
	$(OLDEST_VENV)/bin/python -m pip install -q -e '.[course,dev]' $(OLDEST_PINS)
	$(OLDEST_VENV)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

test-oldest: setup $(OLDEST_VENV)/.setup-done
	PATH=$(abspath $(OLDEST_VENV))/bin:$$PATH $(OLDEST_VENV)/bin/python -m pytest -q --durations=10 $(OLDEST_TESTS)

lab: setup
	$(BIN)/jupyter lab --notebook-dir=.

release: setup
	$(PY) -m grader.cli release

# ASSIGNMENT=ps1 grades one problem set; WORKERS=n grades n submissions at once;
# REGRADE=1 grades again what is already graded (grades are replaced, never added).
# SANDBOX=off grades without bubblewrap (learner code can then read this machine's files).
REGRADE ?=
SANDBOX ?= auto
grade: setup
	$(PY) -m grader.grade $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) --workers $(WORKERS) $(if $(REGRADE),--regrade) --sandbox $(SANDBOX)

bench-grade: setup
	$(PY) -m grader.bench_grade --out bench-results/bench-grade.md

bench: setup
	$(PY) -m grader.bench --out bench-results/bench-cpu.md

gpu-check: setup
	$(PY) -m grader.bench --device cuda --size full --calibrate --out bench-results/gpu-check.md
	$(PY) -m grader.gpu_check_chapters --size full --out bench-results/gpu-check-chapters.md

clean:
	rm -rf $(VENV) $(OLDEST_VENV) bench-results reports autograded feedback gradebook.db .pytest_cache
	find . -name __pycache__ -prune -exec rm -rf {} +
