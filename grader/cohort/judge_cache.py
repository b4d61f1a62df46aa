"""The judges' compiler cache, kept from one grading run to the next: a course's
(``.grader-cache/``, for local workers) or a Ray node's (:func:`grader.cohort.distributed.node_cache`).
"""
from __future__ import annotations

import os
import shutil
import stat

from grader import _environment as environment
from grader import _files as files


class JudgeCache:
    """The judges' compiler cache (Inductor's and Triton's), kept in the course folder from one
    ``make grade`` to the next (:meth:`of`; a Ray node's in a folder of its own, :meth:`under`)
    (``.grader-cache/``, closed to everyone but the grading user: only
    judges, which never run learner code, write it): a run that grades one new submission then
    compiles the references from cache hits instead of cold. One folder per grader code, torch
    and machine (older ones are removed), beside the first, cold, build's seconds of each set
    (``cold.json``): the subjects' deadlines follow what compiling the references costs on this
    machine (:func:`grader.isolation.judge.judging.subject_deadline_s`), not what a warm cache makes
    it."""

    def __init__(self, folder: str):
        self.folder = folder
        self.cold_file = os.path.join(folder, "cold.json")
        self.figures_file = os.path.join(folder, "figures.json")

    @classmethod
    def of(cls, course: str) -> "JudgeCache":
        """The cache of ``course`` (its ``.grader-cache/``, or ``COURSE_JUDGE_CACHE``)."""
        return cls.under(os.path.join(course, files.CACHE))

    @classmethod
    def under(cls, parent: str) -> "JudgeCache":
        """This grader's, torch's and machine's cache in ``parent`` (or in ``COURSE_JUDGE_CACHE``
        where that is the grading user's own folder), made closed to everyone else; the caches
        of other graders, torches and machines there are removed."""
        import hashlib
        import platform

        import torch

        from grader._paths import grader_fingerprint

        key = hashlib.sha256(f"{grader_fingerprint()} {torch.__version__} {platform.node()} "
                             f"{platform.machine()}".encode()).hexdigest()[:16]
        shared = os.environ.get(environment.JUDGE_CACHE)
        if shared:   # one cache for many course folders (the test suite's), where it is ours
            try:
                os.makedirs(shared, mode=0o700, exist_ok=True)
                if os.stat(shared).st_uid == os.geteuid() and os.access(shared, os.W_OK):
                    parent = shared
            except OSError:
                pass
        os.makedirs(parent, mode=0o700, exist_ok=True)
        found = os.lstat(parent)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
            # Planted (a folder of another user's in /tmp, a link): its compiled code would run
            # in the judges.
            raise PermissionError(f"{parent} is not a folder of the grading user's own")
        os.chmod(parent, 0o700)
        for old in os.listdir(parent):   # another grader, torch or machine's: never read again
            if old != key:
                shutil.rmtree(os.path.join(parent, old), ignore_errors=True)
        os.makedirs(os.path.join(parent, key), exist_ok=True)
        return cls(os.path.join(parent, key))

    def cold_reference_s(self, assignment: str, built) -> float | None:
        """What building ``assignment``'s references cost cold on this machine: this build's
        figure when it was the first (recorded), else the first one's."""
        cold = files.read_json_dict(self.cold_file)
        if isinstance(cold.get(assignment), (int, float)):
            return float(cold[assignment])
        if built.reference_s is not None and not built.error:
            cold[assignment] = built.reference_s
            files.write_json_atomic(self.cold_file, cold)
        return built.reference_s

    def kept_figures(self, assignment: str) -> dict:
        """The figures ``assignment``'s planning questions were judged on in this machine's
        first run (problem -> :class:`grader.checks.jobs.JobFigures` as a dict), or ``{}``: every
        later run, a regrade included, judges on the same ones instead of measuring again."""
        kept = files.read_json_dict(self.figures_file).get(assignment)
        return dict(kept) if isinstance(kept, dict) else {}

    def keep_figures(self, assignment: str, built) -> None:
        """Keep what ``built`` measured for the next runs, unless some are kept already or a
        figure is unfit to judge on (the next run then measures again)."""
        fit = all(isinstance(f, dict) and not f.get("unfit")
                  for f in (built.measured_jobs or {}).values())
        kept = files.read_json_dict(self.figures_file)
        if built.measured_jobs and fit and not built.error \
                and not isinstance(kept.get(assignment), dict):
            kept[assignment] = dict(built.measured_jobs)
            files.write_json_atomic(self.figures_file, kept)
