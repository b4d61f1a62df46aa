# Everything that needs the environment depends on `setup`, so a fresh clone's
# `make test` or `make grade` sets itself up first.
SHELL := /bin/bash
PYTHON_SYS ?= python3
VENV := .venv
BIN := $(abspath $(VENV))/bin
PY := $(BIN)/python
# What `make setup-sandbox` / `setup-browser` unpack without root, where they cannot install.
SYSTEM := $(abspath .system)
# The venv's bin/ must be on PATH for nbgrader: it shells out to `alembic`.
export PATH := $(BIN):$(SYSTEM)/bin:$(PATH)
# torch and torchvision pinned to releases that install without a network download here;
# override e.g. `make setup TORCH_PINS="torch==2.6.0 torchvision==0.21.0"`.
TORCH_PINS ?= torch==2.14.1 torchvision==0.29.1
# TORCH_INDEX: where pip takes torch and torchvision from, only them (the grading image,
# deploy/Dockerfile, takes PyTorch's CPU builds); SETUP_EXTRAS: the package's extras to install
# (the image: course,cluster, Ray's dashboard agent that KubeRay's health checks call).
TORCH_INDEX ?=
SETUP_EXTRAS ?= course,dev
# System packages are installed only when asked for (as root, or through passwordless sudo;
# otherwise unpacked without root into .system/, and where even that fails the exact command is
# printed): `make setup-sandbox` installs bubblewrap, the sandbox for learner code during
# grading; `make setup-browser` installs chromium, for the browser tests. `make setup
# WITH="sandbox browser"` does both with the setup. `make setup` alone needs no root.
WITH ?=
STAMP := $(VENV)/.setup-done
ASSIGNMENT ?=
SIZE ?= ci

.PHONY: setup setup-sandbox setup-browser test test-oldest lab bench bench-grade gpu-check gpu-bundle release grade gradescope clean help

# One line per target (tests/test_setup.py checks that every target of .PHONY is listed).
help:
	@echo "make grade         grade submitted/ (or the bundled demo cohort) into the gradebook"
	@echo "make gradescope ASSIGNMENT=psN   the Gradescope autograder zip of a problem set"
	@echo "make setup         the Python environment (.venv/); no root needed"
	@echo "make setup-sandbox bubblewrap, the sandbox for learner code during make grade (root or sudo)"
	@echo "make setup-browser chromium, for the browser tests (root or sudo)"
	@echo "make test          set up and run the test suite"
	@echo "make test-oldest   the grader's tests and the chapters on the oldest supported torch"
	@echo "make lab           JupyterLab on the course with nbgrader's extensions"
	@echo "make release       regenerate release/ from source/"
	@echo "make bench         grader and workload figures for this machine (bench-results/)"
	@echo "make bench-grade   seconds per graded submission and where they go (bench-results/)"
	@echo "make gpu-check     every GPU table of the course on CUDA (bench-results/gpu-check/); OFFLINE=1: no setup, python3"
	@echo "make gpu-bundle    what gpu-check OFFLINE=1 needs beyond a GPU machine's torch (gpu-bundle/)"
	@echo "make clean         remove the venvs and everything the targets made"
	@echo "make help          this list"
	@echo
	@echo "make grade VARIABLE=value ...  (the default after each =; declared in grader/cohort/settings.py):"
	@$(PYTHON_SYS) -B -m grader.cohort.settings
	@echo
	@echo "The course and who does what: README.md. The rest (grading, Gradescope, Canvas, JupyterHub,"
	@echo "Ray and Kubernetes, trust, versions): docs/README.md lists the pages."

setup: $(STAMP) $(addprefix setup-,$(WITH))

# Re-run only when the dependency list changes; a second `make setup` does nothing. The stamp is
# written last, so a setup that failed half-way runs again.
# make-venv falls back to a venv without pip plus pip from PyPI where python3-venv is missing;
# pip-install tries an install again when a download is cut off.
$(STAMP): pyproject.toml
	grader/tools/make-venv $(PYTHON_SYS) $(VENV)
	grader/tools/pip-install $(PY) -q --upgrade pip
	grader/tools/pip-install $(PY) -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH_PINS)
	grader/tools/pip-install $(PY) -q -e '.[$(SETUP_EXTRAS)]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	$(BIN)/jupyter labextension enable --level=sys_prefix @jupyter/nbgrader >/dev/null
	$(BIN)/jupyter labextension list 2>&1 | grep -q '@jupyter/nbgrader.*enabled' || { echo "make setup: nbgrader's JupyterLab extension (@jupyter/nbgrader) is not enabled"; exit 1; }
	@command -v bwrap >/dev/null || echo "note: bubblewrap is not installed: \`make grade\` confines learner code with the kernel's Landlock and seccomp instead where it can (\`make setup-sandbox\` installs bubblewrap)"
	touch $@

