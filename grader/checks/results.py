"""The vocabulary of a result, in one place: the statuses a problem's result can have, and the
checks (name, title, order) that a problem can ask for.

A worker's result is a JSON dict (``{"status": ..., "checks": {name: {...}}}``) because it
crosses a process boundary; :mod:`grader.isolation.verify` checks its shape before anything reads it.
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
    TAMPERED = "tampered"            # the learner's code replaced something the grader relies on
    REFUSED = "refused"              # the static check refused the code before it ran
    GRADER_ERROR = "grader_error"    # the grader itself failed
    TIMEOUT = "timeout"              # the worker did not finish in time (reported by the parent)
    CRASHED = "crashed"              # the worker died before reporting (reported by the parent)
    REJECTED = "rejected"            # the worker's report could not be trusted (parent)

    def __str__(self) -> str:  # the same text on every Python (3.12 changed Enum formatting)
        return self.value


# Tuples, not sets: a str-valued Enum member equals its value but does not hash like it, and
# statuses read back from JSON are plain strings.
# What a worker may report itself; the others are decided by the process that started it.
WORKER_STATUSES = (Status.OK, Status.LEARNER_ERROR, Status.TAMPERED, Status.REFUSED,
                   Status.GRADER_ERROR)
# Results about the process, not the code: worth another try (never cached).
PROCESS_FAILURES = (Status.TIMEOUT, Status.CRASHED, Status.REJECTED)


@dataclasses.dataclass(frozen=True)
class Check:
    """One kind of check a problem can ask for: its name in results and ``TEST_CELLS``, and
    the title a learner reads."""

    name: str
    title: str


# The registry, in the order the worker runs them: speed and job last, because they are only
# measured for correct outputs.
REGISTRY: tuple[Check, ...] = (
    Check("correctness", "outputs match the original"),
    Check("fullgraph", "compiles with fullgraph=True"),
    Check("breaks", "no graph breaks"),
    Check("recompiles", "no recompiles"),
    Check("fusion", "kernel count"),
    Check("speed", "speedup target"),
    Check("job", "total time for the job (compile + calls)"),
)
CHECKS: tuple[str, ...] = tuple(c.name for c in REGISTRY)
CHECK_TITLES: dict[str, str] = {c.name: c.title for c in REGISTRY}
