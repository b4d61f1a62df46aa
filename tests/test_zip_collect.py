"""`make grade` takes an LMS's bulk download: a zip in downloads/ASSIGNMENT/archive/ is collected
by `nbgrader zip_collect` into submitted/STUDENT/ASSIGNMENT/, each student taken from the file
name by the regexp in nbgrader_config.py (Canvas naming). No autograding here: only the first
step of the run, `find_submissions`, runs.
"""
import os
import shutil
import zipfile

import pytest

from grader.cohort.grade import Run, find_submissions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSIGNMENT = "ps2"


def _course(tmp_path, entries: dict[str, str]) -> str:
    """A course folder with the repository's config, ps2 (source and release), and a Canvas-style
    zip of ``{file name in the zip: text}`` in downloads/ps2/archive/."""
    folder = str(tmp_path / "course")
    os.makedirs(folder)
    shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), folder)
    for kind in ("source", "release"):  # release/ is committed (a test keeps it current)
        shutil.copytree(os.path.join(ROOT, kind, ASSIGNMENT), os.path.join(folder, kind, ASSIGNMENT))
    archive = os.path.join(folder, "downloads", ASSIGNMENT, "archive")
    os.makedirs(archive)
    with zipfile.ZipFile(os.path.join(archive, "submissions.zip"), "w") as zf:
        for name, text in entries.items():
            zf.writestr(name, text)
    return folder


def _release_text() -> str:
    with open(os.path.join(ROOT, "release", ASSIGNMENT, f"{ASSIGNMENT}.ipynb")) as fh:
        return fh.read()


def test_canvas_zip_is_collected_into_submitted(tmp_path):
    text = _release_text()
    folder = _course(tmp_path, {
        "smithjane_12345_678901_ps2.ipynb": text,
        # late, and submitted a second time (Canvas appends -1): collected as ps2.ipynb
        "doejohn_late_23456_789012_ps2-1.ipynb": text.replace("YOUR CODE HERE", "YOUR CODE HERE!"),
        "smithjane_12345_678901_notes.txt": "not a notebook: ignored",
    })
    run = Run(course=folder, assignments=[ASSIGNMENT])
    find_submissions(run)

    assert run.demo is False and run.course == folder
    assert [(s.student, s.assignment) for s in run.submissions] == [("doejohn", ASSIGNMENT),
                                                                     ("smithjane", ASSIGNMENT)]
    for sub in run.submissions:
        assert sub.folder == os.path.join(folder, "submitted", sub.student, ASSIGNMENT)
        assert sorted(os.listdir(sub.folder)) == [f"{ASSIGNMENT}.ipynb"]
    submitted = os.path.join(folder, "submitted", "{}", ASSIGNMENT, f"{ASSIGNMENT}.ipynb")
    assert open(submitted.format("smithjane")).read() == text
    assert "YOUR CODE HERE!" in open(submitted.format("doejohn")).read()


def test_a_notebook_the_regexp_cannot_place_stops_the_run_with_its_name(tmp_path):
    folder = _course(tmp_path, {"smithjane_12345_678901_ps2.ipynb": _release_text(),
                                "ps2 (renamed by hand).ipynb": _release_text()})
    with pytest.raises(SystemExit) as err:   # make grade stops before grading anyone
        find_submissions(Run(course=folder, assignments=[ASSIGNMENT]))
    assert "ps2 (renamed by hand).ipynb" in str(err.value)
    assert "named_regexp" in str(err.value)


def test_downloads_outside_archive_are_pointed_there(tmp_path):
    folder = _course(tmp_path, {})
    shutil.move(os.path.join(folder, "downloads", ASSIGNMENT, "archive", "submissions.zip"),
                os.path.join(folder, "downloads", ASSIGNMENT, "submissions.zip"))
    with pytest.raises(SystemExit, match="expected downloads/ps2/archive/submissions.zip"):
        find_submissions(Run(course=folder, assignments=[ASSIGNMENT]))
