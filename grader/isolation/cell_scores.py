"""Scoring a test cell from the judge's verdicts: what the notebook's ``run_test`` shows and what
``make grade`` credits (:mod:`grader.cohort.scoring`), one function for both (:func:`score_cell`).

An :class:`Evaluation` is the judge's result for one problem with its learner-facing messages;
a test cell declared in the problem set's ``TEST_CELLS`` (:class:`grader.problems.TestCell`) earns
its points from the evaluations of the checks it names (:class:`CellScore`).
"""
from __future__ import annotations

import dataclasses
import functools

from grader.checks.declared import BY_NAME
from grader.checks.results import CheckOutcome, ProblemResult, Status
from grader.problems import Problem, TestCell, test_cells


class CheckFailed(AssertionError):
    """A check did not pass; the message is meant for the learner."""


@dataclasses.dataclass
class Evaluation:
    """The judge's result for one problem, with learner-facing messages."""

    problem: Problem
    result: dict
    printed: bool = False  # check() printed it already: displaying it again shows one line

    @functools.cached_property
    def parsed(self) -> ProblemResult:
        """The result, typed (the dict is what the judge wrote)."""
        return ProblemResult.from_dict(self.result)

    @property
    def status(self) -> str:
        return self.parsed.status

    @property
    def with_reference(self) -> bool:
        return "speed" in self.parsed.checks and bool(
            self.parsed.checks["speed"].details.get("with_reference"))

    def outcome(self, name: str) -> CheckOutcome:
        """The check ``name``."""
        return self.parsed.outcome(name)

    def ok(self, name: str) -> bool:
        return self.outcome(name).ok

    def verdict(self, name: str) -> str:
        return self.outcome(name).final_verdict

    def message(self, name: str) -> str:
        out = self.outcome(name)
        text = out.message
        hint = self.problem.hints.get(name)
        if not out.ok and hint and out.verdict != "inconclusive" and self.status == Status.OK \
                and not out.details.get("gated_by"):  # the gate's own check carries the hint
            text += f"\nhint: {hint}"
        return text

    def require(self, name: str) -> None:
        """Raise :class:`CheckFailed` with the learner-facing message unless ``name`` passed.
        An inconclusive speed verdict does not raise: it is reported, not failed."""
        __tracebackhide__ = True  # IPython and pytest: the learner sees their cell, not ours
        print(self.line(name))
        if self.verdict(name) not in ("pass", "inconclusive"):
            raise CheckFailed(self.failure(name))

    def failure(self, name: str) -> str:
        return f"{self.problem.key}: {self.title(name)} failed\n{self.message(name)}"

    def points(self, name: str, max_points: float, inconclusive_credit: float = 0.0) -> float:
        """nbgrader partial credit: full for pass, ``inconclusive_credit`` x for inconclusive."""
        print(self.line(name))
        return credit(self.verdict(name), max_points, inconclusive_credit)

    def title(self, name: str) -> str:
        declared = {c.name: c for c in self.problem.parts}.get(name) or BY_NAME.get(name)
        if declared is None:
            return name
        return declared.training_title if self.problem.training and declared.training_title \
            else declared.title

    def line(self, name: str) -> str:
        verdict = self.verdict(name).upper()
        return f"[{verdict}] {self.problem.key} {self.title(name)}\n" + _indent(self.message(name))

    def __str__(self) -> str:
        if self.status != Status.OK:
            return f"[FAIL] {self.problem.key}: {self.parsed.message or self.status}"
        return "\n".join(self.line(name) for name in self.parsed.checks)

    def summary(self) -> str:
        """One line: each check's verdict."""
        if self.status != Status.OK:
            return f"{self.problem.key}: {self.status}"
        return f"{self.problem.key}: " + ", ".join(
            f"{name} {self.verdict(name)}" for name in self.parsed.checks)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(f"<{self.summary()}>" if self.printed else str(self))


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def credit(verdict: str, max_points: float, inconclusive_credit: float = 0.0) -> float:
    if verdict == "pass":
        return float(max_points)
    if verdict == "inconclusive":
        return float(max_points) * inconclusive_credit
    return 0.0


# ---------------------------------------------------------------------------------------------
# Scoring a test cell (shared by the notebook and the judged scoring)

