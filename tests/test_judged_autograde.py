"""nbgrader's autograde of a judged submission (grader.cohort.judged_autograde), which runs
nothing of the notebook, and the subject's deadline that follows the references
(grader.cohort.scoring, grader.isolation.judge.judging.subject_deadline_s).

The nbgrader step is tested on ps2's course with judged scores written here (what the judge's
scoring saves, grader.cohort.scoring.JudgedScores), so every kind of test cell is covered in
seconds: full points, none, partial credit, an inconclusive verdict for review. How the scores
are decided is tested through the judge in tests/test_grade.py and tests/test_problem_sets.py.
"""
from __future__ import annotations

import dataclasses
import json
import os

import nbformat
import pytest

from grader import _files as files
from grader.cohort import demo
from grader.cohort.collect import Submission
from grader.cohort.judged_autograde import SAVED_OUTPUT_NOTE, WHILE_GRADING, autograde
from grader.cohort.merge import Graded, merge
from grader.cohort.scoring import BuiltReferences, grade_notebook, subject_deadlines
from grader.isolation.judge import judging
from grader.isolation.judge.judge_job import BUILD_REFERENCES, JudgeReply
from grader.checks.results import ProblemResult
from grader.problems import get_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PS = "ps2"
NOTE = "ps2.q1: your code did not finish in time (an endless loop, or far too slow)"
# One of each kind of test cell (ps2: correctness 3, fusion 4, speed 3 points, partial credit).
JUDGED_CELLS = {
    "ps2-q1-correctness": {"grade_id": "ps2-q1-correctness", "points": 3.0, "max_points": 3.0,
                           "partial": False, "text": "[PASS] ps2.q1 outputs match the original"},
    "ps2-q1-fusion": {"grade_id": "ps2-q1-fusion", "points": 0.0, "max_points": 4.0,
                      "partial": False, "text": "[FAIL] ps2.q1 kernel count\n    17 kernels",
                      "failure": "ps2.q1: kernel count failed"},
    "ps2-q1-speed": {"grade_id": "ps2-q1-speed", "points": 1.5, "max_points": 3.0,
                     "partial": True, "text": "[INCONCLUSIVE] ps2.q1 speedup target\n[REVIEW] noisy",
                     "review": True},
}
FORGED = "[PASS] everything (printed by my own run)"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """ps2's course (nbgrader's gradebook holds the set) and one submission whose notebook was
    saved with outputs: its own prints, and test cells claiming full marks."""
    folder = str(tmp_path_factory.mktemp("judged") / "course")
    demo.build_demo_course(ROOT, [PS], folder=folder, cohort={})
    source = nbformat.read(os.path.join(ROOT, "source", PS, f"{PS}.ipynb"), as_version=4)
    release = nbformat.read(os.path.join(folder, "release", PS, f"{PS}.ipynb"), as_version=4)
    nb = demo.personas_for(PS, release, source)["ada_full"]
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("grade") and not meta.get("solution"):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=FORGED),
                            nbformat.v4.new_output("execute_result", data={"text/plain": "4"},
                                                   execution_count=1)]
        else:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="my own run\n")]
    student = os.path.join(folder, files.SUBMITTED, "ann", PS)
    os.makedirs(student)
    nbformat.write(nb, os.path.join(student, f"{PS}.ipynb"))
    from nbgrader.api import Gradebook

    with Gradebook(files.db_url(folder)) as gb:     # as make grade's prepare_gradebook does
        gb.update_or_create_student("ann")
    return folder


def _judged_folder(tmp_path, cells=None) -> str:
    folder = str(tmp_path / "grading")
    os.makedirs(folder)
    with open(os.path.join(folder, files.JUDGED_SCORES_FILE), "w") as fh:
        json.dump({"assignment": PS, "problems": {}, "cells": cells or JUDGED_CELLS,
                   "solutions": {"ps2-q1-solution": {"problems": ["ps2.q1"],
                                                     "deadline_s": 90.0, "note": NOTE}}}, fh)
    return folder


def _sub(course: str) -> Submission:
    return Submission("ann", PS, os.path.join(course, files.SUBMITTED, "ann", PS))


