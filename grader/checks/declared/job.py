"""job: a planning question's rule on hidden jobs (:class:`grader.problems.JobPlan`): its
choice for each, judged on the modelled totals from the figures this run's judge measured
(nothing the subject said but the mode strings), on their own and on each round's; one share of
the credit per pair of jobs (one below the break-even, one above it) that are both right."""
from __future__ import annotations

from grader.checks import targets
from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    plan, figures, asked = case.problem.plan, case.side.job_figures(), case.evidence.plan
    break_even = figures.break_even
    head = [f"measured by the grader on this machine ({asked['device']}), once per "
            f"grading run: each way of running the given model, its cold first call "
            f"(compile included) and its time per call; {figures.how()}", *figures.table()]
    if break_even is None:
        head.append(f"  no compile mode is faster per call than eager here: every job is "
                    f"run best without compiling (job sizes drawn across "
                    f"{plan.fallback[0]:,}..{plan.fallback[1]:,})")
    else:
        head.append(f"  break-even: {figures.summary()}")
    head.append(f"  a choice is right when its job total (first call + calls x time per "
                f"call) is at least {plan.fraction:.0%} of the best choice's, on these "
                f"figures and on each round's own; a job whose verdict changes from one "
                f"round's figures to another's is undecided (held for review), not wrong")
    if figures.unfit:
        # The whole question, for everyone: one reason, for the instructor, no verdict.
        return CheckOutcome(False, "\n".join([*head, f"  HELD FOR REVIEW: {figures.unfit}"]),
                            "inconclusive", {"figures": figures.to_dict()})
    sets = figures.figure_sets()
    judged = {"short": [], "long": []}
    jobs = []
    for part, calls, choice in asked["hidden"]:
        verdict, best, ratio, totals = targets.judge_plan_choice(sets, calls, choice,
                                                                 plan.fraction)
        where = f" ({calls / break_even:.2g}x the break-even)" if break_even else ""
        word = {"pass": "RIGHT", "fail": "WRONG"}.get(verdict, "UNDECIDED")
        line = (f"    job of {calls:,} calls{where}: your rule chose {choice!r} "
                f"({totals[choice]:.2f} s) -> {word}")
        if verdict != "pass":
            line += f": {_job_direction(figures.eager, choice, best, totals, verdict)}"
        judged[part].append((verdict, line))
        jobs.append({"part": part, "calls": calls, "choice": choice, "best": best,
                     "verdict": verdict, "ratio": ratio, "totals_s": totals})
    lines, pair_verdicts = [], []
    for i, (low, high) in enumerate(zip(judged["short"], judged["long"]), start=1):
        verdict = overall_verdict([low[0], high[0]])
        pair_verdicts.append(verdict)
        lines += [f"  pair {i}: {verdict.upper() if verdict != 'inconclusive' else 'UNDECIDED'}",
                  low[1], high[1]]
    right = pair_verdicts.count("pass")
    verdict = overall_verdict(pair_verdicts)
    said = (f"pairs right: {right} of {len(pair_verdicts)} (one share per pair: a job below "
            f"the break-even and one above it, both right)" if break_even is not None else
            f"pairs right: {right} of {len(pair_verdicts)} (one share per pair of jobs, both "
            f"right)")
    return CheckOutcome(verdict == "pass", "\n".join([*head, said, *lines]), verdict, {
        "credit": right / max(1, len(pair_verdicts)), "jobs": jobs,
        "figures": figures.to_dict()})


def overall_verdict(verdicts: list[str]) -> str:
    """'pass' when every verdict passed; 'inconclusive' when one could not be decided (a person
    looks: it may have been right); else 'fail'."""
    if "inconclusive" in verdicts:
        return "inconclusive"
    return "pass" if all(v == "pass" for v in verdicts) else "fail"


def _job_direction(eager: str, choice: str, best: str, totals: dict, verdict: str) -> str:
    """Which way the rule went wrong on a job (the direction, not the answer)."""
    if verdict == "inconclusive":
        return ("the rounds' figures disagree about this job (it is within the spread of the "
                "break-even): held for review")
    if choice == eager:
        return (f"compiling pays at this size ({best!r}: {totals[best]:.2f} s): your rule "
                f"compiles too late")
    if best == eager:
        return (f"the compile does not pay back at this size (not compiling: "
                f"{totals[best]:.2f} s): your rule compiles too early")
    return (f"{best!r} takes {totals[best]:.2f} s: at this size {choice!r} costs more than it "
            f"saves")


CHECK = Check("job", "the rule's choices on hidden jobs (compile + calls)",
              {Need.RULE_ANSWERS, Need.JOB_FIGURES}, decide)
