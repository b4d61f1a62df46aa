"""``Need.RULE_ANSWERS``: a planning question's rule (:class:`grader.problems.JobPlan`) asked, in
the subject, for a mode at every size the question's check draws (the examples, a grid, and,
where the hidden jobs are judged, those and their decoys, shuffled:
:mod:`grader.checks.declared.job`); every answer checked to be one of the plan's modes. Fills
``plan``."""
from __future__ import annotations

import random

import torch

from grader.checks import correctness
from grader.checks.declared import job
from grader.checks.results import Status
from grader.isolation.judge.reference_side import ReferenceSide
from grader.isolation.judge.subject_session import SubjectGone, SubjectSession, learner_text
from grader.problems import Problem


def ask(subject: SubjectSession, problem: Problem, side: ReferenceSide, device: str, ev,
        judge_jobs: bool) -> None:
    """Ask the learner's rule about the examples, a grid of sizes and, when the hidden jobs
    are judged (``judge_jobs``), the hidden jobs and the decoys, all shuffled; keep its
    answers, each checked against the plan's modes."""
    plan = problem.plan
    rng = random.Random(correctness.fresh_seeds(1)[0])
    hidden, decoys = [], []
    if judge_jobs:
        job.fit_figures(side)
        figures = side.job_figures()
        break_even = figures.break_even
        hidden = job.hidden_job_sizes(plan, break_even, rng, figures.spread())
        decoys = job.decoy_job_sizes(plan, break_even, rng)
    sizes = list(dict.fromkeys([*plan.examples, *job.PROBE_SIZES, *(n for _, n in hidden),
                                *decoys]))
    rng.shuffle(sizes)
    kind = torch.device(device).type
    reply, _ = subject.request({"op": "plan", "problem": problem.key, "sizes": sizes,
                                "device": kind})
    if "error" in reply:
        ev.status, ev.message = "learner_error", learner_text(reply["error"])
        return
    modes, types = reply.get("modes"), reply.get("types")
    if not isinstance(modes, list) or not isinstance(types, list) \
            or len(modes) != len(sizes) or len(types) != len(sizes):
        raise SubjectGone(Status.REJECTED, "the process that ran your code sent a malformed "
                                           "answer to the job sizes")
    for calls, mode, kind_of in zip(sizes, modes, types):
        if mode not in plan.modes:
            got = repr(mode)[:60] if isinstance(mode, str) else f"a {str(kind_of)[:40]}"
            ev.status, ev.message = "learner_error", (
                f"{problem.entry}.{plan.method}({calls:,}, {kind!r}) returned {got}: it must "
                f"return one of {plan.modes} for every number of calls")
            return
    answers = dict(zip(sizes, modes))
    ev.plan = {"device": kind, "examples": {n: answers[n] for n in plan.examples},
               "answers": sorted(answers.items()),
               "hidden": [(part, n, answers[n]) for part, n in hidden]}
