"""The problem sets: release/ is current, the reference solutions pass every test, the unsolved
release fails every autograded test, self-check works outside nbgrader, and failure messages name
the learner's line.

These compile real models on the CPU: about 5-7 minutes of notebook runs in all on a 2-core
machine, run two at a time (tests/conftest.py's at_once). Each problem set is validated once. ``nbgrader validate`` also proves that no test cell of a reference solution
writes to stderr: nbgrader scores such a cell zero, and validate would then report a failure.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import at_once
from grader import _environment as environment
from grader.cohort import assign
from grader.problems import sets

ROOT = assign.COURSE_ROOT
# Found by their folders (grader.problems.sets): no list of the sets to keep up to date.
PROBLEM_SETS = sets.names()


def _nbgrader(*args: str) -> subprocess.CompletedProcess:
    return assign.nbgrader(*args, cwd=ROOT, check=False)


def test_every_problem_set_is_in_source_and_release():
    """Each set is its two folders, grader/problems/psN/ and source/psN/, and a release."""
    assert len(PROBLEM_SETS) >= 8 and "ps1" in PROBLEM_SETS, PROBLEM_SETS
    assert assign.assignments() == PROBLEM_SETS
    for ps in PROBLEM_SETS:
        assert os.path.exists(os.path.join(ROOT, "release", ps, f"{ps}.ipynb"))


def test_release_is_not_stale():
    stale = assign.stale_notebooks()
    assert not stale, f"release/ is out of date, run `make release`: {stale}"


def test_committed_notebooks_have_no_outputs_and_start_with_install_cell():
    from grader.course.colab import INSTALL_CELL, INSTALL_CELL_TAG

    for folder in ("source", "release"):
        for ps in PROBLEM_SETS:
            with open(os.path.join(ROOT, folder, ps, f"{ps}.ipynb")) as fh:
                nb = json.load(fh)
            first = nb["cells"][0]
            assert first["cell_type"] == "code"
            assert "".join(first["source"]) == INSTALL_CELL
            assert INSTALL_CELL_TAG in first["metadata"].get("tags", [])
            assert not (first["metadata"].get("nbgrader") or {}).get("grade")
            for cell in nb["cells"]:
                if cell["cell_type"] == "code":
                    assert cell["outputs"] == [] and cell["execution_count"] is None


def test_problem_definitions_match_the_notebooks():
    """Every problem's solution_grade_id is a solution cell of its source notebook."""
    from grader.problems import get_problem
    from grader.isolation.cells.source import solution_cells

    for ps in PROBLEM_SETS:
        mod = __import__(f"grader.problems.{ps}", fromlist=["PROBLEMS"])
        for key in mod.PROBLEMS:
            problem = get_problem(key)
            cells = solution_cells(os.path.join(ROOT, "source", ps, f"{ps}.ipynb"),
                                   [problem.solution_grade_id])
            assert len(cells) == 1, key
            assert "### BEGIN SOLUTION" in cells[0].source


# The notebook runs the tests below ask for: each set's two validations (its reference solution,
# its unsolved release; nbgrader processes) and ps3 solved in a plain kernel. Each keeps about one
# core busy (the notebook's kernel compiling and measuring with one thread), so they run TEST_JOBS
# at a time (tests/conftest.py).
SELF_CHECK_PS = "ps3"


def _validate(how: str, ps: str) -> subprocess.CompletedProcess:
    if how == "solved":
        return _nbgrader("validate", f"source/{ps}/{ps}.ipynb")
    return _nbgrader("validate", "--invert", f"release/{ps}/{ps}.ipynb")


