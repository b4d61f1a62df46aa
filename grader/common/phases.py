"""Where a grading job's seconds go: the one stopwatch the judge (its steps), a submission's
attempt (the judge's jobs, nbgrader's run) and ``make bench-grade``'s breakdown share.

>>> phases = Phases()
>>> ...                       # build the reference side
>>> phases.lap("reference side")
>>> phases.seconds            # {'reference side': 1.234}

This measures the grader, not learner code: nothing credited is timed with it
(:mod:`grader.checks.timing` times what is credited).
"""
from __future__ import annotations

import time


class Phases:
    """Seconds by named step; :meth:`lap` charges the time since the previous lap (or the
    start) to a step, adding up when a step repeats (one per problem of a job)."""

    def __init__(self) -> None:
        self.started = self._mark = time.monotonic()
        self.seconds: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._mark, 3)
        self._mark = now

    def record(self, name: str, seconds: float) -> None:
        """A step timed elsewhere (a judge's own phases, reported back to the attempt)."""
        self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 3)

    def resume(self) -> None:
        """Start the next lap now: the time since the previous one was charged elsewhere (with
        :meth:`record`)."""
        self._mark = time.monotonic()

    def elapsed(self) -> float:
        """Seconds since the stopwatch started."""
        return time.monotonic() - self.started
