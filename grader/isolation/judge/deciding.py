"""The judge's last step for one problem: each wanted check decided by its declaration
(:mod:`grader.checks.declared`), in the declared order, on a :class:`JudgedCase` (the problem,
the subject's evidence, the judge's verdict on the rebuilt graph, the reference side); here in
the judge, or in a child of it (:mod:`grader.isolation.judge.judge_child`). Nothing here names a
check or a problem set."""
from __future__ import annotations

import dataclasses

from grader.checks import _torch_internals as ti
from grader.checks import correctness, declared
from grader.checks.results import CheckOutcome, Need, ProblemResult
from grader.isolation.judge.evidence import graph as graph_evidence
from grader.isolation.judge.evidence import outputs
from grader.isolation.judge.evidence.record import Evidence
from grader.isolation.judge.judge_job import JudgeJob
from grader.isolation.judge.reference_side import ReferenceSide, timed_version, traced_inputs
from grader.isolation.judge.subject_session import learner_text
from grader.problems import NO_COMPILE, Problem, seeded_generator

# What the learner reads when the grader itself failed (the traceback goes to the instructor).
GRADER_FAILED = ("the grader itself failed while checking this problem ({what}): this is not a "
                 "verdict on your code; it is flagged for your instructor, who will grade it "
                 "by hand")


@dataclasses.dataclass
class JudgedCase:
    """One problem as a declared check's ``decide`` reads it (the protocol is
    :class:`grader.checks.results.Case`): the subject's evidence, the judge's verdict on the
    rebuilt graph (where a wanted check needs it), the reference side, and the outcomes decided
    so far."""

    problem: Problem
    side: ReferenceSide
    evidence: Evidence
    device: str
    budget_s: float
    graph: graph_evidence.GraphVerdict | None = None
    outcomes: dict = dataclasses.field(default_factory=dict)

    def compile_options(self, compiling: bool = False) -> dict:
        """The problem's compile options with the learner's choice; ``compiling``: without a mode
        that means not compiling (the check compiles all the same)."""
        options = {**self.problem.learner_compile, **self.evidence.choice}
        if compiling and options.get("mode") == NO_COMPILE:
            options = {k: v for k, v in options.items() if k != "mode"}
        return options

    def timed(self, module, options: dict):
        """``module`` as a timed measurement calls it (:func:`timed_version`)."""
        return timed_version(module, self.problem, options)

    def traced_inputs(self, seed: int) -> tuple:
        return traced_inputs(self.problem, self.device, seed)

    def on_every_class(self, classes: dict, candidate, tolerance=None) -> list:
        """``candidate`` against the original run eagerly, on fresh inputs of each class."""
        return outputs.on_every_class(classes, candidate, self.side.base_eager, self.problem,
                                      self.device, tolerance=tolerance)

    @staticmethod
    def class_lines(reports: list) -> str:
        return outputs.class_lines(reports)

    @staticmethod
    def learner_text(text: str) -> str:
        return learner_text(text)

    def breaks(self) -> list[dict]:
        """The graph breaks the subject reported (its words: feedback only)."""
        return graph_evidence.breaks(self.evidence)

    def graph_operators(self) -> tuple | None:
        return graph_evidence.graph_operators(self.graph, self.evidence, self.problem)

    def pool(self) -> tuple[list, list]:
        """Inputs from fresh seeds for timing, and the original's eager outputs on them."""
        seeds = correctness.fresh_seeds(self.problem.pool_size)
        pool = [self.problem.make_inputs(seeded_generator(s), self.device) for s in seeds]
        with ti.quiet_torch_logs():
            expected = [self.side.base_eager(*args) for args in pool]
        return pool, expected


def decide(problem: Problem, side: ReferenceSide, ev: Evidence, wanted: list[str],
            device: str, job: JudgeJob, lap, before_timing=None) -> dict[str, CheckOutcome]:
    """Decide the wanted checks, each by its declaration (:mod:`grader.checks.declared`), in
    the declared order: a check whose requirement failed is not decided (it fails with the
    requirement's reason); the rebuilt graph is checked once, when the first check that
    needs it comes. ``before_timing()``, where given, is called once before the first check
    that times (the machine's other work done first: the next subject's imports)."""
    case = JudgedCase(problem, side, ev, device,
                budget_s=float(job.budget_s or problem.budget_s))
    graph_validated = False
    for check in problem.parts:
        if check.name not in wanted:
            continue
        failed = next((c for c in problem.parts if c.name in check.requires
                       and c.name in case.outcomes and not case.outcomes[c.name].ok), None)
        if failed is not None:
            # The gate (docs/design.md, "A score means learned it"): nothing is credited,
            # or measured, past a requirement that failed.
            case.outcomes[check.name] = failed.gated()
            continue
        if Need.GRAPH in check.needs and not graph_validated:
            case.graph, graph_validated = graph_verdict(case), True
            lap("graph checks")
        if Need.TIMINGS in check.needs and before_timing is not None:
            before_timing()
            before_timing = None
            lap("next subject")
        outcome = check.decide(case)
        if outcome is not None:
            case.outcomes[check.name] = outcome
        if check.phase:
            lap(check.phase)
    return case.outcomes


def graph_verdict(case: JudgedCase) -> graph_evidence.GraphVerdict:
    """The judge's verdict on the learner's rebuilt graph
    (:func:`grader.isolation.judge.evidence.graph.validate`), failed where it is one graph but not
    the problem set's lesson (``Problem.lessons``, declared by the set): no structural point
    either."""
    verdict = graph_evidence.validate(case.problem, case.side, case.evidence, case.device)
    if not verdict.ok:
        return verdict
    case.graph = verdict
    for lesson in case.problem.lessons:
        why = lesson(case)
        if why:
            return dataclasses.replace(verdict, ok=False, message=(
                f"compiles to one graph, but not one that does what this problem teaches: "
                f"{why}"))
    return verdict


def with_the_gate(problem: Problem, wanted: list[str]) -> list[str]:
    """``wanted``, with every check a wanted one requires added (a structural or speed point
    needs correct outputs on every class of inputs: :attr:`grader.checks.results.Check.requires`)."""
    return declared.with_requirements(problem.parts, wanted)


def stop(result: ProblemResult, status, message: str) -> None:
    """``result`` ended with ``status`` and ``message``: no check decided."""
    result.status, result.message, result.checks = status, message, {}
