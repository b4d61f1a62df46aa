"""Check a learner's solution to a problem: the API that test cells and self-check call.

>>> from grader.problems.ps1 import *
>>> from grader.isolation.check import check, run_test
>>> check("ps1.q1", FixedModel)                  # self-check: every verdict, with hints
>>> run_test("ps1-q1-correctness", FixedModel)   # what a test cell runs

Everything is decided by a judge process that never runs learner code (:mod:`grader.isolation.judge`):
the learner's code, taken from the *source* of the cell that defined ``FixedModel`` and screened
first (:mod:`grader.isolation.static_check`), runs in a fresh sandboxed subject process that
answers the judge's requests; the judge checks its outputs, checks and times the graph it
compiled to, and computes every verdict. Where the course's ``source/`` folder is at hand (an
instructor's machine), the reference solution is measured in the same run; elsewhere (a
student's machine, Colab) the shipped per-device floors are used, and the verdict says so.

During ``make grade`` nothing here runs: the judged scoring (:mod:`grader.cohort.scoring`)
measures every problem of a submission in a process that never runs learner code and scores each
test cell from the problem set's ``TEST_CELLS`` with :func:`score_cell`; the notebook is not run,
its test cells are given those verdicts (:mod:`grader.cohort.judged_autograde`).

Why one module (~450 lines): it is the notebook's whole API (``check``, ``evaluate``,
``run_test``) and the test-cell scoring both it and ``make grade`` use, one import for a notebook.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from typing import Iterable

from grader.problems import Problem, TestCell, get_problem, public_names, test_cells
from grader.checks.declared import BY_NAME
from grader.checks.results import NEEDS_A_REFERENCE, PROCESS_FAILURES, CheckOutcome, ProblemResult, Status
from grader.isolation.source import Cell, cells_defining, solution_cells
from grader import _environment as environment
from grader import _files as files

_RESULTS: dict[str, "Evaluation"] = {}


class CheckFailed(AssertionError):
    """A check did not pass; the message is meant for the learner."""


@dataclasses.dataclass
class Evaluation:
    """The judge's result for one problem, with learner-facing messages."""

    problem: Problem
    result: dict
    printed: bool = False  # check() printed it already: displaying it again shows one line

    @functools.cached_property
    def parsed(self) -> ProblemResult:
        """The result, typed (the dict is what the judge wrote)."""
        return ProblemResult.from_dict(self.result)

    @property
    def status(self) -> str:
        return self.parsed.status

    @property
    def with_reference(self) -> bool:
        return "speed" in self.parsed.checks and bool(
            self.parsed.checks["speed"].details.get("with_reference"))

    def outcome(self, name: str) -> CheckOutcome:
        """The check ``name``."""
        return self.parsed.outcome(name)

    def ok(self, name: str) -> bool:
        return self.outcome(name).ok

    def verdict(self, name: str) -> str:
        return self.outcome(name).final_verdict

    def message(self, name: str) -> str:
        out = self.outcome(name)
        text = out.message
        hint = self.problem.hints.get(name)
        if not out.ok and hint and out.verdict != "inconclusive" and self.status == Status.OK \
                and not out.details.get("gated_by"):  # the gate's own check carries the hint
            text += f"\nhint: {hint}"
        return text

    def require(self, name: str) -> None:
        """Raise :class:`CheckFailed` with the learner-facing message unless ``name`` passed.
        An inconclusive speed verdict does not raise: it is reported, not failed."""
        __tracebackhide__ = True  # IPython and pytest: the learner sees their cell, not ours
        print(self.line(name))
        if self.verdict(name) not in ("pass", "inconclusive"):
            raise CheckFailed(self.failure(name))

    def failure(self, name: str) -> str:
        return f"{self.problem.key}: {self.title(name)} failed\n{self.message(name)}"

    def points(self, name: str, max_points: float, inconclusive_credit: float = 0.0) -> float:
        """nbgrader partial credit: full for pass, ``inconclusive_credit`` x for inconclusive."""
        print(self.line(name))
        return credit(self.verdict(name), max_points, inconclusive_credit)

    def title(self, name: str) -> str:
        declared = {c.name: c for c in self.problem.parts}.get(name) or BY_NAME.get(name)
        if declared is None:
            return name
        return declared.training_title if self.problem.training and declared.training_title \
            else declared.title

    def line(self, name: str) -> str:
        verdict = self.verdict(name).upper()
        return f"[{verdict}] {self.problem.key} {self.title(name)}\n" + _indent(self.message(name))

    def __str__(self) -> str:
        if self.status != Status.OK:
            return f"[FAIL] {self.problem.key}: {self.parsed.message or self.status}"
        return "\n".join(self.line(name) for name in self.parsed.checks)

    def summary(self) -> str:
        """One line: each check's verdict."""
        if self.status != Status.OK:
            return f"{self.problem.key}: {self.status}"
        return f"{self.problem.key}: " + ", ".join(
            f"{name} {self.verdict(name)}" for name in self.parsed.checks)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(f"<{self.summary()}>" if self.printed else str(self))


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def credit(verdict: str, max_points: float, inconclusive_credit: float = 0.0) -> float:
    if verdict == "pass":
        return float(max_points)
    if verdict == "inconclusive":
        return float(max_points) * inconclusive_credit
    return 0.0


