"""A judge in a process of its own (``python -m grader.isolation.judge.steps --serve``), driven by
the process that holds the gradebook (a worker of ``make grade``, a Ray task, Gradescope's
``run_autograder``) or by a notebook's kernel for self-check: :class:`JudgeProcess` sends it jobs
and reads its replies with a deadline, and starts it again when it died or hung. What goes each way
is typed (:mod:`grader.isolation.judge.judge_job`): a :class:`JudgeJob` is sent, a
:class:`JudgeReply` comes back, each converted to and from JSON in one place.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time


from grader.common.wire import ProtocolError
from grader.isolation.sandbox import channel, process
from grader.isolation.judge.judge_job import JudgeJob, JudgeReply


class JudgeProcess:
    """A judge in a process of its own, driven from a process that holds the gradebook (or from
    a notebook's kernel, for self-check). :meth:`grade` restarts it when it died or hung."""

    def __init__(self, *, env: dict | None = None, log_path: str | None = None,
                 cores: frozenset[int] | None = None):
        """``cores``: the CPU cores the judge and the subjects it starts are pinned to, its own
        (one local worker's, so two workers' timings do not share a core; with two or more, the
        judge starts each next job's subject ahead); None: not pinned, shared."""
        self.env = dict(env if env is not None else os.environ)
        # The judge imports what this process imports (this grader package first, then the same
        # path: a problem set outside the package, such as a test's, resolves the same there).
        path = [os.path.dirname(process.grader_package_dir())]
        path += [p for p in sys.path if p and os.path.isdir(p) and p not in path]
        self.env["PYTHONPATH"] = os.pathsep.join(path)
        self.log_path = log_path
        self.cores = cores
        self.proc = None
        self.reply_fd = None
        self.lock = threading.Lock()

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grader.isolation.judge.steps", "--serve", "--reply-fd",
                 str(write_fd), *(["--cores", ",".join(map(str, sorted(self.cores)))]
                                  if self.cores else [])], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(write_fd,), env=self.env, start_new_session=True)
        finally:
            os.close(write_fd)
            if log is not subprocess.DEVNULL:
                log.close()
        self.reply_fd = read_fd

    def grade(self, job: JudgeJob, timeout_s: float) -> JudgeReply:
        """The judge's reply to ``job``; a failed one (:attr:`JudgeReply.error`) when it died,
        passed ``timeout_s`` or sent something that is not a reply."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.close()   # a judge that ended (it does after a job that overran it)
                self._start()
            deadline = time.monotonic() + timeout_s
            try:
                self.proc.stdin.write(channel.encode_message(job.to_dict()))
                self.proc.stdin.flush()
                reply, _ = channel.read_message(self.reply_fd, channel.deadline_reader(deadline))
                return JudgeReply.from_dict(reply)
            except TimeoutError:
                self.close()
                return JudgeReply.failed(f"the judge did not finish within {timeout_s:.0f} s")
            except (EOFError, OSError, ProtocolError) as exc:
                self.close()
                return JudgeReply.failed(f"the judge stopped ({type(exc).__name__}: {exc})")

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                import signal

                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.proc = None
        if self.reply_fd is not None:
            os.close(self.reply_fd)
            self.reply_fd = None
