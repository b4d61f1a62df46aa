"""fusion: the kernels in the judge's own Inductor compile of the learner's graph, against the
problem's ``max_kernels``."""
from __future__ import annotations

from grader.checks.fusion import fusion_report
from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    problem, graph = case.problem, case.graph
    if not graph.ok:
        return CheckOutcome(False, f"kernels not counted: they are counted on the one graph "
                                   f"your code compiles to, and it {graph.headline}")
    options = {k: v for k, v in case.compile_options().items() if k in ("mode", "dynamic")}
    rep = fusion_report(problem.traced_call(graph.module), *case.traced_inputs(0), **options)
    limit = problem.max_kernels
    ok = limit is None or rep.total <= limit
    return CheckOutcome(ok, f"{rep} (allowed: at most {limit} in all; counted in the grader's "
                            f"own compile of your graph)",
                        details={"kernels": rep.total, "generated": rep.kernels,
                                 "library": rep.library, "max_kernels": limit})


CHECK = Check("fusion", "kernel count", {Need.GRAPH}, decide, requires=("correctness",),
              phase="check fusion")
