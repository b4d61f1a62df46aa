"""Made-up submissions of problem set 2 (the cheapest to grade) for the attack tests: a notebook
with its solution cell replaced, written where `make grade` collects it, and the scores the
gradebook holds afterwards. Its honest reference points: :data:`PASS_CLASS` (the demo's
dee_slow: fused and correct, but a chain of wasted functions keeps it from the speed target)
earns 7 of 10, so an attack in front of it has the speed cell's 3 points to steal; the given
model unchanged and a blank notebook earn 0.
"""
from __future__ import annotations

import json
import os
import nbformat

from grader.cohort.demo import demo_solutions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PS = "ps2"
# The demo's dee_slow ps2 solution (source/ps2/demo_cohort.py), one definition for both.
PASS_CLASS = demo_solutions(ROOT)["ps2"]["slow"]["ps2-q1-solution"]
HONEST_POINTS = 7


FORGED = "[PASS] everything (an output saved in the notebook)"


def _notebook(release_nb, solution: str | None, extra: str | None, forged: bool = False):
    """The release notebook with ``solution`` in its solution cell and ``extra`` in a cell of its
    own after it; ``forged``: saved with outputs that claim full marks in every test cell."""
    nb = nbformat.from_dict(json.loads(json.dumps(release_nb)))
    for cell in nb.cells if forged else []:
        meta = cell.metadata.get("nbgrader") or {}
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=FORGED),
                            nbformat.v4.new_output("execute_result", execution_count=1,
                                                   data={"text/plain": str(meta["points"])})]
    for index, cell in enumerate(nb.cells):
        if (cell.metadata.get("nbgrader") or {}).get("solution") and cell.cell_type == "code":
            if solution is not None:
                cell.source = solution
            if extra is not None:
                nb.cells.insert(index + 1, nbformat.v4.new_code_cell(extra))
            break
    return nb


def _write(course: str, student: str, nb, timestamp: str = "2026-12-01 12:00:00.000000 UTC"):
    folder = os.path.join(course, "submitted", student, PS)
    os.makedirs(folder, exist_ok=True)
    nbformat.write(nb, os.path.join(folder, f"{PS}.ipynb"))
    with open(os.path.join(folder, "timestamp.txt"), "w") as fh:
        fh.write(timestamp + "\n")


def _scores(course: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + os.path.join(course, "gradebook.db")) as gb:
        return {s.student_id: float(s.score) for s in gb.assignment_submissions(PS)}


def _scores_once_decided(course: str) -> dict[str, float]:
    """The gradebook's scores, with each cell held for a person because this loaded machine's
    noise left its verdict undecided (never a verdict made wrongly, and never a grader error)
    counted at its full points, as a person deciding it for code that earns them would: what a
    test compares with the written-down score of code that earns them. An attack gains nothing
    from it: one held this way reads above its written-down 0, and fails the comparison."""
    from grader import _files as files
    from grader.cohort.scoring import JudgedScores
    from grader.isolation.cell_scores import REVIEW_NOTE

    undecided = REVIEW_NOTE.split(":")[0]      # "the machine was too noisy to decide ..."
    scores = _scores(course)
    for student in scores:
        judged = JudgedScores.load(os.path.join(files.autograded_dir(course, student, PS),
                                                files.RESULTS_FILE))
        for cell in (judged.cell_scores().values() if judged else ()):
            if cell.review and undecided in cell.text:
                scores[student] += cell.max_points - cell.points
    return scores