# Phony and checked every time: nothing records an install, so a failed one is tried again.
setup-sandbox:
	@grader/tools/system-package bwrap bubblewrap "the sandbox for learner code during make grade" $(SYSTEM)

# Debian's chromium. (Ubuntu's apt chromium is a snap stub: there, `.venv/bin/playwright install
# chromium` and COURSE_CHROMIUM=<its chrome binary> for the browser tests.)
setup-browser:
	@grader/tools/system-package chromium chromium "the browser tests (tests/test_browser.py)" $(SYSTEM)

# The suite tests the sandbox and the browser, so it asks for both (CI runs it as root).
# TEST_WORKERS parallel pytest workers (pytest-xdist): most of the suite's time is spent waiting on
# processes (kernels, nbgrader, grading runs), so two workers fill the 2-core box. --dist loadfile
# runs each test file on one worker, so no fixture is computed twice (tests/conftest.py keeps the
# files that share a session fixture together and puts the longest first, an order that
# --no-loadscope-reorder keeps). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test: setup setup-sandbox setup-browser
	$(PY) -m pytest -q --durations=15 $(XDIST) tests

# The oldest torch the course supports (pyproject.toml: torch>=2.8), in a venv of its own: the
# grader's tests and the chapters at CI size. Not part of `make test` (it downloads ~3 GB).
OLDEST_PINS ?= torch==2.8.0 torchvision==0.23.0
OLDEST_VENV := .venv-oldest
OLDEST_TESTS ?= tests --ignore=tests/test_browser.py --ignore=tests/test_colab_runtime.py --ignore=tests/test_packaging.py
$(OLDEST_VENV)/.setup-done: pyproject.toml
	grader/tools/make-venv $(PYTHON_SYS) $(OLDEST_VENV)
	grader/tools/pip-install $(OLDEST_VENV)/bin/python -q --upgrade pip
	grader/tools/pip-install $(OLDEST_VENV)/bin/python -q $(OLDEST_PINS)
	grader/tools/pip-install $(OLDEST_VENV)/bin/python -q -e '.[course,dev]' $(OLDEST_PINS)
	$(OLDEST_VENV)/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

test-oldest: setup setup-sandbox $(OLDEST_VENV)/.setup-done
	PATH=$(abspath $(OLDEST_VENV))/bin:$$PATH $(OLDEST_VENV)/bin/python -m pytest -q --durations=10 $(XDIST) $(OLDEST_TESTS)

lab: setup
	$(BIN)/jupyter lab --notebook-dir=.

release: setup
	$(PY) -m grader.cli release

# Only what you set is passed on: every variable's default and help is in grader/cohort/settings.py
# (`make help` lists them; `.venv/bin/python -m grader.cli grade --help` shows the options).
# ASSIGNMENT=ps1 grades one problem set (ASSIGNMENT="ps1 ps2" several); WORKERS=n grades n at once
# (default: one per idle core, as many as the memory holds);
# REGRADE=1 grades again what is already graded (grades are replaced, never added);
# MEMORY_GB=n limits the address space of the process that runs a submission's code, on CPU
# (default 6, the self-check's too: grader.isolation.sandbox.process.DEFAULT_MEMORY_BYTES);
# SANDBOX=off grades without bubblewrap: learner code then gets kernel confinement where this
# machine allows it, else limits only (what it can do is printed at the start; docs/trust.md);
# EXECUTOR=ray grades each submission as a Ray task, on RAY_ADDRESS (a running cluster) or a local
# Ray instance (docs/ray-kubernetes.md); DEMO=all grades the whole demo cohort (when submitted/ and
# downloads/ hold no files).
COURSE ?=
WORKERS ?=
MEMORY_GB ?=
SANDBOX ?=
ROSTER ?=
CANVAS_ASSIGNMENTS ?=
CANVAS_PER_QUESTION ?=
EXECUTOR ?=
RAY_ADDRESS ?=
DEMO ?=
REGRADE ?=
grade: setup
	$(PY) -m grader.cli grade $(if $(COURSE),--course $(COURSE)) $(foreach a,$(ASSIGNMENT),--assignment $(a)) $(if $(WORKERS),--workers $(WORKERS)) $(if $(MEMORY_GB),--memory-gb $(MEMORY_GB)) $(if $(SANDBOX),--sandbox $(SANDBOX)) $(if $(ROSTER),--roster $(ROSTER)) $(if $(CANVAS_ASSIGNMENTS),--canvas-assignments $(CANVAS_ASSIGNMENTS)) $(if $(CANVAS_PER_QUESTION),--canvas-per-question) $(if $(EXECUTOR),--executor $(EXECUTOR)) $(if $(RAY_ADDRESS),--ray-address $(RAY_ADDRESS)) $(if $(DEMO),--demo-students $(DEMO)) $(if $(REGRADE),--regrade)

