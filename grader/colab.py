"""The first cell of every notebook: on Colab (only), install this course's package.

The repository's address is set here and nowhere else; ``python -m grader.cli sync-notebooks``
writes :data:`INSTALL_CELL` into every chapter and problem set, and a test fails when a notebook's
first cell differs. ``COURSE_PIP_SOURCE`` overrides the address (a fork, or a local checkout in
tests of a Colab-like runtime).
"""
from __future__ import annotations

REPO_URL = "https://github.com/torch-compile-course/torch-compile-course"
PIP_SOURCE = f"git+{REPO_URL}.git"

INSTALL_CELL_TAG = "course-setup"

INSTALL_CELL = f'''\
# Course setup. On Google Colab this installs the course's `grader` package (torch, torchvision
# and matplotlib are already there); in JupyterLab with `make lab` there is nothing to do.
import os, sys, subprocess
if "google.colab" in sys.modules or os.environ.get("COURSE_PIP_SOURCE"):
    source = os.environ.get("COURSE_PIP_SOURCE", "{PIP_SOURCE}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)
import torch
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
print(f"torch {{torch.__version__}} on {{DEVICE}}"
      + ("" if DEVICE == "cuda" else " (no GPU: on Colab pick Runtime > Change runtime type > GPU;"
                                     " GPU-only results are marked as such below)"))'''
