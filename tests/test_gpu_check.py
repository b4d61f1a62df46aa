"""``make gpu-check``'s dry run, and what travels to the GPU machine (issue 46).

The dry run is the GPU machine's command with the device class forced to CPU
(``--device cpu --size ci``), run in a Python made like that machine's: torch, NumPy and
Matplotlib, no Jupyter, nbclient, nbformat or nbgrader, no torchvision (tests/gpu_machine.py);
torchvision comes from a bundle as ``make gpu-bundle`` makes one (here ``--from-installed``: no
network). To keep the suite's time, it runs the parts that carry the seed's claims (chapters 5
and 3, alone on the device; chapter 3 has GPU-only cells too: CUDA graphs), the judge's bound and
one problem set through the judge (ps1); the other parts are the same code (``--chapters`` and
``--sets`` only select), and ``make test``'s chapter tests run every chapter already.
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

import gpu_machine
from grader.problems import sets
from grader.tools import gpu_bundle, gpu_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts")
LIMIT = 64 * 2 ** 20          # what travels to the GPU machine: the working tree and the bundle
MAX_FILES, MAX_FILE = 8, 16 * 2 ** 20
DRY_CHAPTERS, DRY_SETS = "05,03", "ps1"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> str:
    """The bundle of this environment's torchvision, as ``make gpu-bundle`` writes one."""
    folder = tmp_path_factory.mktemp("gpu-bundle")
    gpu_bundle.main(["--from-installed", "--out", str(folder)])
    found = [os.path.join(folder, n) for n in os.listdir(folder)]
    assert len(found) == 1 and re.search(r"torchvision-[\d.]+-for-torch-\d+\.\d+-cp3\d+\.zip$", found[0])
    return found[0]


@pytest.fixture(scope="module")
def gpu_python() -> str:
    """A Python like the GPU machine's (made once, in tests/artifacts/, of hard links)."""
    try:
        python = gpu_machine.make(os.path.join(ARTIFACTS, "gpu-machine"))
    except OSError as exc:   # hard links need this environment's file system
        pytest.skip(f"cannot make the GPU machine's Python here: {exc}")
    probe = ("import importlib.util as u, torch, numpy, matplotlib; "
             f"print([m for m in {gpu_machine.ABSENT!r} if u.find_spec(m)])")
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=300,
                         cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"the GPU machine's Python has {out.stdout.strip()}"
    return python


