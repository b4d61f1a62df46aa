"""Check a learner's solution to a problem: the API that test cells and self-check call.

>>> from grader.check import check
>>> check("ps1.q1", FixedModel)           # prints a verdict per check, with hints

Everything is measured in a fresh process (:mod:`grader.worker` via :mod:`grader.isolate`) from
the *source* of the cell that defined ``FixedModel``, not from the object in this kernel.
Where the course's ``source/`` folder is at hand (the instructor's autograde), the reference
solution is measured in the same run; elsewhere (a student's machine, Colab) the shipped
per-device floors are used, and the verdict says so.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Iterable

from .problems import Problem, get_problem
from .source import Cell, cells_defining, solution_cells

_RESULTS: dict[str, "Evaluation"] = {}

CHECK_TITLES = {
    "correctness": "outputs match the original",
    "fullgraph": "compiles with fullgraph=True",
    "breaks": "no graph breaks",
    "recompiles": "no recompiles",
    "fusion": "kernel count",
    "speed": "speedup target",
}


class CheckFailed(AssertionError):
    """A check did not pass; the message is meant for the learner."""


@dataclasses.dataclass
class Evaluation:
    """The worker's result for one problem, with learner-facing messages."""

    problem: Problem
    result: dict
    printed: bool = False  # check() printed it already: displaying it again shows one line

    @property
    def status(self) -> str:
        return self.result.get("status", "grader_error")

    @property
    def with_reference(self) -> bool:
        return bool(self.result.get("checks", {}).get("speed", {}).get("with_reference"))

    def outcome(self, name: str) -> dict:
        if self.status != "ok":
            return {"ok": False, "message": self.result.get("message", self.status)}
        return self.result["checks"].get(name, {"ok": False, "message": f"{name} was not checked"})

    def ok(self, name: str) -> bool:
        return bool(self.outcome(name).get("ok"))

    def verdict(self, name: str) -> str:
        out = self.outcome(name)
        return out.get("verdict") or ("pass" if out.get("ok") else "fail")

    def message(self, name: str) -> str:
        out = self.outcome(name)
        text = out.get("message", "")
        hint = self.problem.hints.get(name)
        if not out.get("ok") and hint and out.get("verdict") != "inconclusive":
            text += f"\nhint: {hint}"
        return text

    def require(self, name: str) -> None:
        """Raise :class:`CheckFailed` with the learner-facing message unless ``name`` passed.
        An inconclusive speed verdict does not raise: it is reported, not failed."""
        __tracebackhide__ = True  # IPython and pytest: the learner sees their cell, not ours
        print(self.line(name))
        if self.verdict(name) not in ("pass", "inconclusive"):
            raise CheckFailed(f"{self.problem.key}: {CHECK_TITLES.get(name, name)} failed\n"
                              f"{self.message(name)}")

    def points(self, name: str, max_points: float, inconclusive_credit: float = 1.0) -> float:
        """nbgrader partial credit: full for pass, ``inconclusive_credit`` x for inconclusive."""
        print(self.line(name))
        verdict = self.verdict(name)
        if verdict == "pass":
            return float(max_points)
        if verdict == "inconclusive":
            return float(max_points) * inconclusive_credit
        return 0.0

    def line(self, name: str) -> str:
        verdict = self.verdict(name).upper()
        return f"[{verdict}] {self.problem.key} {CHECK_TITLES.get(name, name)}\n" + _indent(
            self.message(name))

    def __str__(self) -> str:
        if self.status != "ok":
            return f"[FAIL] {self.problem.key}: {self.result.get('message', self.status)}"
        return "\n".join(self.line(name) for name in self.result["checks"])

    def summary(self) -> str:
        """One line: each check's verdict."""
        if self.status != "ok":
            return f"{self.problem.key}: {self.status}"
        return f"{self.problem.key}: " + ", ".join(
            f"{name} {self.verdict(name)}" for name in self.result["checks"])

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(f"<{self.summary()}>" if self.printed else str(self))


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


