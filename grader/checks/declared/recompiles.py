"""recompiles: no recompiles. The subject's compile count over the problem's calls as used,
credited only to one graph that the judge checked on every shape and step the problem uses
(a graph specialised to one batch size or one position fails there). Applies to problems with
``recompile_inputs`` only."""
from __future__ import annotations

from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome | None:
    problem, graph = case.problem, case.graph
    if problem.recompile_inputs is None:
        return None
    report = case.evidence.recompiles if isinstance(case.evidence.recompiles, dict) else {}
    if "error" in report:
        return CheckOutcome(False, f"your code raised while it was called repeatedly: "
                                   f"{case.learner_text(report['error'])}")
    compiles, hit = report.get("compiles"), report.get("hit_limit")
    counted = isinstance(compiles, int) and isinstance(hit, bool)
    told = case.learner_text(report.get("message", "")) if counted else "no compile count was sent"
    details = {"compiles": compiles if counted else None, "hit_limit": hit if counted else None}
    if not graph.ok:
        return CheckOutcome(False, f"{told}\nnot credited: it is credited to one graph that serves "
                                   f"every call, and your code {graph.headline}", details=details)
    if graph.general:
        return CheckOutcome(False, f"{told}\n{graph.general}", details=details)
    ok = counted and compiles <= problem.max_compiles and not hit
    return CheckOutcome(ok, f"{told}\n(the graph was checked by the grader on every call: one graph "
                            f"serves them all)" if ok else told, details=details)


CHECK = Check("recompiles", "no recompiles", {Need.GRAPH, Need.COMPILE_COUNT}, decide,
              requires=("correctness",))
