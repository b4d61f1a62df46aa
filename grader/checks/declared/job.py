"""job: a planning question's rule on hidden jobs (:class:`grader.problems.JobPlan`): its
choice for each, judged on the modelled totals from the figures this run's judge measured
(nothing the subject said but the mode strings), on their own and on each round's; one share of
the credit per pair of jobs (one below the break-even, one above it) that are both right."""
from __future__ import annotations

import math
import random

import torch

from grader.checks import targets
from grader.checks.results import Check, CheckOutcome, Need


def decide(case) -> CheckOutcome:
    plan, figures, asked = case.problem.plan, case.side.job_figures(), case.evidence.plan
    break_even = figures.break_even
    head = [f"measured by the grader on this machine ({asked['device']}), once, the same for "
            f"every submission: each way of running the given model, its cold first call "
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


# ---------------------------------------------------------------------------------------------
# The jobs a planning question's rule is asked about (the judge asks the subject for the rule's
# answers: grader.isolation.judge.evidence.rule_answers), and the figures they are judged on, fitted
# to the instructor's rule before any submission is judged.

def _log_uniform(rng: random.Random, low: float, high: float) -> int:
    return max(1, int(round(math.exp(rng.uniform(math.log(low), math.log(high))))))


# The sizes every rule is asked about besides the hidden jobs: four a decade from 10 to 10^8.
PROBE_SIZES = tuple(int(round(10 ** (k / 4))) for k in range(4, 33))


def hidden_job_sizes(plan, break_even: float | None, rng: random.Random,
                     spread: tuple[float, float] | None = None) -> list[tuple[str, int]]:
    """A planning question's hidden jobs, ``(part, calls)``: ``plan.pairs`` sizes drawn
    log-uniformly in ``[low/far, low/near]`` ("short") and as many in ``[near*high, far*high]``
    ("long"), where ``low`` and ``high`` are the least and the greatest break-even of the
    rounds this machine measured (``spread``; ``B``, the break-even, for both where not given);
    the i-th of each make a pair. Drawn outside the rounds' spread, every job has one right
    answer on every round's figures however busy the machine was while it measured (a job
    within the spread would be undecided for every rule, the reference's too). Where compiling
    never pays (``B`` is ``None``), every size is drawn across ``plan.fallback``, the smaller
    half "short", the larger "long" (not compiling is then right for each)."""
    n = plan.pairs
    if break_even is None:
        sizes = sorted(_log_uniform(rng, *plan.fallback) for _ in range(2 * n))
        return [("short", c) for c in sizes[:n]] + [("long", c) for c in sizes[n:]]
    low, high = spread if spread is not None else (break_even, break_even)
    return ([("short", _log_uniform(rng, low / plan.far, low / plan.near)) for _ in range(n)]
            + [("long", _log_uniform(rng, high * plan.near, high * plan.far))
               for _ in range(n)])


# How many sets of hidden jobs the instructor's rule is tried on before a run's figures judge
# the learners' (each set as one submission's: the pairs the question grades).
YARDSTICK_SETS = 20


def reference_rule_verdict(side) -> str:
    """'' when the instructor's rule (``side.reference_rule``) earns a planning question on the
    figures this judge measured, on :data:`YARDSTICK_SETS` sets of hidden jobs drawn as a
    submission's are; else why not, in the instructor's words (no rule: '')."""
    rule, plan = side.reference_rule, side.problem.plan
    if rule is None:
        return ""
    figures = side.job_figures()
    sets = figures.figure_sets()
    kind = torch.device(side.device).type
    rng = random.Random(0)
    missed = []
    for _ in range(YARDSTICK_SETS):
        for _part, calls in hidden_job_sizes(plan, figures.break_even, rng, figures.spread()):
            choice = rule(calls, kind)
            verdict = targets.judge_plan_choice(sets, calls, choice, plan.fraction)[0] \
                if choice in plan.modes else "fail"
            if verdict != "pass":
                missed.append((calls, choice, verdict))
    if not missed:
        return ""
    calls, choice, verdict = missed[0]
    return (f"the reference solution's own rule does not earn {side.problem.key} on the figures "
            f"this machine measured ({figures.summary()}): of "
            f"{YARDSTICK_SETS * 2 * plan.pairs} hidden jobs drawn as a submission's are, it "
            f"gets {len(missed)} wrong or undecided (a job of {calls:,} calls: it chose "
            f"{choice!r}, {verdict}). The machine was busy while it measured, or is unlike the "
            f"one the rule was written for: every submission's question is held for a person "
            f"(regrade it on a quiet machine: make grade ASSIGNMENT={side.problem.assignment} "
            f"REGRADE=1)")


def fit_figures(side) -> None:
    """Judge a planning question's figures by the instructor's rule before any submission is:
    measured again once where it misses; where it still does, the figures carry the reason
    (:attr:`JobFigures.unfit`) and every submission's question is held for a person."""
    if side.problem.plan is None or side.reference_rule is None or side.job_figures().unfit:
        return
    why = reference_rule_verdict(side)
    if why:
        side.jobs = None            # measured again: the load that moved them may have gone
        why = reference_rule_verdict(side)
    side.job_figures().unfit = why


def decoy_job_sizes(plan, break_even: float | None, rng: random.Random) -> list[int]:
    """``plan.decoys`` sets of sizes drawn as the hidden jobs are, each around a false
    break-even 3 to 30 times above or below the real one: sizes clustered like the hidden ones,
    so that a rule which sees every size cannot tell which cluster is graded."""
    centre = break_even or math.sqrt(plan.fallback[0] * plan.fallback[1])
    sizes = []
    for _ in range(plan.decoys):
        away = 10 ** rng.uniform(math.log10(3), math.log10(30))
        false = centre * away if rng.random() < 0.5 else centre / away
        sizes += [n for _, n in hidden_job_sizes(plan, false, rng)]
    return sizes


CHECK = Check("job", "the rule's choices on hidden jobs (compile + calls)",
              {Need.RULE_ANSWERS, Need.JOB_FIGURES}, decide)
