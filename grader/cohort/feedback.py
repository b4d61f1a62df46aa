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


def generate_feedback(course: str, outcomes, log=print) -> None:
    """Feedback HTML for each submission graded in this run (nbgrader's ``GenerateFeedback``, in
    this process, one student and assignment at a time: a course of 500 with one new submission
    renders one page, not 500), and a page with the reason for each one that scored zero because
    it could not be graded. A page nbgrader could not render is said through ``log``."""
    for o in outcomes:
        if o.status == Graded.GRADED:
            student, assignment = o.submission.student, o.submission.assignment
            failure = render_feedback(course, assignment, student)
            if failure:
                log(f"feedback: {student}/{assignment}: {failure}")
            wrap_feedback_lines(files.feedback_dir(course, student, assignment))
    for o in outcomes:
        if o.status == Graded.FAILED or (o.status == Graded.SKIPPED and o.reason):
            folder = files.feedback_dir(course, o.submission.student, o.submission.assignment)
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, files.NOT_GRADED_PAGE), "w") as fh:
                fh.write(f"<html><head><meta charset='utf-8'>{FEEDBACK_STYLE}</head><body>"
                         f"<h1>{o.submission.assignment}: not graded</h1>"
                         f"<p>Your submission scored 0 because it could not be graded:</p>"
                         f"<pre>{html.escape(o.reason)}</pre></body></html>\n")


def render_feedback(course: str, assignment: str, student: str) -> str | None:
    """nbgrader's feedback page of ``student``'s autograded ``assignment`` (``nbgrader
    generate_feedback ASSIGNMENT --student STUDENT --force``, in this process: nbgrader is
    imported here already). Returns why it could not be rendered, or None."""
    import logging

    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory

    config = assign.course_config(course)
    coursedir = CourseDirectory(config=config, root=course, assignment_id=assignment,
                                student_id=student)
    quiet = logging.getLogger("grader.feedback")   # its failures are returned, not printed
    quiet.propagate = False
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
    try:
        with assign.CONVERTING:
            GenerateFeedback(coursedir=coursedir, config=config, log=quiet, force=True).start()
        return None
    except Exception as exc:  # nbgrader's NbGraderException, a bad config
        return f"nbgrader could not render the feedback page: {type(exc).__name__}: {exc}"


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
