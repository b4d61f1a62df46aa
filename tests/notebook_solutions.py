"""Fill a student (release/) notebook with the reference solution from its source/ twin.

Used by the end-to-end tests (browser, Colab-like runtime), which need a notebook as a learner
who solved it would have it: the release notebook, untouched except for its solution cells,
where the ``# YOUR CODE HERE`` / ``raise NotImplementedError()`` stub is replaced by the text
between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` of the instructor's version (markers
dropped, indentation kept). Written-answer (markdown) cells are left as they are.
"""
from __future__ import annotations

import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SOLUTION = re.compile(r"^[ \t]*### BEGIN SOLUTION[ \t]*\n(?P<body>.*?)^[ \t]*### END SOLUTION[ \t]*\n?",
                       re.S | re.M)
_STUB = re.compile(r"^[ \t]*# YOUR CODE HERE[ \t]*\n[ \t]*raise NotImplementedError\(\)[ \t]*\n?", re.M)


def _text(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _nbgrader(cell: dict) -> dict:
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def reference_solutions(source_nb: dict) -> dict[str, str]:
    """grade_id -> the code between the solution markers, for each code solution cell."""
    out = {}
    for cell in source_nb["cells"]:
        meta = _nbgrader(cell)
        if cell["cell_type"] == "code" and meta.get("solution"):
            match = _SOLUTION.search(_text(cell))
            assert match, f"{meta.get('grade_id')}: no ### BEGIN/END SOLUTION block"
            out[meta["grade_id"]] = match["body"]
    return out


def fill_solutions(release_nb: dict, source_nb: dict, edit=None) -> dict:
    """``release_nb`` (modified in place and returned) with each code solution cell's stub
    replaced by the reference solution. ``edit(grade_id, code) -> code`` may alter a solution
    first (to make a deliberately wrong attempt)."""
    solutions = reference_solutions(source_nb)
    for cell in release_nb["cells"]:
        meta = _nbgrader(cell)
        if cell["cell_type"] != "code" or not meta.get("solution"):
            continue
        code = solutions[meta["grade_id"]]
        if edit is not None:
            code = edit(meta["grade_id"], code)
        text, count = _STUB.subn(lambda _: code, _text(cell))
        assert count == 1, f"{meta['grade_id']}: the release cell has no stub to replace"
        cell["source"] = text
    return release_nb


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def save(nb: dict, path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(nb, fh, indent=1)
        fh.write("\n")


def solved_release(ps: str, edit=None, root: str = ROOT) -> dict:
    """release/<ps>/<ps>.ipynb with the reference solution filled in."""
    return fill_solutions(load(os.path.join(root, "release", ps, f"{ps}.ipynb")),
                          load(os.path.join(root, "source", ps, f"{ps}.ipynb")), edit)


def release_with(ps: str, cells: dict[str, str], root: str = ROOT) -> dict:
    """release/<ps>/<ps>.ipynb, solved with the reference, then with each solution cell named in
    ``cells`` (grade_id -> the cell's whole text) replaced: another learner's answer."""
    nb = solved_release(ps, root=root)
    for cell in nb["cells"]:
        grade_id = _nbgrader(cell).get("grade_id")
        if grade_id in cells:
            cell["source"] = cells[grade_id]
    assert all(any(_nbgrader(c).get("grade_id") == g for c in nb["cells"]) for g in cells), cells
    return nb
