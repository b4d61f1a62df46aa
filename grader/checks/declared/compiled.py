"""compiled: the judge's own Inductor compile of the learner's graph (as the speed check
compiles it), run on inputs from fresh seeds, against the original's eager outputs within the
problem's stated tolerance: what torch.compile makes of the code, where "correctness" checks the
code run eagerly (ps7: code whose compiled result differs from its eager one)."""
from __future__ import annotations

from grader.checks import _torch_internals as ti
from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    problem, graph, ev = case.problem, case.graph, case.evidence
    if graph is None or not graph.ok:
        return CheckOutcome(False, "not checked: it is checked on the one graph your code "
                                   "compiles to, and it " + (graph.headline if graph
                                                            else "was not captured"))
    options = case.compile_options(compiling=True)
    reports = []
    with ti.quiet_torch_logs():
        for name, module in graph.by_class.items():
            compiled = case.timed(module, options)
            [(_, rep)] = case.on_every_class({name: ev.classes[name]}, compiled,
                                             tolerance=problem.tolerance)
            reports.append((name, rep))
    checked = sum(rep.checked for _, rep in reports)
    rtol, atol = problem.tolerance or ("the dtype's", "the dtype's")
    how = (f"the grader compiled your graph with Inductor (torch.compile, "
           f"mode={options.get('mode', 'default')!r}) and compared its outputs on "
           f"{checked} fresh inputs with the original's eager outputs (rtol={rtol}, "
           f"atol={atol})")
    if all(rep.ok for _, rep in reports):
        return CheckOutcome(True, how + ": they match.", details={"checked": checked})
    text = case.class_lines(reports).replace(
        "outputs do not match the reference:",
        "the compiled outputs do not match the original's eager ones:")
    return CheckOutcome(False, f"{how}.\n{text}\n(your code run eagerly is what the "
                               f"correctness check compares; this check compares what "
                               f"torch.compile makes of it)",
                        details={"checked": checked})


CHECK = Check("compiled", "compiled with Inductor, matches eager", {Need.GRAPH}, decide,
              requires=("correctness",), phase="check compiled")
