"""Gradescope: the autograder zip of a problem set, and what it runs for each submission.

``make gradescope ASSIGNMENT=ps2`` (:func:`build_autograder`) writes
``build/gradescope/ps2-autograder.zip``, the zip that Gradescope's programming-assignment
autograder takes:

- ``setup.sh``: run once by Gradescope, as root, when it builds the image (Ubuntu): installs
  Python, bubblewrap, and this course's package with the torch release this machine grades with;
- ``run_autograder``: run for every submission, in ``/autograder``;
- ``course/``: the ``grader`` package, ``pyproject.toml``, and the instructor's
  ``source/ASSIGNMENT/`` (the reference solution the speed targets are measured against), plus
  ``gradescope.json`` naming the problem set.

``run_autograder`` (:func:`grade_submission`) grades ``/autograder/submission/*.ipynb`` with the
same trusted pipeline as ``make grade`` (:func:`grader.cohort.pipeline.grade_notebook`: the solution
cells are read from the file, screened, and measured in fresh sandboxed workers; this process
never runs learner code) and writes ``/autograder/results/results.json`` in Gradescope's format:
the total ``score`` and one test per autograded test cell (name, score, max_score, status,
output: the verdicts and hints the notebook's test cell prints, visibility). A test cell that holds
nbgrader's hidden tests is ``after_published``. Written answers are not in it: grade them by hand
(a manually graded question on Gradescope).

``AUTOGRADER_ROOT`` replaces ``/autograder`` (a test runs ``run_autograder`` on a fake tree).

Isolation: Gradescope runs each submission in a fresh container. bubblewrap is used when it can
run there (:func:`grader.isolation.sandbox.probe`); Docker's default settings usually forbid the user
namespaces it needs. Without it, as Gradescope advises, learner code runs as an unprivileged user
id (the judge and the subject, :mod:`grader.isolation.judge`: only the subject runs learner code,
and it decides nothing), and ``/autograder/source/course/source`` (the reference solution) is
closed to it (``chmod 700``) before anything runs. ``results.json`` records which
(``extra_data.isolation``), and the autograder's stdout, shown to instructors only, says so.
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

COURSE_ROOT = REPO_ROOT
DEFAULT_ROOT = "/autograder"
ROOT_ENV = "AUTOGRADER_ROOT"
CONFIG_FILE = "gradescope.json"
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
HIDDEN_TESTS_MARKER = "### BEGIN HIDDEN TESTS"   # nbgrader's marker
# CPU wheels: Gradescope's machines have no GPU, and the CUDA wheels are gigabytes.
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

SETUP_SH = """\
#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
set -euxo pipefail
cd "$(dirname "$0")"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# bubblewrap: the sandbox for learner code, used when the container allows it (see run_autograder).
apt-get install -y -qq python3 python3-venv python3-pip bubblewrap util-linux
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install -q --upgrade pip
/autograder/venv/bin/pip install -q --extra-index-url {torch_index} {torch_pins}
/autograder/venv/bin/pip install -q ./course
# The sandbox runs learner code as an unprivileged user: it must be able to read Python.
chmod -R a+rX /autograder/venv
"""

RUN_AUTOGRADER = """\
#!/usr/bin/env bash
# Gradescope runs this for every submission (as /autograder/run_autograder, in /autograder): it
# grades /autograder/submission/*.ipynb with the course's grading pipeline and writes
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


def _course_files(course: str, assignment: str) -> list[tuple[str, str]]:
    """(path on disk, path in the zip) of the course part of the autograder."""
    files = [(os.path.join(course, "pyproject.toml"), "course/pyproject.toml"),
             (os.path.join(course, "README.md"), "course/README.md")]   # pyproject's readme
    for folder in ("grader", os.path.join("source", assignment)):
        for root, dirs, names in os.walk(os.path.join(course, folder)):
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".ipynb_checkpoints"))
            for name in sorted(names):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(root, name)
                files.append((path, "course/" + os.path.relpath(path, course).replace(os.sep, "/")))
    return files


def _write_executable(zf: zipfile.ZipFile, name: str, text: str) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = (stat.S_IFREG | 0o755) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, text)


def build_autograder(assignment: str, out: str | None = None, course: str = COURSE_ROOT,
                     torch_pins: str | None = None) -> str:
    """Write the Gradescope autograder zip of ``assignment`` (default
    ``build/gradescope/ASSIGNMENT-autograder.zip`` in ``course``) and return its path.

    ``torch_pins``: what ``setup.sh`` installs for torch (default: this environment's torch and
    torchvision releases, :func:`installed_torch_pins`). Raises ``FileNotFoundError`` when
    ``source/ASSIGNMENT/`` has no notebook."""
    folder = os.path.join(course, "source", assignment)
    if not os.path.isdir(folder) or not any(n.endswith(".ipynb") for n in os.listdir(folder)):
        raise FileNotFoundError(f"no instructor notebook in source/{assignment}/ of {course}")
    from grader.problems import test_cells

    test_cells(assignment)   # raises for a problem set the grader does not know
    out = out or os.path.join(course, "build", "gradescope", f"{assignment}-autograder.zip")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    config = {"assignment": assignment}
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        _write_executable(zf, "setup.sh", SETUP_SH.format(
            torch_index=TORCH_INDEX, torch_pins=torch_pins or installed_torch_pins()))
        _write_executable(zf, "run_autograder", RUN_AUTOGRADER.format())
        for path, name in _course_files(course, assignment):
            zf.write(path, name)
        zf.writestr(f"course/{CONFIG_FILE}", json.dumps(config, indent=1) + "\n")
    return out


