"""One submission's attempt: its points decided by the judged scoring (no learner code in this
process), then nbgrader's run of the notebook, for the feedback, in a temporary course copy with
the kernel sandboxed. :func:`run_attempt` returns an :class:`Attempt`: the grading copy to merge
(:func:`grader.cohort.merge.merge_attempt`) or why it could not be graded.

Both executors grade through :func:`run_attempt`: the local one (:func:`local_attempts`, worker
threads here) and the Ray one (:func:`grader.cohort.distributed.grade_task`, a task on a node).
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import shutil
import sys
import tempfile
from typing import Iterator

from grader.cohort import assign, files
from grader.cohort.collect import Submission
from grader.checks.phases import Phases
from grader.cohort.kernel import kernel_settings, short_runtime_dir
from grader.isolation import sandbox
from grader import _environment as environment

UNSCREENED_FOR_TESTS_ENV = environment.UNSCREENED_FOR_TESTS  # tests only: students not screened
# nbgrader's autograde runs each notebook again for the feedback (run_attempt), in a kernel only
# bubblewrap confines (grader.cohort.kernel). False once the feedback runs no learner code: kernel
# confinement of the subject then suffices for real submissions (grade.choose_isolation).
NOTEBOOK_KERNEL_RUNS_LEARNER_CODE = True
KERNEL_WARNING = ("nbgrader's notebook kernel, which runs the notebook again for the feedback, "
                  "is not confined without bubblewrap: it runs as the grading user with limits "
                  "only, can read what that user can read (source/, the gradebook), write there, "
                  "and signal that user's processes.")


@dataclasses.dataclass(frozen=True)
class AttemptSettings:
    """How a run grades each submission (plain data: a Ray task receives it)."""

    sandbox: str            # the isolation mode ('bwrap', 'off'), probed again on a Ray node
    timeout_s: float        # per submission, nbgrader's run included
    memory_bytes: int       # address-space limit of learner processes on CPU
    cell_timeout_s: int     # per notebook cell (nbgrader's Execute.timeout)
    subject_timeout_s: float | None = None  # per judge job (default: the problem's own)


@dataclasses.dataclass
class Attempt:
    """One submission graded in its own grading copy, not merged yet."""

    folder: str | None      # the grading copy (removed once merged); None: nothing to merge from
    failure: str | None     # why it scores zero, or None
    seconds: float = 0.0
    phases: dict = dataclasses.field(default_factory=dict)  # seconds by step (bench-grade)
    node: str = ""          # where it was graded (Ray), empty for local workers


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def submitted_notebook(course: str, sub: Submission) -> str | None:
    """The submission's copy of the problem set's notebook (named as in source/), if any."""
    folder = os.path.join(course, files.SOURCE, sub.assignment)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".ipynb") and os.path.exists(os.path.join(sub.folder, name)):
            return os.path.join(sub.folder, name)
    return None


def run_attempt(sub: Submission, course: str, settings: AttemptSettings, *,
                isolation: sandbox.Isolation, judge=None, device: str | None = None) -> Attempt:
    """Grade one submission: the judged points (no learner code here; ``judge`` decides
    them, on ``device``), then nbgrader in a temporary course copy with the kernel sandboxed.
    The attempt's ``phases`` hold the seconds of each step (each group of problems the judge
    graded, broken down by the judge; nbgrader's run of the notebook) for ``make bench-grade``."""
    phases = Phases()
    tmp = tempfile.mkdtemp(prefix=f"grade-{sub.student}-{sub.assignment}-")
    uid = runtime_dir = None

    def done(failure: str | None) -> Attempt:
        return Attempt(tmp, failure, phases.elapsed(), dict(phases.seconds))

    try:
        # 1. The points, decided here.
        notebook = submitted_notebook(course, sub)
        if notebook is None:
            return done(f"the submission has no {sub.assignment} notebook")
        from grader.cohort.scoring import grade_notebook

        # The grader's own attack tests name students whose code skips the screen (defence in
        # depth) to attack what stands behind it; a submission cannot reach this process's
        # environment.
        screen = sub.student not in os.environ.get(UNSCREENED_FOR_TESTS_ENV, "").split(",")
        result = grade_notebook(notebook, sub.assignment, course, sandbox=settings.sandbox,
                                device=device, judge=judge, isolation=isolation, screen=screen,
                                timeout_s=settings.subject_timeout_s)
        scores_file = os.path.join(tmp, files.JUDGED_SCORES_FILE)
        display_file = os.path.join(tmp, files.JUDGED_SCORES_DISPLAY_FILE)
        result.save(scores_file, display_file)
        os.chmod(display_file, 0o644)
        for name, seconds in result.phases().items():
            phases.record(name, seconds)
        phases.lap("judged scores")

        # 2. nbgrader's run of the notebook, for the feedback, in a course copy.
        shutil.copy(os.path.join(course, files.NBGRADER_CONFIG), tmp)
        shutil.copy(os.path.join(course, files.GRADEBOOK), os.path.join(tmp, files.GRADEBOOK))
        shutil.copytree(os.path.join(course, files.SOURCE, sub.assignment),
                        os.path.join(tmp, files.SOURCE, sub.assignment))
        shutil.copytree(sub.folder, os.path.join(tmp, files.SUBMITTED, sub.student, sub.assignment))
        # The kernel's working folder: a copy of the learner's own submission, nothing else.
        workdir = os.path.join(tmp, "kernel-work")
        shutil.copytree(sub.folder, workdir)
        for root, dirs, names in os.walk(tmp):
            os.chmod(root, 0o755)
        if isolation.sandboxed and sandbox.switches_user():
            uid = sandbox.take_uid()
        runtime_dir = short_runtime_dir()
        env = assign.nbgrader_env()
        env.update(HOME=os.path.join(tmp, "home"), TMPDIR=tmp, PYTHONDONTWRITEBYTECODE="1",
                   MPLBACKEND="Agg", JUPYTER_PLATFORM_DIRS="1", JUPYTER_RUNTIME_DIR=tmp,
                   COURSE_JUDGED_SCORES_FILE=scores_file,
                   COURSE_KERNEL_SANDBOX=kernel_settings(
                       isolation=isolation, uid=uid,
                       runtime_dir=runtime_dir, workdir=workdir,
                       results=display_file, memory_bytes=settings.memory_bytes))
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_PATH"):
            env.pop(name, None)
        os.makedirs(env["HOME"])
        left = max(60.0, settings.timeout_s - phases.elapsed())
        finished = sandbox.run(
            [sys.executable, "-m", "nbgrader", "autograde", sub.assignment,
             "--student", sub.student, "--force", f"--Execute.timeout={int(settings.cell_timeout_s)}",
             f"--CourseDirectory.root={tmp}"],
            isolation=sandbox.Isolation("none", "nbgrader itself runs no learner code"),
            # On a GPU (device set) the address-space limit would stop CUDA itself.
            limits=sandbox.Limits(timeout_s=left,
                                  memory_bytes=None if device else settings.memory_bytes),
            env=env, cwd=tmp)
        phases.lap("nbgrader autograde")
        with open(os.path.join(tmp, files.AUTOGRADE_LOG), "wb") as fh:
            fh.write(finished.output)
        if finished.timed_out:
            return done(f"grading stopped after {settings.timeout_s:.0f} s (the per-submission limit)")
        return done(None)
    except Exception as exc:  # our own failure preparing the copy: report, never lose the run
        return done(f"could not grade: {type(exc).__name__}: {exc}")
    finally:
        sandbox.give_back_uid(uid)
        if runtime_dir:
            shutil.rmtree(runtime_dir, ignore_errors=True)


def device_for(slot: int, gpus: int) -> str | None:
    """The GPU of worker ``slot`` (one timed submission per GPU), or None on CPU."""
    return f"cuda:{slot % gpus}" if gpus else None


def local_attempts(todo: list[tuple[Submission, str]], course: str, settings: AttemptSettings, *,
                   isolation: sandbox.Isolation, judges: list, workers: int
                   ) -> Iterator[tuple[Submission, str, Attempt]]:
    """The local executor: ``workers`` submissions at once in threads of this process, each
    with its worker's judge and GPU. Yields (submission, digest, attempt) as each finishes;
    interrupted (or closed early), it cancels the submissions not started."""
    gpus = gpu_count()
    workers = max(1, workers)
    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {}
        for index, (sub, digest) in enumerate(todo):
            slot = index % workers
            judge = judges[slot % len(judges)] if judges else None
            futures[pool.submit(run_attempt, sub, course, settings, isolation=isolation,
                                judge=judge, device=device_for(slot, gpus))] = (sub, digest)
        try:
            for future in cf.as_completed(futures):
                sub, digest = futures[future]
                yield sub, digest, future.result()
        except BaseException:  # KeyboardInterrupt here, or GeneratorExit from the caller
            for f in futures:
                f.cancel()
            raise
