"""Grade one submission where learner code never runs: what ``make grade`` credits.

For a submitted notebook this process (the trusted parent)

1. reads the learner's solution cells from the ``.ipynb`` (by their nbgrader ``grade_id``);
2. screens them (:mod:`grader.isolation.static_check`), then measures every problem of the set once in a
   fresh, sandboxed worker (:func:`grader.isolation.check.evaluate`), with the reference solution from the
   instructor's ``source/`` sent to the worker on its stdin;
3. verifies each worker result (:mod:`grader.isolation.verify`) and scores every autograded test cell from
   the problem set's ``TEST_CELLS`` (:func:`grader.isolation.check.score_cell`);
4. writes it all to one JSON file: the points and text of each test cell, each problem's result
   (what the notebook displays, and the cohort report reads).

The notebook's kernel then only shows these results, and nbgrader's ``ApplyPipelineScores`` step
(:mod:`grader.cohort.apply_scores`) puts these points in the gradebook, whatever the kernel printed.
"""
from __future__ import annotations

import dataclasses
import json
import time

from grader.isolation.check import score_cell
from grader.problems import get_problem, test_cells
from grader.isolation.source import solution_cells


@dataclasses.dataclass
class PipelineResult:
    """Everything the pipeline decided for one submission."""

    assignment: str
    problems: dict        # key -> verified result
    cells: dict           # grade_id -> CellScore as a dict
    seconds: dict         # key -> seconds its worker took
    sandbox: str

    def phases(self) -> dict:
        """Seconds by step, summed over the problems' workers ("worker start", "baseline and
        reference", "learner cells", "check speed", ...), plus each worker's total."""
        out: dict = {}
        for key, result in self.problems.items():
            for name, seconds in (result.get("phases") or {}).items():
                if isinstance(seconds, (int, float)):
                    out[name] = round(out.get(name, 0.0) + seconds, 3)
            out[f"worker {key}"] = self.seconds.get(key, 0.0)
        return out

    @property
    def points(self) -> float:
        return sum(c["points"] for c in self.cells.values())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def display(self) -> dict:
        """What the notebook's kernel may read: the learner's own results, no instructor data
        (the workers' logs are left out)."""
        return {"problems": {k: {n: v for n, v in r.items() if n != "output_tail"}
                             for k, r in self.problems.items()},
                "cells": self.cells}

    def save(self, path: str, display_path: str | None = None) -> None:
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh, default=str)
        if display_path:
            with open(display_path, "w") as fh:
                json.dump(self.display(), fh, default=str)


def problems_of(assignment: str) -> list[str]:
    """The problem keys a set's test cells are scored on, in declaration order."""
    keys: list[str] = []
    for cell in test_cells(assignment).values():
        keys += [k for k in cell.problems if k not in keys]
    return keys


def prepare_references(assignment: str, course: str, *, sandbox: str = "auto", isolation=None,
                       device: str | None = None) -> dict[str, dict]:
    """Each timed problem's baseline and reference, compiled once for a grading run
    (:func:`grader.isolation.check.prepare`): problem key -> prepared; problems whose preparation
    failed are left out (their submissions compile them, as before)."""
    from grader.isolation import check

    prepared = {}
    for key in problems_of(assignment):
        ready = check.prepare(key, course_root=course, device=device, sandbox=sandbox,
                              isolation=isolation)
        if ready is not None:
            prepared[key] = ready
    return prepared


def grade_notebook(notebook: str, assignment: str, course: str, *, sandbox: str = "auto",
                   device: str | None = None, timeout_s: float | None = None,
                   prepared: dict[str, dict] | None = None, isolation=None) -> PipelineResult:
    """Measure and score ``notebook`` (a submission of ``assignment``) against the reference
    solutions in ``course``/source. Raises ``ValueError`` when the file is not a notebook.
    ``prepared``: from :func:`prepare_references` (the same verdicts, fewer seconds)."""
    from grader.isolation import check

    cells_by_problem = {}
    for key in problems_of(assignment):
        problem = get_problem(key)
        cells_by_problem[key] = solution_cells(notebook, [problem.solution_grade_id])
    problems, seconds, evaluations, sandbox_used = {}, {}, {}, "none"
    for key, cells in cells_by_problem.items():
        started = time.monotonic()
        ev = check.evaluate(key, cells=cells, course_root=course, sandbox=sandbox,
                            device=device, timeout_s=timeout_s, cache=False,
                            prepared=(prepared or {}).get(key), isolation=isolation)
        seconds[key] = round(time.monotonic() - started, 2)
        evaluations[key] = ev
        problems[key] = ev.result
        sandbox_used = ev.result.get("sandbox") or sandbox_used
    scores = {grade_id: score_cell(cell, evaluations).to_dict()
              for grade_id, cell in test_cells(assignment).items()}
    return PipelineResult(assignment, problems, scores, seconds, sandbox_used)


def declared_test_cells_problems(source_notebook: str, assignment: str) -> list[str]:
    """Why the notebook's autograded test cells and the set's ``TEST_CELLS`` disagree (empty
    when every test cell is declared with its points): checked before grading anyone."""
    with open(source_notebook, encoding="utf-8") as fh:
        nb = json.load(fh)
    declared = test_cells(assignment)
    problems, seen = [], set()
    for cell in nb["cells"]:
        meta = (cell.get("metadata") or {}).get("nbgrader") or {}
        if not meta.get("grade") or meta.get("solution") or cell.get("cell_type") != "code":
            continue
        grade_id = meta.get("grade_id")
        seen.add(grade_id)
        if grade_id not in declared:
            problems.append(f"test cell {grade_id} is not declared in grader.problems."
                            f"{assignment}.TEST_CELLS")
        elif abs(float(meta.get("points", 0)) - declared[grade_id].points) > 1e-9:
            problems.append(f"test cell {grade_id} is worth {meta.get('points')} points in the "
                            f"notebook and {declared[grade_id].points} in TEST_CELLS")
    problems += [f"TEST_CELLS declares {g}, which is not a test cell of {source_notebook}"
                 for g in declared if g not in seen]
    return problems

