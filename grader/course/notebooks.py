"""Housekeeping for the course's notebooks: where they are, and the shared setup cell in each."""
from __future__ import annotations

import glob
import json
import os

from grader import _files as files
from grader._paths import REPO_ROOT
from grader.course.colab import INSTALL_CELL, INSTALL_CELL_TAG

COURSE_FOLDERS = (files.NOTEBOOKS, files.SOURCE, files.RELEASE)


def course_root() -> str:
    return REPO_ROOT


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


def setup_cell_ok(path: str) -> bool:
    with open(path, encoding="utf-8") as fh:
        cells = json.load(fh).get("cells", [])
    return bool(cells) and cells[0].get("cell_type") == "code" and _source(cells[0]) == INSTALL_CELL


def _source_lines(text: str) -> list[str]:
    """A cell source as nbformat writes it: one string per line, newlines kept."""
    return text.splitlines(keepends=True)


def sync_setup_cells(root: str | None = None, check_only: bool = False) -> list[str]:
    """Make the first cell of every chapter and problem set (``notebooks/``, ``source/`` and
    ``release/``) :data:`INSTALL_CELL`, tagged :data:`INSTALL_CELL_TAG`. Only that cell changes:
    the rest of the file is written back as it was (nbformat's layout: one-space indent, sorted
    keys), the cell keeps its id and gets no outputs. A notebook whose first cell is not the
    tagged setup cell gets one inserted. Returns the paths changed (or, with ``check_only``,
    that would change)."""
    changed = []
    for path in course_notebooks(root):
        if setup_cell_ok(path) and _has_tag(path):
            continue
        changed.append(path)
        if check_only:
            continue
        with open(path, encoding="utf-8") as fh:
            nb = json.load(fh)
        cells = nb.setdefault("cells", [])
        first = cells[0] if cells else None
        if first is not None and INSTALL_CELL_TAG in (first.get("metadata") or {}).get("tags", []):
            first.update(cell_type="code", execution_count=None, outputs=[],
                         source=_source_lines(INSTALL_CELL))
        else:
            cell = {"cell_type": "code", "execution_count": None,
                    "metadata": {"tags": [INSTALL_CELL_TAG]}, "outputs": [],
                    "source": _source_lines(INSTALL_CELL)}
            if (nb.get("nbformat"), nb.get("nbformat_minor", 0)) >= (4, 5):
                ids = {c.get("id") for c in cells}
                cell["id"] = next(f"course-setup-{n}" if n else "course-setup"
                                  for n in range(len(cells) + 1)
                                  if (f"course-setup-{n}" if n else "course-setup") not in ids)
            cells.insert(0, cell)
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(nb, fh, indent=1, sort_keys=True, ensure_ascii=False)
            fh.write("\n")
    return changed


def _has_tag(path: str) -> bool:
    with open(path, encoding="utf-8") as fh:
        cells = json.load(fh).get("cells", [])
    return bool(cells) and INSTALL_CELL_TAG in (cells[0].get("metadata") or {}).get("tags", [])
