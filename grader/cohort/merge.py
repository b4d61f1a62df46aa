"""The gradebook merge: one graded submission at a time into the real gradebook and
``autograded/``, from the main process only (the single writer).

Each merge runs in one transaction and ends by writing the submission's marker
(:data:`grader._files.MARKER`): a killed run loses nothing that was merged, and the next
run skips what is marked and unchanged (:func:`already_graded`). Re-grading updates a
submission's automatic grades in place: nothing is counted twice, and a grader's manual scores
and comments are kept (as nbgrader's own autograde keeps them).
"""
from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import shutil
import warnings

from grader import _files as files
from grader.cohort.attempt import Attempt
from grader.cohort.collect import Submission


class Graded(str, enum.Enum):
    """How a submission came out of a run. A ``str``: it compares equal to its value."""

    GRADED = "graded"    # graded from its own notebook
    FAILED = "failed"    # scored zero, with the reason (NOT_GRADED.txt)
    SKIPPED = "skipped"  # already graded and unchanged since (its marker)

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass
class Outcome:
    """One submission's result in a run, as the summary, the report and the exit status read it."""

    submission: Submission
    status: Graded
    reason: str = ""
    score: float = 0.0
    max_score: float = 0.0
    seconds: float = 0.0
    phases: dict = dataclasses.field(default_factory=dict)  # seconds by step (bench-grade)
    node: str = ""           # where it was graded (Ray), empty for local workers


def marker_path(course: str, sub: Submission) -> str:
    return os.path.join(files.autograded_dir(course, sub.student, sub.assignment), files.MARKER)


def already_graded(course: str, sub: Submission, digest: str | None = None) -> dict | None:
    """The record of an earlier grading of this very submission (unchanged since), if any."""
    marker = marker_path(course, sub)
    if not os.path.exists(marker):
        return None
    with open(marker) as fh:
        prev = json.load(fh)
    return prev if prev.get("digest") == (digest or sub.digest()) else None


def unreadable_reason(sub: Submission) -> str | None:
    """Why a notebook of the submission cannot be read, or None."""
    for name in sorted(os.listdir(sub.folder)):
        if name.endswith(".ipynb"):
            try:
                import nbformat

                nbformat.read(os.path.join(sub.folder, name), as_version=4)
            except Exception as exc:
                return f"{name} is not a readable notebook ({type(exc).__name__}: {str(exc)[:120]})"
    return None


def merge_attempt(course: str, sub: Submission, attempt: Attempt, digest: str) -> Outcome:
    """Merge a finished attempt (:func:`merge`), then remove its grading copy; the outcome
    carries the attempt's seconds, phases and node."""
    try:
        outcome = merge(course, sub, attempt.folder, attempt.failure, digest, attempt.seconds)
    finally:
        if attempt.folder:
            shutil.rmtree(attempt.folder, ignore_errors=True)
    outcome.phases, outcome.node = attempt.phases, attempt.node
    return outcome


