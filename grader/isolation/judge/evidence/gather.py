"""The judge's questions to the subject, in order: the learner's cells loaded, then for each
problem the parts of :mod:`grader.isolation.judge.evidence` its wanted checks need (a planning
question: the rule's answers alone)."""
from __future__ import annotations

import random

from grader.checks import correctness, graph_artifact
from grader.checks.declared.correctness import CHECK as CORRECTNESS
from grader.checks.results import Need, Status
from grader.isolation.judge.evidence import (compile_count, custom_op, declared, graph, outputs,
                                       rule_answers)
from grader.isolation.cells.source import Cell
from grader.isolation.judge.subject_session import SubjectGone, SubjectSession, learner_text
from grader.problems import Problem


def gather(subject: SubjectSession, problems: dict, sides: dict, wanted: dict,
           cells: list[Cell], device: str, module: str | None, evidence: dict, lap) -> None:
    """Ask the subject for the evidence the ``wanted`` checks of each problem need, part by part,
    into ``evidence`` (problem ->
    :class:`grader.isolation.judge.evidence.record.Evidence`); each step's seconds go to ``lap``."""
    subject.request({"op": "hello"})
    lap("subject start")
    reply, _ = subject.request({"op": "load", "problems": list(problems), "device": device,
                                "problem_module": module,
                                "cells": [c.to_dict() for c in cells]})
    loaded = reply.get("problems")
    if not isinstance(loaded, dict):
        raise SubjectGone(Status.REJECTED, "the process that ran your code answered nonsense")
    lap("learner cells")
    for key, problem in problems.items():
        # Only the evidence the wanted checks are decided on is asked for.
        needs = problem.needs(wanted[key])
        ev, info = evidence[key], loaded.get(key)
        if not isinstance(info, dict) or info.get("status") != "ok":
            ev.status = "learner_error"
            ev.message = learner_text((info or {}).get("message") if isinstance(info, dict)
                                  else "the process that ran your code did not build it")
            continue
        try:
            ev.choice = validated_choice(problem, info.get("choice"))
        except ValueError as exc:
            ev.status, ev.message = "learner_error", str(exc)
            continue
        if problem.plan is not None:
            rule_answers.ask(subject, problem, sides[key], device, ev,
                             Need.JOB_FIGURES in needs)
            lap("plan")
        else:
            model_evidence(subject, problem, sides[key], needs, device, ev, lap)
        # The kinds of evidence declared beside the checks that need them.
        if ev.status == "ok" and declared.parts_of(needs):
            declared.ask(subject, problem, needs, ev)
            lap("declared evidence")


def model_evidence(subject: SubjectSession, problem: Problem, side, needs, device: str, ev,
                   lap) -> None:
    """The built-in parts a model's checks need, in order."""
    # Every class of inputs the problem tests, shapes drawn for this job only.
    ev.classes_seed = correctness.fresh_seeds(1)[0]
    ev.classes = problem.input_classes(random.Random(ev.classes_seed))
    if Need.OUTPUTS in needs:
        ev.correctness = outputs.ask(subject, problem, side, device, ev.classes)
        lap(CORRECTNESS.name)
    # The learner's graphs call the custom operator: its registration comes first.
    if problem.custom_op is not None and needs & {Need.CUSTOM_OP, Need.GRAPH}:
        custom_op.ask(subject, problem, ev)
        lap("custom operator")
    if Need.GRAPH in needs:
        with graph_artifact.extra_operators(ev.operators):
            graph.ask(subject, problem, side, ev, device)
        lap("capture")
    # The graph's own check reads the calls as used (one graph on every call).
    if needs & {Need.GRAPH, Need.COMPILE_COUNT}:
        compile_count.ask(subject, problem, ev, device)
        lap("calls as used")


def validated_choice(problem: Problem, choice) -> dict:
    """The compile options the learner chose, as data the problem allows (else ValueError)."""
    if not isinstance(choice, dict):
        raise ValueError("the process that ran your code sent no compile options")
    out = {}
    for name, value in choice.items():
        allowed = problem.choices.get(name)
        if allowed is None or value not in allowed:
            raise ValueError(f"{name}={str(value)[:40]!r} is not a choice this problem allows"
                             + (f" (one of {allowed})" if allowed else ""))
        out[name] = value
    return out
