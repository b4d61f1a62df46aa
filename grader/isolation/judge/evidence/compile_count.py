"""``Need.COMPILE_COUNT``: the problem's calls as used, asked of the subject (a fresh model
compiled with ``fullgraph=True`` and called ``problem.usage_calls`` times): how often it
compiled and whether a call raised. Fills ``recompiles`` (the subject's report, read as data:
:func:`usage_failure`, :func:`calls_made`)."""
from __future__ import annotations

from grader.checks import correctness
from grader.common.wire import Packer
from grader.isolation.judge.reference_side import traced_inputs
from grader.isolation.judge.subject_session import SubjectSession, learner_text
from grader.problems import Problem


def ask(subject: SubjectSession, problem: Problem, ev, device: str) -> None:
    """The problem as it is used: a fresh model compiled with ``fullgraph=True`` and called
    ``problem.usage_calls`` times (its recompile inputs in order, again and again, or inputs
    of its first class): how often it compiled, and whether any call raised."""
    options = {**problem.learner_compile, **ev.choice}
    calls = problem.recompile_inputs(device) if problem.recompile_inputs is not None else \
        [traced_inputs(problem, device, seed) for seed in correctness.fresh_seeds(4)]
    packer = Packer()
    reply, _ = subject.request({"op": "recompiles", "problem": problem.key,
                                "calls": packer.value(calls), "total": problem.usage_calls,
                                "dynamic": options.get("dynamic"),
                                "max_compiles": problem.max_compiles}, packer.blob())
    ev.recompiles = reply


def usage_failure(problem: Problem, ev) -> str:
    """Why the learner's model, compiled from a fresh start and called as the problem calls it,
    is not one graph on every call ('' : it is). A recompile is the recompile check's business
    where the problem has one."""
    report = ev.recompiles if isinstance(ev.recompiles, dict) else {}
    if not report:
        return "the calls the problem makes were not checked"
    if "error" in report:
        return (f"your code raised while the problem called it repeatedly: "
                f"{learner_text(report['error'])}")
    failed, hit = report.get("failed_call"), report.get("hit_limit") is True
    if isinstance(failed, int) and not hit:
        first = str(report.get("failure") or "").strip().splitlines()
        return (f"not one graph on every call the problem makes: a fresh model compiled with "
                f"fullgraph=True raised on call {failed + 1} of {problem.usage_calls}: "
                f"{learner_text(first[0] if first else 'no reason was sent')}")
    compiles = report.get("compiles")
    if problem.recompile_inputs is None and (hit or not isinstance(compiles, int)
                                             or compiles > problem.max_compiles):
        return (f"one graph does not serve every call the problem makes (from a fresh model, "
                f"fullgraph=True): {learner_text(report.get('message', 'no count was sent'))}")
    return ""


def calls_made(ev) -> int:
    """How many calls the subject made of the fresh model (0 when it did not say)."""
    report = ev.recompiles if isinstance(ev.recompiles, dict) else {}
    calls = report.get("calls")
    return calls if isinstance(calls, int) else 0
