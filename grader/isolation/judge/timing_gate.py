"""A gate a child forked from the judge (or from its zygote) waits at before it times anything,
while the judge waits for the next subject's imports: the child does its untimed checks of the
learner's graph meanwhile, and the machine is quiet once it times.

A child forked from the judge inherits a :class:`Gate` (a pipe; the judge opens it by closing
the writing end). A child of the zygote (:class:`grader.isolation.judge.graph_child.Zygote`, a
process of its own) waits at a gate the zygote makes for its request and opens once the judge
sends the request's token on a pipe the two keep for that (:func:`await_token`); the child's
handler finds it with :func:`zygote_gate`.
"""
from __future__ import annotations

import os
import select
import time


class Gate:
    """A child forked from this process waits at the gate (:meth:`pass_through`) until this
    process opens it (:meth:`open`), meanwhile doing what needs no quiet machine: the judge's
    untimed checks of a learner's graph while the next subject imports torch
    (``before_open``: :meth:`grader.isolation.judge.subject_session.NextSubject.ready`), its
    timing only after. A pipe: :meth:`open` closes its writing end, the child holds none
    (:meth:`in_the_child`), so the child's read ends."""

    def __init__(self, before_open=None) -> None:
        self.before_open = before_open
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)

    def open(self) -> bool:
        """(In this process.) ``before_open()``, then open the gate, once; what
        ``before_open`` returned (``False`` where the gate was open already)."""
        if self.write_fd is None:
            return False
        try:
            return bool(self.before_open()) if self.before_open is not None else False
        finally:
            os.close(self.write_fd)
            self.write_fd = None

    def in_the_child(self) -> None:
        """(First in the forked child.) Hold no writing end: the gate opens when this
        process's closes."""
        if self.write_fd is not None:
            os.close(self.write_fd)
            self.write_fd = None

    def pass_through(self) -> None:
        """(In the child.) Return once the gate is open."""
        while os.read(self.read_fd, 1):
            pass

    def close(self) -> None:
        """(In this process, once no child waits.) Close the pipe, without ``before_open``."""
        self.in_the_child()
        os.close(self.read_fd)


# In the zygote and its child: the gate of the request at hand (:func:`zygote_gate`).
zygote_gate_now: Gate | None = None
# How long the zygote waits for the judge to open a request's gate (past it, it opens it).
GATE_WAIT_S = 300.0


def zygote_gate():
    """(In a child of the zygote.) What to call before the first timed check, where the
    request came with a gate (``Zygote.run``'s ``meanwhile``); else None."""
    return zygote_gate_now.pass_through if zygote_gate_now is not None else None


def await_token(gate_fd: int, token: int, gate: Gate) -> None:
    """(In the zygote.) Open ``gate`` once the judge has sent ``token`` on ``gate_fd`` (tokens of
    earlier requests, sent after their child had ended, are passed over)."""
    deadline = time.monotonic() + GATE_WAIT_S
    try:
        while time.monotonic() < deadline:
            if not select.select([gate_fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                break
            data = os.read(gate_fd, 8)
            if len(data) < 8 or int.from_bytes(data, "little") >= token:
                break
    finally:
        gate.open()
