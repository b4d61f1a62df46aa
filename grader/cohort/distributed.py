"""Grading on a Ray cluster: ``make grade EXECUTOR=ray`` (``RAY_ADDRESS=...`` for a running
cluster; without it a local Ray instance starts).

Each submission is one Ray task with declared resources (:data:`CPUS_PER_SUBMISSION` CPUs, and
on GPU nodes one whole GPU, so two timed runs never share a GPU). Nodes share no filesystem: a
task receives what grading one submission needs as data (:func:`stage`: the course's
``nbgrader_config.py`` and ``gradebook.db``, ``source/ASSIGNMENT/``, the submission, and the
run's prepared reference caches through Ray's object store) and returns the graded result as
data (:func:`grade_task`: the grading copy's gradebook, the autograded notebook, the pipeline's
results, nbgrader's log). The driver (:func:`grader.cohort.grade.autograde_all`) unpacks each finished
task into a local folder and merges it like a local one: it stays the only writer of
``gradebook.db``, so resuming, reruns, ``--regrade`` and manual grades behave as with local
workers.

A task whose worker process or node dies is run again by Ray (``max_retries``); its grade is
merged once, when a try finishes. A submission that fails on every try is recorded with the
reason, like a local failure.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile

from grader.isolation.sandbox import pack_folder, unpack_folder

CPUS_PER_SUBMISSION = 1   # the timed runs use one thread (grader.isolation.judge); nbgrader's kernel one more
MAX_RETRIES = 2           # tries after a lost worker process or node, before the submission fails
# What a task sends back from its grading copy (grader.cohort.grade._grade_one's folder).
RESULT_PATHS = ("gradebook.db", "autograded", "pipeline.json", "pipeline.json.disagreements.json",
                "autograde.log")


def stage(course: str, assignment: str, student: str) -> bytes:
    """Everything grading one submission reads from the course folder, as one archive."""
    return pack_folder(course, ["nbgrader_config.py", "gradebook.db",
                          os.path.join("source", assignment),
                          os.path.join("submitted", student, assignment)])


def grade_task(payload: bytes, student: str, assignment: str, options: dict,
               prepared: dict | None) -> dict:
    """Grade one staged submission on this node (the body of the Ray task): the same
    :func:`grader.cohort.grade._grade_one` as local grading, in a course folder unpacked from
    ``payload``. Returns the result archive, the failure (or None), seconds, phases and the node."""
    from grader.cohort import grade
    from grader.isolation import sandbox

    course = tempfile.mkdtemp(prefix=f"ray-{student}-{assignment}-")
    tmp = None
    node = socket.gethostname()
    blocked = unblock_sigint()
    try:
        unpack_folder(payload, course)
        try:
            isolation = sandbox.probe(options["sandbox"])
        except sandbox.SandboxUnavailable as exc:
            return {"archive": b"", "failure": f"node {node} cannot run the sandbox: {exc}",
                    "seconds": 0.0, "phases": {}, "node": node}
        run = grade.Run(course=course, assignments=[assignment], timeout_s=options["timeout_s"],
                        memory_bytes=options["memory_bytes"],
                        cell_timeout_s=options["cell_timeout_s"], sandbox=options["sandbox"],
                        isolation=isolation, subject_timeout_s=options.get("subject_timeout_s"))
        judge = _judge(course, prepared)
        run.judges = [judge]
        try:
            sub = grade.Submission(student, assignment,
                                   os.path.join(course, "submitted", student, assignment))
            tmp, failure, seconds, phases = grade._grade_one(run, sub, 0, grade._gpu_count())
        finally:
            judge.close()
        return {"archive": pack_folder(tmp, RESULT_PATHS), "failure": failure,
                "seconds": seconds, "phases": phases, "node": node}
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        shutil.rmtree(course, ignore_errors=True)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _judge(folder: str, prepared: dict | None):
    """A judge for one task, its compiler cache started from the run's prepared one (the
    reference side then compiles from cache hits) in ``folder``/judge-cache."""
    from grader.isolation.judge import JudgeProcess

    cache = os.path.join(folder, "judge-cache")
    if prepared and prepared.get("cache"):
        unpack_folder(prepared["cache"], cache)
    return JudgeProcess(env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                                 TRITON_CACHE_DIR=os.path.join(cache, "triton")))


def unblock_sigint() -> set:
    """Ray runs tasks with SIGINT blocked, and child processes inherit the mask: the notebook's
    kernel could then not be interrupted when a cell times out (nbgrader interrupts it with
    SIGINT), and an endless loop would fail the whole submission instead of that one cell.
    Unblocks it in the calling thread; returns the mask to restore."""
    return signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def prepare_task(payload: bytes, assignment: str, options: dict) -> dict:
    """The run's prepared reference caches for ``assignment``, built on a grading node (the
    compiler cache is specific to the machine type, so the cluster's nodes should be one type)."""
    from grader.cohort import pipeline
    from grader.cohort.grade import _gpu_count

    course = tempfile.mkdtemp(prefix=f"ray-prepare-{assignment}-")
    try:
        unpack_folder(payload, course)
        judge = _judge(course, None)
        try:
            seconds = pipeline.prepare_references(assignment, course, judge,
                                                  device="cuda:0" if _gpu_count() else None)
        finally:
            judge.close()
        return {"cache": pack_folder(os.path.join(course, "judge-cache")), "seconds": seconds}
    finally:
        shutil.rmtree(course, ignore_errors=True)


