"""``Need.CUSTOM_OP``: the learner's registration of the problem's custom operator, asked
of the subject as graphs (never code) and rebuilt by the judge into an operator of its own
around the problem's kernel (:mod:`grader.checks.custom_ops`); the learner's graphs call that
one. Fills ``custom_op_wire`` (the registration as data), ``custom_op`` and ``operators`` (the
graph name the learner's graphs call it by)."""
from __future__ import annotations

from grader.checks import custom_ops
from grader.isolation.judge.subject_session import SubjectSession
from grader.problems import Problem


def ask(subject: SubjectSession, problem: Problem, ev) -> None:
    """The learner's registration of the problem's custom operator, as graphs (never code),
    rebuilt into the judge's own operator around the problem's kernel: the learner's graphs
    call that one (:mod:`grader.checks.custom_ops`)."""
    reply, blob = subject.request({"op": "custom_op", "problem": problem.key})
    rebuild(problem, ev, reply, blob)


def rebuild(problem: Problem, ev, reply: dict, blob: bytes) -> None:
    """The judge's operator rebuilt from the registration data ``(reply, blob)`` into ``ev``
    (here, and again in a child of the judge's zygote from the same data)."""
    ev.custom_op_wire = (reply, blob)
    ev.custom_op = custom_ops.rebuild(problem.custom_op, reply, blob)
    if ev.custom_op.op is not None:
        ev.operators = {problem.custom_op.graph_name: ev.custom_op.op}
