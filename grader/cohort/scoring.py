"""Grade one submission where learner code never runs: what ``make grade`` credits.

For a submitted notebook this process (the trusted parent)

1. reads the learner's solution cells from the ``.ipynb`` (by their nbgrader ``grade_id``);
2. screens them (:mod:`grader.isolation.cells.screen`), then has the judge grade every problem of
   the set (:mod:`grader.isolation.judge.steps`: a process that never runs learner code; the
   learner's code runs in a sandboxed subject that answers its requests), against the reference
   solution from the instructor's ``source/``;
3. scores every autograded test cell from the problem set's ``TEST_CELLS``
   (:func:`grader.isolation.cell_scores.score_cell`) from the judge's verdicts;
4. writes it all to one JSON file: the points and text of each test cell, each problem's result,
   and for each solution cell the subject's deadline and what stopped its code, if anything
   (what the graded notebook shows, and the cohort report reads).

nbgrader then records these points and shows these verdicts in the submitted notebook, which it
does not run (:mod:`grader.cohort.judged_autograde`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable

from grader.checks.jobs import JobFigures
from grader.checks.results import NEEDS_A_REFERENCE, ProblemResult, Status
from grader.isolation.cell_scores import CellScore, Evaluation, score_cell
from grader.problems import get_problem, public_names, test_cells
from grader.isolation.cells.source import is_autograded_test_cell, nbgrader_meta, solution_cells


@dataclasses.dataclass
class JudgedScores:
    """Everything the judge decided for one submission, scored per test cell."""

    assignment: str
    problems: dict        # key -> verified result
    cells: dict           # grade_id -> CellScore as a dict
    seconds: dict         # key -> seconds the judge took for it
    sandbox: str
    # solution grade_id -> {"problems": [...], "deadline_s": the subject's, "note": what stopped
    # the cell's code ('' when nothing did)}
    solutions: dict = dataclasses.field(default_factory=dict)

    def phases(self) -> dict:
        """Seconds by step, summed over the problems' workers ("worker start", "baseline and
        reference", "learner cells", "check speed", ...), plus each worker's total."""
        out: dict = {}
        for key, result in self.problems.items():
            for name, seconds in (result.get("phases") or {}).items():
                if isinstance(seconds, (int, float)):
                    out[name] = round(out.get(name, 0.0) + seconds, 3)
            out[f"judge {key}"] = self.seconds.get(key, 0.0)
        return out

    @property
    def points(self) -> float:
        return sum(c["points"] for c in self.cells.values())

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path: str) -> None:
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh, default=str)

    @classmethod
    def load(cls, path: str) -> "JudgedScores | None":
        """What :meth:`save` wrote (``None`` when the file is missing or not this format): the
        one reader of a submission's judged scores (nbgrader's judged autograde, the report, the
        demo's check of its expected scores)."""
        try:
            with open(path) as fh:
                data = json.load(fh)
            # Missing parts read as empty: a file cut short still shows what it holds.
            return cls(str(data.get("assignment") or ""), dict(data.get("problems") or {}),
                       dict(data.get("cells") or {}), dict(data.get("seconds") or {}),
                       str(data.get("sandbox") or ""), dict(data.get("solutions") or {}))
        except (OSError, ValueError, AttributeError, TypeError):
            return None

    def problem_results(self) -> list[ProblemResult]:
        """Each problem's result, typed."""
        return [ProblemResult.from_dict({**result, "problem": key})
                for key, result in self.problems.items()]

    def cell_scores(self) -> dict[str, CellScore]:
        """Each test cell's score, typed, by ``grade_id``."""
        return {grade_id: CellScore.from_dict(cell) for grade_id, cell in self.cells.items()
                if isinstance(cell, dict)}


def problems_of(assignment: str) -> list[str]:
    """The problem keys a set's test cells are scored on, in declaration order."""
    keys: list[str] = []
    for cell in test_cells(assignment).values():
        keys += [k for k in cell.problems if k not in keys]
    return keys


def groups_of(assignment: str, module: str | None = None) -> list[list[str]]:
    """The problems a set's test cells are scored on, grouped by the solution cell they read:
    each group is graded with one subject process (problems of one question share it)."""
    groups: dict[str, list[str]] = {}
    for key in problems_of(assignment):
        groups.setdefault(get_problem(key, module).solution_grade_id, []).append(key)
    return list(groups.values())