def merge(course: str, sub: Submission, tmp: str | None, failure: str | None, digest: str,
          seconds: float = 0.0) -> Outcome:
    """Copy one graded submission into the real gradebook and autograded/ (the only writer).

    The automatic part of each grade (score, review flag, automatic comment), the submission's
    timestamp and each notebook's late penalty come from the grading copy ``tmp``; what a grader
    entered by hand (manual scores, extra credit, comments) stays as it is in the real gradebook.
    With a ``failure`` (or nothing graded in ``tmp``) every grade is zero, with the reason.
    ``seconds``: how long grading it took (kept in its marker for the report of later runs)."""
    from nbgrader.api import Gradebook, MissingEntry

    graded_nb = files.autograded_dir(tmp or "", sub.student, sub.assignment)
    if failure is None and not os.path.isdir(graded_nb):
        failure = unreadable_reason(sub) or "nbgrader could not autograde this submission:\n" + \
            log_tail(tmp)
    auto: dict = {}
    timestamp, penalties = _timestamp(sub), {}
    if failure is None:
        src_gb = Gradebook(files.db_url(tmp))
        try:
            src_sub = src_gb.find_submission(sub.assignment, sub.student)
            timestamp = src_sub.timestamp
            for nb in src_sub.notebooks:
                penalties[nb.name] = nb.late_submission_penalty
                auto.update({(nb.name, g.name): (g.auto_score, g.needs_manual_grade)
                             for g in nb.grades})
                auto.update({(nb.name, "comment", c.name): c.auto_comment for c in nb.comments})
        except MissingEntry:
            failure = "nbgrader recorded no grades for this submission:\n" + log_tail(tmp)
        finally:
            src_gb.close()
    with Gradebook(files.db_url(course)) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            dst = gb.find_submission(sub.assignment, sub.student)  # a regrade updates in place
        except MissingEntry:
            dst = gb.add_submission(sub.assignment, sub.student)
        dst.timestamp = timestamp
        for nb in dst.notebooks:
            nb.late_submission_penalty = penalties.get(nb.name) if failure is None else None
            for g in nb.grades:
                # A submission that could not be graded scores zero everywhere, written answers too.
                score, review = auto.get((nb.name, g.name), (0.0, False)) if failure is None \
                    else (0.0, False)
                g.auto_score = score
                g.needs_manual_grade = review or g.manual_score is not None
            for c in nb.comments:
                c.auto_comment = auto.get((nb.name, "comment", c.name)) if failure is None \
                    else failure
        gb.db.commit()
        dst = gb.find_submission(sub.assignment, sub.student)
        score, max_score = float(dst.score), float(dst.max_score)
    target = files.autograded_dir(course, sub.student, sub.assignment)
    shutil.rmtree(target, ignore_errors=True)
    if failure is None:
        shutil.copytree(graded_nb, target)
    else:
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, files.NOT_GRADED_FILE), "w") as fh:
            fh.write(failure + "\n")
        if tmp and os.path.exists(os.path.join(tmp, files.AUTOGRADE_LOG)):  # the whole story
            shutil.copy(os.path.join(tmp, files.AUTOGRADE_LOG),
                        os.path.join(target, files.AUTOGRADE_LOG))
    for name, kept in files.KEPT_AS:
        if tmp and os.path.exists(os.path.join(tmp, name)):
            shutil.copy(os.path.join(tmp, name), os.path.join(target, kept))
    outcome = Outcome(sub, Graded.GRADED if failure is None else Graded.FAILED, failure or "",
                      score, max_score, round(seconds, 1))
    with open(marker_path(course, sub), "w") as fh:  # last: marks the merge as complete
        json.dump({"digest": digest, "status": outcome.status, "reason": outcome.reason,
                   "score": score, "max_score": max_score, "seconds": outcome.seconds}, fh)
    return outcome


def _timestamp(sub: Submission):
    """The submission's ``timestamp.txt`` (as nbgrader reads it), or None."""
    from nbgrader.utils import parse_utc

    path = os.path.join(sub.folder, "timestamp.txt")
    try:
        with open(path) as fh:
            return parse_utc(fh.read().strip())
    except (OSError, ValueError):
        return None


def log_tail(tmp: str | None) -> str:
    """The lines of nbgrader's log in ``tmp`` that say why it failed."""
    try:
        text = open(os.path.join(tmp, files.AUTOGRADE_LOG), errors="replace").read()
    except (OSError, TypeError):
        return ""
    lines = text.splitlines()
    # The exception each traceback ended with (its last line, unindented), not "Traceback (...":
    ends = [lines[i] for i in range(len(lines))
            if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", lines[i])]
    errors = ends or [ln for ln in lines if ("ERROR" in ln or "Error" in ln)
                      and "Traceback (most recent call last)" not in ln]
    return "\n".join(list(dict.fromkeys(errors[-5:])) or lines[-5:])