# The Gradescope autograder zip of one problem set: build/gradescope/ASSIGNMENT-autograder.zip.
# GRADESCOPE_TIMEOUT: the assignment's time limit on Gradescope in seconds (default: the one the
# zip's README recommends for the set: 15 minutes for ps3, 10 for the others); run_autograder
# stops itself a minute before it and writes results.json.
# REQUIRE_CONFINEMENT=1: the zip grades nothing where learner code cannot be confined in
# Gradescope's container (default: it grades there under an unprivileged user id only, and the
# results page says so).
GRADESCOPE_TIMEOUT ?=
REQUIRE_CONFINEMENT ?=
gradescope: setup
	@test -n "$(ASSIGNMENT)" || { echo "usage: make gradescope ASSIGNMENT=ps2"; exit 2; }
	$(PY) -m grader.cli gradescope $(ASSIGNMENT) $(if $(GRADESCOPE_TIMEOUT),--timeout-s $(GRADESCOPE_TIMEOUT)) $(if $(REQUIRE_CONFINEMENT),--require-confinement)

bench-grade: setup
	$(PY) -m grader.cli bench-grade --out bench-results/bench-grade.md

bench: setup
	$(PY) -m grader.cli bench --out bench-results/bench-cpu.md

# Every GPU table of the course in one run (grader/tools/gpu_check.py; docs/gpu-check.md): the
# chapters' claims beside this GPU's figures, every GPU-only cell, each problem set graded through
# the judge, the floors for this device class; files in bench-results/gpu-check/. Here (online) it
# runs in .venv and then also the chapters through Jupyter and the benchmarks with --calibrate.
# OFFLINE=1: on a GPU machine with no network: no `setup`; the machine's own python3 (PYTHON_SYS;
# torch 2.8 or newer with CUDA, Triton, NumPy, Matplotlib; no Jupyter) and, for torchvision,
# gpu-bundle/ (`make gpu-bundle` made here; send it with the working tree).
# GPU_CHECK_ARGS: more options (`python3 -m grader.cli gpu-check --help`).
OFFLINE ?=
GPU_CHECK_ARGS ?=
gpu-check: $(if $(OFFLINE),,setup)
ifeq ($(OFFLINE),)
	$(PY) -m grader.cli gpu-check --out bench-results/gpu-check $(GPU_CHECK_ARGS)
	$(PY) -m grader.cli bench --device cuda --size full --calibrate --out bench-results/gpu-check.md
	$(PY) -m grader.cli gpu-check-chapters --size full --out bench-results/gpu-check-chapters.md
else
	$(PYTHON_SYS) -m grader.cli gpu-check --out bench-results/gpu-check $(GPU_CHECK_ARGS)
endif

# gpu-bundle/: torchvision's wheel for the GPU machine's torch (GPU_TORCH, major.minor), one zip
# per Python 3.10 to 3.13, for `make gpu-check OFFLINE=1` (29 MiB; downloaded here, installed nowhere).
GPU_TORCH ?= 2.11
gpu-bundle: setup
	$(PY) -m grader.cli gpu-bundle --torch $(GPU_TORCH)

# Everything the targets make: venvs, bench-results/, build/ (the demo course, Gradescope zips),
# nbgrader's folders and database, test artifacts. submitted/ and downloads/ are the instructor's.
clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(SYSTEM) bench-results build gpu-bundle reports autograded feedback release/.ipynb_checkpoints \
		gradebook.db gradebook.db-journal .pytest_cache tests/artifacts .grader-cache
	find . -name '*.egg-info' -prune -exec rm -rf {} +
	find . -name __pycache__ -prune -exec rm -rf {} +
