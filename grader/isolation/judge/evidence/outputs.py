"""``Need.OUTPUTS``: the learner's outputs, run eagerly in the subject on inputs the judge drew
from fresh seeds, of every class the problem tests, compared with the original's while the
subject runs (what the learner's call did to its inputs is copied onto the judge's own). Fills
``correctness``, the outcome the correctness check reads."""
from __future__ import annotations

import torch

from grader.checks import correctness
from grader.checks.results import CheckOutcome, Status
from grader.common.wire import Packer, ProtocolError, decode
from grader.isolation.judge.reference_side import ReferenceSide
from grader.isolation.judge.subject_session import (LearnerRaised, SubjectGone, SubjectSession,
                                              learner_text)
from grader.problems import Problem, seeded_generator


def ask(subject: SubjectSession, problem: Problem, side: ReferenceSide,
                 device: str, classes: dict) -> CheckOutcome:
    """The learner's outputs (eager, in the subject) against the baseline's, on fresh
    inputs of every class the problem tests."""
    def learner_call(*args):
        packer = Packer()
        header, blob = subject.request({"op": "call", "problem": problem.key,
                                        "inputs": packer.value(args)}, packer.blob())
        if "error" in header:
            exc = LearnerRaised(learner_text(header["error"]))
            exc.learner_message = learner_text(header["error"])
            raise exc
        try:
            outputs = decode(header["outputs"], blob, device)
            after = decode(header["inputs_after"], blob, device)
        except (KeyError, ProtocolError) as exc:
            raise SubjectGone(Status.REJECTED, f"the process that ran your code sent a "
                                               f"malformed answer ({exc})") from None
        # What the learner's call did to its inputs, on the judge's copies: the check below
        # then sees it as it would in-process.
        for mine, theirs in zip(args, after if isinstance(after, (list, tuple)) else ()):
            if isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor) \
                    and theirs.shape == mine.shape and theirs.dtype == mine.dtype:
                with torch.no_grad():
                    mine.copy_(theirs)
        return outputs

    reports = on_every_class(classes, learner_call, side.base_eager, problem, device)
    return CheckOutcome(all(r.ok for _, r in reports), class_lines(reports),
                        details={"checked": sum(r.checked for _, r in reports),
                                 "classes": list(classes)})


def on_every_class(classes: dict, candidate, reference, problem: Problem, device: str,
                    tolerance: tuple[float, float] | None = None) -> list:
    """``[(class name, CorrectnessReport)]``: ``candidate`` against ``reference`` on fresh
    inputs of each class (three of the problem's own inputs, two of each other class)."""
    out = []
    for name, make in classes.items():
        first = name == problem.inputs_name
        out.append((name, correctness.check_outputs(
            candidate, reference, lambda seed, make=make: make(seeded_generator(seed), device),
            seeds=correctness.fresh_seeds(3 if first else 2), grad=problem.training,
            tolerance=tolerance)))
    return out


def class_lines(reports: list) -> str:
    """Each class's correctness report, one line each (the report alone for one class)."""
    if len(reports) == 1:
        return str(reports[0][1])
    return "\n".join(f"on {name}: {rep}" for name, rep in reports)
