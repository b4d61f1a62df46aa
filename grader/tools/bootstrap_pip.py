"""Install pip into the running interpreter's environment without pip and without root.

Used by grader/tools/make-venv when ``python3 -m venv`` cannot bootstrap pip (Debian and Ubuntu
without python3-venv). A pip wheel can install itself: ``python pip.whl/pip install pip.whl``.
The wheel is the one this Python bundles for ensurepip when it is there, else the newest one on
PyPI (its JSON API names the file and its SHA-256, which is checked).
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

PYPI = "https://pypi.org/pypi/pip/json"


def bundled_wheel() -> str | None:
    """ensurepip's own pip wheel, where this Python has it."""
    try:
        import ensurepip
    except ImportError:
        return None
    found = sorted(glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled",
                                          "pip-*.whl")))
    return found[-1] if found else None


def pypi_wheel(folder: str) -> str:
    """Download the newest pip wheel from PyPI into ``folder`` and check its SHA-256."""
    import urllib.parse

    with urllib.request.urlopen(PYPI, timeout=60) as response:
        release = json.load(response)
        where = response.geturl()
    wheel = next(f for f in release["urls"] if f["packagetype"] == "bdist_wheel")
    path = os.path.join(folder, wheel["filename"])
    # PyPI names the file by an absolute URL; a mirror in its place may name it relative to
    # the page that lists it.
    with urllib.request.urlopen(urllib.parse.urljoin(where, wheel["url"]), timeout=120) as response:
        data = response.read()
    if hashlib.sha256(data).hexdigest() != wheel["digests"]["sha256"]:
        raise RuntimeError(f"{wheel['filename']}: SHA-256 does not match PyPI's")
    with open(path, "wb") as fh:
        fh.write(data)
    return path


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        wheel = bundled_wheel() or pypi_wheel(folder)
        return subprocess.call([sys.executable, os.path.join(wheel, "pip"), "install", "-q",
                                "--no-index", wheel])


if __name__ == "__main__":
    sys.exit(main())
