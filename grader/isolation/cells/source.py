"""Where the learner's code comes from: notebook cells, never the learner's live objects.

Speed and fullgraph are measured in a fresh process from the learner's *source*, so what the
learner's kernel did to ``torch``, the clock or the grader does not travel along.

- In a kernel (self-check, nbgrader test cells): :func:`cells_defining` finds the cell that
  defined a class or function through ``linecache``, which IPython fills with every cell's text
  (``inspect.getsource`` of a class defined in a cell is unreliable before Python 3.13).
- From a file (instructor side): :func:`solution_cells` reads the cells nbgrader marks as
  solutions in a ``.ipynb``.
"""
from __future__ import annotations

import dataclasses
import json
import linecache
import re
from typing import Iterable


@dataclasses.dataclass
class Cell:
    """One piece of learner code and how to name it in messages ("cell 7")."""

    label: str
    source: str

    def to_dict(self) -> dict:
        return {"label": self.label, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "Cell":
        return cls(str(d["label"]), str(d["source"]))


_MAGIC = re.compile(r"^\s*[%!]")


def strip_magics(source: str) -> str:
    """Blank out IPython magics and shell escapes (``%timeit``, ``!pip``) so plain Python can
    execute a cell; line numbers are kept. As in IPython, a magic is a line that *starts* a
    statement with ``%`` or ``!`` (with its own backslash continuations): a line inside brackets,
    a string or a backslash continuation of Python is Python (``(a\n    != b)``) and stays."""
    out: list[str] = []
    state = _Scan()
    magic_goes_on = False
    for line in source.splitlines():
        if magic_goes_on or (state.at_statement_start() and _MAGIC.match(line)):
            out.append("")
            magic_goes_on = line.rstrip().endswith("\\")
            continue
        out.append(line)
        state.feed(line)
    return "\n".join(out)


class _Scan:
    """Where Python source stands at the end of each line fed to it: inside brackets, inside a
    string that goes on, or continued by a backslash (enough to tell where a statement starts)."""

    def __init__(self) -> None:
        self.depth = 0
        self.quote = ""          # the open string's delimiter ('', or ' " \'\'\' \"\"\")
        self.continued = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and not self.quote and not self.continued

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        while i < n:
            if self.quote:
                if line[i] == "\\":
                    i += 2
                    continue
                if line.startswith(self.quote, i):
                    i += len(self.quote)
                    self.quote = ""
                    continue
                i += 1
                continue
            c = line[i]
            if c == "#":
                n = i
                break
            if c in "\"'":
                triple = c * 3
                self.quote = triple if line.startswith(triple, i) else c
                i += len(self.quote)
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(0, self.depth - 1)
            i += 1
        ends_with_backslash = line[:n].endswith("\\")
        if self.quote in ("'", '"') and not ends_with_backslash:
            self.quote = ""      # an unterminated one-line string: Python's error, not ours
        self.continued = ends_with_backslash and not self.quote


def _functions_of(obj) -> Iterable:
    if isinstance(obj, type):
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)
            if hasattr(value, "__code__"):
                yield value
    else:
        obj = getattr(obj, "__func__", obj)
        if hasattr(obj, "__code__"):
            yield obj


def cells_defining(*objects) -> list[Cell]:
    """The text of the cells (or files) that defined ``objects`` (classes or functions), each once,
    in the order given. Raises ``ValueError`` when an object's source cannot be found."""
    cells: list[Cell] = []
    seen: set[str] = set()
    for obj in objects:
        found = False
        for fn in _functions_of(obj):
            filename = fn.__code__.co_filename
            lines = linecache.getlines(filename)
            if not lines:
                continue
            found = True
            if filename not in seen:
                seen.add(filename)
                cells.append(Cell(_label_for(filename), "".join(lines)))
            break
        if not found:
            filename = _latest_cell_defining(obj)
            if filename is not None:
                found = True
                if filename not in seen:
                    seen.add(filename)
                    cells.append(Cell(_label_for(filename), "".join(linecache.getlines(filename))))
        if not found:
            name = getattr(obj, "__name__", repr(obj))
            raise ValueError(f"cannot find the source of {name}: define it in a notebook cell "
                             f"or a .py file (not with exec) and run that cell again")
    return cells


def _latest_cell_defining(obj) -> str | None:
    """For a class with no functions of its own (``class Fixed(Original): pass``, or only
    attributes): the most recently run cell whose text defines it at top level."""
    name = getattr(obj, "__name__", None)
    if not name or getattr(obj, "__module__", None) not in ("__main__", None):
        return None
    keyword = "class" if isinstance(obj, type) else "def"
    pattern = re.compile(rf"^{keyword}\s+{re.escape(name)}\b", re.M)
    # linecache keeps cells in the order they ran: the last match is the live definition.
    for filename in reversed(list(linecache.cache)):
        if pattern.search("".join(linecache.getlines(filename))):
            return filename
    return None


def _label_for(filename: str) -> str:
    from grader.checks.breaks import describe_location

    label = describe_location(filename, 1).label
    return label.rsplit(", line", 1)[0]


def nbgrader_meta(cell) -> dict:
    """A notebook cell's nbgrader metadata (``{}`` when it has none); ``cell`` as JSON or as a
    ``NotebookNode``."""
    return (cell.get("metadata") or {}).get("nbgrader") or {}


def is_autograded_test_cell(cell) -> bool:
    """Is this an autograded test cell: a graded code cell that is not a solution (nbgrader's
    ``grade: true, solution: false``; a graded solution cell is a written answer)?"""
    meta = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) \
        and not meta.get("solution")


def solution_cells(notebook_path: str, grade_ids: Iterable[str] | None = None) -> list[Cell]:
    """The solution cells (nbgrader ``solution: true``) of a notebook, optionally only those with
    the given ``grade_id``s, labelled "cell N" by their position (1-based).

    Raises ``ValueError`` with a plain message when the file is not a readable notebook.
    """
    try:
        with open(notebook_path, encoding="utf-8") as fh:
            nb = json.load(fh)
        raw_cells = nb["cells"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{notebook_path} is not a readable notebook: {exc}") from exc
    wanted = set(grade_ids) if grade_ids is not None else None
    cells = []
    for number, cell in enumerate(raw_cells, start=1):
        meta = nbgrader_meta(cell)
        if cell.get("cell_type") != "code" or not meta.get("solution"):
            continue
        if wanted is not None and meta.get("grade_id") not in wanted:
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        cells.append(Cell(f"cell {number}", source))
    return cells