@dataclasses.dataclass
class BuiltReferences:
    """What building a set's reference side in a judge gave (:func:`build_references`)."""

    seconds: dict = dataclasses.field(default_factory=dict)        # problem -> seconds it took
    measured_jobs: dict = dataclasses.field(default_factory=dict)  # planning question -> figures
    error: str | None = None   # the judge failed: each submission then meets the failure itself

    @property
    def reference_s(self) -> float | None:
        """What loading and compiling the set's reference took the judge on this machine, from
        which its subjects' deadlines follow
        (:func:`grader.isolation.judge.judging.subject_deadline_s`): the slowest of each timed
        problem's reference side (the reference loaded, its graph captured and compiled, the
        baseline compiled) and each planning question's slowest cold first call (a compile of the
        given model); None when nothing was built. Read it from the run's first judge: the others
        compile from its cache."""
        figures = [float(s) for key, s in self.seconds.items() if key not in self.measured_jobs]
        figures += [max(map(float, f["first_call_s"].values()))
                    for f in self.measured_jobs.values() if f.get("first_call_s")]
        return max(figures) if figures else None


def build_references(assignment: str, course: str, judge, *, device: str | None = None,
                     measured_jobs: dict | None = None) -> BuiltReferences:
    """Build each timed problem's baseline and reference in ``judge`` (a running
    :class:`grader.isolation.judge.judge_process.JudgeProcess`) before the first submission. A
    planning question's figures (ps3 q1's cost of each mode) are measured by the run's first judge
    and handed to the others as ``measured_jobs`` (its :attr:`BuiltReferences.measured_jobs`): every
    submission of a run is judged on the same figures, and they are measured once, not once per
    worker or Ray task."""
    from grader.isolation.judge import judging

    keys = [k for k in problems_of(assignment)
            if get_problem(k).needs() & set(NEEDS_A_REFERENCE)]
    if not keys:
        return BuiltReferences()
    job = judging.build_references_job(keys, course, device=device, measured_jobs=measured_jobs)
    reply = judge.grade(job, judging.judge_timeout(job))
    if reply.error or not reply.built:
        return BuiltReferences(error=(reply.error or "the judge built no reference")[:500])
    return BuiltReferences(dict(reply.built), dict(reply.measured_jobs))


def yardstick(key: str, figures: dict, kept: bool = False, where: str = "this machine") -> str:
    """A planning question's figures of the run (what every submission's hidden jobs are judged
    on), in a line: the break-even, its spread over the rounds, how long measuring took, and
    whether this run measured them or an earlier one on ``where`` did (``kept``)."""
    try:
        measured = JobFigures.from_dict(figures, get_problem(key).plan.modes)
    except (KeyError, ValueError) as exc:
        return f"no usable figures ({exc})"
    said = f"{measured.summary()}; " + (
        f"measured in {measured.seconds:.0f} s by {where}'s first run, kept with the "
        f"compiler cache (the same for every run here)" if kept else
        f"measured once for the run in {measured.seconds:.0f} s")
    return said + (f"\n  HELD: {measured.unfit}" if measured.unfit else "")


def _scores(assignment: str, evaluations: dict) -> dict:
    """Every test cell whose problems have all been evaluated, scored (grade_id -> CellScore as
    a dict); the others are left out."""
    return {grade_id: score_cell(cell, evaluations).to_dict()
            for grade_id, cell in test_cells(assignment).items()
            if all(key in evaluations for key in cell.problems)}


def subject_deadlines(assignment: str, reference_s: float | None) -> dict[str, float]:
    """The subject's deadline (seconds) for each solution cell of ``assignment`` (one group of
    problems), from what building the set's references took (``reference_s``, None: not
    measured): :func:`grader.isolation.judge.judging.subject_deadline_s`."""
    from grader.isolation.judge import judging

    return {get_problem(keys[0]).solution_grade_id:
            judging.subject_deadline_s([get_problem(k) for k in keys], reference_s)
            for keys in groups_of(assignment)}


def solution_note(results: dict, deadline_s: float) -> str:
    """What stopped a solution cell's code in the subject, for the learner to read under that cell
    ('' when nothing did): the judge's message for each of the cell's problems that did not run to
    the end (an endless loop, a process that died, an exception, code refused before it ran), each
    message once."""
    messages: dict[str, list[str]] = {}
    for key, result in results.items():
        status = result.get("status")
        if status == Status.OK:
            continue
        text = str(result.get("message") or status)
        if status == Status.TIMEOUT:
            text += f" after {deadline_s:.0f} s"
        messages.setdefault(text, []).append(key)
    return "\n".join(f"{', '.join(keys)}: {text}" for text, keys in messages.items())


