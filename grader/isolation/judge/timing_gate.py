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
import struct
import time


class Gate:
    """A child forked from this process waits at the gate (:meth:`pass_through`) until this
    process opens it (:meth:`open`), meanwhile doing what needs no quiet machine: the judge's
    untimed checks of a learner's graph while the next subject imports torch
    (``before_open``: :meth:`grader.isolation.judge.subject_session.NextSubject.ready`), its
    timing only after. A pipe: :meth:`open` closes its writing end, the child holds none
    (:meth:`in_the_child`), so the child's read ends. The child also says when it came to the
    gate (a second pipe: the monotonic clock is one for every process), so that its time limit
    leaves out only what it spent waiting there (:meth:`held_s`)."""

    def __init__(self, before_open=None) -> None:
        self.before_open = before_open
        self.opened_at: float | None = None
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        self.arrived_r, self.arrived_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

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
            self.opened_at = time.monotonic()

    def open_for_child(self) -> float:
        """(In this process, while a child forked since the gate was made runs: ``run_bounded``'s
        ``meanwhile``.) :meth:`open`, then :meth:`held_s`."""
        self.open()
        return self.held_s()

    def held_s(self) -> float:
        """How long a child waited at the gate before it opened (0 where none came to it
        before, or it is not open yet)."""
        held = 0.0
        while self.opened_at is not None:
            try:
                data = os.read(self.arrived_r, 8)
            except BlockingIOError:
                break
            if len(data) < 8:
                break
            held = max(held, self.opened_at - struct.unpack("d", data)[0])
        return held

    def in_the_child(self) -> None:
        """(First in the forked child.) Hold no writing end: the gate opens when this
        process's closes."""
        if self.write_fd is not None:
            os.close(self.write_fd)
            self.write_fd = None

    def pass_through(self) -> None:
        """(In the child.) Say when it came, then return once the gate is open."""
        try:
            os.write(self.arrived_w, struct.pack("d", time.monotonic()))
        except OSError:     # (not said: its limit then counts the wait, as before the gate)
            pass
        while os.read(self.read_fd, 1):
            pass

    def close(self) -> None:
        """(In this process, once no child waits.) Close the pipes, without ``before_open``."""
        self.in_the_child()
        for fd in (self.read_fd, self.arrived_r, self.arrived_w):
            os.close(fd)


# In the zygote and its child: the gate of the request at hand (:func:`zygote_gate`).
zygote_gate_now: Gate | None = None
# How long the zygote waits for the judge to open a request's gate (past it, it opens it).
GATE_WAIT_S = 300.0


def zygote_gate():
    """(In a child of the zygote.) What to call before the first timed check, where the
    request came with a gate (``Zygote.run``'s ``meanwhile``); else None."""
    return zygote_gate_now.pass_through if zygote_gate_now is not None else None


def send_token(gate_fd: int, token: int) -> None:
    """(In the judge.) Open the gate of the zygote's request ``token``."""
    os.write(gate_fd, token.to_bytes(8, "little"))


def await_token(gate_fd: int, token: int, gate: Gate) -> float:
    """(In the zygote: ``run_bounded``'s ``meanwhile``.) Open ``gate`` once the judge has sent
    ``token`` on ``gate_fd`` (tokens of earlier requests are passed over); how long the child
    waited at it (:meth:`Gate.held_s`)."""
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
    return gate.held_s()