# ---------------------------------------------------------------------------------------------
# Scoring a test cell (shared by the notebook and the judged scoring)

@dataclasses.dataclass
class CellScore:
    """What a test cell earns from its problems' results, and the text it shows."""

    grade_id: str
    points: float
    max_points: float
    partial: bool            # the cell's value is its points (nbgrader partial credit)
    text: str                # every verdict the cell depends on, with messages and hints
    failure: str = ""        # why it earned nothing, when it did not pass outright
    review: bool = False     # for a person to look at: an inconclusive verdict, or a grader error
    passed: bool = True      # every check it requires passed (a 0-point gate cell says so too)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CellScore":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


GRADER_FAILED_NOTE = ("the grader itself failed on a check this cell depends on: this is not a "
                      "verdict on your code. It is flagged for your instructor (nbgrader: needs "
                      "manual grade), who grades it by hand; it scores 0 of {max_points:g} until "
                      "then")
REVIEW_NOTE = ("the machine was too noisy to decide this verdict, even after the extra trials: "
               "it is flagged for the instructor (nbgrader: needs manual grade) and scores "
               "{points:g} of {max_points:g} until a person looks (a regrade on a quieter machine, "
               "`make grade REGRADE=1`, usually decides it)")


def score_cell(cell: TestCell, evaluations: dict[str, Evaluation]) -> CellScore:
    """Points of ``cell`` from the evaluations of its problems (key -> Evaluation)."""
    lines, failure, shown = [], "", set()
    for key, name in cell.checks:
        ev = evaluations[key]
        if ev.status != Status.OK:
            if key not in shown:
                shown.add(key)
                lines.append(str(ev))
        elif (key, name) not in shown:
            shown.add((key, name))
            lines.append(ev.line(name))
    if any(evaluations[key].status == Status.GRADER_ERROR for key, _ in cell.checks):
        note = GRADER_FAILED_NOTE.format(max_points=float(cell.points))
        lines.append(f"[REVIEW] {note}")
        return CellScore(cell.grade_id, 0.0, float(cell.points), cell.scored is not None,
                         "\n".join(lines), note, review=True, passed=False)
    met, review = True, False
    for key, name in cell.requires:
        ev = evaluations[key]
        if ev.verdict(name) == "inconclusive":
            review = True
        elif ev.verdict(name) != "pass":
            met = False
            failure = failure or ev.failure(name)
    if cell.scored:
        key, name = cell.scored
        verdict = evaluations[key].verdict(name)
        review = review or (met and verdict == "inconclusive")
        share = evaluations[key].outcome(name).get("credit")
        if not met:
            points = 0.0
        elif isinstance(share, (int, float)) and verdict != "pass":
            points = float(cell.points) * min(1.0, max(0.0, float(share)))  # one share per item
        else:
            points = credit(verdict, cell.points, cell.inconclusive_credit)
        if not failure and points < cell.points and verdict != "inconclusive":
            failure = evaluations[key].failure(name)
    else:
        points = float(cell.points) if met and not review else \
            float(cell.points) * cell.inconclusive_credit if met else 0.0
    if review and met:
        note = REVIEW_NOTE.format(points=points, max_points=float(cell.points))
        lines.append(f"[REVIEW] {note}")
        failure = failure or note
    passed = met and (cell.scored is None or evaluations[cell.scored[0]].verdict(
        cell.scored[1]) != "fail")
    return CellScore(cell.grade_id, points, float(cell.points), cell.scored is not None,
                     "\n".join(lines), failure, review and met, passed)


