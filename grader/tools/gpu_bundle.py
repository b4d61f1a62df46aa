"""``make gpu-bundle``: what ``make gpu-check`` needs that a bare GPU machine lacks, packed here.

    python -m grader.cli gpu-bundle --torch 2.11     # -> gpu-bundle/torchvision-0.26.0-for-torch-2.11-cp311.zip, ...

A GPU machine with torch, Triton, NumPy and Matplotlib and nothing else (no network) lacks one
thing the course runs: torchvision, for chapter 5's ResNet-18. This downloads the torchvision
wheel made for that torch (``pip download``, here, where there is a network: about 8 MB for
each Python release in :data:`PYTHONS`, since the GPU machine's is not known here and the
operators' library is built for one) and keeps the package in a zip (its compiled operators and the libraries they link included: the
torchvision of a release registers its operators' fakes at import, which fails without them);
``make gpu-check`` unpacks it into its own temporary folder and puts that on its parts'
``PYTHONPATH``. Nothing is installed. A wheel is built against one torch and one CUDA: where the
machine's differ (a torch from another index), torchvision's import raises, and gpu-check says
so in its report. ``--from-installed`` packs the torchvision installed here instead (the test
suite's dry run, which has no network).

The bundle lives in ``gpu-bundle/`` (ignored by git): name it in the device run's ``carry``
list, as the test of the 64 MiB limit does (``tests/test_gpu_check.py``).
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import zipfile

from grader._paths import REPO_ROOT

BUNDLE_DIR = os.path.join(REPO_ROOT, "gpu-bundle")
# What a bundle keeps of a torchvision wheel or installation: the package and the libraries
# its operators link (torchvision.libs/), no caches, no metadata.
KEPT = re.compile(r"^torchvision(\.libs)?/")
LEFT_OUT = re.compile(r"/__pycache__/")
# The Python releases a bundle has a zip for (torchvision's compiled part is built for one).
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def torchvision_for(torch_version: str) -> str:
    """The torchvision release made for torch ``major.minor`` (``2.11`` -> ``0.26.0``; torchvision
    0.(minor + 15) pairs with torch 2.minor: 0.23 with 2.8, 0.26 with 2.11, 0.29 with 2.14, each
    wheel's ``Requires-Dist: torch==`` says so). The pip download checks it again."""
    major, minor = (int(x) for x in torch_version.split(".")[:2])
    if major != 2:
        raise ValueError(f"no torchvision pairing known for torch {torch_version}")
    return f"0.{minor + 15}.0"


def bundle_torch(path: str) -> str:
    """The torch ``major.minor`` a bundle zip was made for (from its name)."""
    found = re.search(r"-for-torch-(\d+\.\d+)(?:-cp\d+)?\.zip$", os.path.basename(path))
    return found.group(1) if found else ""


def bundle_python(path: str) -> str:
    """The Python a bundle zip was made for, as its tag (``cp311``; "" when its name has none)."""
    found = re.search(r"-(cp\d+)\.zip$", os.path.basename(path))
    return found.group(1) if found else ""


def python_tag(version: str | None = None) -> str:
    """``3.11`` (default: this Python's) -> ``cp311``."""
    major, minor = (version.split(".")[:2] if version else sys.version_info[:2])
    return f"cp{major}{minor}"


def _requires_torch(metadata: str) -> str:
    found = re.search(r"^Requires-Dist: torch\s*\(?==\s*([\d.]+)", metadata, re.MULTILINE)
    return ".".join(found.group(1).split(".")[:2]) if found else ""


def pack_wheel(wheel: str, out_dir: str, tag: str) -> str:
    """A torchvision ``wheel``'s package as ``out_dir/torchvision-V-for-torch-T-TAG.zip``."""
    with zipfile.ZipFile(wheel) as src:
        meta_name = next(n for n in src.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = src.read(meta_name).decode()
        version = re.search(r"^Version: (\S+)", metadata, re.MULTILINE).group(1)
        torch_for = _requires_torch(metadata)
        members = [(n, src.read(n)) for n in src.namelist()
                   if KEPT.match(n) and not LEFT_OUT.search(n) and not n.endswith("/")]
    return _write(members, out_dir, version, torch_for, tag)


def pack_installed(out_dir: str) -> str:
    """The torchvision installed here, packed as :func:`pack_wheel` packs a wheel."""
    import torch
    import torchvision

    site = os.path.dirname(os.path.dirname(torchvision.__file__))
    members = []
    for top in ("torchvision", "torchvision.libs"):
        for folder, dirs, names in os.walk(os.path.join(site, top)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in names:
                rel = os.path.relpath(os.path.join(folder, name), site).replace(os.sep, "/")
                with open(os.path.join(folder, name), "rb") as fh:
                    members.append((rel, fh.read()))
    torch_for = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    return _write(members, out_dir, torchvision.__version__.split("+")[0], torch_for,
                  python_tag())


def unpack(path: str, folder: str) -> str:
    """A bundle's package unpacked into ``folder`` (created), the folder to put on the path."""
    os.makedirs(folder, exist_ok=True)
    with zipfile.ZipFile(path) as src:
        src.extractall(folder)
    return folder


def _write(members: list, out_dir: str, version: str, torch_for: str, tag: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, f"torchvision-*-for-torch-{torch_for}-{tag}.zip")):
        os.unlink(old)
    path = os.path.join(out_dir, f"torchvision-{version}-for-torch-{torch_for}-{tag}.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for name, data in sorted(members):
            out.writestr(name, data)
    return path


def download(torch_version: str, out_dir: str, pythons=PYTHONS) -> list[str]:
    """pip-download the torchvision wheel for ``torch_version`` (Linux x86-64) for each Python
    release of ``pythons`` and pack each; a release with no wheel is left out, said so."""
    wanted = torchvision_for(torch_version)
    made = []
    for python in pythons:
        with tempfile.TemporaryDirectory() as tmp:
            got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                                  "--only-binary", ":all:", "--platform", "manylinux_2_28_x86_64",
                                  "--python-version", python, f"torchvision=={wanted}", "-d", tmp])
            wheels = glob.glob(os.path.join(tmp, "torchvision-*.whl"))
            if got.returncode != 0 or not wheels:
                print(f"no torchvision {wanted} wheel for Python {python}: left out")
                continue
            with zipfile.ZipFile(wheels[0]) as src:
                meta = next(n for n in src.namelist() if n.endswith(".dist-info/METADATA"))
                pairs = _requires_torch(src.read(meta).decode())
            if pairs != ".".join(torch_version.split(".")[:2]):
                raise SystemExit(f"torchvision {wanted} requires torch {pairs}, "
                                 f"not {torch_version}")
            made.append(pack_wheel(wheels[0], out_dir, python_tag(python)))
    if not made:
        raise SystemExit(f"no torchvision {wanted} wheel for any of Python {', '.join(pythons)}")
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch", default="2.11",
                        help="the GPU machine's torch, major.minor (default: 2.11)")
    parser.add_argument("--python", default=",".join(PYTHONS),
                        help="the Python releases to pack a wheel for, comma-separated "
                             "(default: %(default)s; the GPU machine's is one of them)")
    parser.add_argument("--out", default=BUNDLE_DIR)
    parser.add_argument("--from-installed", action="store_true",
                        help="pack the torchvision installed here (no download)")
    args = parser.parse_args(argv)
    paths = [pack_installed(args.out)] if args.from_installed else \
        download(args.torch, args.out, [p.strip() for p in args.python.split(",") if p.strip()])
    for path in paths:
        print(f"{path}: {os.path.getsize(path) / 2 ** 20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
