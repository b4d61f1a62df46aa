"""A Python like the GPU machine's, for ``make gpu-check``'s dry run: torch, NumPy and Matplotlib
and what they require (Triton among torch's), and nothing else: no Jupyter, nbclient, nbformat,
ipykernel or nbgrader, no torchvision.

Made from this environment's own packages (no network): a venv without pip whose
``site-packages`` holds hard links to the installed files of those distributions (the same file
system: no copy). The sandbox's subject can run in it as in any venv (real files, no symlinks out).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata

WANTED = ("torch", "numpy", "matplotlib")
ABSENT = ("nbclient", "nbformat", "ipykernel", "IPython", "nbgrader", "jupyter_client",
          "torchvision")


def closure(names=WANTED) -> list[metadata.Distribution]:
    """``names`` and every distribution they require (extras left out), as installed here."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.split(r"[\s<>=!~;\[(]", todo.pop(), maxsplit=1)[0].strip()
        key = name.lower().replace("_", "-")
        if not key or key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = dist
        for req in dist.requires or []:
            if "extra ==" not in req and "extra==" not in req:
                todo.append(req)
    return list(seen.values())


def _tops(dist: metadata.Distribution) -> set[str]:
    """The top-level entries of ``site-packages`` a distribution installed."""
    tops = set()
    for f in dist.files or []:
        part = str(f).split("/")[0]
        if part and not part.startswith("..") and part != "__pycache__":
            tops.add(part)
    return tops


def make(folder: str) -> str:
    """The venv in ``folder`` (made once); returns its python."""
    python = os.path.join(folder, "bin", "python")
    marker = os.path.join(folder, ".made")
    if os.path.exists(marker):
        return python
    shutil.rmtree(folder, ignore_errors=True)
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", folder], check=True)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                         "['purelib'])"], capture_output=True, text=True,
                          check=True).stdout.strip()
    source = str(metadata.distribution("torch").locate_file(""))
    for dist in closure():
        for top in _tops(dist):
            src, dst = os.path.join(source, top), os.path.join(site, top)
            if os.path.exists(dst) or not os.path.exists(src):
                continue
            if os.path.isdir(src):
                shutil.copytree(src, dst, copy_function=os.link,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                os.link(src, dst)
    open(marker, "w").close()
    return python