def _self_check(ps: str, folder: str):
    """A student's copy of ``ps`` (no source/ anywhere near it), solved, run in a plain kernel
    in ``folder``: the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    with open(os.path.join(ROOT, "release", ps, f"{ps}.ipynb")) as fh:
        release_nb = json.load(fh)
    with open(os.path.join(ROOT, "source", ps, f"{ps}.ipynb")) as fh:
        source_nb = json.load(fh)
    nb = nbformat.reads(json.dumps(_fill_solutions(release_nb, source_nb)), as_version=4)
    env = {k: v for k, v in os.environ.items() if k != environment.ROOT}
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": folder}}).execute(env=env)
    return nb


@pytest.fixture(scope="module")
def notebook_runs(request, tmp_path_factory):
    """``(how, ps) -> result`` for every run this session's tests ask for (all of them in a full
    run, only the selected ones under ``-k``): nbgrader validate's process for ``solved`` and
    ``unsolved``, the executed notebook for ``self-check``; ps3's (the longest, about 50 s
    each) first."""
    wanted = []
    for item in request.session.items:
        function = getattr(item, "function", None)
        if function is test_reference_solution_passes_every_test:
            wanted.append(("solved", item.callspec.params["ps"]))
        elif function is test_unsolved_release_fails_every_test:
            wanted.append(("unsolved", item.callspec.params["ps"]))
        elif function is test_self_check_outside_nbgrader:
            wanted.append(("self-check", SELF_CHECK_PS))
    wanted.sort(key=lambda pair: (pair[1] != "ps3", pair))

    def run(pair):
        how, ps = pair
        if how == "self-check":
            try:
                return _self_check(ps, str(tmp_path_factory.mktemp("self-check")))
            except Exception as exc:     # a cell failed: reported by the test, not the fixture
                return exc
        return _validate(how, ps)

    # COURSE_SIZE=ci for the notebooks' kernels: ps3's exploration cell measures one round from
    # the warm compiler cache (grader.course.chapters.measure_modes), not three of cold compiles.
    with pytest.MonkeyPatch.context() as env:
        env.setenv(environment.SIZE, "ci")
        runs = dict(zip(wanted, at_once(run, wanted)))
        # A timed cell measures on this machine, beside the rest of the suite: on a loaded
        # machine a reference's speed can come out undecided, which validate reports as partial
        # credit. Such a set is validated once more, alone, after the others; anything else
        # stands as it came.
        for pair, proc in runs.items():
            if pair[0] == "solved" and only_timed_cells_fell_short(proc.stdout):
                print(f"{pair[1]}: only a timed cell fell short beside the other runs; validated "
                      f"again alone", flush=True)
                runs[pair] = _validate(*pair)
    return runs


def only_timed_cells_fell_short(validate_stdout: str) -> bool:
    """Whether ``nbgrader validate`` failed only through speed cells that earned part of their
    points (a timed verdict), nothing else."""
    failed = [block for block in re.split(r"\n=+\n", validate_stdout)
              if block.startswith("The following cell failed")]
    return bool(failed) and all(
        '-speed"' in block and block.rstrip().endswith(
            "Partial credit; passed some but not all of the tests") for block in failed)


@pytest.mark.parametrize("ps", PROBLEM_SETS)
def test_reference_solution_passes_every_test(notebook_runs, ps):
    proc = notebook_runs["solved", ps]
    assert "Success! Your notebook passes all the tests." in proc.stdout, proc.stdout + proc.stderr


def test_only_a_speed_cell_with_partial_credit_is_validated_again():
    """What validate prints (nbgrader's own formatter) for a reference whose timed cell came out
    short: validated again; any other failure, a speed cell's error included, stands."""
    import io

    from nbgrader.validator import Validator

    def printed(*failures):
        v = Validator()
        v.stream = io.StringIO()
        for source, error in failures:
            v._print_error(source, error)
        return "Validating...\n" + v.stream.getvalue()

    partial = "Partial credit; passed some but not all of the tests"
    speed = ('# Speedup (3 points)\nrun_test("ps6-q1-speed", CachedGPT)', partial)
    assert only_timed_cells_fell_short(printed(speed))
    assert not only_timed_cells_fell_short(printed(
        speed, ('run_test("ps6-q1-correctness", CachedGPT)', partial)))
    assert not only_timed_cells_fell_short(printed(
        ('run_test("ps6-q1-speed", CachedGPT)', "CheckFailed: ps6.q1: speed failed")))
    assert not only_timed_cells_fell_short("Success! Your notebook passes all the tests.")


@pytest.mark.parametrize("ps", PROBLEM_SETS)
def test_unsolved_release_fails_every_test(notebook_runs, ps):
    proc = notebook_runs["unsolved", ps]
    assert "Success! The notebook does not pass any tests." in proc.stdout, \
        proc.stdout + proc.stderr


def _fill_solutions(release_nb: dict, source_nb: dict) -> dict:
    """The release notebook with each solution cell replaced by the source's (reference) text."""
    source_by_id = {c["metadata"]["nbgrader"]["grade_id"]: c["source"]
                    for c in source_nb["cells"]
                    if (c["metadata"].get("nbgrader") or {}).get("solution")}
    for cell in release_nb["cells"]:
        meta = cell["metadata"].get("nbgrader") or {}
        if meta.get("solution") and cell["cell_type"] == "code":
            cell["source"] = source_by_id[meta["grade_id"]]
    return release_nb


def test_self_check_outside_nbgrader(notebook_runs):
    """A student's copy of ps3 (no source/ anywhere near it), solved, run in a plain kernel:
    every self-check passes, q1's says what the rule answers and that its hidden jobs are judged
    only when graded (it never prints a break-even: the exploration cell measures it), and
    nothing reaches stderr."""
    nb = notebook_runs["self-check", SELF_CHECK_PS]
    if isinstance(nb, Exception):
        raise nb
    checks = [c for c in nb.cells if c.cell_type == "code" and "check(\"ps3." in c.source
              and not c.source.lstrip().startswith("ev")]
    assert len(checks) == 2
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for out in cell.outputs:
            assert out.get("name") != "stderr", f"stderr in cell {cell.source[:60]!r}: {out}"
            assert out.get("output_type") != "error", f"error in cell {cell.source[:60]!r}: {out}"
    text = ["".join(o.get("text", "") for o in c.outputs if o.get("output_type") == "stream")
            for c in checks]
    for out in text:
        assert "[PASS]" in out and "[FAIL]" not in out, out
    assert "[PASS] ps3.q1 the rule answers one of the modes" in text[0], text[0]
    assert "[NOT JUDGED HERE] ps3.q1 the rule's choices on hidden jobs" in text[0], text[0]
    assert "compiling pays after" not in text[0] and "job of" not in text[0], text[0]
    explored = next(c for c in nb.cells if c.cell_type == "code" and "measure_modes(" in c.source)
    shown = "".join(o.get("text", "") for o in explored.outputs)
    assert "pays after" in shown and "rounds" in shown, shown
    # at COURSE_SIZE=ci (the fixture's): one round from the warm cache, and it says so
    assert "1 round on one core" in shown and "not cold" in shown, shown


def test_failure_message_names_the_learners_line_and_a_fix():
    from grader.isolation.check import CheckFailed, evaluate
    from grader.isolation.cells.source import Cell

    broken = Cell("cell 9", (
        "class BatchScorer(PerSampleScorer):\n"
        "    def forward(self, x):\n"
        "        r = torch.relu(self.fc(x))\n"
        "        print('scores', r.shape)\n"
        "        return r / (r.norm(dim=-1, keepdim=True) + 1e-6)\n"))
    ev = evaluate("ps3.q2", cells=[broken], reference="off")
    assert ev.status == "ok", ev.result
    assert ev.ok("correctness")
    with pytest.raises(CheckFailed) as info:
        ev.require("fullgraph")
    message = str(info.value)
    assert "cell 9, line 4" in message, message
    assert "print" in message and "fix:" in message, message
