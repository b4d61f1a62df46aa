"""Where the judge's checks of one learner graph run, and under what limits: on a CPU in a child
with its own memory and time limits (:mod:`grader.isolation.judge.graph_child`), forked from the
judge for an inference problem, from the judge's zygote for a training problem (whose checks run
backward, which a child forked from a judge that ran backward could not), the evidence sent to
it as data (:func:`grader.isolation.judge.evidence.record.to_wire`); on a GPU in a child spawned for
each decision (:mod:`grader.isolation.judge.spawned_child`: a CUDA context does not survive a fork),
which builds the reference side again and rebuilds the evidence as a child of the zygote does,
with a bound on its CUDA memory instead of an address-space limit. A planning question's checks
run in the judge itself, under a time limit (:func:`time_limit`). A graph past a limit scores
nothing structural, with the reason; the child's own failure is the grader's."""
from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading

import torch

from grader.checks import _torch_internals as ti
from grader.checks import graph_artifact
from grader.checks.declared.correctness import CHECK as CORRECTNESS
from grader.checks.results import CheckOutcome, Need, ProblemResult, Status
from grader.common.phases import Phases
from grader.isolation.judge import deciding, graph_child, spawned_child, timing_gate
from grader.isolation.judge.evidence import record
from grader.isolation.judge.evidence.record import Evidence
from grader.isolation.judge.judge_job import JudgeJob
from grader.isolation.judge.reference_side import ReferenceSide
from grader.isolation.cells.source import Cell
from grader.problems import Problem, get_problem

# What the judge's zygote calls in each child it forks for a training problem's checks, and a
# child spawned on a GPU for any problem's (grader.isolation.judge.spawned_child).
TRAINING_WORKER = "grader.isolation.judge.judge_child:training_worker"
PRELOAD_COMPILER = "grader.checks._torch_internals:preload_compiler"


def in_the_zygotes_child(problem: Problem, device: str) -> bool:
    """Whether ``problem``'s checks run in a child of the judge's zygote: a training problem
    (its checks run backward) on a CPU. On a GPU every problem's run in a spawned child
    (:mod:`grader.isolation.judge.spawned_child`: a CUDA context does not survive a fork)."""
    return problem.training and problem.plan is None and device == "cpu"


def decide_in_a_child(zygote: graph_child.Zygote, problem: Problem, side: ReferenceSide,
                      ev: Evidence, wanted: list[str], device: str, job: JudgeJob,
                      phases: Phases, result: ProblemResult, limit: float,
                      gate=None) -> None:
    """:func:`grader.isolation.judge.deciding.decide` in a child of this process with its own memory
    and time limits (:mod:`grader.isolation.judge.graph_child`): the checks that compile and run the
    learner's graph. A graph past either limit scores no structural point, with the reason; the
    child's own failure is the grader's, held for a person. This process stays as it was.

    An inference problem's child is forked from this process and inherits its reference
    side; a training problem's is forked from the judge's zygote (it could not run backward
    if forked from here) and builds the reference side again itself (:func:`training_worker`)
    from the evidence, sent to it as data. On a GPU every problem's child is spawned
    (:mod:`grader.isolation.judge.spawned_child`) and does the same, its CUDA memory bounded.

    ``gate`` (a :class:`grader.isolation.judge.timing_gate.Gate` that waits for the next
    subject's imports, where the job times): the child, forked from this process or from the
    zygote, checks the graph meanwhile and times only once the gate is open; a spawned child
    starts after it."""
    allowance = child_memory_bytes(side)
    where = "zygote" if in_the_zygotes_child(problem, device) else (
        "spawned" if spawned_child.spawns(device) else "judge")
    if where != "judge":
        if gate is not None and where == "spawned" and gate.open():
            phases.lap("next subject")
        header, blob = record.to_wire(ev)
        request = {"problem": problem.key, "problem_module": job.problem_module,
                   "device": device, "wanted": list(wanted), "judge_job": job_for_the_child(job),
                   "reference_cells": [c.to_dict() for c in
                                       job.reference_cells.get(problem.key, ())],
                   "evidence": header}
        bounded = zygote.run(request, blob, seconds=limit, memory_bytes=allowance,
                             meanwhile=gate.open if gate is not None else None) \
            if where == "zygote" else \
            spawned_child.run(TRAINING_WORKER, request, blob, seconds=limit,
                              memory_bytes=allowance, device=device)
    else:
        def work() -> dict:
            if gate is not None:
                gate.in_the_child()
            return decided(problem, side, ev, wanted, device, job,
                           before_timing=gate.pass_through if gate is not None else None)

        bounded = graph_child.run_bounded(work, seconds=limit, memory_bytes=allowance,
                                          meanwhile=gate.open_for_child if gate is not None
                                          else None)
    result.extra["graph_child"] = {"ended": bounded.kind, "seconds": round(bounded.seconds, 2),
                                   "limit_s": round(limit), "memory_bytes": allowance,
                                   "forked_from": where,
                                   **({"device_memory": bounded.device_memory}
                                      if bounded.device_memory else {})}
    checks = checks_from_child(bounded.value, wanted) if bounded.kind == "done" else None
    if bounded.kind == "done" and checks is not None:
        result.checks = checks
        for name, seconds in bounded.value["phases"].items():
            phases.record(name, seconds)
        phases.record("graph child", max(0.0, bounded.seconds
                                         - sum(bounded.value["phases"].values())))
        phases.resume()
        return
    phases.lap("graph checks")
    if bounded.kind in ("time", "memory"):
        # The learner's graph needed more than the problem allows: nothing structural, the
        # reason said; the correctness verdict (the subject's outputs) stays.
        why = (f"the grader stopped checking the graph your code compiles to after "
               f"{limit:.0f} s, several times what this problem's reference needs"
               if bounded.kind == "time" else
               f"the grader's checks of the graph your code compiles to needed more than the "
               f"{allowance / 2 ** 30:.1f} GiB of {'GPU ' if where == 'spawned' else ''}memory "
               f"this problem allows them "
               f"({bounded.why})")
        result.checks = not_credited(wanted, ev, why)
        return
    deciding.stop(result, Status.GRADER_ERROR, deciding.GRADER_FAILED.format(
        what="in the judge's child process that checks your graph: " + (
            bounded.why if bounded.kind == "failed" else "it sent a malformed answer")))
    result.extra["traceback"] = bounded.traceback or bounded.why