# ---------------------------------------------------------------------------------------------
# Finding the reference solution (instructor side only)

def find_course_root(start: str | None = None) -> str | None:
    """The nbgrader course directory above ``start`` (``COURSE_ROOT`` wins when set)."""
    if os.environ.get("COURSE_ROOT"):
        return os.environ["COURSE_ROOT"]
    here = os.path.abspath(start or os.getcwd())
    while True:
        if os.path.exists(os.path.join(here, "nbgrader_config.py")):
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
    folder = os.path.join(root, "source", problem.assignment)
    if not os.path.isdir(folder):
        return None
    for name in sorted(os.listdir(folder)):
        if name.endswith(".ipynb"):
            cells = solution_cells(os.path.join(folder, name), [problem.solution_grade_id])
            if cells:
                return cells
    return None


# ---------------------------------------------------------------------------------------------
# Public API

def evaluate(key: str, *objects, cells: Iterable[Cell] | None = None, reference: str = "auto",
             device: str | None = None, budget_s: float | None = None,
             timeout_s: float | None = None, sandbox: str = "auto",
             problem_module: str | None = None, course_root: str | None = None,
             checks: Iterable[str] | None = None) -> Evaluation:
    """Grade ``key`` in a fresh process from the source of ``objects`` (or from ``cells``).

    ``reference``: 'auto' (measure the reference solution when ``source/`` is at hand), 'off'
    (self-check floors only). Results are cached in this process by the learner's source, so
    several test cells share one measurement. ``checks`` limits which of the problem's checks
    run (default: all).
    """
    from . import isolate
    from .targets import default_device

    problem = get_problem(key, problem_module)
    learner = list(cells) if cells is not None else cells_defining(*objects)
    ref = reference_cells(problem, course_root) if reference == "auto" else None
    spec = {
        "problem": key, "problem_module": problem_module,
        "learner_cells": [c.to_dict() for c in learner],
        "reference_cells": [c.to_dict() for c in ref] if ref else None,
        "device": device or default_device(), "budget_s": budget_s,
    }
    if checks is not None:
        spec["checks"] = list(checks)
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    if digest in _RESULTS:
        return _RESULTS[digest]
    extra = [course_root or find_course_root() or os.getcwd()]
    result = isolate.run_worker({**spec, "extra_path": extra},
                                timeout_s=timeout_s or max(300.0, 4 * problem.budget_s),
                                sandbox=sandbox, warn=False)
    evaluation = Evaluation(problem, result)
    _log_for_report(key, result)
    if result.get("status") in ("ok", "learner_error", "tampered"):
        _RESULTS[digest] = evaluation  # crashes and timeouts are worth a retry
    return evaluation


def _log_for_report(key: str, result: dict) -> None:
    """During ``make grade`` (``COURSE_GRADE_LOG`` set) keep each result for the cohort report."""
    path = os.environ.get("COURSE_GRADE_LOG")
    if not path:
        return
    slim = {"problem": key, "status": result.get("status"), "message": result.get("message", ""),
            "checks": {name: {k: v for k, v in out.items() if k != "message"}
                       for name, out in result.get("checks", {}).items()}}
    try:
        with open(path, "a") as fh:
            fh.write(json.dumps(slim, default=str) + "\n")
    except OSError:
        pass


def check(key: str, *objects, **options) -> Evaluation:
    """Self-check: evaluate and print every verdict with its hint. Returns the evaluation."""
    evaluation = evaluate(key, *objects, **options)
    print(evaluation)
    if evaluation.status == "ok" and "speed" in evaluation.result["checks"]:
        if evaluation.with_reference:
            print("(speed measured against the reference solution in the same run)")
        else:
            print("(self-check: speed compared with this device class's shipped floor; the final "
                  "grade measures your speedup against the reference solution)")
    return dataclasses.replace(evaluation, printed=True)
