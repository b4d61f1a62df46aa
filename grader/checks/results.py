"""The vocabulary of a result, in one place: the statuses a problem's result can have, and the
checks (name, title, order) that a problem can ask for.

A problem's result is a JSON dict (``{"status": ..., "checks": {name: {...}}}``) because it
crosses a process boundary (the judge's, :mod:`grader.isolation.judge`, to the process that scores
it); it is read through :class:`ProblemResult`.
The names it may contain are defined here, and every module compares against these.
"""
from __future__ import annotations

import dataclasses
import enum


class Status(str, enum.Enum):
    """Why a problem's result is what it is. A ``str``: it travels in JSON as its value and
    compares equal to it."""

    OK = "ok"                        # measured: the checks say how it went
    LEARNER_ERROR = "learner_error"  # the learner's code raised while loading or building
    REFUSED = "refused"              # the static check refused the code before it ran
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


@dataclasses.dataclass(frozen=True)
class Check:
    """One kind of check a problem can ask for: its name in results and ``TEST_CELLS``, and
    the title a learner reads."""

    name: str
    title: str


# The registry, in the order the judge decides them: speed last, because it is only measured
# for correct outputs. "rule" and "job" are a planning question's (grader.problems.JobPlan).
REGISTRY: tuple[Check, ...] = (
    Check("correctness", "outputs match the original"),
    Check("fullgraph", "compiles with fullgraph=True"),
    Check("breaks", "no graph breaks"),
    Check("recompiles", "no recompiles"),
    # The judge's own Inductor compile of the learner's graph against the original's eager
    # outputs: what torch.compile makes of the code, where "correctness" checks the code run
    # eagerly (ps7: code whose compiled result differs from its eager one).
    Check("compiled", "compiled with Inductor, matches eager"),
    Check("fusion", "kernel count"),
    # A custom operator the learner registered (ps8), rebuilt by the judge around the problem's
    # own kernel: its fake against the real output on every shape, its autograd formula against
    # the library's gradient, and the model's graph calling it (grader.checks.custom_ops).
    Check("custom_op", "the custom operator: fake and autograd agree with the library"),
    # ATen operators in the learner's captured graph, against the problem's bound: a Python loop
    # over rows that compiles once (padded to a fixed count) still puts a copy of its body in
    # the graph for every row (ps3 q2).
    Check("operators", "operators in the graph (one batched computation, no per-row copies)"),
    Check("speed", "speedup target"),
    Check("rule", "the rule answers one of the modes for every job size"),
    Check("job", "the rule's choices on hidden jobs (compile + calls)"),
)
CHECKS: tuple[str, ...] = tuple(c.name for c in REGISTRY)
CHECK_TITLES: dict[str, str] = {c.name: c.title for c in REGISTRY}


@dataclasses.dataclass
class CheckOutcome:
    """What one check reported: passed or not, the learner-facing message, the verdict of a
    timed check ('pass', 'fail', 'inconclusive'), and the figures it measured (``details``:
    speedups, samples, graph counts, breaks ...). Reads like the JSON it came from too
    (``outcome["with_reference"]``, ``outcome.get("speedups")``)."""

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

    def get(self, key: str, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def __getitem__(self, key: str):
        if key in ("ok", "message") or (key == "verdict" and self.verdict is not None):
            return getattr(self, key)
        return self.details[key]


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
