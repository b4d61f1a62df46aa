"""Virtual environments holding exactly what a user's environment holds, built in seconds.

An integration is tested in the environment it creates, never only in the course's venv (which has
nbgrader, JupyterLab, nbclient, ray, ...): a module the integration does not install must fail the
test. Two are built here:

* Colab's runtime (``tests/test_colab_runtime.py``): torch, torchvision, matplotlib, a kernel, pip;
* Gradescope's image (:func:`gradescope_venv`): what the zip's ``setup.sh`` installs — torch and
  torchvision, then the course package *without extras* (so its base dependencies: matplotlib);
  ``tests/test_gradescope.py``, ``tests/test_fresh_machine.py`` and ``make bench-gradescope`` run
  ``run_autograder`` with it.

How, fast and honest: ``python -m venv --without-pip``, then the **exact dependency closure** of the
root distributions, resolved from each distribution's metadata (requirements with their environment
markers and extras), is *hard-linked* file by file (from each distribution's RECORD) out of the
course's venv into the new venv's site-packages. That is what ``pip install ROOTS`` would lay down
(callers assert ``pip check`` is clean), in seconds instead of minutes and 5.7 GB. Hard links, not
symlinks or a ``.pth`` file: nothing else of the course's venv is visible, and an uninstall in the
new venv could not delete the course venv's files. No network is used.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from grader._paths import REPO_ROOT as ROOT
# Never in a learner's or Gradescope's environment: what only the instructor's venv has.
INSTRUCTOR_ONLY = ["nbgrader", "jupyterlab", "notebook", "nbclient", "nbconvert", "nbformat"]
# Nor in Gradescope's, which has no notebook kernel at all (Colab's has one), nor Ray.
NOT_ON_GRADESCOPE = [*INSTRUCTOR_ONLY, "jupyter_client", "ipykernel", "ray"]


def canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


def dependency_closure(roots: list[str]) -> dict:
    """canonical name -> installed distribution, for ``roots`` and everything they require
    (markers evaluated for this interpreter, extras followed), from the course venv's metadata."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    found: dict[str, tuple] = {}
    todo = [(name, frozenset()) for name in roots]
    while todo:
        name, extras = todo.pop()
        key = canonical(name)
        if key in found and extras <= found[key][1]:
            continue
        extras = extras | (found[key][1] if key in found else frozenset())
        dist = md.distribution(name)
        found[key] = (dist, extras)
        for spec in dist.requires or []:
            req = Requirement(spec)
            envs = [{"extra": e} for e in ("", *sorted(extras))]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return {key: dist for key, (dist, _) in found.items()}


def link_distributions(dists: dict, site_packages: str) -> int:
    """Hard-link every file each distribution installed under site-packages (its RECORD) into
    ``site_packages``; scripts and data installed outside site-packages are left out."""
    count = 0
    for dist in dists.values():
        base = os.path.realpath(dist.locate_file(""))
        for entry in dist.files or []:
            src = os.path.realpath(dist.locate_file(entry))
            rel = os.path.relpath(src, base)
            if rel.startswith("..") or not os.path.isfile(src):
                continue
            dst = os.path.join(site_packages, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            try:
                os.link(src, dst)
            except OSError:  # another file system: copy
                shutil.copy2(src, dst)
            count += 1
    return count


def copy_checkout(dest: str) -> None:
    """The checkout's files as a commit would have them (tracked, or untracked and not ignored)."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = os.path.join(ROOT, name)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, name))


def make_venv(venv: str, roots: list[str]) -> tuple[str, dict]:
    """A venv at ``venv`` holding exactly ``roots`` and their dependencies; returns its Python
    and the distributions linked into it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dists = dependency_closure(roots)
    link_distributions(dists, site)
    return python, dists


def importable(python: str, modules: list[str]) -> list[str]:
    """Which of ``modules`` ``python`` can import (found on its path, without the caller's)."""
    code = ("import importlib.util as u, sys; "
            f"print(' '.join(m for m in {modules!r} if u.find_spec(m) is not None))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, check=True,
                         env=env, cwd="/").stdout
    return out.split()


def gradescope_venv(venv: str, course: str) -> str:
    """What the Gradescope zip's ``setup.sh`` leaves in ``/autograder/venv``: torch and torchvision
    (with what they require; pip too, as ``python3 -m venv`` installs it), then ``pip install
    ./course`` — the course package with its base dependencies and no extras. ``course`` is the
    zip's ``course/`` folder. Returns the venv's Python."""
    python, _ = make_venv(venv, ["torch", "torchvision", "pip"])
    # The course package: built into a wheel by this venv's pip (setuptools, no network), then
    # installed with its base dependencies, each taken from the course venv as above.
    wheels = os.path.join(os.path.dirname(venv), "wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", wheels, course], check=True, capture_output=True)
    import importlib.metadata as md
    import tomllib

    from packaging.requirements import Requirement

    with open(os.path.join(course, "pyproject.toml"), "rb") as fh:
        base = [Requirement(r).name for r in tomllib.load(fh)["project"]["dependencies"]]
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    have = {canonical(d.metadata["Name"]) for d in md.distributions(path=[site])}
    link_distributions({k: d for k, d in dependency_closure(base).items() if k not in have}, site)
    wheel = [os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl")]
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", *wheel],
                   check=True, capture_output=True)
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"the Gradescope-like venv is incomplete: {check.stdout}{check.stderr}")
    # setup.sh: "chmod -R a+rX /autograder/venv" (learner code runs as another user).
    subprocess.run(["chmod", "-R", "a+rX", venv], check=True)
    return python
