"""Housekeeping for the course's notebooks: the shared setup cell, and clean-in-git checks."""
from __future__ import annotations

import glob
import json
import os

from .colab import INSTALL_CELL, INSTALL_CELL_TAG

COURSE_FOLDERS = ("notebooks", "source", "release")


def course_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def course_notebooks(root: str | None = None) -> list[str]:
    """Every committed notebook of the course (chapters, instructor and student versions)."""
    root = root or course_root()
    paths = []
    for folder in COURSE_FOLDERS:
        paths += glob.glob(os.path.join(root, folder, "**", "*.ipynb"), recursive=True)
    return sorted(p for p in paths if ".ipynb_checkpoints" not in p)


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def dirty_cells(path: str) -> list[str]:
    """Why ``path`` is not clean for git (outputs, execution counts, unreadable); [] if clean."""
    try:
        with open(path, encoding="utf-8") as fh:
            nb = json.load(fh)
    except (OSError, ValueError) as exc:
        return [f"not a readable notebook: {exc}"]
    problems = []
    for number, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {number} has outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {number} has an execution count")
    return problems


def setup_cell_ok(path: str) -> bool:
    with open(path, encoding="utf-8") as fh:
        cells = json.load(fh).get("cells", [])
    return bool(cells) and cells[0].get("cell_type") == "code" and _source(cells[0]) == INSTALL_CELL


def sync_setup_cells(root: str | None = None, check_only: bool = False) -> list[str]:
    """Make the first cell of every chapter and problem set :data:`INSTALL_CELL` (release/ is
    regenerated from source/ by ``make release``, so it follows). Returns the paths changed
    (or, with ``check_only``, that would change)."""
    import nbformat

    changed = []
    for path in course_notebooks(root):
        if path.startswith(os.path.join(root or course_root(), "release")) or setup_cell_ok(path):
            continue
        changed.append(path)
        if check_only:
            continue
        nb = nbformat.read(path, as_version=4)
        cell = nbformat.v4.new_code_cell(INSTALL_CELL)
        cell.metadata["tags"] = [INSTALL_CELL_TAG]
        first = nb.cells[0] if nb.cells else None
        if first is not None and INSTALL_CELL_TAG in first.get("metadata", {}).get("tags", []):
            nb.cells[0] = cell
        else:
            nb.cells.insert(0, cell)
        cell.pop("id", None)
        nbformat.write(nb, path)
    return changed
