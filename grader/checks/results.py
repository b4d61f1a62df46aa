"""The vocabulary of a result, in one place: the statuses a problem's result can have, the
evidence a check may need (:class:`Need`) and the form a check is declared in (:class:`Check`;
the checks themselves are :mod:`grader.checks.declared`, one module each).

A problem's result is a JSON dict (``{"status": ..., "checks": {name: {...}}}``) because it
crosses a process boundary (the judge's, :mod:`grader.isolation.judge.steps`, to the process that
scores it); it is read through :class:`ProblemResult`.
The names it may contain are defined here, and every module compares against these.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, Protocol


class Status(str, enum.Enum):
    """Why a problem's result is what it is. A ``str``: it travels in JSON as its value and
    compares equal to it."""

    OK = "ok"                        # measured: the checks say how it went
    LEARNER_ERROR = "learner_error"  # the learner's code raised while loading or building
    REFUSED = "refused"              # the screen refused the code before it ran
    GRADER_ERROR = "grader_error"    # the grader itself failed
    TIMEOUT = "timeout"              # the learner's process did not finish in time
    CRASHED = "crashed"              # the learner's process died before it answered
    REJECTED = "rejected"            # the learner's process broke the protocol: nothing it sent was used

    def __str__(self) -> str:  # the same text on every Python (3.12 changed Enum formatting)
        return self.value


# Tuples, not sets: a str-valued Enum member equals its value but does not hash like it, and
# statuses read back from JSON are plain strings.
# Statuses of a result the judge decided from the learner's process's answers.
DECIDED_STATUSES = (Status.OK, Status.LEARNER_ERROR, Status.REFUSED,
                   Status.GRADER_ERROR)
# Results about the process, not the code: worth another try (never cached).
PROCESS_FAILURES = (Status.TIMEOUT, Status.CRASHED, Status.REJECTED)


class Need(str, enum.Enum):
    """The evidence a check is decided on. The judge gathers, for each problem, what the checks
    it decides need, and nothing else (:meth:`grader.isolation.judge.steps.Judge.grade`)."""

    # The learner's outputs on inputs the judge drew from fresh seeds (the subject runs the
    # learner's code eagerly; the judge compares them with the original's while it runs).
    OUTPUTS = "outputs"
    # The graph of the learner's traced call, captured by the subject and rebuilt by the judge
    # from data, then checked by the judge on every class of inputs and on the problem's calls as
    # used (``case.graph``: a :class:`grader.isolation.judge.evidence.graph.GraphVerdict`).
    GRAPH = "graph"
    # The problem's calls as used: a fresh model compiled with fullgraph=True and called
    # ``usage_calls`` times, how often it compiled and whether a call raised (``case.evidence
    # .recompiles``).
    COMPILE_COUNT = "compile count"
    # The learner's custom operator, shipped as graphs and rebuilt around the problem's kernel.
    CUSTOM_OP = "custom operator"
    # A planning rule's answer for each job size the judge asked about.
    RULE_ANSWERS = "rule answers"
    # The judge's own timings of the learner's graph against the baseline and the reference
    # (nothing of the learner's runs while it times).
    TIMINGS = "timings"
    # The judge's own measured cost of each way of running a planning question's job.
    JOB_FIGURES = "job figures"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class EvidencePart:
    """A kind of evidence declared beside the check that needs it, not in the judge: a check
    lists it in ``needs`` as it lists a :class:`Need`, and the judge asks the subject for it
    only where a wanted check does (:mod:`grader.isolation.judge.evidence.declared`).

    - ``name``: its name among the parts of a problem's checks; the judge keeps its answer in
      ``case.evidence.declared[name]``;
    - ``answer(model, problem)``: run in the subject, beside the learner's code, on the model the
      learner's cells built; returns JSON data (an exception raised in the learner's code is
      their error, any other the grader's);
    - ``validate(data, problem)``: run in the judge on what the subject sent (anything: the
      learner may have forged it); returns the data the check reads (JSON, so that it reaches a
      child of the judge's zygote), or raises ``ValueError``: the answer is refused
      (``Status.REJECTED``).
    """

    name: str
    answer: Callable[[Any, Any], Any]
    validate: Callable[[Any, Any], Any]

    def __str__(self) -> str:
        return self.name


# The needs for which the judge builds the problem's reference side with the instructor's
# reference solution (it sizes the judge's budget for a learner's graph, and is timed).
NEEDS_A_REFERENCE = (Need.GRAPH, Need.TIMINGS, Need.JOB_FIGURES)


class Case(Protocol):
    """What a check's ``decide`` is given: one problem's evidence, as the judge gathered and
    checked it (:class:`grader.isolation.judge.deciding.JudgedCase` is the one there is). Only what
    the check declared it needs is there; the rest is ``None`` or empty."""

    problem: Any            # the grader.problems.Problem
    device: str
    evidence: Any           # what the subject sent, checked (judge.evidence.record.Evidence)
    graph: Any              # Need.GRAPH: the judge's verdict on the rebuilt graph, or None
    side: Any               # the problem's reference side (baseline, reference, job figures)
    outcomes: dict          # the checks decided so far, by name (the declared order)
    budget_s: float         # the timing budget of this job

    def compile_options(self, compiling: bool = False) -> dict: ...   # the learner's choice
    def timed(self, module, options: dict): ...          # compiled as the speed check times it
    def traced_inputs(self, seed: int) -> tuple: ...     # what the graph is captured on
    def on_every_class(self, classes: dict, candidate, tolerance=None) -> list: ...
    def class_lines(self, reports: list) -> str: ...
    def learner_text(self, text: str) -> str: ...        # text from the subject, marked and cut
    def breaks(self) -> list[dict]: ...                  # the breaks the subject reported
    def graph_operators(self) -> tuple | None: ...
    def pool(self) -> tuple[list, list]: ...             # timing inputs, the original's outputs


@dataclasses.dataclass(frozen=True)
class Check:
    """One check, declared in one place (a module of :mod:`grader.checks.declared`, or a
    problem set's own): the judge reads nothing else to decide it.

    - ``name``: its name in results and ``TEST_CELLS``; ``title``: what a learner reads
      (``training_title`` for a training problem, where it differs);
    - ``needs``: the evidence it is decided on (:class:`Need`, or an :class:`EvidencePart`
      declared beside it): the judge asks the subject for it, and prepares it (the rebuilt
      graph), only where a wanted check needs it;
    - ``decide(case)``: its outcome (:class:`CheckOutcome`), or ``None`` where it does not apply
      to this problem (nothing reported);
    - ``requires``: checks that gate this one: each is decided first, added to a job that wants
      this one, and when one fails this one is not decided: it fails with that check's
      ``gate_message``;
    - ``after``: checks whose outcomes ``decide`` reads when they were decided (order only);
    - ``allowed(problem)``: why a problem cannot ask for it ('' : it can);
    - ``phase``: the name its decision is timed under in the job's phases ('' : none of its own).
    """

    name: str
    title: str
    needs: frozenset
    decide: Callable[[Case], "CheckOutcome | None"]
    requires: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    gate_message: str = ""
    allowed: Callable[[Any], str] | None = None
    phase: str = ""
    training_title: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "needs", frozenset(
            n if isinstance(n, EvidencePart) else Need(n) for n in self.needs))

    def gated(self) -> "CheckOutcome":
        """The outcome of a check this one gates, when this one failed."""
        return CheckOutcome(False, self.gate_message, "fail", {"gated_by": self.name})


@dataclasses.dataclass
class CheckOutcome:
    """What one check reported: passed or not, the learner-facing message, the verdict of a
    timed check ('pass', 'fail', 'inconclusive'), and the figures it measured (``details``:
    speedups, samples, graph counts, breaks ...). Read through its fields
    (``outcome.details["with_reference"]``); its JSON form is :meth:`to_dict`'s, read back by
    :meth:`from_dict`."""

    ok: bool
    message: str = ""
    verdict: str | None = None
    details: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> "CheckOutcome":
        rest = {k: v for k, v in d.items() if k not in ("ok", "message", "verdict")}
        return cls(bool(d.get("ok")), str(d.get("message", "")), d.get("verdict"), rest)

    def to_dict(self) -> dict:
        out = {"ok": self.ok, "message": self.message, **self.details}
        if self.verdict is not None:
            out["verdict"] = self.verdict
        return out

    @property
    def final_verdict(self) -> str:
        """The verdict, or pass/fail for a check that only says ok."""
        return self.verdict or ("pass" if self.ok else "fail")


@dataclasses.dataclass
class ProblemResult:
    """One problem's result: the judge writes it as JSON (:meth:`to_dict`), and whatever reads a
    result reads it through :meth:`from_dict`. ``extra`` keeps what the grader's own bookkeeping
    adds (phases, sandbox, the learner's process's output tail, seconds)."""

    status: str
    problem: str = ""
    message: str = ""
    device: str = ""
    device_class: str = ""
    checks: dict[str, CheckOutcome] = dataclasses.field(default_factory=dict)
    extra: dict = dataclasses.field(default_factory=dict)

    _FIELDS = ("status", "problem", "message", "device", "device_class", "checks")

    @classmethod
    def from_dict(cls, d: dict) -> "ProblemResult":
        checks = {name: CheckOutcome.from_dict(out) for name, out in (d.get("checks") or {}).items()}
        return cls(d.get("status", Status.GRADER_ERROR), str(d.get("problem", "")),
                   str(d.get("message", "")), str(d.get("device", "")),
                   str(d.get("device_class", "")), checks,
                   {k: v for k, v in d.items() if k not in cls._FIELDS})

    def to_dict(self) -> dict:
        out = {"status": self.status, "problem": self.problem, **self.extra}
        for name in ("message", "device", "device_class"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        if self.checks or self.status == Status.OK:
            out["checks"] = {name: c.to_dict() for name, c in self.checks.items()}
        return out

    def outcome(self, name: str) -> CheckOutcome:
        """The check ``name``; a result that is not OK fails every check with its message."""
        if self.status != Status.OK:
            return CheckOutcome(False, self.message or str(self.status))
        return self.checks.get(name) or CheckOutcome(False, f"{name} was not checked")
