"""One submission's attempt: its points decided by the judged scoring (no learner code in this
process), saved in a grading folder of its own. :func:`run_attempt` returns an :class:`Attempt`:
that folder, or why the submission could not be graded; the driver then has nbgrader record it
(:func:`grader.cohort.judged_autograde.autograde_attempt`) and merges it
(:func:`grader.cohort.merge.merge_attempt`).

Both executors grade through :func:`run_attempt`: the local one (:func:`local_attempts`, worker
threads here) and the Ray one (:func:`grader.cohort.distributed.grade_task`, a task on a node).
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import queue
import tempfile
import time
from typing import Iterator

from grader import _files as files
from grader.cohort.collect import Submission
from grader.cohort.settings import GradeSettings
from grader.common.phases import Phases
from grader.isolation.sandbox import process
from grader import _environment as environment

UNSCREENED_FOR_TESTS_ENV = environment.UNSCREENED_FOR_TESTS  # tests only: students not screened


@dataclasses.dataclass(frozen=True)
class AttemptSettings:
    """How a run grades each submission (plain data: a Ray task receives it): the run's
    settings, their sandbox the one the run probed (:meth:`GradeSettings.probed`), and what the
    run measured before the first submission."""

    grade: GradeSettings
    subject_timeout_s: float | None = None  # per judge job (default: from reference_s)
    # assignment -> what building its references took the run's first judge (seconds), from which
    # the subjects' deadlines follow (grader.cohort.scoring.BuiltReferences.reference_s)
    reference_s: dict = dataclasses.field(default_factory=dict)
    # assignment -> its planning questions' figures, measured once for the run: a judge that
    # builds the set's references later is handed them (every submission judged on the same)
    measured_jobs: dict = dataclasses.field(default_factory=dict)

    @property
    def sandbox(self) -> str:
        """The isolation mode ('bwrap', 'kernel', 'off'), probed again on a Ray node."""
        return self.grade.sandbox


@dataclasses.dataclass
class Attempt:
    """One submission graded in its own grading folder, not merged yet."""

    folder: str | None      # the grading folder (removed once merged); None: nothing to merge from
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
                isolation: process.Isolation, judge=None, device: str | None = None,
                folder_in: str | None = None) -> Attempt:
    """Grade one submission: the judged points (no learner code here; ``judge`` decides them,
    on ``device``), saved as :data:`grader._files.JUDGED_SCORES_FILE` in a new grading
    folder (in ``folder_in``, default the temporary folder). The attempt's ``phases`` hold the seconds of each step (each group of problems the
    judge graded, broken down by the judge) for ``make bench-grade``."""
    phases = Phases()
    tmp = tempfile.mkdtemp(prefix=f"grade-{sub.student}-{sub.assignment}-", dir=folder_in)

    def done(failure: str | None) -> Attempt:
        return Attempt(tmp, failure, phases.elapsed(), dict(phases.seconds))

    try:
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
                                timeout_s=settings.subject_timeout_s,
                                memory_bytes=settings.grade.memory_bytes,
                                reference_s=settings.reference_s.get(sub.assignment),
                                measured_jobs=settings.measured_jobs.get(sub.assignment))
        result.save(os.path.join(tmp, files.JUDGED_SCORES_FILE))
        for name, seconds in result.phases().items():
            phases.record(name, seconds)
        phases.lap("judged scores")
        return done(None)
    except Exception as exc:  # our own failure: report, never lose the run
        return done(f"could not grade: {type(exc).__name__}: {exc}")


def device_for(slot: int, gpus: int) -> str | None:
    """The GPU of worker ``slot`` (one timed submission per GPU), or None on CPU."""
    return f"cuda:{slot % gpus}" if gpus else None


# What a local worker holds besides its subject (at most MEMORY_GB): its judge, with torch and
# the compiled references (0.8 GB after ps1, measured 2026-12-06), and the next jobs' subjects
# waiting with their imports done (0.7 GB each; two for a set with two solution cells, such as
# ps3: grader.isolation.judge.judge_job.MAX_SUBJECTS_AHEAD).
WORKER_OVERHEAD_BYTES = int(2.5 * 2 ** 30)
# Left to choose, no more workers than one per this many submissions to grade: each worker's
# judge builds a set's references before its first submission of the set (on 3 ps2 submissions
# two workers graded 0.9 times as many a minute as one, on 4 of ps1 or ps4 1.9 and 1.3 times).
SUBMISSIONS_PER_WORKER = 4


def available_memory_bytes() -> int | None:
    """What the kernel says this machine could give now without swapping (``MemAvailable``)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# How long :func:`busy_cores` watches the cores (a run that chooses its workers waits this long).
BUSY_SAMPLE_S = 0.5


def _cpu_jiffies(cpus: set[int]) -> dict[int, tuple[int, int]]:
    """Each of ``cpus``'s (idle, total) time so far, in clock ticks (/proc/stat)."""
    got = {}
    with open("/proc/stat") as fh:
        for line in fh:
            name, *fields = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                ticks = [int(f) for f in fields[:8]]     # user .. steal (guest is in user)
                got[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))   # idle + iowait
    return got


def busy_cores(sample_s: float = BUSY_SAMPLE_S) -> float | None:
    """How many of the cores this process may use the machine keeps busy now: their time not
    idle over ``sample_s`` seconds, summed (None where /proc/stat cannot be read)."""
    cpus = os.sched_getaffinity(0)
    try:
        before = _cpu_jiffies(cpus)
        time.sleep(sample_s)
        after = _cpu_jiffies(cpus)
    except (OSError, ValueError, IndexError):
        return None
    busy = 0.0
    for cpu, (idle, total) in after.items():
        if cpu in before and total > before[cpu][1]:
            busy += 1 - (idle - before[cpu][0]) / (total - before[cpu][1])
    return busy if after else None