# ---------------------------------------------------------------------------------------------
# Finding the reference solution (instructor side only)

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


# ---------------------------------------------------------------------------------------------
# Public API

def job_for(keys: list[str], learner: list[Cell], *, reference: str = "auto",
            device: str | None = None, budget_s: float | None = None,
            timeout_s: float | None = None, sandbox: str = "auto",
            problem_module: str | None = None, course_root: str | None = None,
            checks: dict[str, list[str]] | None = None, isolation=None,
            screen: bool = True, memory_bytes: int | None = None) -> dict:
    """The judge's job for problems ``keys`` that share the learner's cells ``learner``
    (:meth:`grader.isolation.judge.Judge.grade`): the reference solutions come from ``source/``
    when it is at hand and ``reference`` is 'auto'. ``memory_bytes``: the subject's address-space
    limit on CPU (``make grade --memory-gb``; default: the judge's)."""
    from grader.checks.targets import default_device

    problems = [get_problem(k, problem_module) for k in keys]
    refs = {}
    for problem in problems:
        wanted = (checks or {}).get(problem.key, problem.checks)
        # The reference times the speed check and sizes the judge's budget for a learner's graph.
        if reference == "auto" and problem.needs(wanted) & set(NEEDS_A_REFERENCE):
            cells = reference_cells(problem, course_root)
            if cells:
                refs[problem.key] = [c.to_dict() for c in cells]
    job = {"problems": list(keys), "problem_module": problem_module,
           "learner_cells": [c.to_dict() for c in learner], "reference_cells": refs,
           "device": device or default_device(), "budget_s": budget_s,
           "timeout_s": timeout_s or subject_deadline_s(problems),
           "sandbox": sandbox, "screen": screen}
    if checks is not None:
        job["checks"] = checks
    if isolation is not None:
        job["isolation"] = {"mode": isolation.mode, "reason": isolation.reason}
    if memory_bytes is not None:
        job["memory_bytes"] = int(memory_bytes)
    return job


# The subject's deadline where the references were built on this machine (make grade,
# Gradescope), rather than a flat 300 s: twice the slowest of what loading and compiling the set's
# references took the judge (make grade's BuiltReferences.reference_s: the reference loaded, its
# graph captured and compiled with Inductor, the baseline compiled; for a planning question its
# slowest cold first call). An honest subject does less (start, load, call, capture, count
# compiles; no Inductor): on 2 loaded cores it took 0.1-0.4 of that in ps1, ps2 and ps4-ps7
# (make bench-grade, 2026-12), so twice leaves it five times what it needed or more, grows with a
# slower machine, and an endless loop costs one short deadline. The floor keeps room for the
# subject's own start (an interpreter and torch: seconds on a quiet core, more on a loaded one)
# where the references build fast.
SUBJECT_DEADLINE_FACTOR = 2.0
SUBJECT_DEADLINE_FLOOR_S = 60.0


def subject_deadline_s(problems: list[Problem], reference_s: float | None = None) -> float:
    """How long the subject may take for ``problems`` (one solution cell's): without a
    measurement (self-check), max(300 s, 4 x the slowest problem's timing budget); with
    ``reference_s``, the seconds the judge took to build the set's reference side here,
    :data:`SUBJECT_DEADLINE_FACTOR` times that, at least :data:`SUBJECT_DEADLINE_FLOOR_S` and
    at most the unmeasured deadline."""
    unmeasured = max(300.0, 4 * max(p.budget_s for p in problems))
    if reference_s is None:
        return unmeasured
    return min(unmeasured, max(SUBJECT_DEADLINE_FLOOR_S, SUBJECT_DEADLINE_FACTOR * reference_s))


def judge_timeout(job: dict) -> float:
    """How long a judge may take for ``job``: the subject's time, the timing budgets, and the
    first build of the reference side (compiles)."""
    budgets = sum(max(45.0, 3 * get_problem(k, job.get("problem_module")).budget_s)
                  for k in job["problems"])
    return float(job["timeout_s"]) + budgets + 600.0


