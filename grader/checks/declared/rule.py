"""rule: a planning question's rule (:class:`grader.problems.JobPlan`) answered one of the
plan's modes for every job size it was asked about (the judge checked each answer as it came)."""
from __future__ import annotations

from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    problem, plan = case.problem, case.evidence.plan
    shown = ", ".join(f"{n:,} calls -> {m!r}" for n, m in plan["examples"].items())
    return CheckOutcome(True, f"{problem.entry}.{problem.plan.method} answered one of "
                              f"{problem.plan.modes} for every job size it was asked about "
                              f"on {plan['device']!r} ({len(plan['answers'])} sizes; "
                              f"the examples: {shown})\nwhat it answers: "
                              f"{answers_by_size(plan['answers'])}")


def answers_by_size(answers: list) -> str:
    """A rule's answers over the sizes it was asked about, as runs of the same answer."""
    runs: list[list] = []
    for calls, mode in answers:
        if runs and runs[-1][0] == mode:
            runs[-1][2] = calls
        else:
            runs.append([mode, calls, calls])
    text = "; ".join(f"{mode!r} for {low:,}..{high:,} calls" for mode, low, high in runs[:8])
    return text + (f"; ... ({len(runs)} runs in all)" if len(runs) > 8 else "")


CHECK = Check("rule", "the rule answers one of the modes for every job size", {Need.RULE_ANSWERS},
              decide)
