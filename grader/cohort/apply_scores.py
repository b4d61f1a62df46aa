"""nbgrader step: the judged points replace what the notebook's kernel scored.

During ``make grade`` the points of every autograded test cell are decided by the judge
and scored (:mod:`grader.cohort.scoring`), in a process that never ran learner code; the kernel only
displays them. This step runs in nbgrader's own process right after ``SaveAutoGrades`` (which
recorded what the kernel's outputs scored) and before ``AssignLatePenalties`` (which must see
the real score):

- each test cell's ``auto_score`` in the gradebook becomes the judged points;
- its outputs in the graded notebook (and so in the feedback) become the judge's verdicts and
  figures; where the kernel's own output or score differed, a note says so, and the difference
  is recorded for the cohort report.

Without ``COURSE_JUDGED_SCORES_FILE`` (Formgrader's autograde, ``nbgrader validate``) it does nothing.
"""
from __future__ import annotations

import json
import os

from nbformat.notebooknode import NotebookNode
from nbgrader.api import Gradebook
from nbgrader.preprocessors import NbGraderPreprocessor

from grader.cohort import files
from grader.isolation.source import is_autograded_test_cell
from grader import _environment as environment

JUDGED_SCORES_FILE_ENV = environment.JUDGED_SCORES_FILE
DISAGREED = ("Note: your notebook's own test output disagreed with the grader's measurement "
             "(it showed {shown}); the grade above is the grader's.")


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


class ApplyJudgedScores(NbGraderPreprocessor):
    """Put the judged points and verdicts on every declared test cell."""

    def preprocess(self, nb, resources):
        path = os.environ.get(JUDGED_SCORES_FILE_ENV)
        if not path:
            return nb, resources
        with open(path) as fh:
            self.judged = json.load(fh)
        self.disagreements: list[dict] = []
        db = resources["nbgrader"]
        with Gradebook(db["db_url"]) as gb:
            for cell in nb.cells:
                if is_autograded_test_cell(cell):
                    self._apply(gb, cell, db)
            gb.db.commit()
        record = os.environ.get(JUDGED_SCORES_FILE_ENV) + files.DISAGREEMENTS_SUFFIX
        with open(record, "w") as fh:
            json.dump(self.disagreements, fh)
        return nb, resources

    def _apply(self, gb: Gradebook, cell, db: dict) -> None:
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        grade = gb.find_grade(grade_id, db["notebook"], db["assignment"], db["student"])
        scored = self.judged.get("cells", {}).get(grade_id)
        if scored is None:
            scored = {"points": 0.0, "text": f"[FAIL] {grade_id}: this test cell is not declared "
                                             f"in the problem set's TEST_CELLS, so it scores 0"}
        kernel_points, kernel_text = grade.auto_score, _stdout(cell).strip()
        grade.auto_score = float(scored["points"])
        # nbgrader's own rule: a cell a grader scored by hand stays flagged for review; and a cell
        # whose verdict was inconclusive is flagged for one (it is not paid silently).
        grade.needs_manual_grade = grade.manual_score is not None or bool(scored.get("review"))
        text = scored["text"]
        # A different score, or verdicts printed that are not the grader's (a cell that raised
        # before printing anything, e.g. on a missing class, claims nothing).
        differs = kernel_points is None or abs(float(kernel_points) - grade.auto_score) > 1e-9 \
            or (kernel_text and kernel_text != scored["text"].strip())
        if differs:
            shown = f"{kernel_points:g} points" if kernel_points is not None else "no score"
            text += "\n\n" + DISAGREED.format(shown=shown)
            self.disagreements.append({"grade_id": grade_id, "kernel_points": kernel_points,
                                       "points": grade.auto_score})
        cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=text + "\n")]
        if scored.get("partial"):
            cell.outputs.append(NotebookNode(
                output_type="execute_result", execution_count=cell.get("execution_count"),
                metadata={}, data={"text/plain": f"{grade.auto_score:g}"}))
        elif grade.auto_score < float(scored.get("max_points", grade.max_score)):
            failure = scored.get("failure") or "failed"
            cell.outputs.append(NotebookNode(
                output_type="error", ename="CheckFailed", evalue=failure,
                traceback=[f"CheckFailed: {failure}"]))
