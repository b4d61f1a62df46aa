"""nbgrader's autograde of one judged submission, without running it: the graded notebook is the
submission as submitted, with the judge's verdicts in its test cells.

During ``make grade`` every point is decided before nbgrader starts (:mod:`grader.cohort.scoring`:
the judge, a process that never runs learner code, and the subject, the only process that does).
nbgrader then only has to record those points and build the notebook the feedback shows, so
:func:`autograde` runs nbgrader's own ``Autograde`` converter (its sanitizing steps, its gradebook
writer, its late penalties) as ``nbgrader autograde --no-execute`` does, with the execute step
replaced:

- :class:`ShowJudgedVerdicts` (where nbgrader's ``Execute`` was) gives every autograded test cell
  the judge's verdicts as its output (every check with its figures, the learner's line, the hint)
  in the form nbgrader scores: nothing more for full points, the points as the cell's value for
  partial credit, an error for none. A solution cell whose code did not run to the end in the
  subject (it never returned, killed its process, raised, was refused) says so under the cell.
  The learner's own saved outputs stay, marked as theirs;
- nbgrader's ``SaveAutoGrades`` then scores the cells from those outputs, as it would after
  running them, and :class:`FlagJudgedReviews` flags the inconclusive ones for a person and
  stops if any score differs from the judge's (a grader bug: the submission is then reported
  as not graded, never silently scored);
- nbgrader's late penalty (``AssignLatePenalties``) and its checks follow, as in its own chain.

These steps are set here, whatever the course's ``nbgrader_config.py`` says about autograde
(that is Formgrader's chain, which runs the notebook): a course config without them would score
the learner's own saved outputs. Everything else in that file (late penalties, output limits)
applies.

It runs in the driver (:func:`grader.cohort.grade.autograde_all`), one submission at a time just
before its merge: nbgrader is already imported there (a process of its own would spend seconds
importing it for each submission), and its converter changes the process's working folder while
it works (every path of the grader is absolute).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time

from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Unicode

from grader import _files as files
from grader.cohort import assign
from grader.cohort.attempt import Attempt
from grader.cohort.collect import Submission
from grader.cohort.scoring import JudgedScores
from grader.isolation.cells.source import is_autograded_test_cell, nbgrader_meta

# What marks the learner's own outputs in the graded notebook: they come from the learner's run
# on their own machine (self-check compares with shipped floors there), and nothing of them counts.
SAVED_OUTPUT_NOTE = "Output saved in your notebook when you ran it (not the grader's):"
NOT_DECLARED = ("[FAIL] {grade_id}: this test cell is not declared in the problem set's "
                "TEST_CELLS, so it scores 0")
WHILE_GRADING = ("While grading (your notebook itself is not run: the grader runs this cell's "
                 "code in a process of its own):")


def verdict_outputs(score: dict, execution_count=None) -> list[NotebookNode]:
    """A test cell's outputs for a judged score (``CellScore`` as a dict), in the form nbgrader's
    ``determine_grade`` reads: the verdicts as text; then the points as the cell's value when they
    are neither all nor none (or the cell is a partial-credit one), an error when they are none."""
    points, max_points = float(score["points"]), float(score["max_points"])
    outputs = [NotebookNode(output_type="stream", name="stdout", text=score["text"] + "\n")]
    if score.get("partial") or 0.0 < points < max_points:
        value = f"{points:g}" if float(f"{points:g}") == points else repr(points)
        outputs.append(NotebookNode(output_type="execute_result", execution_count=execution_count,
                                    metadata={}, data={"text/plain": value}))
    elif points < max_points:
        failure = score.get("failure") or "failed"
        outputs.append(NotebookNode(output_type="error", ename="CheckFailed", evalue=failure,
                                    traceback=[f"CheckFailed: {failure}"]))
    return outputs


def saved_output_note() -> NotebookNode:
    return NotebookNode(output_type="display_data", metadata={}, data={
        "text/plain": SAVED_OUTPUT_NOTE, "text/html": f"<p><i>{SAVED_OUTPUT_NOTE}</i></p>"})


def solution_note(note: str) -> NotebookNode:
    """What stopped a solution cell's code in the subject, as an error under the cell."""
    return NotebookNode(output_type="error", ename="WhileGrading", evalue=note,
                        traceback=[WHILE_GRADING, *note.splitlines()])


class JudgedStep(NbGraderPreprocessor):
    """An autograde step that reads the submission's judged scores."""

    judged_scores_file = Unicode(help="the judged scores (grader.cohort.scoring.JudgedScores."
                                      "save)").tag(config=True)

    def judged(self) -> JudgedScores:
        # Through the file's one reader; a file it cannot read stops the autograde (the
        # grader's failure, never a zero for the learner).
        judged = JudgedScores.load(self.judged_scores_file)
        if judged is None:
            raise ValueError(f"the grader's bug: no judged scores could be read from "
                             f"{self.judged_scores_file}")
        return judged


