"""Gradescope: the autograder zip of a problem set, and what it runs for each submission.

``make gradescope ASSIGNMENT=ps2`` (:func:`build_autograder`) writes
``build/gradescope/ps2-autograder.zip``, the zip that Gradescope's programming-assignment
autograder takes:

- ``README.md``: which of Gradescope's settings to raise for this set, and to what (from the
  figures of ``python -m grader.cli bench-gradescope --save``, :func:`autograder_readme`);
- ``setup.sh``: run once by Gradescope, as root, when it builds the image (Ubuntu): stops with a
  clear message on a base image older than torch's wheels need (Python 3.10, glibc 2.28);
  installs Python, bubblewrap, the torch release this machine grades with, from PyTorch's CPU
  index only (``--index-url``: a CUDA build from PyPI cannot be picked), and this course's package;
- ``run_autograder``: run for every submission, in ``/autograder``;
- ``course/``: the ``grader`` package, ``pyproject.toml``, and the instructor's
  ``source/ASSIGNMENT/`` (the reference solution the speed targets are measured against), plus
  ``gradescope.json`` naming the problem set.

``run_autograder`` (:func:`grade_submission`) grades ``/autograder/submission/*.ipynb`` with the
same trusted judge and scoring as ``make grade`` (:func:`grader.cohort.scoring.grade_notebook`: the solution
cells are read from the file, screened, and measured in fresh sandboxed workers; this process
never runs learner code) and writes ``/autograder/results/results.json`` in Gradescope's format:
the total ``score`` and one test per autograded test cell (name, score, max_score, status,
output: the verdicts and hints the notebook's test cell prints, visibility). A test cell that holds
nbgrader's hidden tests is ``after_published``. Written answers are not in it: grade them by hand
(a manually graded question on Gradescope). ``results.json`` is written when grading starts
(saying that it did not finish), after each group of problems, and with the reason on SIGTERM,
at the deadline (the time limit less a minute) and on any error of the grader.

``AUTOGRADER_ROOT`` replaces ``/autograder`` (a test runs ``run_autograder`` on a fake tree).

Isolation: Gradescope runs each submission in a fresh container. bubblewrap is used when it can
run there (:func:`grader.isolation.sandbox.process.probe`); Docker's default settings usually forbid
the user namespaces it needs. Without it the subject (the only process that runs learner code: the
judge, :mod:`grader.isolation.judge.steps`, decides everything) gets kernel confinement where the
container's kernel and seccomp profile allow it (Landlock, seccomp, an unprivileged user id of its
own, every process it starts killed and counted: the same as ``make grade``, tried for real), else,
as Gradescope advises, at least an unprivileged user id; and ``/autograder/source/course/source``
(the reference solution) is closed to it (``chmod 700``) before anything runs. ``results.json``
records which (``extra_data.isolation``), and the autograder's stdout, shown to instructors only,
says so. The confinement is this package's own code (ctypes): setup.sh installs nothing for it.

Why one long module: Gradescope's side of the course is two halves of one
contract, the zip built here and the ``run_autograder`` it runs (results.json), kept together
so that a change to one is seen beside the other.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import time
import zipfile
from grader._paths import REPO_ROOT
from grader import _environment as environment
from grader import _files as files
from grader.isolation.cells.source import is_autograded_test_cell, nbgrader_meta

COURSE_ROOT = REPO_ROOT
DEFAULT_ROOT = "/autograder"
ROOT_ENV = "AUTOGRADER_ROOT"
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
HIDDEN_TESTS_MARKER = "### BEGIN HIDDEN TESTS"   # nbgrader's marker
# CPU wheels: Gradescope's machines have no GPU, and the CUDA wheels are gigabytes.
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
DEADLINE_ENV = environment.AUTOGRADER_DEADLINE_S
# Gradescope's default time limit ("We have a default overall timeout of 10 minutes",
# gradescope-autograders.readthedocs.io, Troubleshooting), and what run_autograder keeps back
# from it to stop, close its workers and write results.json itself.
GRADESCOPE_DEFAULT_TIMEOUT_S = 600
DEADLINE_MARGIN_S = 60

# The oldest base image setup.sh works on. torch's Linux wheels are built for manylinux_2_28 (glibc
# 2.28 or newer: this environment's torch 2.14.1 wheel is tagged cp311-cp311-manylinux_2_28_x86_64)
# and, like this package (pyproject.toml: requires-python), need Python 3.10 or newer
# (tests/test_gradescope.py checks both against the torch installed here).
MIN_PYTHON = (3, 10)
MIN_GLIBC = (2, 28)

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
set -euxo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# bubblewrap: the sandbox for learner code, used when the container allows it (see run_autograder).
apt-get install -y -qq python3 python3-venv python3-pip bubblewrap util-linux
# torch's wheels need Python >= {py_major}.{py_minor} and glibc >= {glibc_major}.{glibc_minor}: stop here, clearly, on an older image.
python3 - <<'CHECK'
import os, sys
need_py, need_glibc = ({py_major}, {py_minor}), ({glibc_major}, {glibc_minor})
glibc = os.confstr("CS_GNU_LIBC_VERSION") or "unknown"
try:
    have_glibc = tuple(int(x) for x in glibc.split()[-1].split(".")[:2])
except ValueError:
    have_glibc = (0, 0)
if sys.version_info[:2] < need_py or have_glibc < need_glibc:
    sys.exit("setup.sh: this base image has Python %d.%d and %s; torch's wheels need Python >= "
             "%d.%d and glibc >= %d.%d. In the assignment's autograder settings, choose a newer "
             "Ubuntu base image (Ubuntu 22.04 has Python 3.10 and glibc 2.35), then upload the zip again."
             % (sys.version_info[:2] + (glibc,) + need_py + need_glibc))
print("setup.sh: Python %d.%d, %s: fine" % (sys.version_info[:2] + (glibc,)))
CHECK
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install -q --upgrade pip
# torch and torchvision from PyTorch's CPU index only: --isolated ignores PIP_* variables and the
# user's pip.conf, PIP_CONFIG_FILE=/dev/null every other pip configuration file, so no
# extra index (PyPI, whose Linux torch is the CUDA build) can be consulted for them.
PIP_CONFIG_FILE=/dev/null /autograder/venv/bin/pip install --isolated -q --index-url {torch_index} {torch_pins}
/autograder/venv/bin/python -c "import torch, torchvision; assert torch.version.cuda is None, torch.__version__; print('setup.sh: installed torch', torch.__version__, 'torchvision', torchvision.__version__, '(CPU build)')"
/autograder/venv/bin/pip install -q ./course
# The sandbox runs learner code as an unprivileged user: it must be able to read Python.
chmod -R a+rX /autograder/venv
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission (as /autograder/run_autograder, in /autograder): it
# grades /autograder/submission/*.ipynb with the course's judge and scoring and writes
# /autograder/results/results.json. AUTOGRADER_ROOT replaces /autograder and
# COURSE_AUTOGRADER_PYTHON the Python that setup.sh installed (tests run it on a fake tree);
# COURSE_AUTOGRADER_SANDBOX: auto (bubblewrap when it can run here), bwrap (required) or off.
set -uo pipefail
root="${{AUTOGRADER_ROOT:-/autograder}}"
python="${{COURSE_AUTOGRADER_PYTHON:-$root/venv/bin/python}}"
cd "$root/source/course" || exit 1
exec "$python" -m grader.cohort.gradescope run --root "$root" --sandbox "${{COURSE_AUTOGRADER_SANDBOX:-auto}}"
"""