def grade_notebook(notebook: str, assignment: str, course: str, *, sandbox: str = "auto",
                   device: str | None = None, timeout_s: float | None = None,
                   reference_s: float | None = None, memory_bytes: int | None = None,
                   judge=None, isolation=None, screen: bool = True,
                   measured_jobs: dict | None = None,
                   progress: Callable[[JudgedScores], None] | None = None) -> JudgedScores:
    """Measure and score ``notebook`` (a submission of ``assignment``) against the reference
    solutions in ``course``/source. Raises ``ValueError`` when the file is not a notebook.
    ``judge``: a running :class:`grader.isolation.judge.judge_process.JudgeProcess` (a grading run
    keeps one per worker, its references built; by default one is started for this notebook, and
    builds them first). ``timeout_s``: the subject's deadline per solution cell; by default it
    follows ``reference_s`` (:attr:`BuiltReferences.reference_s`, measured by building the
    references when not given; :func:`grader.isolation.judge.judging.subject_deadline_s`).
    ``memory_bytes``: the subject's address-space limit on CPU (``--memory-gb``).
    ``measured_jobs``: the run's figures for the set's planning questions
    (:attr:`BuiltReferences.measured_jobs`), carried by every job so that a judge that builds the
    references inside a job (a fresh one after a restart) judges on them instead of measuring
    its own. ``screen``: only
    the grader's own tests turn the screen off, to attack what stands behind it. ``progress``:
    called after each group of problems (one solution cell) with the result so far, in which only
    the test cells whose problems are all graded appear (Gradescope's run_autograder writes it
    out)."""
    from grader.isolation.judge import judging
    from grader.isolation.cells.screen import describe, screen_cells
    from grader.isolation.judge.judge_job import MAX_SUBJECTS_AHEAD
    from grader.isolation.judge.judge_process import JudgeProcess

    own = judge is None
    judge = judge or JudgeProcess()
    problems, seconds, evaluations, sandbox_used, solutions = {}, {}, {}, "none", {}
    try:
        if timeout_s is None and reference_s is None:
            reference_s = build_references(assignment, course, judge, device=device,
                                           measured_jobs=measured_jobs).reference_s
        deadlines = subject_deadlines(assignment, reference_s)
        groups = groups_of(assignment)
        # One subject per solution cell: where a submission has two jobs or more, the judge
        # keeps two waiting, so the second job does not wait for one the first job started.
        ahead = min(len(groups), MAX_SUBJECTS_AHEAD)
        for keys in groups:
            first = get_problem(keys[0])
            cells = solution_cells(notebook, [first.solution_grade_id])
            deadline_s = timeout_s or deadlines[first.solution_grade_id]
            started = time.monotonic()
            refusals = screen_cells(cells, first.allowed_config,
                                    public_names(first)) if screen else []
            if refusals:  # refused before anything runs (the judge would refuse it too)
                results = {k: {"status": Status.REFUSED, "problem": k,
                               "message": describe(refusals)} for k in keys}
            else:
                job = judging.job_for(keys, cells, course_root=course, sandbox=sandbox,
                                    device=device, timeout_s=deadline_s, isolation=isolation,
                                    screen=screen, memory_bytes=memory_bytes,
                                    measured_jobs=measured_jobs, subjects_ahead=ahead)
                results = judging.run_job(job, judge)
            for key in keys:
                seconds[key] = round((time.monotonic() - started) / len(keys), 2)
                evaluations[key] = Evaluation(get_problem(key), results[key])
                problems[key] = results[key]
                sandbox_used = results[key].get("sandbox") or sandbox_used
            solutions[first.solution_grade_id] = {
                "problems": list(keys), "deadline_s": deadline_s,
                "note": solution_note({k: results[k] for k in keys}, deadline_s)}
            if progress is not None:
                progress(JudgedScores(assignment, dict(problems), _scores(assignment, evaluations),
                                      dict(seconds), sandbox_used, dict(solutions)))
    finally:
        if own:
            judge.close()
    return JudgedScores(assignment, problems, _scores(assignment, evaluations), seconds,
                        sandbox_used, solutions)


def declared_test_cells_problems(source_notebook: str, assignment: str) -> list[str]:
    """Why the notebook's autograded test cells and the set's ``TEST_CELLS`` disagree (empty
    when every test cell is declared with its points): checked before grading anyone."""
    with open(source_notebook, encoding="utf-8") as fh:
        nb = json.load(fh)
    declared = test_cells(assignment)
    problems, seen = [], set()
    for cell in nb["cells"]:
        if not is_autograded_test_cell(cell):
            continue
        meta = nbgrader_meta(cell)
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



def held_for_review(course: str, submission) -> list[str]:
    """The test cells of ``submission`` (graded into ``course``) held for a person: a grader
    error, or a verdict this machine's noise left undecided. They score 0, or a share, until
    someone grades them by hand (Formgrader: needs manual grade)."""
    from grader import _files as files

    judged = JudgedScores.load(os.path.join(files.autograded_dir(course, submission.student,
                                                                 submission.assignment),
                                            files.RESULTS_FILE))
    if not judged:
        return []
    return [grade_id for grade_id, cell in judged.cell_scores().items() if cell.review]
