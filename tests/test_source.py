"""Finding the learner's source: the cell that defined a class, even one with no methods."""
import linecache

import pytest

from grader.isolation.cells.source import cells_defining, strip_magics


def _run_as_cell(source: str, filename: str, namespace: dict) -> None:
    # What IPython does with a cell: its text goes in linecache, its code is compiled under
    # that file name and run in __main__.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def test_a_class_with_methods_is_found_through_its_methods():
    ns = {"__name__": "__main__"}
    src = "class Fixed:\n    def forward(self, x):\n        return x\n"
    _run_as_cell(src, "/tmp/ipykernel_0/1001.py", ns)
    [cell] = cells_defining(ns["Fixed"])
    assert cell.source == src


def test_a_class_without_methods_is_found_in_the_latest_cell_that_defines_it():
    ns = {"__name__": "__main__", "Base": object}
    _run_as_cell("class Passing(Base):\n    mode = 'old'\n", "/tmp/ipykernel_0/1002.py", ns)
    newer = "x = 1\nclass Passing(Base):\n    mode = 'new'\n"
    _run_as_cell(newer, "/tmp/ipykernel_0/1003.py", ns)
    [cell] = cells_defining(ns["Passing"])
    assert cell.source == newer


def test_an_object_without_source_is_a_plain_error():
    ns = {"__name__": "__main__"}
    exec("class Ghost:\n    pass\n", ns)  # no file: nothing to send to the grader
    with pytest.raises(ValueError, match="cannot find the source of Ghost"):
        cells_defining(ns["Ghost"])


def test_magics_are_blanked_keeping_line_numbers():
    assert strip_magics("%timeit f()\nx = 1\n!ls") == "\nx = 1\n"


def test_only_a_line_that_starts_a_statement_is_a_magic():
    # As IPython reads a cell: `%` and `!` lines are magics where a statement starts (with their
    # own backslash continuations); inside brackets, a string or a continued line, Python.
    cell = ("%matplotlib inline\n"
            "x = (a\n"
            "    != b)\n"                       # a continuation line of Python
            "s = \"\"\"\n!not a shell escape\n\"\"\"\n"
            "y = 7 \\\n"
            "    % 2\n"
            "!pip install \\\n"
            "   torch\n"
            "z = 3  # (\n"
            "%timeit z\n")
    out = strip_magics(cell).split("\n")
    assert out == ["", "x = (a", "    != b)", 's = """', "!not a shell escape", '"""',
                   "y = 7 \\", "    % 2", "", "", "z = 3  # (", ""]
    compile("\n".join(out).replace("a\n", "1\n").replace("b)", "2)"), "<cell>", "exec")