def run_job(job: dict, judge=None) -> dict[str, dict]:
    """Grade ``job`` with ``judge`` (a :class:`grader.isolation.judge_process.JudgeProcess`; by default
    a new one, for this job only); returns ``{key: result dict}``. A judge that fails makes a
    grader-error result for each problem, with the reason."""
    from grader.isolation.judge_process import JudgeProcess

    own = judge is None
    judge = judge or JudgeProcess()
    try:
        reply = judge.grade(job, judge_timeout(job))
    finally:
        if own:
            judge.close()
    results = reply.get("results") if isinstance(reply, dict) else None
    if not isinstance(results, dict):
        why = reply.get("error", "no result") if isinstance(reply, dict) else "no result"
        return {k: {"status": Status.GRADER_ERROR, "problem": k,
                    "message": f"the judge failed: {why}"} for k in job["problems"]}
    return {k: results.get(k) or {"status": Status.GRADER_ERROR, "problem": k,
                                  "message": "the judge sent no result"} for k in job["problems"]}


def evaluate(key: str, *objects, cells: Iterable[Cell] | None = None, reference: str = "auto",
             device: str | None = None, budget_s: float | None = None,
             timeout_s: float | None = None, sandbox: str = "auto",
             problem_module: str | None = None, course_root: str | None = None,
             checks: Iterable[str] | None = None, cache: bool = True, isolation=None,
             judge=None, screen: bool = True, hidden_jobs: bool = False) -> Evaluation:
    """Grade ``key`` from the source of ``objects`` (or from ``cells``): a judge process runs the
    learner's code in a sandboxed subject and decides every verdict itself
    (:mod:`grader.isolation.judge`).

    ``reference``: 'auto' (measure the reference solution when ``source/`` is at hand), 'off'
    (self-check floors only). Results are cached in this process by the learner's source, so
    several test cells share one measurement (``cache=False``: always measure). ``checks``
    limits which of the problem's checks run (default: all). ``sandbox``: 'auto', 'bwrap'
    (required) or 'off' (see :func:`grader.isolation.sandbox.probe`); ``isolation``: one already
    probed. ``judge``: a running :class:`grader.isolation.judge_process.JudgeProcess` (a grading run
    keeps one per worker; by default a new one is started). ``screen``: only the grader's own
    tests turn the static check off, to attack what stands behind it. ``hidden_jobs``: judge a
    planning question's hidden jobs (ps3 q1) here too; by default they are judged only when
    grading, because their verdicts would tell a learner the break-even the question asks them
    to measure (:class:`grader.problems.JobPlan`): the result says so instead.
    """
    from grader.isolation import static_check

    problem = get_problem(key, problem_module)
    learner = list(cells) if cells is not None else cells_defining(*objects)
    refusals = static_check.check_cells(learner, problem.allowed_config,
                                        public_names(problem, problem_module)) if screen else []
    if refusals:  # said here at once; the judge screens again before anything runs
        return Evaluation(problem, {"status": Status.REFUSED, "problem": key,
                                    "message": static_check.describe(refusals)})
    wanted = list(checks) if checks is not None else list(problem.checks)
    held_back = problem.plan is not None and not hidden_jobs and "job" in wanted
    if held_back:
        wanted.remove("job")
    job = job_for([key], learner, reference=reference, device=device, budget_s=budget_s,
                  timeout_s=timeout_s, sandbox=sandbox, problem_module=problem_module,
                  course_root=course_root,
                  checks={key: wanted} if checks is not None or held_back else None,
                  isolation=isolation, screen=screen)
    digest = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()
    if cache and digest in _RESULTS:
        return _RESULTS[digest]
    result = run_job(job, judge)[key]
    if held_back and result.get("status") == Status.OK:
        result = dict(result, checks={**(result.get("checks") or {}),
                                      "job": HIDDEN_JOBS_HELD_BACK.to_dict()})
    evaluation = Evaluation(problem, result)
    if cache and evaluation.status not in PROCESS_FAILURES + (Status.GRADER_ERROR,):
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


def find_test_cell(grade_id: str) -> TestCell:
    """The declaration of test cell ``grade_id`` ("ps1-q1-speed" belongs to ps1)."""
    assignment = grade_id.split("-", 1)[0]
    cells = test_cells(assignment)
    if grade_id not in cells:
        raise KeyError(f"no test cell {grade_id!r} is declared in grader.problems.{assignment}")
    return cells[grade_id]


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