# ---------------------------------------------------------------------------------------------
# Building the zip

def installed_torch_pins() -> str:
    """``torch==X torchvision==Y`` of this environment (local suffixes such as ``+cpu`` dropped):
    the Gradescope image grades with the torch release this machine grades with."""
    from importlib.metadata import PackageNotFoundError, version

    pins = []
    for name in ("torch", "torchvision"):
        try:
            pins.append(f"{name}=={version(name).split('+', 1)[0]}")
        except PackageNotFoundError:
            pins.append(name)
    return " ".join(pins)


def setup_sh(torch_pins: str) -> str:
    """The zip's ``setup.sh``, installing ``torch_pins`` (e.g. ``torch==2.14.1 torchvision==0.29.1``)
    from PyTorch's CPU index."""
    return SETUP_SH.format(torch_index=TORCH_INDEX, torch_pins=torch_pins,
                           py_major=MIN_PYTHON[0], py_minor=MIN_PYTHON[1],
                           glibc_major=MIN_GLIBC[0], glibc_minor=MIN_GLIBC[1])


def _course_files(course: str, assignment: str) -> list[tuple[str, str]]:
    """(path on disk, path in the zip) of the course part of the autograder."""
    found = [(os.path.join(course, "pyproject.toml"), "course/pyproject.toml"),
             (os.path.join(course, "README.md"), "course/README.md")]   # pyproject's readme
    for folder in ("grader", os.path.join(files.SOURCE, assignment)):
        for root, dirs, names in os.walk(os.path.join(course, folder)):
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".ipynb_checkpoints"))
            for name in sorted(names):
                # The demo's near-answers stay with the instructor, as nbgrader keeps them.
                if name.endswith((".pyc", ".pyo")) or name == files.DEMO_SOLUTIONS_FILE:
                    continue
                path = os.path.join(root, name)
                found.append((path, "course/" + os.path.relpath(path, course).replace(os.sep, "/")))
    return found