def idle_cores() -> int:
    """The cores this process may use, less those the machine keeps busy now (:func:`busy_cores`;
    the one-minute load average where that cannot be read, which still counts the setup just
    run): a worker pinned to a core another program keeps busy waits for it."""
    count = len(os.sched_getaffinity(0))
    busy = busy_cores()
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:
            return count
    return max(1, min(count, int(count - busy + 0.5)))


def default_workers(memory_bytes: int, pending: int, idle: int) -> int:
    """How many submissions ``make grade`` grades at once when ``WORKERS`` is not set: one per
    ``idle`` core (:func:`idle_cores`; each worker's judge pinned to its own: on 2 idle cores two
    workers graded 1.3 to 2 times as many submissions a minute as one worker with both,
    docs/grading.md), no more than the memory available holds at ``memory_bytes`` (the subject's
    limit) plus :data:`WORKER_OVERHEAD_BYTES` each, on a GPU box no more than its GPUs, and no
    more than one per :data:`SUBMISSIONS_PER_WORKER` of the ``pending`` submissions. At least
    one."""
    count = min(idle, pending // SUBMISSIONS_PER_WORKER)
    available = available_memory_bytes()
    if available is not None:
        count = min(count, available // (memory_bytes + WORKER_OVERHEAD_BYTES))
    gpus = gpu_count()
    if gpus:
        count = min(count, gpus)
    return max(1, int(count))


def default_workers_rule(memory_gb: float) -> str:
    """:func:`default_workers`'s rule in words, for the run's workers line."""
    return (f"one per idle core, as many as the memory available holds at MEMORY_GB="
            f"{memory_gb:g} plus {WORKER_OVERHEAD_BYTES / 2 ** 30:g} GiB each, one per "
            f"{SUBMISSIONS_PER_WORKER} submissions to grade at most; WORKERS=n to choose")


def worker_cores(workers: int, idle: int | None = None) -> list[frozenset[int] | None]:
    """The CPU cores of each of ``workers`` local workers: the cores this process may use, split
    into that many groups, so that each worker's judge and subjects (and the timings they make)
    have cores of their own. One worker: all of them where all are ``idle`` (None: taken as
    idle), its judge then starting each next submission's subject ahead on a second core;
    where another program keeps some busy, none pinned (None), no subject started ahead (its
    imports would take a core from that program). More workers than cores: none pinned, the
    cores shared."""
    allowed = sorted(os.sched_getaffinity(0))
    if workers > len(allowed) or (workers <= 1 and idle is not None and idle < len(allowed)):
        return [None] * max(1, workers)
    workers = max(1, workers)
    size = len(allowed) // workers
    return [frozenset(allowed[i * size:(i + 1) * size]) for i in range(workers)]


def local_attempts(todo: list[tuple[Submission, str]], course: str, settings: AttemptSettings, *,
                   isolation: process.Isolation, judges: list, workers: int,
                   folder_in: str | None = None,
                   built_by: dict | None = None) -> Iterator[tuple[Submission, str, Attempt]]:
    """The local executor: ``workers`` submissions at once in threads of this process, each
    with its worker's judge and GPU, each grading copy in ``folder_in`` (default: the temporary
    folder). ``built_by``: worker slot -> the sets its judge has built the references of; before
    its first submission of another set, a worker's judge builds that set's (from the run's
    compiler cache, with ``settings.measured_jobs``), in the submission's seconds. Yields
    (submission, digest, attempt) as each finishes; interrupted (or closed early), it cancels
    the submissions not started."""
    gpus = gpu_count()
    workers = max(1, workers)
    # A submission takes the judge of a worker that is free, not one picked in advance: a worker
    # never waits on another's judge while its own is idle.
    free: queue.Queue = queue.Queue()
    for slot in range(workers):
        free.put(slot)

    built = built_by if built_by is not None else {}

    def attempt(sub: Submission) -> Attempt:
        slot = free.get()
        try:
            judge = judges[slot % len(judges)] if judges else None
            building = 0.0
            if judge is not None and sub.assignment not in built.setdefault(slot, set()):
                started = time.monotonic()
                # As a separate job before the submission's own, as the run built it first. A
                # build that failed leaves the grading job to build it, and to report why.
                from grader.cohort.scoring import build_references

                try:
                    build_references(sub.assignment, course, judge,
                                     device=device_for(slot, gpus),
                                     measured_jobs=settings.measured_jobs.get(sub.assignment))
                except Exception:  # noqa: BLE001 (the grading job reports it, as said above)
                    pass
                built[slot].add(sub.assignment)
                building = time.monotonic() - started
            made = run_attempt(sub, course, settings, isolation=isolation, judge=judge,
                               device=device_for(slot, gpus), folder_in=folder_in)
            if building:
                made.seconds += building
                made.phases["reference side"] = made.phases.get("reference side", 0.0) + building
            return made
        finally:
            free.put(slot)

    with cf.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {}
        for sub, digest in todo:
            futures[pool.submit(attempt, sub)] = (sub, digest)
        try:
            for future in cf.as_completed(futures):
                sub, digest = futures[future]
                yield sub, digest, future.result()
        except BaseException:  # KeyboardInterrupt here, or GeneratorExit from the caller
            for f in futures:
                f.cancel()
            raise
