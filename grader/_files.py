"""Every file and folder name the grader reads or writes, in one place: every role imports it
(``from grader import _files as files``), as it imports :mod:`grader._paths`.

A course folder (nbgrader's layout) after ``make grade``::

    nbgrader_config.py, gradebook.db          the course's configuration and its gradebook
    canvas-roster.csv, canvas-assignments.csv Canvas's export and the name map (optional)
    downloads/ASSIGNMENT/archive/             LMS downloads, collected into submitted/
    submitted/STUDENT/ASSIGNMENT/             what each student handed in
    autograded/STUDENT/ASSIGNMENT/            the graded notebook, or NOT_GRADED.txt and
                                              autograde.log; grader-results.json;
                                              .graded.json last
    feedback/STUDENT/ASSIGNMENT/              nbgrader's feedback HTML, or NOT_GRADED.html
    reports/                                  grades.csv, canvas.csv, report.html (+ PNGs)
    .grader-cache/                            the judges' compiler cache (grader.cohort.judge_cache.JudgeCache)

One submission's grading copy (:mod:`grader.cohort.attempt`) holds the same course files, plus
the judged points (``judged-scores.json``) and nbgrader's log; the merge
(:mod:`grader.cohort.merge`) keeps them under the names above.
"""
from __future__ import annotations

import os

# The course folder.
NBGRADER_CONFIG = "nbgrader_config.py"
GRADEBOOK = "gradebook.db"
ROSTER = "canvas-roster.csv"                # Canvas's gradebook export, if the instructor put it there
ASSIGNMENT_MAP = "canvas-assignments.csv"   # nbgrader assignment -> Canvas assignment (nbgrader,canvas)
NOTEBOOKS = "notebooks"                    # the chapters
SOURCE = "source"                          # the instructor's assignments (nbgrader)
RELEASE = "release"                        # what students get (nbgrader generate_assignment)
DOWNLOADS = "downloads"
SUBMITTED = "submitted"
AUTOGRADED = "autograded"
FEEDBACK = "feedback"
REPORTS = "reports"
CACHE = ".grader-cache"                    # the judges' compiler cache, kept between runs

# autograded/STUDENT/ASSIGNMENT/
MARKER = ".graded.json"                         # written last: the merge of this submission is complete
RESULTS_FILE = "grader-results.json"            # the judged result, kept beside the graded notebook
NOT_GRADED_FILE = "NOT_GRADED.txt"              # why a submission scored zero
AUTOGRADE_LOG = "autograde.log"                 # nbgrader's output (also in the grading copy)

# feedback/STUDENT/ASSIGNMENT/
NOT_GRADED_PAGE = "NOT_GRADED.html"

# reports/
GRADES_CSV = "grades.csv"
CANVAS_CSV = "canvas.csv"
REPORT_HTML = "report.html"

# A problem set's folder, grader/problems/psN/ (grader.problems.sets reads and writes them).
SET_DEMO_EXPECTED = "demo_expected.json"         # its demo students' points
SET_FLOORS = "floors.json"                       # self-check's speed floors: make bench, gpu-check
SET_GRADESCOPE_MEASURED = "gradescope_measured.json"  # `bench-gradescope --save`
# Its other folder, source/psN/, beside the nbgrader notebook (never released: nbgrader_config.py).
DEMO_SOLUTIONS_FILE = "demo_cohort.py"           # the demo personas' near-answers
# The folders a new set is copied from (grader/problems/_template/, source/_template/); the name
# stands for the set's own in every file of them (`python -m grader.cli new-set`).
SET_TEMPLATE = "_template"

# Gradescope's autograder (grader/cohort/gradescope.py).
GRADESCOPE_CONFIG = "gradescope.json"           # in the zip's course/: the assignment, its deadline
GRADESCOPE_RESULTS = "results.json"             # what Gradescope reads, in ROOT/results/
# Gradescope's container: ROOT/source (the unzipped autograder), ROOT/submission, ROOT/results.
GRADESCOPE_SOURCE = "source"
GRADESCOPE_SUBMISSION = "submission"
GRADESCOPE_RESULTS_DIR = "results"
GRADESCOPE_COURSE = "course"                    # the course inside the zip (ROOT/source/course)

# One submission's grading copy.
JUDGED_SCORES_FILE = "judged-scores.json"       # the points and verdicts the judge decided
# grading copy -> autograded/STUDENT/ASSIGNMENT/
KEPT_AS = ((JUDGED_SCORES_FILE, RESULTS_FILE),)


def db_url(course: str) -> str:
    """The SQLAlchemy URL of ``course``'s gradebook."""
    return "sqlite:///" + os.path.join(os.path.abspath(course), GRADEBOOK)


def autograded_dir(course: str, student: str, assignment: str) -> str:
    return os.path.join(course, AUTOGRADED, student, assignment)


def feedback_dir(course: str, student: str, assignment: str) -> str:
    return os.path.join(course, FEEDBACK, student, assignment)


def read_json_dict(path: str) -> dict:
    """The JSON object in ``path``, or ``{}`` when it is missing, unreadable or not an object
    (the grader's bookkeeping files: a lost one only costs the work it saved)."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json_atomic(path: str, data) -> None:
    """Write ``data`` as JSON to ``path`` whole or not at all (a reader, or a run killed while it
    writes, never sees half a file)."""
    import json
    import tempfile

    # A name of its own: two processes writing the same file at once (two workers of the test
    # suite sharing one cache) each replace it whole, the last one winning.
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(path)))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
        os.chmod(tmp, 0o644)   # as open() would have made it (mkstemp makes 0600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