def _write_executable(zf: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = (stat.S_IFREG | 0o755) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, text)


def measured(assignment: str) -> dict | None:
    """What ``python -m grader.cli bench-gradescope --save`` measured for ``assignment``
    (``wall_s``, ``peak_rss_mb``, ``cpus``, ``date``, and the run's ``command`` and ``machine``),
    or None; kept in the set's folder (:func:`grader.problems.sets.gradescope_measured`)."""
    from grader.problems import sets

    row = sets.gradescope_measured(assignment)
    if not row:
        return None
    return {"command": "", "machine": "", "torch": "", **row}


def hang_bound_s(assignment: str) -> float:
    """How long a submission whose code never returns can hold the autograder, at most: each group
    of problems runs in a subject stopped at its deadline, which follows what building the
    references took there and is never above the unmeasured one
    (:func:`grader.isolation.judge.judging.subject_deadline_s`)."""
    from grader.cohort.scoring import subject_deadlines

    return sum(subject_deadlines(assignment, None).values())


def recommended_settings(row: dict, assignment: str) -> dict:
    """Gradescope settings for a set from its measurement: memory 1.5 x the measured peak,
    rounded up to 0.5 GB; a time limit that covers 3 x the measured wall time (Gradescope's
    CPUs may be slower than a core here) and a submission that never returns
    (:func:`hang_bound_s` plus the measured time), at least Gradescope's default 10 minutes,
    rounded up to 5 minutes, at most its 40; 1 vCPU."""
    import math

    memory_gb = max(1.0, math.ceil(row["peak_rss_mb"] * 1.5 / 512) / 2)
    need_s = max(row["wall_s"] * 3, hang_bound_s(assignment) + row["wall_s"])
    minutes = max(10, math.ceil(need_s / 60 / 5) * 5)
    return {"memory_gb": memory_gb, "timeout_min": min(minutes, 40), "cpus": 1,
            "hang_s": hang_bound_s(assignment)}


def default_time_limit_s(assignment: str) -> float:
    """The time limit a set's zip is built for unless told otherwise: the one its README tells
    the instructor to set (:func:`recommended_settings`), else Gradescope's default; so the
    README and the zip's own deadline agree."""
    row = measured(assignment)
    return recommended_settings(row, assignment)["timeout_min"] * 60.0 if row \
        else float(GRADESCOPE_DEFAULT_TIMEOUT_S)


