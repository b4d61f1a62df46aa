"""Made-up submissions of problem set 2 (the cheapest to grade) for the attack tests: a notebook
with its solution cell replaced, written where `make grade` collects it, and the scores the
gradebook holds afterwards. Its honest reference points: the unfused loop version
(:data:`PASS_CLASS`) is correct but neither fused nor fast: 3 of 10; a blank notebook: 0.
"""
from __future__ import annotations

import json
import os

import nbformat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PS = "ps2"
PASS_CLASS = "class FusedGroupNormGELU(GroupNormGELU):\n    pass\n"


def _notebook(release_nb, solution: str | None, extra: str | None):
    nb = nbformat.from_dict(json.loads(json.dumps(release_nb)))
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
