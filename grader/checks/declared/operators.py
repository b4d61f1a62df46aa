"""operators: the ATen operators in the learner's graph (rebuilt by the judge), against the
problem's ``max_operators``: a Python loop over rows that compiles once (padded to a fixed
count) still puts a copy of its body in the graph for every row (ps3 q2)."""
from __future__ import annotations

import collections

from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    graph = case.graph
    if not graph.ok:
        return CheckOutcome(False, f"operators not counted: they are counted on the one graph "
                                   f"your code compiles to, and it {graph.headline}")
    counts = collections.Counter(
        str(node.target) for node in graph.module.graph_module.graph.nodes
        if node.op == "call_function" and str(node.target).startswith("aten."))
    total, limit = sum(counts.values()), case.problem.max_operators
    most = ", ".join(f"{name.rsplit('.', 1)[0]} x{n}" for name, n in counts.most_common(4))
    details = {"operators": total, "max_operators": limit, "counts": dict(counts)}
    if total <= limit:
        return CheckOutcome(True, f"your graph holds {total} ATen operators (at most {limit}: "
                                  f"{most})", details=details)
    return CheckOutcome(False, f"your graph holds {total} ATen operators, more than the {limit} "
                               f"this problem allows ({most}): a Python loop puts a copy of its "
                               f"body into the graph for every iteration it runs, even where the "
                               f"graph compiles only once (a loop over a fixed, padded number of "
                               f"rows); the lesson is one computation for the whole batch",
                        details=details)


def _allowed(problem) -> str:
    return "" if problem.max_operators is not None else \
        "the 'operators' check needs max_operators"


CHECK = Check("operators", "operators in the graph (one batched computation, no per-row copies)",
              {Need.GRAPH}, decide, requires=("correctness",), allowed=_allowed)
