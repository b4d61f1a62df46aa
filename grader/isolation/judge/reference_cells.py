"""Finding the reference solution (instructor side only): the course folder above here, and the
reference's solution cells in its ``source/<assignment>/*.ipynb``. A student's machine and Colab
have no ``source/``: there the judge uses the shipped per-device floors instead."""
from __future__ import annotations

import os

from grader import _environment as environment
from grader import _files as files
from grader.isolation.cells.source import Cell, solution_cells
from grader.problems import Problem


def find_course_root(start: str | None = None) -> str | None:
    """The nbgrader course directory above ``start`` (``COURSE_ROOT`` wins when set)."""
    if os.environ.get(environment.ROOT):
        return os.environ[environment.ROOT]
    here = os.path.abspath(start or os.getcwd())
    while True:
        if os.path.exists(os.path.join(here, files.NBGRADER_CONFIG)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def reference_cells(problem: Problem, course_root: str | None = None) -> list[Cell] | None:
    """The reference solution's cells from ``source/<assignment>/*.ipynb``, or ``None`` when
    this machine has no ``source/`` (students, Colab)."""
    root = course_root or find_course_root()
    if root is None:
        return None
    folder = os.path.join(root, files.SOURCE, problem.assignment)
    if not os.path.isdir(folder):
        return None
    for name in sorted(os.listdir(folder)):
        if name.endswith(".ipynb"):
            cells = solution_cells(os.path.join(folder, name), [problem.solution_grade_id])
            if cells:
                return cells
    return None

