"""A new problem set from the template: ``python -m grader.cli new-set ps9``.

A set is two folders (:mod:`grader.problems.sets`): ``grader/problems/ps9/`` (its problems, test
cells and figures) and ``source/ps9/`` (its nbgrader notebook and demo personas). Both are
copied from the template folders, ``grader/problems/_template/`` and ``source/_template/``, with
``_template`` renamed to the set's name in every file name and text (problem keys, grade ids,
the notebook's import line). Nothing else is edited: the course finds the set by its folders.
"""
from __future__ import annotations

import os
import re

from grader import _files as files
from grader._paths import REPO_ROOT
from grader.problems import sets

PROBLEMS_DIR = os.path.dirname(os.path.abspath(sets.__file__))
# The course's assignments are the folders of source/ named ps... (grader.cohort.assign.assignments),
# and a set's name is a Python package's.
_NAME = re.compile(r"^ps[a-z0-9_]+$")


def create(name: str, course_root: str = REPO_ROOT, problems_dir: str = PROBLEMS_DIR) -> list[str]:
    """Write the set ``name``'s two folders, ``problems_dir/name/`` and
    ``course_root/source/name/``, from this course's template folders; returns the files
    written. Refuses a name not of the form ``ps9`` or a folder already there."""
    if not _NAME.match(name):
        raise ValueError(f"new-set: {name!r} is not a set's name: ps, then lower-case letters, "
                         f"digits or _ (ps9)")
    pairs = [(os.path.join(PROBLEMS_DIR, files.SET_TEMPLATE), os.path.join(problems_dir, name)),
             (os.path.join(REPO_ROOT, files.SOURCE, files.SET_TEMPLATE),
              os.path.join(course_root, files.SOURCE, name))]
    missing = [template for template, _ in pairs if not os.path.isdir(template)]
    if missing:   # an installed package has no course around it
        raise FileNotFoundError(f"new-set: no template at {', '.join(missing)}")
    taken = [target for _, target in pairs if os.path.exists(target)]
    if taken:
        raise FileExistsError(f"new-set: {', '.join(taken)} already exists")
    written = []
    for template, target in pairs:
        for root, dirs, names in os.walk(template):
            dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".ipynb_checkpoints"))
            folder = os.path.join(target, os.path.relpath(root, template))
            os.makedirs(folder, exist_ok=True)
            for file_name in sorted(n for n in names if not n.endswith(".pyc")):
                with open(os.path.join(root, file_name), encoding="utf-8") as fh:
                    text = fh.read()
                path = os.path.join(folder, file_name.replace(files.SET_TEMPLATE, name))
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text.replace(files.SET_TEMPLATE, name))
                written.append(path)
    return written
