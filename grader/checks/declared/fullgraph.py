"""fullgraph: the learner's model is one graph, as the judge checks it: captured with
``fullgraph=True`` by the subject, rebuilt by the judge from data, computing what the original
computes on fresh inputs of every class, with no break in the calls the problem makes."""
from __future__ import annotations

from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    graph = case.graph
    return CheckOutcome(graph.ok, graph.message, details={
        "breaks": [] if graph.ok else case.breaks()})


CHECK = Check("fullgraph", "compiles with fullgraph=True", {Need.GRAPH}, decide,
              requires=("correctness",))