@pytest.fixture(scope="module")
def dry_run(gpu_python, bundle, tmp_path_factory):
    """``python3 -m grader.cli gpu-check --device cpu --size ci`` in that Python: (exit status,
    output, the folder of its files, seconds)."""
    out = tmp_path_factory.mktemp("gpu-check")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = os.path.dirname(gpu_python) + os.pathsep + env.get("PATH", "")
    started = time.monotonic()
    proc = subprocess.run(
        [gpu_python, "-m", "grader.cli", "gpu-check", "--device", "cpu", "--size", "ci",
         "--out", str(out), "--bundle", os.path.dirname(bundle), "--chapters", DRY_CHAPTERS,
         "--sets", DRY_SETS, "--jobs", "2", "--deadline-s", "420"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr, str(out), time.monotonic() - started


def test_the_dry_run_writes_at_most_8_files_of_at_most_16_mib(dry_run):
    code, output, out, seconds = dry_run
    names = sorted(os.listdir(out))
    assert names == sorted(gpu_check.OUT_FILES), (names, output[-3000:])
    assert len(names) <= MAX_FILES
    for name in names:
        assert 0 < os.path.getsize(os.path.join(out, name)) <= MAX_FILE, name
    assert code == 0, output[-5000:]
    assert "torchvision from the bundle" in output, output[-3000:]


def test_the_dry_run_fills_every_table(dry_run):
    _, output, out, _ = dry_run
    text = open(os.path.join(out, "gpu-check.md"), encoding="utf-8").read()
    for heading in ("The seed's claims beside this device's figures", "Every chapter's recorded "
                    "figures", "GPU cells, and every cell that did not run", "Problem sets: the "
                    "instructor's solutions graded through the judge", "The judge's bound",
                    "## Parts"):
        assert heading in text, heading
    data = json.load(open(os.path.join(out, "gpu-check.json")))
    assert data["meta"]["device_class"] == "cpu" and data["meta"]["torch"]
    # Every part ran to its end, and says so.
    parts = data["parts"]
    assert {n[:2] for n in parts if n[0].isdigit()} == {"05", "03"}
    assert all(e["ended"] == "done" for e in parts.values()), parts
    print({name: e["seconds"] for name, e in parts.items()})
    # The claims: chapter 5's three workloads and chapter 3's two modes, each beside its claim.
    claims = {r["name"]: r for r in data["records"] if r.get("claim")}
    for wanted in ("CNN (ResNet-18)", "transformer block", "big batch", "mode=reduce-overhead",
                   "mode=max-autotune"):
        assert any(name.startswith(wanted) for name in claims), (wanted, sorted(claims))
    # Every cell is marked; on a CPU the GPU-only ones say they were skipped, none failed.
    cells = [c for chapter in data["chapters"].values() for c in chapter]
    assert cells and all(c["status"] in ("ran", "skipped", "failed") for c in cells)
    assert not [c for c in cells if c["status"] == "failed"], \
        [(c["cell"], c["error"]) for c in cells if c["status"] == "failed"]
    skipped = [c for c in data["chapters"][gpu_check._chapter("03")] if c["status"] == "skipped"]
    assert skipped and all(c["gpu"] for c in skipped)
    assert "| skipped |" in text
    # The judge's bound: work within the allowance ends done, past it ends memory.
    assert [(b["expected"], b["ended"]) for b in data["bound"]] == [("done", "done"),
                                                                     ("memory", "memory")]


def test_the_dry_run_grades_a_set_through_the_judge_and_proposes_floors(dry_run):
    _, _, out, _ = dry_run
    data = json.load(open(os.path.join(out, "gpu-check.json")))
    attempt = data["sets"]["ps1"]["attempts"][-1]
    problems = attempt["problems"]
    assert problems and all(p["status"] == "ok" for p in problems.values()), problems
    assert attempt["cells"] and all(c["passed"] or c["review"] for c in attempt["cells"].values())
    measured = {k: p for k, p in problems.items() if p["reference_speedup"]}
    assert measured, problems
    floors = json.load(open(os.path.join(out, "floors.json")))
    shipped = sets.all_floors()
    assert set(shipped) <= set(floors)                      # nothing dropped
    for key, p in measured.items():
        assert floors[key]["cpu"] == p["floor"] >= 1.0


def test_the_dry_run_takes_minutes_not_more(dry_run):
    """The suite's budget (make test under 30 minutes on 2 cores): this run under 4."""
    assert dry_run[3] < 240, dry_run[3]


def test_the_bundle_and_the_working_tree_fit_in_64_mib(bundle):
    """What travels to the GPU machine: the files git tracks and the untracked ones it does not
    ignore, plus the bundle (ignored: sent as an extra path), which ``make gpu-bundle`` makes
    with a zip for each Python release of gpu_bundle.PYTHONS (each about this one's size)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, timeout=120)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    paths = [p for p in listed.stdout.decode().split("\0") if p]
    tree = sum(os.path.getsize(os.path.join(ROOT, p)) for p in paths
               if os.path.isfile(os.path.join(ROOT, p)))
    size = os.path.getsize(bundle)
    assert 1 * 2 ** 20 < size < 32 * 2 ** 20, size            # torchvision's package, no more
    zips = len(gpu_bundle.PYTHONS)
    assert tree + zips * size <= LIMIT, f"{tree / 2 ** 20:.1f} MiB + {zips} x {size / 2 ** 20:.1f} MiB"
    assert "gpu-bundle/" in open(os.path.join(ROOT, ".gitignore")).read()


def test_make_gpu_check_offline_installs_nothing_and_uses_python3():
    """``make gpu-check OFFLINE=1``: no setup (no venv, no pip), the machine's python3."""
    # --no-print-directory: under `make test` MAKEFLAGS makes a nested make name its folder.
    dry = subprocess.run(["make", "--no-print-directory", "-n", "gpu-check", "OFFLINE=1",
                          "PYTHON_SYS=python3"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert dry.returncode == 0, dry.stderr
    lines = [line.strip() for line in dry.stdout.splitlines() if line.strip()]
    assert lines == ["python3 -m grader.cli gpu-check --out bench-results/gpu-check"], lines
    online = subprocess.run(["make", "-n", "-W", "pyproject.toml", "gpu-check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60).stdout
    assert "pip-install" in online and "-m grader.cli gpu-check --out" in online


def test_the_plan_and_the_supported_torch():
    parts = gpu_check.plan()
    assert [p.phase for p in parts[:3]] == ["exclusive"] * 3
    assert {p.kind for p in parts} == {"bound", "chapter", "set"}
    chapters = {p.name for p in parts if p.kind == "chapter"}
    assert len(chapters) == len(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
    sets = {p.name for p in parts if p.kind == "set"}
    assert sets == {n for n in os.listdir(os.path.join(ROOT, "source")) if n.startswith("ps")}
    assert all(p.budget_s < gpu_check.DEFAULT_DEADLINE_S for p in parts)
    assert gpu_check.DEFAULT_DEADLINE_S <= 8 * 60
    assert gpu_check.torch_supported("2.11.0+cu128") and gpu_check.torch_supported("2.8.0")
    assert not gpu_check.torch_supported("2.7.1+cu126")
    assert [p.name for p in gpu_check.select(parts, "05", "none", True)] == \
        [gpu_check._chapter("05")]
    assert gpu_bundle.torchvision_for("2.11") == "0.26.0"
    assert gpu_bundle.torchvision_for("2.14.1") == "0.29.0"
    assert gpu_bundle.bundle_torch("x/torchvision-0.26.0-for-torch-2.11-cp312.zip") == "2.11"
    assert gpu_bundle.bundle_python("x/torchvision-0.26.0-for-torch-2.11-cp312.zip") == "cp312"
    assert gpu_bundle.python_tag("3.10") == "cp310"
