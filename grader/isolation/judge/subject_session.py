"""The subject, seen from the judge: one sandboxed process running the learner's code
(:mod:`grader.isolation.sandbox.subject`), asked for what only it can give, with a deadline on every
request, its replies parsed as data only (:class:`SubjectSession`). When it crashes, hangs or
breaks the protocol it is :class:`SubjectGone`; when the learner's code raised there,
:class:`LearnerRaised`. The judge (:mod:`grader.isolation.judge.steps`) holds the session; nothing
here decides a point.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import tempfile
import time


from grader.checks.results import Status
from grader.common.wire import ProtocolError
from grader.isolation.sandbox import channel, process


# What the learner reads when a limit stopped their code
# (grader.isolation.sandbox.process.Running.exceeded).
EXCEEDED = {
    "disk": "your code wrote more to disk than a submission may",
    "memory": "your code used more memory than a submission may (counted as the kernel counts "
              "it: shared memory and memfd files too)",
    "processes": "your code started more processes and threads than a submission may",
}


class SubjectGone(Exception):
    """The subject stopped answering: it crashed, hung, or broke the protocol."""

    ends_the_check = True  # correctness.check_outputs lets it through

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class LearnerRaised(Exception):
    """The learner's code raised in the subject (the message is the learner's, cut short)."""

    learner_message: str = ""


class GraderFailed(Exception):
    """The grader's own code failed in the subject, where no learner code was on the way (the
    subject's traceback, for the instructor). Flagged for a person, never the learner's crash."""

    ends_the_check = True  # correctness.check_outputs lets it through

    def __init__(self, traceback_text: str):
        super().__init__("the grader's own code failed in the process that ran your code")
        self.traceback_text = traceback_text


def learner_text(message: str) -> str:
    """Text that came from the learner's process, marked as such and cut short."""
    message = str(message)
    return message if len(message) <= 1600 else message[:1600] + " [...]"


# ---------------------------------------------------------------------------------------------
# The subject, seen from the judge

def _module_dirs(module: str | None) -> list[str]:
    """Where a problem module outside the grader package lives (test fixtures): bound into the
    sandbox read-only and put on the subject's path. Nothing else of the course is."""
    if not module or module.startswith("grader."):
        return []
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return []
    return [os.path.dirname(os.path.realpath(spec.origin))]


class SubjectSession:
    """One subject process: requests with deadlines, replies parsed as data only."""

    def __init__(self, *, isolation: process.Isolation, device: str, problem_module: str | None,
                 deadline: float, memory_bytes: int | None = process.DEFAULT_MEMORY_BYTES,
                 import_ahead: bool = False):
        self.deadline = deadline
        extra = _module_dirs(problem_module)
        env = process.environment({"TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor",
                                   "TRITON_CACHE_DIR": "/tmp/triton",
                                   "PYTHONPATH": os.pathsep.join(extra)})
        self.home = None
        if not isolation.sandboxed:  # the same layout without bubblewrap: a home of its own
            self.home = tempfile.mkdtemp(prefix="subject-")
            env.update(HOME=self.home, TMPDIR=self.home,
                       TORCHINDUCTOR_CACHE_DIR=os.path.join(self.home, "inductor"),
                       TRITON_CACHE_DIR=os.path.join(self.home, "triton"))
        timeout = max(1.0, deadline - time.monotonic())
        try:
            self.running = process.start(
                [process.python_executable(), "-m", "grader.isolation.sandbox.subject",
                 *(["--import-ahead"] if import_ahead else [])],
                isolation=isolation,
                limits=process.Limits(timeout_s=timeout, memory_bytes=memory_bytes),
                read_only=extra, env=env, home=self.home, device=device)
        except BaseException:
            self._remove_home()
            raise
        self.finished: process.Finished | None = None

    def request(self, header: dict, blob: bytes = b"") -> tuple[dict, bytes]:
        try:
            self.running.send(channel.encode_message(header, blob))
            reply, data = channel.read_message(self.running.reply_fd,
                                               self.running.reader(self.deadline))
        except TimeoutError:
            raise SubjectGone(Status.TIMEOUT, "your code did not finish in time (an endless loop, "
                                              "or far too slow); it was stopped") from None
        except (EOFError, BrokenPipeError, OSError):
            raise self._gone() from None
        except ProtocolError as exc:
            raise SubjectGone(Status.REJECTED, f"the process that ran your code broke the "
                                               f"grader's protocol ({exc}); nothing it sent was "
                                               f"used") from None
        if "grader_error" in reply:
            raise GraderFailed(str(reply["grader_error"])[-6000:])
        return reply, data

    def _gone(self) -> SubjectGone:
        """Why the subject stopped answering: its own end (crashed), or the grader's failure to
        confine and start it (the launcher's report)."""
        try:
            self.running.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.running.setup_error:
            return SubjectGone(Status.GRADER_ERROR, f"the grader could not start the confined "
                                                    f"process for your code: "
                                                    f"{self.running.setup_error}")
        over = EXCEEDED.get(self.running.exceeded)
        if over:
            why = self.running.exceeded_why
            return SubjectGone(Status.CRASHED, over + (f" ({why})" if why else "")
                               + ", and was stopped")
        return SubjectGone(Status.CRASHED, self._death())

    def _death(self) -> str:
        code = self.running.proc.returncode
        if code is None:
            return "the process that ran your code stopped answering"
        if code < 0 or code > 128:
            import signal

            signum = -code if code < 0 else code - 128
            name = signal.Signals(signum).name if signum in {s.value for s in signal.Signals} \
                else str(signum)
            return (f"the process that ran your code was killed by {name}"
                    + (", probably out of memory" if name == "SIGKILL" else ""))
        return (f"the process that ran your code ended (exit status {code}) before it answered: "
                f"your code ended it (e.g. os._exit / sys.exit), or it crashed")

    def stop(self) -> process.Finished:
        """End the subject and everything it started; nothing of it runs after this returns."""
        if self.finished is None:
            try:
                if self.running.alive():
                    self.running.send(channel.encode_message({"op": "bye"}))
            except OSError:
                pass
            self.finished = self.running.finish(grace_s=5.0)
            self._remove_home()
        return self.finished

    def _remove_home(self) -> None:
        """Remove the subject's folder whatever learner code left in it (folder chains past
        PATH_MAX, folders without read rights:
        :func:`grader.isolation.sandbox.usage.remove_tree`)."""
        if self.home:
            import sys

            from grader.isolation.sandbox.usage import remove_tree

            try:
                remove_tree(self.home)
            except OSError as exc:   # not the learner's doing (their code is gone): said, not fatal
                print(f"grader: could not remove {self.home}: {exc}", file=sys.stderr, flush=True)
            self.home = None


