"""speed: the judge's own compile of the learner's graph timed against the baseline (and the
reference solution, when at hand), interleaved (:mod:`grader.checks.timing`, targets in
:mod:`grader.checks.targets`); credited only for correct outputs, to one graph that serves every
call the problem makes (a model that compiles again and again is as slow as its compiles)."""
from __future__ import annotations

from grader.checks import correctness, targets
from grader.checks import _torch_internals as ti
from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    graph = case.graph
    custom_op = case.outcomes.get("custom_op")
    if custom_op is not None and not custom_op.ok:
        # Inductor compiles the graph from what the operator's fake says of its output (shape,
        # dtype, strides): a fake found wrong would be trusted there, and the compiled graph
        # would fail or compute on the wrong layout. Nothing of it is timed.
        return CheckOutcome(False, "not timed: the graph is compiled from what your custom "
                                   "operator's fake says of its output, and the custom-operator "
                                   "check found it wrong (above): fix that first", "fail")
    recompiles = case.outcomes.get("recompiles")
    if recompiles is not None and not recompiles.ok and graph is not None and graph.ok:
        # Say which part of the recompile check failed, not a guess.
        why = recompiles.message.splitlines()
        return CheckOutcome(False, "not timed: speed is credited to one graph that "
                                   "serves every call the problem makes, and the "
                                   "recompile check found that yours does not:\n"
                                   + "\n".join(why[-3:]), "fail")
    return _timed(case)


def _timed(case) -> CheckOutcome:
    problem, side, graph = case.problem, case.side, case.graph
    said = case.evidence.correctness
    if said is not None and not said.ok:
        return CheckOutcome(False, "speed not measured: the outputs are wrong", "fail")
    if not graph.ok:
        return CheckOutcome(False, f"not timed: speed is measured on the one graph your code "
                                   f"compiles to, and it {graph.headline}", "fail")
    pool, expected = case.pool()
    target = problem.target if side.reference is not None else targets.self_check_target(problem)
    with ti.quiet_torch_logs():
        learner = case.timed(graph.module, case.compile_options())
        verdict = targets.judge_speed(learner, side.base_timed, pool, reference=side.reference,
                                      target=target, device=case.device, budget_s=case.budget_s)
    details = verdict.to_dict()
    details["with_reference"] = side.reference is not None
    text = str(verdict)
    if problem.reference_eager_baseline and side.reference is not None:
        text += ("\n  (the baseline is the reference solution's own model run eagerly: the "
                 "speedup credited is what compiling gains, not a better algorithm)")
    outcome = CheckOutcome(verdict.passed, text, verdict.verdict, details)
    for index, output in verdict.comparison.last_outputs.get("learner", []):
        why = correctness.compare_output(output, expected[index], "a timed run's output")
        if why is not None:
            outcome.ok, outcome.verdict = False, "fail"
            outcome.message = f"{why}; speed is only credited for correct outputs"
            break
    return outcome


CHECK = Check("speed", "speedup target", {Need.GRAPH, Need.TIMINGS}, decide,
              requires=("correctness",), after=("recompiles", "custom_op"), phase="check speed")