class ShowJudgedVerdicts(JudgedStep):
    """The judge's verdicts on the test cells, what stopped a solution cell's code under it, the
    learner's saved outputs marked as theirs: in place of running the notebook."""

    def preprocess(self, nb, resources):
        judged = self.judged()
        cells = judged.cells
        notes = {grade_id: solution.get("note") for grade_id, solution in
                 judged.solutions.items() if solution.get("note")}
        for cell in nb.cells:
            if cell.get("cell_type") != "code":
                continue
            meta = nbgrader_meta(cell)
            if is_autograded_test_cell(cell):
                score = cells.get(meta["grade_id"]) or {
                    "points": 0.0, "max_points": float(meta.get("points", 0)),
                    "text": NOT_DECLARED.format(grade_id=meta["grade_id"])}
                cell.outputs = verdict_outputs(score, cell.get("execution_count"))
                continue
            if cell.get("outputs"):
                cell.outputs = [saved_output_note(), *cell.outputs]
            note = notes.get(meta.get("grade_id")) if meta.get("solution") else None
            if note:
                cell.outputs = [*cell.get("outputs", []), solution_note(note)]
        return nb, resources


class FlagJudgedReviews(JudgedStep):
    """After nbgrader's ``SaveAutoGrades``: a test cell whose verdict was inconclusive is flagged
    for a person (nbgrader: needs manual grade), as is one a person already scored; a score that
    is not the judge's stops the autograde (:func:`autograde` reports it as the grader's bug)."""

    def preprocess(self, nb, resources):
        cells = self.judged().cells
        db = resources["nbgrader"]
        from nbgrader.api import Gradebook

        with Gradebook(db["db_url"]) as gb:
            for cell in nb.cells:
                if not is_autograded_test_cell(cell):
                    continue
                grade_id = nbgrader_meta(cell)["grade_id"]
                grade = gb.find_grade(grade_id, db["notebook"], db["assignment"], db["student"])
                score = cells.get(grade_id) or {"points": 0.0}
                if grade.auto_score is None or abs(grade.auto_score - float(score["points"])) > 1e-9:
                    raise ValueError(f"the grader's bug: nbgrader scored test cell {grade_id} "
                                     f"{grade.auto_score} from its verdicts, the judge "
                                     f"{score['points']}")
                grade.needs_manual_grade = grade.manual_score is not None or bool(score.get("review"))
            gb.db.commit()
        return nb, resources


def autograde_steps() -> list:
    """nbgrader's own autograde chain, its execute step replaced by :class:`ShowJudgedVerdicts`
    and :class:`FlagJudgedReviews` right after ``SaveAutoGrades`` (before the late penalty, which
    must see the final score)."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute, SaveAutoGrades

    steps = []
    for step in Autograde.class_traits()["autograde_preprocessors"].default():
        steps.append(ShowJudgedVerdicts if step is Execute else step)
        if step is SaveAutoGrades:
            steps.append(FlagJudgedReviews)
    return steps


def autograde(course: str, sub: Submission, folder: str) -> str | None:
    """nbgrader's autograde of ``sub`` in ``folder``, which holds its judged scores
    (:data:`grader._files.JUDGED_SCORES_FILE`): a grading copy of ``course`` is made there
    (its ``nbgrader_config.py`` and gradebook, the set's ``source/``, the submission), then graded;
    nbgrader's log goes to :data:`grader._files.AUTOGRADE_LOG`. Returns why it could not be
    graded, or None."""
    from nbgrader.converters import Autograde
    from nbgrader.coursedir import CourseDirectory
    shutil.copy(os.path.join(course, files.NBGRADER_CONFIG), folder)
    shutil.copy(os.path.join(course, files.GRADEBOOK), os.path.join(folder, files.GRADEBOOK))
    shutil.copytree(os.path.join(course, files.SOURCE, sub.assignment),
                    os.path.join(folder, files.SOURCE, sub.assignment))
    shutil.copytree(sub.folder, os.path.join(folder, files.SUBMITTED, sub.student, sub.assignment))
    log = logging.getLogger("grader.autograde")   # one submission at a time: one file handler
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = logging.FileHandler(os.path.join(folder, files.AUTOGRADE_LOG))
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    log.addHandler(handler)
    try:
        config = assign.course_config(folder)
        config.Autograde.autograde_preprocessors = autograde_steps()
        config.ClearOutput.enabled = False      # nbgrader's --no-execute: keep the saved outputs
        config.JudgedStep.judged_scores_file = os.path.join(folder, files.JUDGED_SCORES_FILE)
        coursedir = CourseDirectory(config=config, root=folder, assignment_id=sub.assignment,
                                    student_id=sub.student)
        with assign.CONVERTING:
            Autograde(coursedir=coursedir, config=config, log=log, force=True).start()
        return None
    except Exception as exc:  # nbgrader's NbGraderException (logged), our bug check, a bad config
        log.exception("autograde failed")
        return f"nbgrader could not autograde this submission: {type(exc).__name__}: {exc}"
    finally:
        log.removeHandler(handler)
        handler.close()


def autograde_attempt(course: str, sub: Submission, attempt: Attempt) -> Attempt:
    """A judged attempt with nbgrader's autograde done in its grading copy (:func:`autograde`),
    its seconds added (phase "nbgrader autograde"); an attempt that failed is returned as is."""
    if attempt.failure is not None or not attempt.folder:
        return attempt
    started = time.monotonic()
    failure = autograde(course, sub, attempt.folder)
    seconds = time.monotonic() - started
    return dataclasses.replace(attempt, failure=failure, seconds=attempt.seconds + seconds,
                               phases={**attempt.phases, "nbgrader autograde": round(seconds, 3)})