class RayExecutor:
    """Submits grading tasks to Ray and hands back finished ones, in the order they finish."""

    def __init__(self, address: str | None = None, gpus_per_submission: float | None = None):
        import builtins

        import ray

        self.ray = ray
        # Ray replaces this process's print() with its own when a task's output reaches the
        # driver (tqdm_ray), for good; keep print as it is, and put it back at shutdown.
        os.environ.setdefault("RAY_TQDM_PATCH_PRINT", "0")
        self._print = builtins.print
        if not ray.is_initialized():
            # Without an address a local instance starts; RAY_ADDRESS is read by ray.init too.
            ray.init(address=address or os.environ.get("RAY_ADDRESS") or None,
                     log_to_driver=False, include_dashboard=False)
        cluster_gpus = ray.cluster_resources().get("GPU", 0)
        self.gpus = (1 if cluster_gpus else 0) if gpus_per_submission is None else gpus_per_submission
        self._grade = ray.remote(grade_task).options(
            num_cpus=CPUS_PER_SUBMISSION, num_gpus=self.gpus, max_retries=MAX_RETRIES,
            retry_exceptions=False)
        self._prepare = ray.remote(prepare_task).options(
            num_cpus=CPUS_PER_SUBMISSION, num_gpus=self.gpus, max_retries=MAX_RETRIES)
        self.pending: dict = {}

    def shutdown(self) -> None:
        """Disconnect (and stop the local instance if this process started it)."""
        import builtins

        self.ray.shutdown()
        builtins.print = self._print

    def describe(self) -> str:
        resources = self.ray.cluster_resources()
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        return (f"Ray: {len(nodes)} node(s), {resources.get('CPU', 0):g} CPUs, "
                f"{resources.get('GPU', 0):g} GPUs; each submission a task with "
                f"{CPUS_PER_SUBMISSION} CPU" + (f" and {self.gpus:g} GPU" if self.gpus else ""))

    def prepare(self, course: str, assignment: str, options: dict) -> dict:
        payload = pack_folder(course, ["nbgrader_config.py", os.path.join("source", assignment)])
        return self.ray.get(self._prepare.remote(payload, assignment, options))

    def put(self, value):
        return self.ray.put(value)

    def submit(self, key, course: str, student: str, assignment: str, options: dict,
               prepared_ref) -> None:
        ref = self._grade.remote(stage(course, assignment, student), student, assignment,
                                 options, prepared_ref)
        self.pending[ref] = key

    def finished(self):
        """Yield (key, result dict or exception) as tasks finish."""
        while self.pending:
            done, _ = self.ray.wait(list(self.pending), num_returns=1)
            for ref in done:
                key = self.pending.pop(ref)
                try:
                    yield key, self.ray.get(ref)
                except Exception as exc:  # every try failed: the caller records the reason
                    yield key, exc

    def cancel(self) -> None:
        for ref in list(self.pending):
            self.ray.cancel(ref, force=True)
        self.pending.clear()


def unpack_result(result: dict) -> str:
    """A finished task's archive unpacked into a new local folder (for grader.cohort.grade._merge)."""
    folder = tempfile.mkdtemp(prefix="ray-result-")
    if result.get("archive"):
        unpack_folder(result["archive"], folder)
    return folder