def autograder_readme(assignment: str, expected: str, timeout_s: float,
                      require_confinement: bool = False) -> str:
    """The zip's own README.md: what to upload, which of Gradescope's settings to raise and to
    what (from :func:`measured`), and how the autograder behaves."""
    row = measured(assignment)
    lines = [f"# Gradescope autograder: {assignment}", "",
             f"Upload this zip as the autograder of a Gradescope programming assignment; students "
             f"submit `{expected}`. Written by `make gradescope ASSIGNMENT={assignment}` "
             "(`grader/cohort/gradescope.py`).", "",
             "## Settings to raise (the assignment's Autograder Settings)", "",
             "Gradescope's defaults are 768 MB of memory, a 10-minute time limit (at most 40 "
             "minutes) and half a virtual CPU (gradescope-autograders.readthedocs.io, "
             "Troubleshooting). This set needs more:", ""]
    if row:
        rec = recommended_settings(row, assignment)
        lines += [f"- **Memory: {rec['memory_gb']:g} GB** or more. Measured peak: "
                  f"{row['peak_rss_mb']} MB (the resident memory of run_autograder and every "
                  "process under it, summed, sampled every 0.1 s).",
                  f"- **Time limit: {rec['timeout_min']} minutes.** Measured: {row['wall_s']:.0f} s "
                  f"on {row['cpus']} core(s) of {row['machine']}, with a cold compiler cache; "
                  f"Gradescope's CPUs may be slower, and a submission whose code never returns "
                  f"holds the autograder up to {rec['hang_s']:.0f} s more (the subjects' "
                  "timeouts) before it is scored.",
                  f"- **CPU: 1 vCPU** or more: the time above was measured on {row['cpus']} "
                  "whole core(s), and Gradescope's default is half a virtual CPU.", "",
                  f"Measured on {row['date']} with `{row['command']}` (torch {row['torch']}), "
                  "grading the reference solution."]
    else:
        lines += [f"Not measured yet for {assignment}: run `python -m grader.cli bench-gradescope "
                  f"--assignment {assignment} --cpus 1 --save` and build the zip again."]
    deadline = max(timeout_s - DEADLINE_MARGIN_S, 0)
    lines += ["", "## When grading does not finish", "",
              f"This zip was built for a time limit of {timeout_s:g} s: `run_autograder` stops "
              f"itself after {deadline:g} s, {DEADLINE_MARGIN_S} s before it, and writes "
              "`results.json` with the tests graded so far and why the others were not "
              "(Gradescope's Troubleshooting: a run stopped by its own time limit gets 0 and shows "
              f"no tests). If you set another limit, build again with `make gradescope "
              f"ASSIGNMENT={assignment} GRADESCOPE_TIMEOUT=SECONDS`. `results.json` is written when "
              "grading starts (saying it did not finish: what a student sees if the container is "
              "killed, by the memory limit say), after each group of problems, on SIGTERM, and "
              "on any error of the grader, with the reason (Gradescope's Best Practices: \"output "
              "partial results.json files as each test is run\").", "",
              "## What is in it", "",
              "- `setup.sh`: run once by Gradescope as root; checks the base image (Python "
              f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]}+, glibc {MIN_GLIBC[0]}.{MIN_GLIBC[1]}+, which "
              "torch's wheels need), installs Python, bubblewrap, torch and torchvision from "
              f"PyTorch's CPU index only ({TORCH_INDEX}), then this course's package.",
              "- `run_autograder`: grades `/autograder/submission/*.ipynb` with the course's "
              "judge and scoring (the same as `make grade`) into `/autograder/results/results.json`, one "
              "test per autograded test cell.",
              f"- `course/`: the `grader` package and `source/{assignment}/` (this set's reference "
              "solution).", "",
              "## Isolation", "",
              isolation_plan(require_confinement), "",
              "The results page of every submission says which it got (its first lines), and so "
              "does `extra_data.isolation` in `results.json`.", ""]
    return "\n".join(lines)


def isolation_plan(require_confinement: bool) -> str:
    """What a zip built with ``require_confinement`` does about confining learner code in
    Gradescope's container (its README and ``make gradescope``'s output say it)."""
    plan = ("In each container, bubblewrap is tried first (Docker's defaults usually forbid the "
            "user namespaces it needs), then the kernel's confinement (Landlock, seccomp, a user "
            "id of its own, every process it starts killed and counted), each for real; "
            "`course/source/` is closed to learner code (`chmod 700`) before anything runs.")
    if require_confinement:
        return plan + (" This zip REQUIRES one of them: where neither runs, no submission is "
                       "graded, and the results page says why (built with `make gradescope "
                       "REQUIRE_CONFINEMENT=1`).")
    return plan + (" Where neither runs, learner code gets an unprivileged user id and limits "
                   "only, and the results page says so (`make gradescope REQUIRE_CONFINEMENT=1` "
                   "builds a zip that grades nothing there instead).")


