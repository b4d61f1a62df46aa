"""correctness: the learner's outputs, computed eagerly by the subject on inputs the judge drew
from fresh seeds (every class of inputs the problem tests), against the original's.

The judge compares them while the subject runs
(:func:`grader.isolation.judge.evidence.outputs.ask`), so deciding is reading that comparison. It
gates every structural and speed check: nothing else is credited, or measured, for code whose
outputs are wrong (docs/design.md, "A score means learned it").
"""
from __future__ import annotations

from grader.checks.results import Check, CheckOutcome, Need

NOT_CORRECT = ("not checked: every check but correctness is credited only to code that computes "
               "what the original computes on every kind of input the problem tests, and yours "
               "does not yet (see the correctness check)")


def decide(case) -> CheckOutcome | None:
    return case.evidence.correctness


CHECK = Check("correctness", "outputs match the original", {Need.OUTPUTS}, decide,
              gate_message=NOT_CORRECT, training_title="loss and gradients match the original")
