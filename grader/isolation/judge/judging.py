"""A job for the judge, made and run (one ``jobs`` module a meaning: ps3's jobs of N calls are
:mod:`grader.checks.jobs`): :func:`job_for` builds the
:class:`~grader.isolation.judge.judge_job.JudgeJob` for a group of problems that share the learner's
cells (with the reference solution's cells where ``source/`` is at hand), :func:`subject_deadline_s`
and :func:`judge_timeout` say how long its subject and its judge may take, and :func:`run_job` has a
judge process grade it. Used by the notebook's self-check (:mod:`grader.isolation.check`) and by
``make grade`` (:mod:`grader.cohort.scoring`) alike.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from grader.checks.results import NEEDS_A_REFERENCE, ProblemResult, Status
from grader.isolation.judge.judge_job import BUILD_REFERENCES, GRADE, JudgeJob, JudgeReply
from grader.isolation.judge.reference_cells import reference_cells
from grader.isolation.sandbox.process import DEFAULT_MEMORY_BYTES
from grader.isolation.cells.source import Cell
from grader.problems import Problem, get_problem


@dataclasses.dataclass(frozen=True)
class JobSettings:
    """How a judge's job is made: each option of :func:`job_for` (and of the notebook's
    ``evaluate``, ``check`` and ``run_test``, :class:`grader.isolation.check.EvaluateSettings`),
    with its default, declared once. Every function that takes ``settings`` also takes these
    fields as keywords (``reference="off"``)."""

    # 'auto': the reference solutions are measured where ``source/`` is at hand (an
    # instructor's machine); 'off': the shipped self-check floors only.
    reference: str = "auto"
    # The device the learner's code runs and is timed on (default: the best one here,
    # grader.checks.targets.default_device).
    device: str | None = None
    # The seconds the speed check may spend timing (default: the problem's ``budget_s``).
    budget_s: float | None = None
    # The subject's deadline (default: subject_deadline_s of the job's problems).
    timeout_s: float | None = None
    # 'auto', 'bwrap' (required) or 'off' (grader.isolation.sandbox.process.probe).
    sandbox: str = "auto"
    # The module of the problem set (default: grader.problems.<assignment>).
    problem_module: str | None = None
    # The course's root, whose ``source/`` holds the reference solutions.
    course_root: str | None = None
    # An isolation already probed (a grading run probes once), else probed per ``sandbox``.
    isolation: Any = None
    # Only the grader's own tests turn the screen off, to attack what stands behind it.
    screen: bool = True
    # The subject's address-space limit on CPU (``make grade --memory-gb``; default:
    # grader.isolation.sandbox.process.DEFAULT_MEMORY_BYTES).
    memory_bytes: int | None = None

    @classmethod
    def made(cls, settings: "JobSettings | None" = None, **options) -> "JobSettings":
        """``settings`` (default: every default) with the fields named in ``options`` replaced;
        an unknown name is a ``TypeError``."""
        return dataclasses.replace(settings if settings is not None else cls(), **options)


def job_for(keys: list[str], learner: list[Cell], settings: JobSettings | None = None, *,
            checks: dict[str, list[str]] | None = None, op: str = GRADE,
            measured_jobs: dict | None = None, subjects_ahead: int = 1,
            **options) -> JudgeJob:
    """The judge's job for problems ``keys`` that share the learner's cells ``learner``
    (:meth:`grader.isolation.judge.steps.Judge.grade`), made as ``settings`` and the
    :class:`JobSettings` fields in ``options`` say: the reference solutions come from
    ``source/`` when it is at hand and ``reference`` is 'auto'. ``checks``: the checks wanted of
    each problem (default: all). ``op``: ``"build references"`` builds the reference side ahead
    of the first submission instead, with the planning questions' ``measured_jobs`` when another
    judge measured them. ``subjects_ahead``: the subjects to keep waiting for the next jobs
    (:attr:`JudgeJob.subjects_ahead`)."""
    from grader.checks.targets import default_device

    s = JobSettings.made(settings, **options)
    problems = [get_problem(k, s.problem_module) for k in keys]
    refs = {}
    for problem in problems:
        wanted = (checks or {}).get(problem.key, problem.checks)
        # The reference times the speed check and sizes the judge's budget for a learner's graph.
        if s.reference == "auto" and problem.needs(wanted) & set(NEEDS_A_REFERENCE):
            cells = reference_cells(problem, s.course_root)
            if cells:
                refs[problem.key] = tuple(cells)
    return JudgeJob(
        problems=tuple(keys), device=s.device or default_device(),
        timeout_s=float(s.timeout_s or subject_deadline_s(problems)),
        learner_cells=tuple(learner), reference_cells=refs, problem_module=s.problem_module,
        budget_s=s.budget_s, sandbox=s.sandbox, isolation=s.isolation, screen=s.screen,
        checks={k: tuple(names) for k, names in (checks or {}).items()},
        memory_bytes=int(s.memory_bytes) if s.memory_bytes is not None
        else DEFAULT_MEMORY_BYTES,
        op=op, measured_jobs=dict(measured_jobs or {}), subjects_ahead=subjects_ahead)


# The subject's deadline where the references were built on this machine (make grade,
# Gradescope), rather than a flat 300 s: three times the slowest of what loading and compiling the set's
# references took the judge (make grade's BuiltReferences.reference_s: the reference loaded, its
# graph captured and compiled with Inductor, the baseline compiled; for a planning question its
# slowest cold first call). An honest subject does less (start, load, call, capture, count
# compiles; no Inductor): on 2 loaded cores it took 0.1-0.4 of that in ps1, ps2 and ps4-ps7
# (make bench-grade, 2026-12), but a correct solution that Dynamo traces slowly (ps2's dee_slow,
# a per-row loop: 29-75 s of tracing) took 65 s against twice a 34 s build on a machine loaded
# by other work, and lost points it had earned. Three times grows with a slower machine and still
# makes an endless loop cost one short deadline (ps1's is the floor). The floor keeps room for the
# subject's own start (an interpreter and torch: seconds on a quiet core, more on a loaded one)
# where the references build fast.
SUBJECT_DEADLINE_FACTOR = 3.0
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



def judge_timeout(job: JudgeJob) -> float:
    """How long a judge may take for ``job``: the subject's time, the timing budgets, and the
    first build of the reference side (compiles)."""
    budgets = sum(max(45.0, 3 * get_problem(k, job.problem_module).budget_s)
                  for k in job.problems)
    return float(job.timeout_s) + budgets + 600.0


def run_job(job: JudgeJob, judge=None) -> dict[str, dict]:
    """Grade ``job`` with ``judge`` (a :class:`grader.isolation.judge.judge_process.JudgeProcess`;
    by default a new one, for this job only); returns ``{key: result dict}``. A judge that fails
    makes a grader-error result for each problem, with the reason."""
    from grader.isolation.judge.judge_process import JudgeProcess

    own = judge is None
    judge = judge or JudgeProcess()
    try:
        reply = judge.grade(job, judge_timeout(job))
    finally:
        if own:
            judge.close()
    if reply.error:
        failed = ProblemResult(Status.GRADER_ERROR, message=f"the judge failed: {reply.error}")
        return {k: dataclasses.replace(failed, problem=k).to_dict() for k in job.problems}
    missing = ProblemResult(Status.GRADER_ERROR, message="the judge sent no result")
    return {k: (reply.results.get(k) or dataclasses.replace(missing, problem=k)).to_dict()
            for k in job.problems}


def build_references_job(keys: list[str], course_root: str, *, device: str | None = None,
                         measured_jobs: dict | None = None) -> JudgeJob:
    """The job that builds the reference side of ``keys`` (no learner cells)."""
    return job_for(keys, [], course_root=course_root, device=device, op=BUILD_REFERENCES,
                   measured_jobs=measured_jobs)
