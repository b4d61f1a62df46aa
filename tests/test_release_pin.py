"""The notebooks install a fixed release of the course on Colab: the tag in grader/course/colab.py is the
package's version, every notebook's first cell installs that tag (COURSE_PIP_SOURCE still
overrides it), and `sync-notebooks` rewrites only that cell.
"""
import json
import os
import re
import shutil
import tomllib

from grader.course.colab import INSTALL_CELL, INSTALL_CELL_TAG, RELEASE, REPO_URL
from grader.course.notebooks import course_notebooks, sync_setup_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SOURCE = re.compile(r'os\.environ\.get\("COURSE_PIP_SOURCE", "([^"]+)"\)')


def _version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        return tomllib.load(fh)["project"]["version"]


def _first_cell(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return "".join(json.load(fh)["cells"][0]["source"])


def test_the_pinned_release_is_the_package_version():
    assert RELEASE == f"v{_version()}", "set grader.course.colab.RELEASE when bumping the version"


def test_every_release_notebook_installs_the_release_of_the_package_version():
    notebooks = course_notebooks(ROOT)
    release = [p for p in notebooks if os.sep + "release" + os.sep in p]
    assert release, "no release notebooks found"
    for path in notebooks:
        m = DEFAULT_SOURCE.search(_first_cell(path))
        assert m, f"{path}: the first cell does not install the course"
        assert m.group(1) == f"git+{REPO_URL}.git@v{_version()}", \
            f"{path} installs {m.group(1)}, the package is {_version()}: " \
            f"run `python -m grader.cli sync-notebooks`"


def test_sync_rewrites_only_the_first_cell_and_keeps_the_layout(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    original = os.path.join(ROOT, "release", "ps2", "ps2.ipynb")
    path = str(folder / "ps2.ipynb")
    shutil.copy(original, path)
    nb = json.load(open(path))
    nb["cells"][0]["source"] = ["# an old setup cell\n", "pip install course@main\n"]
    nb["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["old\n"]}]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(nb, fh, indent=1, sort_keys=True, ensure_ascii=False)
        fh.write("\n")

    assert sync_setup_cells(str(tmp_path)) == [path]
    text = open(path, encoding="utf-8").read()
    after = json.loads(text)
    assert text == json.dumps(after, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert after["cells"][1:] == nb["cells"][1:]                 # nothing else changed
    assert {k: v for k, v in after.items() if k != "cells"} == {k: v for k, v in nb.items() if k != "cells"}
    first = after["cells"][0]
    assert "".join(first["source"]) == INSTALL_CELL and first["outputs"] == []
    assert first["id"] == nb["cells"][0]["id"] and INSTALL_CELL_TAG in first["metadata"]["tags"]
    assert sync_setup_cells(str(tmp_path)) == []                  # a second run changes nothing


def test_a_notebook_without_the_setup_cell_gets_one_inserted(tmp_path):
    (tmp_path / "notebooks").mkdir()
    path = str(tmp_path / "notebooks" / "new.ipynb")
    nb = {"cells": [{"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["# Title"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    json.dump(nb, open(path, "w"))
    assert sync_setup_cells(str(tmp_path), check_only=True) == [path]
    assert json.load(open(path)) == nb                            # check_only writes nothing
    sync_setup_cells(str(tmp_path))
    cells = json.load(open(path))["cells"]
    assert [c["cell_type"] for c in cells] == ["code", "markdown"] and cells[1] == nb["cells"][0]
    assert cells[0]["id"] == "course-setup" and "".join(cells[0]["source"]) == INSTALL_CELL
