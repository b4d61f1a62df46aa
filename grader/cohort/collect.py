"""Collection: what was handed in, as :class:`Submission` s.

nbgrader's layout is ``submitted/STUDENT/ASSIGNMENT/`` (:func:`scan`); LMS downloads in
``downloads/ASSIGNMENT/archive/`` are collected into it first by ``nbgrader zip_collect``
(:func:`zip_collect`), which stops instead of leaving a student silently ungraded.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable

from grader.cohort import assign, files


@dataclasses.dataclass
class Submission:
    student: str
    assignment: str
    folder: str

    @property
    def name(self) -> str:
        return f"{self.student}/{self.assignment}"

    def digest(self) -> str:
        h = hashlib.sha256()
        for root, _, names in sorted(os.walk(self.folder)):
            for f in sorted(names):
                h.update(f.encode())
                with open(os.path.join(root, f), "rb") as fh:
                    h.update(fh.read())
        return h.hexdigest()


def scan(course: str, assignments: list[str]) -> list[Submission]:
    """Every ``submitted/STUDENT/ASSIGNMENT/`` folder of ``assignments``, by student."""
    root = os.path.join(course, files.SUBMITTED)
    subs = []
    if not os.path.isdir(root):
        return subs
    for student in sorted(os.listdir(root)):
        for assignment in assignments:
            folder = os.path.join(root, student, assignment)
            if os.path.isdir(folder):
                subs.append(Submission(student, assignment, folder))
    return subs


ZIP_COLLECT_HELP = ("the file names are matched by c.FileNameCollectorPlugin.named_regexp in "
                    "nbgrader_config.py (written for Canvas downloads; its comment says how to adapt it)")


def zip_collect(course: str, assignment: str, log: Callable[[str], None] = print) -> None:
    """``nbgrader zip_collect ASSIGNMENT --force`` when downloads/ASSIGNMENT/ exists: the zip
    files (or loose files) in downloads/ASSIGNMENT/archive/ are extracted to .../extracted/ and
    each notebook copied to submitted/STUDENT/ASSIGNMENT/, the student taken from the file name.

    nbgrader only warns about a notebook whose name the regexp does not match and leaves it
    out, so that student would silently get no grade: this stops with the list instead. A
    failing zip_collect raises RuntimeError with nbgrader's output
    (:func:`grader.cohort.assign.nbgrader`)."""
    folder = os.path.join(course, files.DOWNLOADS, assignment)
    if not os.path.isdir(folder):
        return
    where = os.path.join(files.DOWNLOADS, assignment)
    stray = sorted(n for n in os.listdir(folder)
                   if n not in ("archive", "extracted") and not n.startswith("."))
    if stray:
        raise RuntimeError(f"{where}/ holds {', '.join(stray[:5])}{' ...' if len(stray) > 5 else ''}: "
                           f"LMS downloads (zip files or loose files) go in {where}/archive/")
    archive = os.path.join(folder, "archive")
    if not any(names for _, _, names in os.walk(archive)):
        log(f"{where}/archive/ is empty: no LMS downloads to collect for {assignment}")
        return
    proc = assign.nbgrader("zip_collect", assignment, "--force", cwd=course)
    output = proc.stdout + proc.stderr
    skipped = "Skipped submission with no match information provided: "  # the regexp's misses
    unmatched = [line.split(skipped, 1)[1].strip() for line in output.splitlines() if skipped in line]
    unmatched = [path for path in unmatched if path.endswith(".ipynb")  # other files: not graded
                 and not os.path.basename(path).startswith(".") and "__MACOSX" not in path]
    if unmatched:
        names = "\n  ".join(os.path.relpath(path, course) for path in unmatched)
        raise RuntimeError(f"nbgrader zip_collect {assignment}: {len(unmatched)} notebook(s) in "
                           f"{where}/archive/ could not be given to a student, so they would not "
                           f"be graded:\n  {names}\n{ZIP_COLLECT_HELP}; rename or remove these files "
                           f"and run again")
    for line in output.splitlines():
        if "Invalid submission notebook name" in line:
            log(f"warning: {where}/archive/: {line.split('] ', 1)[-1]} (release/{assignment}/ "
                f"has no notebook of that name: check that student's file)")
    collected = [line.split("] ", 1)[-1] for line in output.splitlines() if "files collected" in line]
    log(f"{where}/archive/: nbgrader zip_collect: {collected[-1] if collected else 'nothing collected'}")
