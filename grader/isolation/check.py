"""Check a learner's solution to a problem: the API that test cells and self-check call.

>>> from grader.problems.ps1 import *
>>> from grader.isolation.check import check, run_test
>>> check("ps1.q1", FixedModel)                  # self-check: every verdict, with hints
>>> run_test("ps1-q1-correctness", FixedModel)   # what a test cell runs

Everything is decided by a judge process that never runs learner code
(:mod:`grader.isolation.judge.steps`): the learner's code, taken from the *source* of the cell that
defined ``FixedModel`` and screened first (:mod:`grader.isolation.cells.screen`), runs in a fresh
sandboxed subject process that answers the judge's requests; the judge checks its outputs, checks
and times the graph it compiled to, and computes every verdict. Where the course's ``source/``
folder is at hand (an instructor's machine), the reference solution is measured in the same run;
elsewhere (a student's machine, Colab) the shipped per-device floors are used, and the verdict says
so.

During ``make grade`` nothing here runs: the judged scoring (:mod:`grader.cohort.scoring`)
measures every problem of a submission in a process that never runs learner code and scores each
test cell from the problem set's ``TEST_CELLS`` with
:func:`grader.isolation.cell_scores.score_cell`; the notebook is not run, its test cells are given
those verdicts (:mod:`grader.cohort.judged_autograde`).

This module is the notebook's API only (``check``, ``evaluate`` and its settings
:class:`EvaluateSettings`, ``run_test``, ``skip_while_grading``); the judge's job is built in
:mod:`grader.isolation.judge.judging`, a test cell is scored in :mod:`grader.isolation.cell_scores`
(both this and ``make grade`` use it), and the reference solution is found in
:mod:`grader.isolation.judge.reference_cells`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Iterable

from grader.checks.results import PROCESS_FAILURES, CheckOutcome, Status
# The notebook's one import: what a test cell or self-check names lives in these modules.
from grader.isolation.cell_scores import (CheckFailed, Evaluation, credit,  # noqa: F401
                                          find_test_cell, score_cell)
from grader.isolation.judge.judging import JobSettings, job_for, run_job
from grader.isolation.cells.source import Cell, cells_defining
from grader.problems import get_problem, public_names

_RESULTS: dict[str, Evaluation] = {}


@dataclasses.dataclass(frozen=True)
class EvaluateSettings(JobSettings):
    """How :func:`evaluate` (and ``check``, ``run_test``) grades: the job's settings
    (:class:`grader.isolation.judge.judging.JobSettings`) and these, each with its default, declared
    once. Each is also taken as a keyword (``evaluate(key, Model, reference="off")``)."""

    # Which of the problem's checks run (names; default: all).
    checks: tuple[str, ...] | None = None
    # Results are cached in this process by the learner's source, so several test cells share
    # one measurement; False: always measure.
    cache: bool = True
    # Judge a planning question's hidden jobs (ps3 q1) here too; by default they are judged
    # only when grading, because their verdicts would tell a learner the break-even the
    # question asks them to measure (grader.problems.JobPlan): the result says so instead.
    hidden_jobs: bool = False

    def __post_init__(self) -> None:
        if self.checks is not None:
            object.__setattr__(self, "checks", tuple(self.checks))


def evaluate(key: str, *objects, cells: Iterable[Cell] | None = None, judge=None,
             settings: EvaluateSettings | None = None, **options) -> Evaluation:
    """Grade ``key`` from the source of ``objects`` (or from ``cells``): a judge process runs the
    learner's code in a sandboxed subject and decides every verdict itself
    (:mod:`grader.isolation.judge.steps`), as ``settings`` and the :class:`EvaluateSettings` fields
    in ``options`` say. ``judge``: a running
    :class:`grader.isolation.judge.judge_process.JudgeProcess` (a grading run keeps one per worker;
    by default a new one is started).
    """
    from grader.isolation.cells.screen import describe, screen_cells

    s = EvaluateSettings.made(settings, **options)
    problem = get_problem(key, s.problem_module)
    learner = list(cells) if cells is not None else cells_defining(*objects)
    refusals = screen_cells(learner, problem.allowed_config,
                            public_names(problem, s.problem_module)) if s.screen else []
    if refusals:  # said here at once; the judge screens again before anything runs
        return Evaluation(problem, {"status": Status.REFUSED, "problem": key,
                                    "message": describe(refusals)})
    wanted = list(s.checks) if s.checks is not None else list(problem.checks)
    held_back = problem.plan is not None and not s.hidden_jobs and "job" in wanted
    if held_back:
        wanted.remove("job")
    job = job_for([key], learner, s,
                  checks={key: wanted} if s.checks is not None or held_back else None)
    digest = hashlib.sha256(json.dumps(job.to_dict(), sort_keys=True).encode()).hexdigest()
    if s.cache and digest in _RESULTS:
        return _RESULTS[digest]
    result = run_job(job, judge)[key]
    if held_back and result.get("status") == Status.OK:
        result = dict(result, checks={**(result.get("checks") or {}),
                                      "job": HIDDEN_JOBS_HELD_BACK.to_dict()})
    evaluation = Evaluation(problem, result)
    if s.cache and evaluation.status not in PROCESS_FAILURES + (Status.GRADER_ERROR,):
        _RESULTS[digest] = evaluation  # crashes and timeouts are worth a retry
    return evaluation


# What a planning question's hidden-jobs check says outside grading (see evaluate).
HIDDEN_JOBS_HELD_BACK = CheckOutcome(
    False, "judged only when your notebook is graded: the hidden jobs lie 1.5 to 3 times below "
           "and above the grading machine's break-even, which the grader measures there; judging "
           "them here would tell you the break-even, which this question asks you to measure. "
           "Measure it with the exploration cell and write your rule from your figures.",
    "not judged here")


def skip_while_grading() -> bool:
    """True (after printing why) while nbgrader's own autograde runs the notebook (Formgrader:
    nbgrader sets ``NBGRADER_EXECUTION=autograde``; ``make grade`` runs no cell). An exploration
    cell, from which nothing is scored, returns early then instead of spending grading seconds on
    its measurements; it runs as usual everywhere else (your kernel, Colab, validate).

    >>> if not skip_while_grading():
    ...     print(fusion_report(MyModel(), *example_inputs()))
    """
    if os.environ.get("NBGRADER_EXECUTION") != "autograde":
        return False
    print("Not run while grading: this cell only explores (nothing is scored from it). "
          "Run it in your own notebook to see its figures.")
    return True


def check(key: str, *objects, **options) -> Evaluation:
    """Self-check: evaluate and print every verdict with its hint. Returns the evaluation."""
    evaluation = evaluate(key, *objects, **options)
    print(evaluation)
    if evaluation.status == Status.OK and "speed" in evaluation.parsed.checks:
        if evaluation.with_reference:
            print("(speed measured against the reference solution in the same run)")
        else:
            from grader.checks.targets import self_check_target

            floors = self_check_target(evaluation.problem).floors
            classes = ", ".join(sorted(floors)) or "none"
            print(f"(self-check: speed compared with the shipped floor for this device class; "
                  f"floors are shipped for: {classes}; the final grade measures your speedup "
                  f"against the reference solution)")
    return dataclasses.replace(evaluation, printed=True)



def run_test(grade_id: str, *objects, **options):
    """What an autograded test cell runs: the checks its declaration names, measured on the
    learner's ``objects``.

    Prints every verdict the cell depends on. A partial-credit cell returns its points (the
    cell's value, which nbgrader reads); any other cell raises :class:`CheckFailed` unless it
    earned its points.
    """
    __tracebackhide__ = True
    cell = find_test_cell(grade_id)
    evaluations = {key: evaluate(key, *objects, **options) for key in cell.problems}
    score = score_cell(cell, evaluations)
    print(score.text)
    held_back = cell.scored is not None and evaluations[cell.scored[0]].verdict(
        cell.scored[1]) == HIDDEN_JOBS_HELD_BACK.verdict
    if held_back and score.passed:
        # Judged only when graded (ps3's hidden jobs): nothing to fail here, nothing credited
        # here either; the printed verdict says so. (No value: nbgrader's validate passes it.)
        return None
    if score.partial:
        return score.points
    if score.points < score.max_points or not score.passed:  # a 0-point gate fails visibly too
        raise CheckFailed(score.failure or f"{grade_id} failed")
    return None
