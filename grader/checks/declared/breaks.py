"""breaks: no graph breaks. Decided on the judge's check of the rebuilt graph; where there is
no graph, the breaks the subject reported (its words, feedback only) say where."""
from __future__ import annotations

from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    graph, ev = case.graph, case.evidence
    return CheckOutcome(graph.ok, graph.message if graph.ok else _message(case), details={
        "graph_count": 1 if graph.ok else ev.graph_count,
        "breaks": [] if graph.ok else case.breaks()})


def _message(case) -> str:
    graph, ev = case.graph, case.evidence
    if graph.refused or ev.graph is not None:
        return graph.message
    count = ev.graph_count
    head = (f"{count} graphs, {len(ev.breaks)} graph breaks (reported by the process that ran "
            f"your code)") if isinstance(count, int) else "not one graph"
    return head + "\n" + graph.message


CHECK = Check("breaks", "no graph breaks", {Need.GRAPH}, decide, requires=("correctness",))
