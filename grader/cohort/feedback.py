"""Feedback for each student: nbgrader's HTML of the autograded notebook (its long output lines
wrapped), or a page that says why the submission was not graded. Runs no learner code."""
from __future__ import annotations

import html
import os

from grader import _files as files
from grader.cohort import assign
from grader.cohort.merge import Graded

# nbgrader's feedback shows outputs in <pre> blocks that keep each line on one line: a verdict
# with its figures and hint runs off the side. Wrap them instead.
FEEDBACK_STYLE = ("<style id='course-wrap'>pre { white-space: pre-wrap; overflow-wrap: anywhere; }"
                  "</style>")


def generate_feedback(course: str, assignments, outcomes) -> None:
    """Feedback HTML per graded submission of ``assignments`` (``nbgrader generate_feedback``),
    and a page with the reason for each one that scored zero because it could not be graded."""
    for assignment in sorted(set(assignments)):
        assign.nbgrader("generate_feedback", assignment, "--force", cwd=course, check=False)
        for o in outcomes:
            if o.submission.assignment == assignment:
                wrap_feedback_lines(files.feedback_dir(course, o.submission.student, assignment))
    for o in outcomes:
        if o.status == Graded.FAILED or (o.status == Graded.SKIPPED and o.reason):
            folder = files.feedback_dir(course, o.submission.student, o.submission.assignment)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, files.NOT_GRADED_PAGE), "w") as fh:
                fh.write(f"<html><head><meta charset='utf-8'>{FEEDBACK_STYLE}</head><body>"
                         f"<h1>{o.submission.assignment}: not graded</h1>"
                         f"<p>Your submission scored 0 because it could not be graded:</p>"
                         f"<pre>{html.escape(o.reason)}</pre></body></html>\n")


def wrap_feedback_lines(folder: str) -> None:
    """Make the feedback pages in ``folder`` wrap long output lines (once per page)."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if not name.endswith(".html"):
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if "id='course-wrap'" in text or "</head>" not in text:
            continue
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text.replace("</head>", FEEDBACK_STYLE + "</head>", 1))