def test_nbgrader_records_the_judged_points_and_shows_the_verdicts_in_the_submission(course, tmp_path):
    from nbgrader.api import Gradebook

    folder = _judged_folder(tmp_path)
    assert autograde(course, _sub(course), folder) is None, open(
        os.path.join(folder, files.AUTOGRADE_LOG)).read()
    with Gradebook(files.db_url(folder)) as gb:
        for grade_id, judged in JUDGED_CELLS.items():
            grade = gb.find_grade(grade_id, PS, PS, "ann")
            assert grade.auto_score == judged["points"], grade_id
            assert grade.needs_manual_grade == bool(judged.get("review")), grade_id
    graded = nbformat.read(os.path.join(files.autograded_dir(folder, "ann", PS), f"{PS}.ipynb"),
                           as_version=4)
    for cell in graded.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        texts = [o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) +
                 o.get("evalue", "") for o in cell.outputs]
        if meta.get("grade") and not meta.get("solution"):      # the judge's, nothing of the run
            assert texts[0].strip() == JUDGED_CELLS[meta["grade_id"]]["text"]
            assert not any(FORGED in t for t in texts)
            continue
        # The learner's own saved output, kept and marked as theirs.
        assert cell.outputs[0].output_type == "display_data"
        assert cell.outputs[0].data["text/plain"] == SAVED_OUTPUT_NOTE
        assert cell.outputs[1].text == "my own run\n"
        if meta.get("grade_id") == "ps2-q1-solution":           # what stopped its code, under it
            assert cell.outputs[-1].output_type == "error" and cell.outputs[-1].evalue == NOTE
            assert cell.outputs[-1].traceback == [WHILE_GRADING, NOTE]
        else:
            assert len(cell.outputs) == 2


def test_the_merged_gradebook_and_feedback_show_the_judged_points(course, tmp_path):
    from grader.cohort import feedback

    folder = _judged_folder(tmp_path)
    assert autograde(course, _sub(course), folder) is None
    outcome = merge(course, _sub(course), folder, None, "digest", seconds=12.3)
    assert outcome.status == "graded" and outcome.score == 4.5 and outcome.seconds == 12.3
    said = []
    feedback.generate_feedback(course, [outcome], log=said.append)   # make grade's own step
    page = open(os.path.join(files.feedback_dir(course, "ann", PS), f"{PS}.html")).read()
    assert NOTE in page and SAVED_OUTPUT_NOTE in page and "17 kernels" in page
    assert "id='course-wrap'" in page and said == []
    # Only what this run graded is rendered again: a page already there is left as it is.
    skipped = dataclasses.replace(outcome, status=Graded.SKIPPED)
    os.remove(os.path.join(files.feedback_dir(course, "ann", PS), f"{PS}.html"))
    feedback.generate_feedback(course, [skipped], log=said.append)
    assert not os.path.exists(os.path.join(files.feedback_dir(course, "ann", PS), f"{PS}.html"))


def test_a_feedback_page_nbgrader_cannot_render_is_said_with_its_reason(course, tmp_path):
    from grader.cohort import feedback

    folder = _judged_folder(tmp_path)
    assert autograde(course, _sub(course), folder) is None
    outcome = merge(course, _sub(course), folder, None, "digest", seconds=1.0)
    # The autograded notebook is gone (a disk cleaned by hand): nbgrader has nothing to render.
    graded = os.path.join(course, files.AUTOGRADED, "ann", PS)
    os.rename(graded, graded + ".away")
    said = []
    try:
        feedback.generate_feedback(course, [outcome], log=said.append)
    finally:
        os.rename(graded + ".away", graded)
    assert len(said) == 1 and said[0].startswith(f"feedback: ann/{PS}: nbgrader could not"), said


def test_a_score_nbgrader_cannot_record_is_reported_not_changed(course, tmp_path):
    cells = dict(JUDGED_CELLS, **{"ps2-q1-speed": dict(JUDGED_CELLS["ps2-q1-speed"], points=5.0)})
    failure = autograde(course, _sub(course), _judged_folder(tmp_path, cells))
    assert failure and "could not autograde" in failure


def test_the_courses_own_autograde_steps_cannot_score_the_saved_outputs(course, tmp_path):
    """The course's nbgrader_config.py names Formgrader's chain; make grade's steps are its own,
    so a config without them (here: nbgrader's bare chain less the execute step) changes nothing."""
    from nbgrader.api import Gradebook

    config = os.path.join(course, files.NBGRADER_CONFIG)
    kept = open(config).read()
    try:
        with open(config, "a") as fh:
            fh.write("\nfrom nbgrader.preprocessors import SaveAutoGrades\n"
                     "c.Autograde.autograde_preprocessors = [SaveAutoGrades]\n")
        folder = _judged_folder(tmp_path)
        assert autograde(course, _sub(course), folder) is None
    finally:
        with open(config, "w") as fh:
            fh.write(kept)
    with Gradebook(files.db_url(folder)) as gb:
        assert gb.find_grade("ps2-q1-fusion", PS, PS, "ann").auto_score == 0.0   # not FORGED's 4


