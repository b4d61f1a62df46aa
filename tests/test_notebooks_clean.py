"""Notebooks are committed without outputs, and each starts with the course's setup cell."""
from __future__ import annotations

import glob
import os

import nbformat
import pytest

from grader.course.colab import INSTALL_CELL, INSTALL_CELL_TAG

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FOLDERS = ("notebooks", "source", "release")


def committed_notebooks(root: str = ROOT) -> list[str]:
    found = []
    for folder in FOLDERS:
        found += glob.glob(os.path.join(root, folder, "**", "*.ipynb"), recursive=True)
    return sorted(p for p in found if ".ipynb_checkpoints" not in p)


def problems(nb) -> list[str]:
    """What is wrong with a notebook as committed: outputs, execution counts, a wrong first cell."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if cell.get("outputs"):
            found.append(f"cell {i} has {len(cell['outputs'])} outputs")
        if cell.get("execution_count") is not None:
            found.append(f"cell {i} has execution_count {cell['execution_count']}")
    first = nb.cells[0] if nb.cells else None
    if first is None or first.cell_type != "code" or first.source != INSTALL_CELL:
        found.append("the first cell is not grader.course.colab.INSTALL_CELL")
    elif INSTALL_CELL_TAG not in first.get("metadata", {}).get("tags", []):
        found.append(f"the first cell lacks the tag {INSTALL_CELL_TAG!r}")
    return found


def test_chapters_exist():
    assert len(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))) >= 5


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda p: os.path.relpath(p, ROOT))
def test_notebook_is_clean(path):
    nb = nbformat.read(path, as_version=4)
    assert not problems(nb), (f"{os.path.relpath(path, ROOT)}: {problems(nb)}; strip outputs "
                              "(jupyter nbconvert --clear-output --inplace) before committing")


def _clean():
    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell(INSTALL_CELL)
    setup.metadata["tags"] = [INSTALL_CELL_TAG]
    nb.cells = [setup, nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("1 + 1")]
    return nb


def test_helper_accepts_a_clean_notebook():
    assert problems(_clean()) == []


def test_helper_rejects_outputs_and_counts(tmp_path):
    nb = _clean()
    nb.cells[2].execution_count = 3
    nb.cells[2].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"},
                                                  execution_count=3)]
    path = tmp_path / "release" / "ps" / "dirty.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nb, str(path))
    assert committed_notebooks(str(tmp_path)) == [str(path)]
    found = problems(nbformat.read(str(path), as_version=4))
    assert "cell 2 has 1 outputs" in found and "cell 2 has execution_count 3" in found


def test_helper_rejects_a_wrong_first_cell():
    nb = _clean()
    nb.cells[0].source = "import torch"
    assert problems(nb) == ["the first cell is not grader.course.colab.INSTALL_CELL"]
    nb = _clean()
    nb.cells[0].metadata["tags"] = []
    assert problems(nb) == [f"the first cell lacks the tag {INSTALL_CELL_TAG!r}"]


def _hours(text: str) -> float:
    """'45 min', '1 h', '1¼ h', 'about 1.5 hours' -> hours."""
    import re
    number = re.search(r"(\d+(?:\.\d+)?)(¼|½|¾)?\s*(min|h)", text)
    assert number, text
    value = float(number.group(1)) + {"¼": .25, "½": .5, "¾": .75, None: 0}[number.group(2)]
    return value / 60 if number.group(3) == "min" else value


def test_difficulty_rises_from_set_to_set_and_the_readme_says_what_each_header_says():
    """The README's problem-set table gives each set's difficulty and time as its notebook's header
    does, and no set is easier or shorter than the one before it."""
    import re
    levels = ["introductory", "intermediate", "intermediate to advanced", "advanced"]
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    rows = re.findall(r"^\| (ps\d) \(\d+\) \|.*\| ([a-z ]+) · ([^|]+) \|", readme, re.M)
    assert [r[0] for r in rows] == sorted(n for n in os.listdir(os.path.join(ROOT, "release"))
                                          if n.startswith("ps"))
    order = []
    for name, level, time in rows:
        nb = nbformat.read(os.path.join(ROOT, "release", name, f"{name}.ipynb"), as_version=4)
        header = next(c.source for c in nb.cells if "**Difficulty:**" in c.source)
        said = re.search(r"\*\*Difficulty:\*\* ([a-z ]+) · \*\*time:\*\* ([^·]+)·", header)
        assert said and said.group(1).strip() == level.strip(), (name, header[:200])
        assert _hours(said.group(2)) == _hours(time), (name, said.group(2), time)
        order.append((levels.index(level.strip()), _hours(time)))
    assert order == sorted(order), order