@dataclasses.dataclass
class CellScore:
    """What a test cell earns from its problems' results, and the text it shows."""

    grade_id: str
    points: float
    max_points: float
    partial: bool            # the cell's value is its points (nbgrader partial credit)
    text: str                # every verdict the cell depends on, with messages and hints
    failure: str = ""        # why it earned nothing, when it did not pass outright
    review: bool = False     # for a person to look at: an inconclusive verdict, or a grader error
    passed: bool = True      # every check it requires passed (a 0-point gate cell says so too)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "CellScore":
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


GRADER_FAILED_NOTE = ("the grader itself failed on a check this cell depends on: this is not a "
                      "verdict on your code. It is flagged for your instructor (nbgrader: needs "
                      "manual grade), who grades it by hand; it scores 0 of {max_points:g} until "
                      "then")
REVIEW_NOTE = ("the machine was too noisy to decide this verdict, even after the extra trials: "
               "it is flagged for the instructor (nbgrader: needs manual grade) and scores "
               "{points:g} of {max_points:g} until a person looks (a regrade on a quieter machine, "
               "`make grade REGRADE=1`, usually decides it)")


def score_cell(cell: TestCell, evaluations: dict[str, Evaluation]) -> CellScore:
    """Points of ``cell`` from the evaluations of its problems (key -> Evaluation)."""
    lines, failure, shown = [], "", set()
    for key, name in cell.checks:
        ev = evaluations[key]
        if ev.status != Status.OK:
            if key not in shown:
                shown.add(key)
                lines.append(str(ev))
        elif (key, name) not in shown:
            shown.add((key, name))
            lines.append(ev.line(name))
    if any(evaluations[key].status == Status.GRADER_ERROR for key, _ in cell.checks):
        note = GRADER_FAILED_NOTE.format(max_points=float(cell.points))
        lines.append(f"[REVIEW] {note}")
        return CellScore(cell.grade_id, 0.0, float(cell.points), cell.scored is not None,
                         "\n".join(lines), note, review=True, passed=False)
    met, review, unmet = True, False, []
    for key, name in cell.requires:
        ev = evaluations[key]
        if ev.verdict(name) == "inconclusive":
            review = True
        elif ev.verdict(name) != "pass":
            met = False
            unmet.append(name)
            failure = failure or ev.failure(name)
    if unmet and cell.scored and evaluations[cell.scored[0]].verdict(cell.scored[1]) == "pass":
        # A [PASS] above that earns nothing here: say why, in the cell itself.
        lines.append(f"[0 of {float(cell.points):g} points] this cell's points also need "
                     f"{' and '.join(unmet)} to pass, and {'they' if len(unmet) > 1 else 'it'} "
                     f"did not (above)")
    if cell.scored:
        key, name = cell.scored
        verdict = evaluations[key].verdict(name)
        review = review or (met and verdict == "inconclusive")
        share = evaluations[key].outcome(name).details.get("credit")
        if not met:
            points = 0.0
        elif isinstance(share, (int, float)) and verdict != "pass":
            points = float(cell.points) * min(1.0, max(0.0, float(share)))  # one share per item
        else:
            points = credit(verdict, cell.points, cell.inconclusive_credit)
        if not failure and points < cell.points and verdict != "inconclusive":
            failure = evaluations[key].failure(name)
    else:
        points = float(cell.points) if met and not review else \
            float(cell.points) * cell.inconclusive_credit if met else 0.0
    if review and met:
        note = REVIEW_NOTE.format(points=points, max_points=float(cell.points))
        lines.append(f"[REVIEW] {note}")
        failure = failure or note
    passed = met and (cell.scored is None or evaluations[cell.scored[0]].verdict(
        cell.scored[1]) != "fail")
    return CellScore(cell.grade_id, points, float(cell.points), cell.scored is not None,
                     "\n".join(lines), failure, review and met, passed)



def find_test_cell(grade_id: str) -> TestCell:
    """The declaration of test cell ``grade_id`` ("ps1-q1-speed" belongs to ps1)."""
    assignment = grade_id.split("-", 1)[0]
    cells = test_cells(assignment)
    if grade_id not in cells:
        raise KeyError(f"no test cell {grade_id!r} is declared in grader.problems.{assignment}")
    return cells[grade_id]

