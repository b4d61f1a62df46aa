"""ps3 q1's job figures, synthetic, in the shape of this CPU's (a cold compile of a few seconds,
~140 us a call eager, ~55 us compiled), three rounds with a little spread between them. In a
run they are the judge's own measurement (grader.checks.jobs.measure, about a minute of cold
compiles); tests that are not about that measurement judge on these instead."""
from __future__ import annotations

from grader.checks.jobs import JobFigures
from grader.problems import get_problem

MODES = get_problem("ps3.q1").plan.modes
PER_CALL_S = {"none": 140e-6, "default": 55e-6, "reduce-overhead": 55e-6, "max-autotune": 53e-6,
              "max-autotune-no-cudagraphs": 53e-6}
COMPILE_S = {"none": 0.002, "default": 5.0, "reduce-overhead": 5.0, "max-autotune": 5.4,
             "max-autotune-no-cudagraphs": 5.4}
ALIKE = {"none": "none", "default": "default", "reduce-overhead": "default",
         "max-autotune": "max-autotune", "max-autotune-no-cudagraphs": "max-autotune"}


def figures(first: dict = COMPILE_S, per_call: dict = PER_CALL_S,
            rounds: tuple = (1.0, 1.04, 0.97)) -> JobFigures:
    """Figures of three rounds, each round's compiles scaled by one of ``rounds``."""
    measured = sorted(set(ALIKE.values()))
    made = [{"first_call_s": {m: first[m] * (1 if m == "none" else w) for m in measured},
             "samples": {m: [per_call[m] * (1 + 0.01 * ((i % 5) - 2)) for i in range(7)]
                         for m in measured}} for w in rounds]
    return JobFigures(MODES, "none", made, dict(ALIKE))
