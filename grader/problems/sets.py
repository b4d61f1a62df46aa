"""The problem sets, found by their folders, and the one reader and writer of the figures each
set keeps beside its problems.

A problem set ``psN`` is two folders, and nothing else names it (docs/design.md, "Adding a
problem set"):

- ``grader/problems/psN/``: ``__init__.py`` (``PROBLEMS`` and ``TEST_CELLS``: what the learner
  is given and how each test cell is scored), ``demo_expected.json`` (its demo students'
  points, with why), ``floors.json`` (self-check's speed floors per problem and device class,
  written by ``bench --calibrate`` and shipped from ``make gpu-check``) and
  ``gradescope_measured.json`` (Gradescope's wall time and peak memory,
  ``bench-gradescope --save``); a figure not measured yet is a file not there;
- ``source/psN/``: ``psN.ipynb`` (nbgrader's source notebook, the reference solution in it) and
  ``demo_cohort.py`` (the demo personas' near-answers, :mod:`grader.cohort.demo`): instructor
  side only, so not in this package, which students install.

A set is every sub-package of ``grader.problems`` whose name is not private (``_template`` is
the folder a new set is copied from): the package's search path is read, so a folder added to
it is a set too (``tests/test_new_set.py`` builds one so).
"""
from __future__ import annotations

import json
import os
import sys

from grader import _files as files


def folders() -> dict[str, str]:
    """``{set name: its folder}`` for every problem set, in name order."""
    # The parent package's search path, read from sys.modules: it is imported before any of its
    # modules, and importing it here would make an import cycle of the problems role.
    found = {}
    for root in sys.modules[__package__].__path__:
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else ():
            path = os.path.join(root, name)
            if not name.startswith(("_", ".")) and os.path.isfile(os.path.join(path, "__init__.py")):
                found.setdefault(name, path)
    return dict(sorted(found.items()))


def names() -> list[str]:
    """Every problem set's name ("ps1", ...), sorted."""
    return list(folders())


def folder(assignment: str) -> str:
    """The folder of ``assignment``'s problems and figures."""
    try:
        return folders()[assignment]
    except KeyError:
        raise KeyError(f"no problem set {assignment!r}; the sets are {names()}") from None


def _read(assignment: str, name: str) -> dict:
    """The set's file ``name`` ({} when the set or the file is not there)."""
    where = folders().get(assignment)
    return files.read_json_dict(os.path.join(where, name)) if where else {}


def _write(assignment: str, name: str, data: dict, indent: int) -> str:
    path = os.path.join(folder(assignment), name)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=indent, sort_keys=True)
        fh.write("\n")
    return path


# ---------------------------------------------------------------------------------------------
# Self-check's speed floors: {problem key: {device class: floor}}

def floors(problem_key: str) -> dict[str, float]:
    """The floors shipped for ``problem_key`` ("ps1.q1"), per device class; {} when none."""
    return dict(_read(problem_key.split(".")[0], files.SET_FLOORS).get(problem_key, {}))


def all_floors() -> dict[str, dict[str, float]]:
    """Every set's floors in one mapping, ``{problem key: {device class: floor}}``."""
    merged: dict[str, dict[str, float]] = {}
    for assignment in folders():
        merged.update(_read(assignment, files.SET_FLOORS))
    return merged


def write_floors(floors_by_problem: dict[str, dict[str, float]]) -> list[str]:
    """Write ``{problem key: {device class: floor}}`` into each set's ``floors.json`` (a set's
    other problems keep theirs). Returns the files written."""
    by_set: dict[str, dict] = {}
    for key, per_class in floors_by_problem.items():
        by_set.setdefault(key.split(".")[0], {})[key] = dict(sorted(per_class.items()))
    return [_write(assignment, files.SET_FLOORS,
                   {**_read(assignment, files.SET_FLOORS), **kept}, indent=2)
            for assignment, kept in sorted(by_set.items())]


# ---------------------------------------------------------------------------------------------
# The demo cohort's written-down points

def expected_scores() -> dict[str, dict[str, float]]:
    """``{set: {demo student: points}}`` from each set's ``demo_expected.json`` (its ``_why``
    says why each student scores what it does)."""
    found = {}
    for assignment in folders():
        scores = {k: v for k, v in _read(assignment, files.SET_DEMO_EXPECTED).items()
                  if not k.startswith("_")}
        if scores:
            found[assignment] = scores
    return found


# ---------------------------------------------------------------------------------------------
# Gradescope's run_autograder, measured

def gradescope_measured(assignment: str) -> dict:
    """What ``bench-gradescope --save`` measured for ``assignment`` ({} when nothing was)."""
    return _read(assignment, files.SET_GRADESCOPE_MEASURED)


def save_gradescope_measured(assignment: str, row: dict) -> str:
    """Write ``row`` as ``assignment``'s Gradescope figures; returns the file."""
    return _write(assignment, files.SET_GRADESCOPE_MEASURED, row, indent=1)