# How long the judge waits for a subject started ahead to finish its imports (it then holds
# nothing of any learner's and is stopped: the job starts one of its own).
BOOT_S = 120.0


class NextSubject:
    """The subjects of the judge's next jobs, started while this job's subject answers.

    A subject spends its first seconds importing torch and Dynamo, before any learner code
    reaches it. Started when a job's own subject starts, the next one imports on another core
    while this job's learner code runs, and the next job finds it ready. It is the same process,
    confined the same way before its first instruction, as one started when the job arrives: it
    holds nothing until that job's first request, and no two jobs share one. A job takes one
    only where it was started for the same confinement, device, problem module and memory, and
    only when it answers; otherwise it is stopped and the job starts its own, so a subject that
    died waiting costs a start, never a grade. A set with two solution cells has two jobs a
    submission, the first of which can be short (ps3's planning rule): two wait there
    (``count``), so the second job takes one that started during the submission before.
    """

    def __init__(self) -> None:
        self.kind: dict | None = None    # the SubjectSession arguments of those waiting
        self.waiting: list[SubjectSession] = []   # oldest first

    @property
    def session(self) -> SubjectSession | None:
        """The subject the next job takes (the oldest waiting), if any."""
        return self.waiting[0] if self.waiting else None

    def start(self, count: int = 1, **kind) -> None:
        """Have ``count`` subjects for jobs of this ``kind`` (the :class:`SubjectSession`
        arguments but the deadline, which a job sets) waiting: those of another kind, or that
        died, are stopped; those waiting already count."""
        if self.kind != kind:
            self.stop()
        for session in [s for s in self.waiting if not s.running.alive()]:
            session.stop()
            self.waiting.remove(session)
        while len(self.waiting) < count:
            try:
                self.waiting.append(SubjectSession(**kind, deadline=time.monotonic() + BOOT_S,
                                                   import_ahead=True))
            except OSError:   # the job then starts its own, and says why if it cannot either
                break
        self.kind = kind

    def _answers(self, session: SubjectSession) -> bool:
        """Whether ``session`` answers a round trip (after its imports); stopped if not."""
        session.deadline = time.monotonic() + BOOT_S
        try:
            session.request({"op": "hello"})
            return True
        except (SubjectGone, GraderFailed):
            session.stop()
            return False

    def ready(self) -> bool:
        """Wait until every waiting subject has done its imports (a round trip each answers after
        them), so that what the judge measures next has the machine to itself; ``False`` when
        none is waiting or none answered (those that did not are stopped)."""
        self.waiting = [s for s in self.waiting if self._answers(s)]
        return bool(self.waiting)

    def take(self, deadline: float, **kind) -> SubjectSession | None:
        """The oldest waiting subject for a job of this ``kind``, with its ``deadline``, if one
        was started for such a job and answers (only it is waited for); ``None`` otherwise.
        Those of another kind, and one that does not answer, are stopped."""
        if self.kind != kind:
            self.stop()
            return None
        while self.waiting:
            session = self.waiting.pop(0)
            if self._answers(session):
                session.deadline = deadline
                break
        else:
            session = None
        return session

    def stop(self) -> None:
        """Stop every waiting subject (the judge ends, or the next job is of another kind)."""
        for session in self.waiting:
            session.stop()
        self.waiting, self.kind = [], None
