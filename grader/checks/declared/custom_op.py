"""custom_op: a custom operator the learner registered (ps8), rebuilt by the judge around the
problem's own kernel: its fake against the real output on every shape, its autograd formula
against the library's gradient, and the model's graph calling it (:mod:`grader.checks.custom_ops`)."""
from __future__ import annotations

import random

from grader.checks import correctness, custom_ops
from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    spec = case.problem.custom_op
    return custom_ops.check(spec, case.evidence.custom_op,
                            spec.shapes(random.Random(correctness.fresh_seeds(1)[0])),
                            case.graph_operators(), correctness.fresh_seeds(1)[0])


def _allowed(problem) -> str:
    return "" if problem.custom_op is not None else \
        "the 'custom_op' check needs custom_op (an OpSpec)"


CHECK = Check("custom_op", "the custom operator: fake and autograd agree with the library",
              {Need.GRAPH, Need.CUSTOM_OP}, decide, requires=("correctness",), allowed=_allowed,
              phase="check custom operator")