def build_autograder(assignment: str, out: str | None = None, course: str = COURSE_ROOT,
                     torch_pins: str | None = None,
                     timeout_s: float | None = None,
                     require_confinement: bool = False) -> str:
    """Write the Gradescope autograder zip of ``assignment`` (default
    ``build/gradescope/ASSIGNMENT-autograder.zip`` in ``course``) and return its path.

    ``torch_pins``: what ``setup.sh`` installs for torch (default: this environment's torch and
    torchvision releases, :func:`installed_torch_pins`). ``timeout_s``: the assignment's time
    limit on Gradescope (default: the one the zip's README recommends,
    :func:`default_time_limit_s`); ``run_autograder`` stops itself ``DEADLINE_MARGIN_S`` before
    it. ``require_confinement``: where neither bubblewrap nor kernel confinement can run in
    Gradescope's container, grade nothing (the results page says why) instead of grading with
    an unprivileged user id only. Raises
    ``FileNotFoundError`` when ``source/ASSIGNMENT/`` has no notebook."""
    folder = os.path.join(course, files.SOURCE, assignment)
    if not os.path.isdir(folder) or not any(n.endswith(".ipynb") for n in os.listdir(folder)):
        raise FileNotFoundError(f"no instructor notebook in source/{assignment}/ of {course}")
    from grader.problems import test_cells

    test_cells(assignment)   # raises for a problem set the grader does not know
    timeout_s = default_time_limit_s(assignment) if timeout_s is None else timeout_s
    out = out or os.path.join(course, "build", "gradescope", f"{assignment}-autograder.zip")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    config = {"assignment": assignment, "deadline_s": max(timeout_s - DEADLINE_MARGIN_S, 0),
              "require_confinement": bool(require_confinement)}
    expected = os.path.basename(_source_notebook(course, assignment))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("README.md", autograder_readme(assignment, expected, timeout_s,
                                                   require_confinement))
        _write_executable(zf, "setup.sh", setup_sh(torch_pins or installed_torch_pins()))
        _write_executable(zf, "run_autograder", RUN_AUTOGRADER.format())
        for path, name in _course_files(course, assignment):
            zf.write(path, name)
        zf.writestr(f"course/{files.GRADESCOPE_CONFIG}", json.dumps(config, indent=1) + "\n")
    return out


# ---------------------------------------------------------------------------------------------
# Grading one submission

def _source_notebook(course: str, assignment: str) -> str:
    folder = os.path.join(course, files.SOURCE, assignment)
    names = sorted(n for n in os.listdir(folder) if n.endswith(".ipynb"))
    if not names:
        raise FileNotFoundError(f"no notebook in {folder}")
    return os.path.join(folder, names[0])


def _cell_text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def cell_info(source_notebook: str) -> dict[str, dict]:
    """Per autograded test cell of the instructor's notebook: its ``title`` (the cell's first
    comment, less the points) and its Gradescope ``visibility`` (``after_published`` when the
    cell holds nbgrader's hidden tests, else ``visible``)."""
    with open(source_notebook, encoding="utf-8") as fh:
        nb = json.load(fh)
    info = {}
    for cell in nb.get("cells", []):
        if not is_autograded_test_cell(cell):
            continue
        meta = nbgrader_meta(cell)
        text = _cell_text(cell)
        comment = next((line.lstrip("# ").strip() for line in text.splitlines()
                        if line.startswith("#")), "")
        comment = re.sub(r"\s*\(\d+(?:\.\d+)?\s+points?\b[^)]*\)\.?\s*$", "", comment).rstrip(".")
        info[meta["grade_id"]] = {
            "title": comment,
            "visibility": "after_published" if HIDDEN_TESTS_MARKER in text else "visible"}
    return info


def _manual_cells(source_notebook: str) -> list[tuple[str, float]]:
    """(grade_id, points) of the written answers (graded by hand)."""
    with open(source_notebook, encoding="utf-8") as fh:
        nb = json.load(fh)
    out = []
    for cell in nb.get("cells", []):
        meta = nbgrader_meta(cell)
        if meta.get("grade") and not is_autograded_test_cell(cell):
            out.append((meta["grade_id"], float(meta.get("points", 0))))
    return out