# ---------------------------------------------------------------------------------------------
# Grading one submission

def _source_notebook(course: str, assignment: str) -> str:
    folder = os.path.join(course, "source", assignment)
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
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
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
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if meta.get("grade") and (meta.get("solution") or cell.get("cell_type") != "code"):
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


def results_json(assignment: str, course: str, result=None, failure: str = "",
                 notebook: str = "", isolation: str = "", seconds: float = 0.0) -> dict:
    """Gradescope's ``results.json`` for one submission: from the pipeline's ``result``
    (:class:`grader.cohort.pipeline.PipelineResult`), or every test at zero with ``failure`` (why the
    submission could not be graded)."""
    from grader.problems import test_cells

    source = _source_notebook(course, assignment)
    info = cell_info(source)
    tests = []
    for number, (grade_id, cell) in enumerate(test_cells(assignment).items(), start=1):
        scored = (result.cells.get(grade_id) if result is not None else None) or {}
        points = float(scored.get("points", 0.0))
        output = scored.get("text", "") if scored else f"not graded: {failure}"
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
    if failure:
        lines.append(f"Your submission could not be graded: {failure}")
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
                       "notebook": os.path.basename(notebook) if notebook else ""},
    }


def grade_submission(root: str | None = None, assignment: str | None = None,
                     course: str | None = None, sandbox: str = "auto") -> dict:
    """Grade the notebook in ``ROOT/submission/`` and write ``ROOT/results/results.json``
    (``root`` default: ``$AUTOGRADER_ROOT`` or ``/autograder``); return what was written.

    ``course``: the folder with ``grader/``, ``source/ASSIGNMENT/`` and ``gradescope.json``
    (default ``ROOT/source/course``); ``assignment`` defaults to ``gradescope.json``'s.
    ``sandbox``: 'auto', 'bwrap' (raises :class:`grader.isolation.sandbox.SandboxUnavailable` where it
    cannot run: no results are written) or 'off'. A submission without a readable notebook
    scores zero, with the reason in the results."""
    from grader.isolation import sandbox as sandbox_mod
    from grader.cohort.pipeline import grade_notebook

    started = time.monotonic()
    root = root or os.environ.get(ROOT_ENV) or DEFAULT_ROOT
    course = course or os.path.join(root, "source", "course")
    if assignment is None:
        with open(os.path.join(course, CONFIG_FILE)) as fh:
            assignment = json.load(fh)["assignment"]
    isolation = sandbox_mod.probe(sandbox)
    print(f"isolation of learner code: {isolation.describe()}", flush=True)
    if os.geteuid() == 0 and os.path.isdir(os.path.join(course, "source")):
        # Only the judge (this user) reads the reference solution; learner code, which runs as
        # an unprivileged user id without bubblewrap, cannot enter the folder.
        os.chmod(os.path.join(course, "source"), 0o700)
    from grader.cohort.grade import UNSCREENED_FOR_TESTS_ENV

    screen = "gradescope" not in os.environ.get(UNSCREENED_FOR_TESTS_ENV, "").split(",")
    expected = os.path.basename(_source_notebook(course, assignment))
    notebook, result, failure = "", None, ""
    try:
        notebook = find_submission_notebook(os.path.join(root, "submission"), expected)
        print(f"grading {notebook} as {assignment}", flush=True)
        result = grade_notebook(notebook, assignment, course,
                                sandbox="bwrap" if isolation.sandboxed else "off", screen=screen)
    except FileNotFoundError as exc:
        failure = str(exc)
    except ValueError as exc:   # not a notebook (grader.isolation.source)
        failure = f"{os.path.basename(notebook)} is not a readable notebook ({exc})"
    results = results_json(assignment, course, result, failure, notebook, isolation.describe(),
                           time.monotonic() - started)
    out_dir = os.path.join(root, "results")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1)
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
    p = sub.add_parser("run", help="grade ROOT/submission/ into ROOT/results/results.json")
    p.add_argument("--root", default=None, help=f"default: ${ROOT_ENV} or {DEFAULT_ROOT}")
    p.add_argument("--assignment", default=None)
    p.add_argument("--sandbox", choices=["auto", "bwrap", "off"], default="auto")
    args = parser.parse_args(argv)
    if args.command == "build":
        path = build_autograder(args.assignment, args.out, torch_pins=args.torch_pins)
        expected = os.path.basename(_source_notebook(COURSE_ROOT, args.assignment))
        print(f"{path}: upload it as the autograder of a Gradescope programming assignment "
              f"(students submit {expected})")
        return 0
    grade_submission(args.root, args.assignment, sandbox=args.sandbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
