"""The first cell of every notebook: on Colab (only), install this course's package.

The repository's address and the release the notebooks install are set here and nowhere else;
``python -m grader.cli sync-notebooks`` writes :data:`INSTALL_CELL` into the first cell of every
chapter and problem set (``notebooks/``, ``source/``, ``release/``), and tests fail when a
notebook's first cell differs or when :data:`RELEASE` is not the package's version.
``COURSE_PIP_SOURCE`` overrides the address (a fork, a branch, or a local checkout in tests of a
Colab-like runtime).

Releasing (maintainers): bump ``version`` in ``pyproject.toml``, set :data:`RELEASE` to ``v`` and
that version, run ``python -m grader.cli sync-notebooks``, commit, then tag the commit with
:data:`RELEASE` and push the tag. Learners' notebooks install that tag, so the package under a
notebook does not change mid-course when the default branch moves on.
"""
from __future__ import annotations

REPO_URL = "https://github.com/torch-compile-course/torch-compile-course"
RELEASE = "v0.1.0"   # a git tag (or commit) of REPO_URL: "v" + pyproject.toml's version
PIP_SOURCE = f"git+{REPO_URL}.git@{RELEASE}"

INSTALL_CELL_TAG = "course-setup"

INSTALL_CELL = f'''\
# Course setup. On Google Colab this installs the course's `grader` package, release {RELEASE}
# (torch, torchvision and matplotlib are already there); with `make lab` there is nothing to do.
import os, sys, subprocess
if "google.colab" in sys.modules or os.environ.get("COURSE_PIP_SOURCE"):
    source = os.environ.get("COURSE_PIP_SOURCE", "{PIP_SOURCE}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)
import torch
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
print(f"torch {{torch.__version__}} on {{DEVICE}}"
      + ("" if DEVICE == "cuda" else " (no GPU: on Colab pick Runtime > Change runtime type > GPU;"
                                     " GPU-only results are marked as such below)"))'''