def find_submission_notebook(submission: str, expected: str) -> str:
    """The submitted notebook: the one named like the problem set's (``expected``, e.g.
    ``ps2.ipynb``) anywhere under ``submission``, else the only notebook there. Raises
    ``FileNotFoundError`` with what was found otherwise."""
    found = []
    for root, dirs, names in os.walk(submission):
        dirs[:] = sorted(d for d in dirs if d not in (".ipynb_checkpoints", "__MACOSX"))
        found += [os.path.join(root, n) for n in sorted(names)
                  if n.endswith(".ipynb") and not n.startswith(".")]
    exact = [p for p in found if os.path.basename(p) == expected]
    if exact:
        return exact[0]
    if len(found) == 1:
        return found[0]
    if not found:
        raise FileNotFoundError(f"the submission holds no notebook: upload {expected}")
    names = ", ".join(os.path.relpath(p, submission) for p in found)
    raise FileNotFoundError(f"the submission holds several notebooks ({names}) and none is named "
                            f"{expected}: upload only {expected}")


NOT_FINISHED = ("the autograder stopped before it had graded every test (the assignment's time or "
                "memory limit on Gradescope, most likely): tell your instructor")


def results_json(assignment: str, course: str, result=None, failure: str = "",
                 notebook: str = "", isolation: str = "", seconds: float = 0.0,
                 pending: str = "") -> dict:
    """Gradescope's ``results.json`` for one submission: from the judged ``result``
    (:class:`grader.cohort.scoring.JudgedScores`, possibly partial: only the test cells it
    holds are graded), or every test at zero with ``failure`` (why the submission could not be
    graded). ``pending``: grading did not finish, and why (the tests not graded yet say so)."""
    from grader.problems import test_cells

    source = _source_notebook(course, assignment)
    info = cell_info(source)
    tests = []
    for number, (grade_id, cell) in enumerate(test_cells(assignment).items(), start=1):
        scored = (result.cells.get(grade_id) if result is not None else None) or {}
        points = float(scored.get("points", 0.0))
        output = scored.get("text", "") if scored else f"not graded: {failure or pending}"
        if scored.get("failure") and scored["failure"] not in output:
            output = f"{output}\n{scored['failure']}".strip()
        title = info.get(grade_id, {}).get("title", "")
        tests.append({
            "name": f"{grade_id}: {title}" if title else grade_id,
            "number": str(number),
            "score": points,
            "max_score": float(cell.points),
            "status": "passed" if points >= float(cell.points) else "failed",
            "output": output,
            "visibility": info.get(grade_id, {}).get("visibility", "visible"),
        })
    score = round(sum(t["score"] for t in tests), 4)
    maximum = sum(t["max_score"] for t in tests)
    lines = [f"{assignment}: {score:g} of {maximum:g} autograded points"
             + (f" ({os.path.basename(notebook)})" if notebook else "") + "."]
    if isolation:
        lines.append(f"Your code ran in: {isolation}.")
    if failure:
        lines.append(f"Your submission could not be graded: {failure}")
    elif pending:
        done = sum(1 for t in tests if not t["output"].startswith("not graded: "))
        lines.append(f"Grading did not finish ({done} of {len(tests)} tests graded): {pending}.")
    manual = _manual_cells(source)
    if manual:
        lines.append(f"Written answers ({', '.join(g for g, _ in manual)}: "
                     f"{sum(p for _, p in manual):g} points) are graded by hand.")
    lines.append("Each test shows the checks it is scored on, as the notebook's test cell prints them.")
    return {
        "score": score,
        "execution_time": round(seconds, 1),
        "output": "\n".join(lines),
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"assignment": assignment, "isolation": isolation,
                       "notebook": os.path.basename(notebook) if notebook else "",
                       "finished": not pending},
    }


