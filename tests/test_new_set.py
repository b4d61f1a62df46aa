"""Adding a problem set is a folder plus a notebook (docs/design.md, "Adding a problem set"): a toy
ps9 made from the template (``python -m grader.cli new-set``) is picked up by the course with
no list edited: its problems are registered, its notebook's test cells match its declaration,
its demo personas and written-down scores are found, and, graded for real by the judge, its
test cells score what the set writes down.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import grader.problems
from grader.cohort import assign
from grader.cohort.demo import PERSONAS, demo_solutions
from grader.cohort.scoring import declared_test_cells_problems
from grader.problems import get_problem, sets
from grader.problems import test_cells as declared_test_cells
from grader.tools import new_set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def toy_set(tmp_path, monkeypatch):
    """ps9, made from the template into a course of its own and a folder added to the
    ``grader.problems`` package's search path (the repository is not touched)."""
    course, packages = tmp_path / "course", tmp_path / "problems"
    os.makedirs(course / "source")
    packages.mkdir()
    written = new_set.create("ps9", course_root=str(course), problems_dir=str(packages))
    monkeypatch.setattr(grader.problems, "__path__", [*grader.problems.__path__, str(packages)])
    yield course, packages, written
    # Forget the toy set, as the import left it: the module and the package's attribute.
    sys.modules.pop("grader.problems.ps9", None)
    if hasattr(grader.problems, "ps9"):
        delattr(grader.problems, "ps9")


def test_a_new_set_is_its_two_folders_and_the_course_finds_it(toy_set):
    course, packages, written = toy_set
    assert sorted(os.path.relpath(p, course.parent) for p in written) == [
        "course/source/ps9/demo_cohort.py", "course/source/ps9/ps9.ipynb",
        "problems/ps9/__init__.py", "problems/ps9/demo_expected.json"]
    assert not [p for p in written if "_template" in open(p).read()]
    # Found by its folder: the sets, the problems, the test cells, the course's assignments.
    assert sets.names()[-1] == "ps9" and sets.folder("ps9") == str(packages / "ps9")
    assert get_problem("ps9.q1").assignment == "ps9"
    assert sorted(declared_test_cells("ps9")) == ["ps9-q1-correctness", "ps9-q1-fullgraph"]
    assert assign.assignments(str(course)) == ["ps9"]
    # The notebook's autograded test cells are the ones the set declares, with their points.
    notebook = str(course / "source" / "ps9" / "ps9.ipynb")
    assert declared_test_cells_problems(notebook, "ps9") == []
    # Its demo: every persona has a written-down score, and the personas' code is found.
    assert set(sets.expected_scores()["ps9"]) == set(PERSONAS)
    assert sorted(demo_solutions(str(course))["ps9"]) == ["partial", "slow", "wrong"]
    # No figure measured yet: none shipped, none made up.
    assert sets.floors("ps9.q1") == {} and sets.gradescope_measured("ps9") == {}


def test_a_new_set_refuses_a_name_taken_or_not_a_module(toy_set):
    course, packages, _ = toy_set
    with pytest.raises(FileExistsError):
        new_set.create("ps9", course_root=str(course), problems_dir=str(packages))
    for name in ("PS 10", "lab1", "ps"):
        with pytest.raises(ValueError):
            new_set.create(name, course_root=str(course), problems_dir=str(packages))


# In a copy of the course, as an instructor would: `new-set`, then the judge grades the set's
# reference solution and its demo personas; the points are printed as JSON.
GRADE_THE_NEW_SET = textwrap.dedent("""
    import json, os, sys
    from grader.tools.new_set import create
    create("ps9")
    from grader.cohort.demo import demo_solutions
    from grader.cohort.scoring import grade_notebook
    from grader.isolation.judge.judge_process import JudgeProcess
    from grader.problems import sets
    import nbformat

    source = os.path.join("source", "ps9", "ps9.ipynb")
    personas = {"ada_full": {}, **{student: demo_solutions(os.getcwd())["ps9"][persona]
                                   for student, persona in (("ben_partial", "partial"),
                                                            ("eve_wrong", "wrong"))}}
    points = {}
    judge = JudgeProcess()
    try:
        for student, replaced in personas.items():
            nb = nbformat.read(source, as_version=4)
            for cell in nb.cells:
                grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
                if grade_id in replaced:
                    cell.source = replaced[grade_id]
            path = f"{student}.ipynb"
            nbformat.write(nb, path)
            points[student] = grade_notebook(path, "ps9", os.getcwd(), judge=judge).points
    finally:
        judge.close()
    print(json.dumps({"points": points, "expected": sets.expected_scores()["ps9"]}))
""")


def test_a_new_set_is_graded_to_its_written_down_scores(tmp_path):
    course = tmp_path / "course"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    shutil.copytree(os.path.join(ROOT, "grader"), course / "grader", ignore=ignore)
    shutil.copytree(os.path.join(ROOT, "source", "_template"), course / "source" / "_template",
                    ignore=ignore)
    shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), course)
    env = {**os.environ, "PYTHONPATH": str(course)}
    proc = subprocess.run([sys.executable, "-c", GRADE_THE_NEW_SET], cwd=course, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["points"] == {s: found["expected"][s] for s in found["points"]}, found
    assert found["points"]["ada_full"] == 4, found


def test_make_grade_takes_the_template_for_no_problem_set():
    """`make grade` on the course itself grades every set of source/ but the template (a fresh
    clone's demo run once tried to grade source/_template)."""
    from grader.cohort.collect import course_assignments

    found = course_assignments(ROOT)
    assert "_template" not in found and os.path.isdir(os.path.join(ROOT, "source", "_template"))
    assert found == sorted(sets.names()), found