def not_credited(wanted: list[str], ev: Evidence, why: str) -> dict[str, CheckOutcome]:
    """The outcomes of a graph the judge stopped checking (``why``): nothing structural; the
    correctness verdict (the subject's outputs, decided while it ran) stays."""
    checks = {name: CheckOutcome(False, f"not credited: {why}", "fail")
              for name in wanted if name != CORRECTNESS.name}
    return {CORRECTNESS.name: ev.correctness, **checks} if ev.correctness is not None else checks


class JudgeOverrun(BaseException):
    """The judge's own checks of one learner graph ran past their time limit (a BaseException,
    as KeyboardInterrupt is: the checks' own ``except Exception`` must not swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`JudgeOverrun` in this thread after ``seconds`` (the main thread only: a
    signal cannot reach another; elsewhere the driver's deadline on the whole job remains)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def overrun(signum, frame):  # noqa: ARG001 (signal handler)
        raise JudgeOverrun()

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def work_limit_s(problem: Problem, side: ReferenceSide) -> float:
    """How long the judge may spend on its own checks of one learner's graph (compiles, runs,
    timing): a few times what the problem's baseline and reference took to build (their
    compiles) plus its timing budget, never less than five minutes (a slow, busy machine)."""
    return max(300.0, 6 * side.seconds + 4 * problem.budget_s)


# Memory the judge's child may add to what it holds when forked, for the checks of one graph:
# room for compiling and timing (the baseline's and the reference's calls too), plus a few times
# the most bytes the problem lets a graph's tensors hold at once (ReferenceSide.graph_budget).
CHILD_MEMORY_BASE = 2 * 1024 ** 3
CHILD_MEMORY_FACTOR = 4


def child_memory_bytes(side: ReferenceSide) -> int:
    """How much the judge's child may add to its address space while it checks a learner's
    graph: :data:`CHILD_MEMORY_BASE` plus :data:`CHILD_MEMORY_FACTOR` x the graph budget's
    bytes."""
    return CHILD_MEMORY_BASE + CHILD_MEMORY_FACTOR * side.graph_budget()[1]


# What the judge's zygote calls in each child it forks for a training problem's checks.


def decided(problem: Problem, side: ReferenceSide, ev: Evidence, wanted: list[str],
            device: str, job: JudgeJob, before_timing=None) -> dict:
    """:func:`grader.isolation.judge.deciding.decide`, in a child, as the data it sends back."""
    laps = Phases()
    with ti.inductor_config_patch(compile_threads=1), \
            graph_artifact.extra_operators(ev.operators):
        checks = deciding.decide(problem, side, ev, wanted, device, job, laps.lap,
                                 before_timing)
    return {"checks": {name: c.to_dict() for name, c in checks.items()},
            "phases": laps.seconds}


def job_for_the_child(job: JudgeJob) -> dict:
    """What of the job :func:`grader.isolation.judge.deciding.decide` reads, as data (the cells are
    not sent)."""
    return dataclasses.replace(job, learner_cells=(), reference_cells={}).to_dict()


def training_worker(request: dict, blob: bytes):
    """(In a child of the judge's zygote, before its memory limit is set.) A training problem's
    reference side, built as the judge built it (the instructor's code and the judge's own, no
    learner code; Inductor's caches make the compiles quick; what only the speed check times is
    left out where the job does not ask for it), and the evidence rebuilt from its data; returns
    the checks to run under the limits."""
    module = request.get("problem_module")
    device = request["device"]
    torch.set_num_threads(1)
    problem = get_problem(request["problem"], module)
    cells = [Cell.from_dict(c) for c in request.get("reference_cells") or []]
    side = ReferenceSide.build(problem, cells or None, device, module,
                               timed=Need.TIMINGS in problem.needs(request["wanted"]))
    ev = record.from_wire(problem, request["evidence"], blob)
    return lambda: decided(problem, side, ev, request["wanted"], device,
                           JudgeJob.from_dict(request["judge_job"]),
                           before_timing=timing_gate.zygote_gate())


def checks_from_child(value, wanted: list[str]) -> dict[str, CheckOutcome] | None:
    """The child's outcomes, each checked to be a check this job wanted, in the form a
    :class:`CheckOutcome` has; ``None`` when anything is off (the grader's failure)."""
    if not isinstance(value, dict) or not isinstance(value.get("checks"), dict) \
            or not isinstance(value.get("phases"), dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, (int, float)) and v >= 0
               for k, v in value["phases"].items()):
        return None
    out = {}
    for name, outcome in value["checks"].items():
        if name not in wanted or not isinstance(outcome, dict) \
                or not isinstance(outcome.get("ok"), bool) \
                or not isinstance(outcome.get("message"), str) \
                or outcome.get("verdict", "pass") not in ("pass", "fail", "inconclusive"):
            return None
        out[name] = CheckOutcome.from_dict(outcome)
    return out