class Stopped(BaseException):
    """Grading was stopped from outside (SIGTERM) or by the deadline; ``reason`` says which.
    A BaseException, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason






def grade_submission(root: str | None = None, assignment: str | None = None,
                     course: str | None = None, sandbox: str = "auto",
                     deadline_s: float | None = None) -> dict:
    """Grade the notebook in ``ROOT/submission/`` and write ``ROOT/results/results.json``
    (``root`` default: ``$AUTOGRADER_ROOT`` or ``/autograder``); return what was written last.

    ``course``: the folder with ``grader/``, ``source/ASSIGNMENT/`` and ``gradescope.json``
    (default ``ROOT/source/course``); ``assignment`` defaults to ``gradescope.json``'s.
    ``sandbox``: 'auto', 'bwrap' or 'kernel' (required: where it cannot run, nothing is graded
    and the results say why) or 'off' (:func:`grader.isolation.sandbox.process.probe`). A submission
    without a readable notebook scores zero, with the reason in the results.

    ``results.json`` is always there to read: written first saying that grading did not finish
    (what the student sees if the process is killed, by the memory limit say), rewritten after each
    group of problems with the tests graded so far, and last with the outcome. SIGTERM, or the
    deadline (``deadline_s`` after the start: default ``$COURSE_AUTOGRADER_DEADLINE_S``, else
    ``gradescope.json``'s ``deadline_s``; 0 for none), stops grading: the tests graded so far keep
    their points and the others say why they were not graded. An unexpected error in the grader
    scores what was graded, and says so."""
    import signal
    import traceback

    from grader.isolation.sandbox import process
    from grader.cohort.scoring import grade_notebook

    started = time.monotonic()
    root = root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    course = course or os.path.join(root, files.GRADESCOPE_SOURCE, files.GRADESCOPE_COURSE)
    with open(os.path.join(course, files.GRADESCOPE_CONFIG)) as fh:
        config = json.load(fh)
    assignment = assignment or config["assignment"]
    if deadline_s is None:
        deadline_s = float(os.environ.get(DEADLINE_ENV) or config.get("deadline_s") or 0)
    out_dir = os.path.join(root, files.GRADESCOPE_RESULTS_DIR)
    os.makedirs(out_dir, exist_ok=True)
    out_path = os.path.join(out_dir, files.GRADESCOPE_RESULTS)
    state = {"result": None, "notebook": "", "isolation": "", "stopping": False, "written": None}

    def write(failure: str = "", pending: str = "") -> dict:
        results = results_json(assignment, course, state["result"], failure, state["notebook"],
                               state["isolation"], time.monotonic() - started, pending)
        files.write_json_atomic(out_path, results)
        state["written"] = results
        return results

    write(pending=NOT_FINISHED)     # what the student sees if nothing after this line runs

    def stop(signum, frame):  # noqa: ARG001 (signal handler)
        if state["stopping"]:
            return
        state["stopping"] = True
        if signum == signal.SIGALRM:
            reason = (f"the autograder's time budget of {deadline_s:g} s ran out (the assignment's "
                      "time limit on Gradescope, less a margin): tell your instructor")
        else:
            reason = (f"the autograder was stopped (signal {signal.Signals(signum).name}) after "
                      f"{time.monotonic() - started:.0f} s, most likely by the assignment's time limit "
                      "on Gradescope: tell your instructor")
        write(pending=reason)      # first, in case the next signal is SIGKILL
        print(f"stopping: {reason}", flush=True)
        raise Stopped(reason)

    import threading

    # Signal handlers can only be set from the main thread (run_autograder's case).
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGALRM)} \
        if main else {}
    if deadline_s > 0 and main:
        signal.setitimer(signal.ITIMER_REAL, max(deadline_s - (time.monotonic() - started), 0.001))
    failure, pending = "", ""
    try:
        isolation = process.probe(sandbox)
        state["isolation"] = isolation.describe()
        print(f"isolation of learner code: {isolation.describe()}", flush=True)
        if isolation.mode == "none" and config.get("require_confinement"):
            raise process.SandboxUnavailable(
                f"learner code cannot be confined in this container ({isolation.reason}), and "
                f"this autograder was built to require it")
        if os.geteuid() == 0 and os.path.isdir(os.path.join(course, files.SOURCE)):
            # Only the judge (this user) reads the reference solution; learner code, which runs
            # under an unprivileged user id without bubblewrap, cannot enter the folder.
            os.chmod(os.path.join(course, files.SOURCE), 0o700)
        screen = "gradescope" not in os.environ.get(environment.UNSCREENED_FOR_TESTS,
                                                    "").split(",")
        expected = os.path.basename(_source_notebook(course, assignment))

        def progress(partial) -> None:
            state["result"] = partial
            if not state["stopping"]:
                write(pending=NOT_FINISHED)

        try:
            state["notebook"] = find_submission_notebook(os.path.join(root, files.GRADESCOPE_SUBMISSION), expected)
            print(f"grading {state['notebook']} as {assignment}", flush=True)
            state["result"] = grade_notebook(
                state["notebook"], assignment, course,
                sandbox=isolation.setting(), screen=screen, progress=progress)
        except FileNotFoundError as exc:
            failure = str(exc)
        except ValueError as exc:   # not a notebook (grader.isolation.cells.source)
            failure = f"{os.path.basename(state['notebook'])} is not a readable notebook ({exc})"
    except Stopped as exc:
        pending = exc.reason
    except process.SandboxUnavailable as exc:
        pending = (f"the sandbox this autograder requires cannot run here ({exc}); nothing was "
                   "graded: tell your instructor")
    except Exception as exc:  # noqa: BLE001 (a grader bug must still reach the student as a reason)
        traceback.print_exc(file=sys.stdout)     # stdout: shown to instructors only
        pending = (f"the grader failed ({type(exc).__name__}: {str(exc)[:300]}); this is not a "
                   "verdict on your code: tell your instructor")
    finally:
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    results = write(failure, pending)
    print(results["output"], flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader.cohort.gradescope", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build", help="write the autograder zip of a problem set")
    p.add_argument("assignment")
    p.add_argument("--out", default=None)
    p.add_argument("--torch-pins", default=None,
                   help="what setup.sh installs for torch (default: this environment's releases)")
    p.add_argument("--timeout-s", type=float, default=None,
                   help="the assignment's time limit on Gradescope (default: the one the zip's "
                        "README recommends for the set, from its measured figures; Gradescope's "
                        f"{GRADESCOPE_DEFAULT_TIMEOUT_S} s for a set not measured); "
                        f"run_autograder stops itself {DEADLINE_MARGIN_S} s before it and writes "
                        f"{files.GRADESCOPE_RESULTS}")
    p.add_argument("--require-confinement", action="store_true",
                   help="grade nothing where learner code cannot be confined in Gradescope's "
                        "container (neither bubblewrap nor the kernel's Landlock and seccomp), "
                        "instead of grading it under an unprivileged user id only")
    p = sub.add_parser("run", help="grade ROOT/submission/ into ROOT/results/results.json")
    p.add_argument("--root", default=None, help=f"default: ${ROOT_ENV} or {DEFAULT_ROOT}")
    p.add_argument("--assignment", default=None)
    p.add_argument("--sandbox", choices=["auto", "bwrap", "kernel", "off"], default="auto")
    args = parser.parse_args(argv)
    if args.command == "build":
        path = build_autograder(args.assignment, args.out, torch_pins=args.torch_pins,
                                timeout_s=args.timeout_s,
                                require_confinement=args.require_confinement)
        expected = os.path.basename(_source_notebook(COURSE_ROOT, args.assignment))
        print(f"{path}: upload it as the autograder of a Gradescope programming assignment "
              f"(students submit {expected})")
        print(f"isolation: {isolation_plan(args.require_confinement)}")
        return 0
    try:
        grade_submission(args.root, args.assignment, sandbox=args.sandbox)
    except Exception as exc:  # noqa: BLE001 (before results_json could run: the zip itself is broken)
        import traceback

        traceback.print_exc(file=sys.stdout)
        root = args.root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT
        os.makedirs(os.path.join(root, files.GRADESCOPE_RESULTS_DIR), exist_ok=True)
        files.write_json_atomic(os.path.join(root, files.GRADESCOPE_RESULTS_DIR, files.GRADESCOPE_RESULTS), {
            "score": 0.0, "stdout_visibility": "hidden", "tests": [],
            "output": f"The autograder could not start ({type(exc).__name__}: {str(exc)[:300]}); "
                      "this is not a verdict on your code: tell your instructor.",
            "extra_data": {"finished": False}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