# ---------------------------------------------------------------------------------------------
# The subject's deadline

def test_the_deadline_is_a_few_times_the_references_build_with_a_floor_and_the_old_ceiling():
    problems = [get_problem("ps2.q1")]
    unmeasured = max(300.0, 4 * max(p.budget_s for p in problems))
    assert judging.subject_deadline_s(problems) == unmeasured            # self-check: as before
    assert judging.subject_deadline_s(problems, 40.0) == judging.SUBJECT_DEADLINE_FACTOR * 40.0
    assert judging.subject_deadline_s(problems, 1.0) == judging.SUBJECT_DEADLINE_FLOOR_S
    assert judging.subject_deadline_s(problems, 1e4) == unmeasured
    assert subject_deadlines(PS, 40.0) == {"ps2-q1-solution": judging.SUBJECT_DEADLINE_FACTOR * 40.0}


def test_the_references_measure_is_the_slowest_build_and_a_plans_slowest_first_call():
    built = BuiltReferences({"ps3.q1": 55.0, "ps9.q1": 8.0},
                            {"ps3.q1": {"first_call_s": {"default": 4.0, "max-autotune": 9.5}}})
    # ps3.q1's 55 s measured every mode many times: its figure is one compile, the slowest.
    assert built.reference_s == 9.5
    assert BuiltReferences({"ps1.q1": 12.0}).reference_s == 12.0
    assert BuiltReferences().reference_s is None


class _Judge:
    """Stands in for a JudgeProcess: records the jobs, builds references in ``build_s`` and
    reports every problem stopped at its deadline."""

    def __init__(self, build_s: float):
        self.build_s, self.jobs = build_s, []

    def grade(self, job, timeout_s):
        self.jobs.append(job)
        if job.op == BUILD_REFERENCES:
            return JudgeReply(built={k: self.build_s for k in job.problems})
        return JudgeReply(results={k: ProblemResult(
            "timeout", k, "your code did not finish in time; it was stopped")
            for k in job.problems})


def test_a_submission_is_judged_with_the_measured_deadline_and_the_cell_says_why_it_stopped(course):
    notebook = os.path.join(_sub(course).folder, f"{PS}.ipynb")
    problems = [get_problem("ps2.q1")]
    given = _Judge(build_s=0.0)        # make grade: the run's first judge measured 25 s
    judged = grade_notebook(notebook, PS, course, judge=given, reference_s=25.0)
    deadline = judging.subject_deadline_s(problems, 25.0)
    assert [j.timeout_s for j in given.jobs] == [deadline]
    assert judged.solutions["ps2-q1-solution"] == {
        "problems": ["ps2.q1"], "deadline_s": deadline,
        "note": f"ps2.q1: your code did not finish in time; it was stopped after "
                f"{deadline:.0f} s"}
    own = _Judge(build_s=40.0)         # Gradescope: the references are built, and measured, first
    judged = grade_notebook(notebook, PS, course, judge=own)
    deadline = judging.subject_deadline_s(problems, 40.0)
    assert own.jobs[0].op == BUILD_REFERENCES and own.jobs[1].timeout_s == deadline
    assert judged.solutions["ps2-q1-solution"]["deadline_s"] == deadline


def test_the_judged_scores_file_has_one_reader():
    """Every function of the grader that names the judged-scores file reads it through
    JudgedScores.load (grader.cohort.scoring), never with a json.load of its own: one reader
    means one place that knows the file's form."""
    import ast

    import grader

    names = {"JUDGED_SCORES_FILE", "RESULTS_FILE", "judged_scores_file"}
    package = os.path.dirname(grader.__file__)
    offenders = []
    for folder, _, found in os.walk(package):
        for name in found:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path.endswith(os.path.join("cohort", "scoring.py")):
                continue
            for node in ast.walk(ast.parse(open(path).read())):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                inside = list(ast.walk(node))
                named = any(isinstance(n, (ast.Name, ast.Attribute)) and
                            (getattr(n, "id", None) in names or getattr(n, "attr", None) in names)
                            for n in inside)
                parses = any(isinstance(n, ast.Attribute) and n.attr in ("load", "loads")
                             and isinstance(n.value, ast.Name) and n.value.id == "json"
                             for n in inside)
                if named and parses:
                    offenders.append(f"{os.path.relpath(path, package)}: {node.name}")
    assert not offenders, offenders
