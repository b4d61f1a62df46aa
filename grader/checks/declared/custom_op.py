"""custom_op: a custom operator the learner registered (ps8), rebuilt by the judge around the
problem's own kernel: its fake against the real output on every shape, its autograd formula
against the library's gradient, and the model's graph calling it (:mod:`grader.checks.custom_ops`)."""
from __future__ import annotations

import random

from grader.checks import correctness, custom_ops
from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    spec = case.problem.custom_op
    outcome = custom_ops.registration_verdict(
        spec, case.evidence.custom_op, spec.shapes(random.Random(correctness.fresh_seeds(1)[0])),
        case.graph_operators(), correctness.fresh_seeds(1)[0])
    graph = case.graph
    if not outcome.ok or graph is None or not graph.ok or not graph.by_class:
        return outcome
    # Called is not enough: the model's result must come through it, on every class of inputs.
    why = custom_ops.computes_through(spec, graph.by_class, case.side.base_model,
                                      case.evidence.classes or {case.problem.inputs_name:
                                                                case.problem.make_inputs},
                                      case.device, correctness.fresh_seeds(1)[0])
    line = why or (f"and your model's result comes through it: with the library's output "
                   f"changed, yours changes as the original's does, on every kind of input")
    return CheckOutcome(not why, f"{outcome.message}\n{line}", "fail" if why else outcome.verdict,
                        outcome.details)


def _allowed(problem) -> str:
    return "" if problem.custom_op is not None else \
        "the 'custom_op' check needs custom_op (an OpSpec)"


CHECK = Check("custom_op", "the custom operator: fake and autograd agree with the library",
              {Need.GRAPH, Need.CUSTOM_OP}, decide, requires=("correctness",), allowed=_allowed,
              phase="check custom operator")
