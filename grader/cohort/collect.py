"""Collection: what was handed in, as :class:`Submission` s.

nbgrader's layout is ``submitted/STUDENT/ASSIGNMENT/`` (:func:`scan`); LMS downloads in
``downloads/ASSIGNMENT/archive/`` are collected into it first by ``nbgrader zip_collect``
(:func:`zip_collect`), which stops instead of leaving a student silently ungraded. Nothing the
instructor put in either folder is passed over in silence: :func:`misplaced` names every path
that is not where that layout puts it, and :func:`holds_files` tells whether either folder holds
anything at all (only then may ``make grade`` grade the demo cohort instead).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Callable

from grader import _files as files
from grader.cohort import assign


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


LAYOUT = (f"{files.SUBMITTED}/STUDENT/ASSIGNMENT/NOTEBOOK.ipynb (nbgrader collect), or an LMS's "
          f"downloads (zip files or loose files) in {files.DOWNLOADS}/ASSIGNMENT/archive/")


def _visible(folder: str) -> list[str]:
    """The entries of ``folder`` but hidden ones (``.DS_Store``, ``.ipynb_checkpoints``)."""
    return sorted(n for n in os.listdir(folder) if not n.startswith(".")) \
        if os.path.isdir(folder) else []


def course_assignments(course: str) -> list[str]:
    """The course's problem sets: the folders of ``source/`` but private ones (``_template``,
    the folder a new set is copied from) (raises ``SystemExit`` saying so when there is no
    ``source/``)."""
    folder = os.path.join(course, files.SOURCE)
    if not os.path.isdir(folder):
        raise SystemExit(f"make grade: {course} is not a course folder: it has no {files.SOURCE}/ "
                         f"(nbgrader's source/ASSIGNMENT/ folders, one per problem set)")
    return [name for name in _visible(folder) if os.path.isdir(os.path.join(folder, name))
            and not name.startswith("_")]


def holds_files(course: str) -> bool:
    """Whether ``submitted/`` or ``downloads/`` holds any file (hidden ones aside)."""
    for top in (files.SUBMITTED, files.DOWNLOADS):
        for root, dirs, names in os.walk(os.path.join(course, top)):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            if any(not n.startswith(".") for n in names):
                return True
    return False


def misplaced(course: str, assignments: list[str]) -> list[str]:
    """One line per path in ``submitted/`` or ``downloads/`` that grading would not read, with
    where it belongs: a file outside a STUDENT/ASSIGNMENT folder, a folder named for no
    assignment of ``assignments`` (the course's, from source/), a download outside archive/."""
    known = ", ".join(assignments)
    out = []

    def unknown(path: str, name: str) -> str:
        return f"{path}/: {name} is not a problem set of this course (source/ has {known})"

    def is_dir(*parts: str) -> bool:
        return os.path.isdir(os.path.join(course, *parts))

    sub = files.SUBMITTED
    for student in _visible(os.path.join(course, sub)):
        if not is_dir(sub, student):
            out.append(f"{sub}/{student}: a file directly in {sub}/; expected "
                       f"{sub}/STUDENT/ASSIGNMENT/{student}")
            continue
        for name in _visible(os.path.join(course, sub, student)):
            if not is_dir(sub, student, name):
                stem = os.path.splitext(name)[0]
                folder = stem if stem in assignments else "ASSIGNMENT"
                out.append(f"{sub}/{student}/{name}: not in an assignment's folder; expected "
                           f"{sub}/{student}/{folder}/{name}")
            elif name not in assignments:
                out.append(unknown(f"{sub}/{student}/{name}", name))
    down = files.DOWNLOADS
    for assignment in _visible(os.path.join(course, down)):
        if not is_dir(down, assignment):
            out.append(f"{down}/{assignment}: a file directly in {down}/; expected "
                       f"{down}/ASSIGNMENT/archive/{assignment}")
        elif assignment not in assignments:
            out.append(unknown(f"{down}/{assignment}", assignment))
        else:
            out += [f"{down}/{assignment}/{name}: expected {down}/{assignment}/archive/{name} "
                    f"(LMS downloads go in archive/)"
                    for name in _visible(os.path.join(course, down, assignment))
                    if name not in ("archive", "extracted")]
    return out


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
