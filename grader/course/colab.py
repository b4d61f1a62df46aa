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

from grader import _environment as environment

REPO_URL = "https://github.com/torch-compile-course/torch-compile-course"
RELEASE = "v0.2.0"   # a git tag (or commit) of REPO_URL: "v" + pyproject.toml's version
PIP_SOURCE = f"git+{REPO_URL}.git@{RELEASE}"

INSTALL_CELL_TAG = "course-setup"

# torch's oldest supported release (pyproject.toml: torch>=2.8). On a Colab runtime with an older
# torch, pip would replace torch and torchvision inside the running session (torchaudio, which
# Colab also preinstalls, would stay old and mismatched) and the kernel would need a restart; the
# cell says so and stops before pip touches anything.
MIN_TORCH = (2, 8)

INSTALL_CELL = f'''\
# Course setup. On Google Colab this installs the course's `grader` package, release {RELEASE}
# (torch, torchvision and matplotlib are already there); with `make lab` there is nothing to do.
import os, sys, subprocess
if "google.colab" in sys.modules or os.environ.get("{environment.PIP_SOURCE}"):
    from importlib.metadata import version, PackageNotFoundError
    def _have(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None
    old = _have("torch")
    if old and tuple(int(x) for x in old.split("+")[0].split(".")[:2]) < {MIN_TORCH!r}:
        print(f"This runtime has torch {{old}} (torchvision {{_have('torchvision')}}, torchaudio "
              f"{{_have('torchaudio')}}); the course needs torch {MIN_TORCH[0]}.{MIN_TORCH[1]} or newer. Installing it "
              "here would replace torch and torchvision inside this running session, leave "
              "torchaudio on the old release, and need a restart. Nothing was installed. Either "
              "switch to a newer runtime, or upgrade all three yourself: run\\n"
              "    %pip install -q 'torch>={MIN_TORCH[0]}.{MIN_TORCH[1]}' torchvision torchaudio\\n"
              "then restart the session (Runtime menu) and run this notebook from the top.")
        raise SystemExit("stopped before installing anything: see the message above")
    source = os.environ.get("{environment.PIP_SOURCE}", "{PIP_SOURCE}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", source], check=True)
import torch
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
print(f"torch {{torch.__version__}} on {{DEVICE}}"
      + ("" if DEVICE == "cuda" else " (no GPU: on Colab pick Runtime > Change runtime type > GPU;"
                                     " GPU-only results are marked as such below)"))'''
