"""Checks as declared parts (grader.checks.declared): one module per check, decided by the judge
in the declared order from the evidence each declares it needs; and a check a course adds
itself, in a module of its own, graded through the real judge without touching the grader."""
from __future__ import annotations

import importlib
import os
import pkgutil
import shutil
import sys
import tempfile
import textwrap
import types

import pytest
import torch

from grader.checks import declared
from grader.checks.results import Check, CheckOutcome, Need, Status
from grader.problems import Problem

# ---------------------------------------------------------------------------------------------
# The registry


def test_one_module_per_check_and_the_registry_lists_each_once():
    modules = [m.name for m in pkgutil.iter_modules(declared.__path__)]
    checks = [importlib.import_module(f"grader.checks.declared.{m}").CHECK for m in modules]
    assert sorted(c.name for c in checks) == sorted(declared.CHECKS)
    assert len(set(declared.CHECKS)) == len(declared.CHECKS)
    for check in checks:
        assert declared.BY_NAME[check.name] is check and check.title and callable(check.decide)
        assert check.needs and all(isinstance(n, Need) for n in check.needs)


def test_a_check_is_decided_after_every_check_it_reads():
    seen = set()
    for check in declared.REGISTRY:
        for name in (*check.requires, *check.after):
            assert name in seen, f"{check.name} reads {name}, which is decided after it"
        seen.add(check.name)
    # correctness gates every check of a model's problem, none of a planning question's.
    gated = {c.name for c in declared.REGISTRY if "correctness" in c.requires}
    assert gated == set(declared.CHECKS) - {"correctness", "rule", "job"}
    assert declared.BY_NAME["correctness"].gate_message


def test_a_job_that_wants_a_gated_check_gets_its_gate_too():
    parts = declared.in_order(("correctness", "fullgraph", "speed"))
    assert declared.with_requirements(parts, ["speed"]) == ["correctness", "speed"]
    assert declared.with_requirements(parts, ["correctness", "speed"]) == ["correctness", "speed"]
    # a problem without the gate does not grow one
    assert declared.with_requirements(declared.in_order(("fullgraph",)), ["fullgraph"]) == \
        ["fullgraph"]


def _problem(**kw) -> Problem:
    return Problem(**{"key": "x.q1", "title": "", "entry": "X", "make_baseline": lambda d: None,
                      "make_inputs": lambda g, d: (), "solution_grade_id": "x", **kw})


def test_a_problem_says_what_its_checks_need_and_refuses_what_it_cannot_decide():
    assert _problem(checks=("correctness", "fusion")).needs() == {Need.OUTPUTS, Need.GRAPH}
    assert _problem(checks=("rule", "job")).needs(["rule"]) == {Need.RULE_ANSWERS}
    with pytest.raises(ValueError, match="unknown checks"):
        _problem(checks=("correctness", "no such check"))
    with pytest.raises(ValueError, match="needs max_operators"):
        _problem(checks=("operators",))
    with pytest.raises(ValueError, match="registry's"):
        _problem(checks=(Check("speed", "mine", {Need.GRAPH}, lambda case: None),))
    late = Check("late", "reads a check decided after it", {Need.GRAPH}, lambda case: None,
                 after=("later",))
    later = Check("later", "decided after", {Need.GRAPH}, lambda case: None)
    with pytest.raises(ValueError, match="decided before"):
        _problem(checks=("correctness", late, later))
    own = _problem(checks=("correctness", later, "fullgraph"))
    assert own.checks == ("correctness", "later", "fullgraph")
    assert [c.name for c in own.parts] == ["correctness", "fullgraph", "later"]


# ---------------------------------------------------------------------------------------------
# A check a course adds itself: "no host sync" on the graph the judge rebuilt

DESIGN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                      "design.md")


def design_example(heading: str) -> str:
    """The first Python block of the section ``heading`` of docs/design.md: what the page shows
    another course is what this test grades."""
    text = open(DESIGN, encoding="utf-8").read()
    section = text[text.index(f"\n## {heading}\n"):]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


# Two more exercises from the page's one, for the learner's other answers in the same job.
MORE_EXERCISES = """
import dataclasses

PROBLEMS.update({f"myexercises.q{i}": dataclasses.replace(
    PROBLEMS["myexercises.q1"], key=f"myexercises.q{i}", entry=entry)
    for i, entry in ((2, "Synced"), (3, "Wrong"))})
"""

# The page's exercise again, graded with its evidence part's check ("Adding a kind of evidence").
HOOKED_EXERCISES = """
from hooks import NO_HOOKS

PROBLEMS.update({f"myexercises.q{i}": dataclasses.replace(
    PROBLEMS["myexercises.q1"], key=f"myexercises.q{i}", entry=entry,
    checks=("correctness", NO_HOOKS)) for i, entry in ((4, "Fixed"), (5, "Hooked"))})
"""

LEARNER = """
class Fixed(Original):
    def forward(self, x):
        y = torch.sin(x)
        return torch.cos(y / (y.abs().max() + 1.0))


class Synced(Original):
    pass


class Wrong(Original):
    def forward(self, x):
        return torch.sin(x)


class Hooked(Fixed):
    def __init__(self):
        super().__init__()
        self.register_forward_hook(lambda module, args, out: out)
"""


@pytest.fixture
def course_check(monkeypatch):
    """docs/design.md's check and problem set in modules of a temporary folder, outside the
    grader (not under /tmp: the subject's sandbox has a private /tmp; it binds the problem set's
    folder)."""
    folder = tempfile.mkdtemp(prefix="declared-check-",
                              dir="/var/tmp" if os.path.isdir("/var/tmp") else None)
    os.chmod(folder, 0o755)   # mkdtemp's is 0700; the learner's process may run as another user
    with open(os.path.join(folder, "host_sync.py"), "w") as f:
        f.write(design_example("Adding a check"))
    with open(os.path.join(folder, "hooks.py"), "w") as f:
        f.write(design_example("Adding a kind of evidence"))
    with open(os.path.join(folder, "myexercises.py"), "w") as f:
        f.write(design_example("Adding a problem set") + MORE_EXERCISES + HOOKED_EXERCISES)
    monkeypatch.syspath_prepend(folder)
    yield "myexercises"
    for name in ("myexercises", "host_sync", "hooks"):
        sys.modules.pop(name, None)
    shutil.rmtree(folder, ignore_errors=True)


def test_the_pages_examples_are_short():
    """The compass: another course grades its own exercise in 20 lines or so."""
    for heading in ("Adding a check", "Adding a problem set", "Adding a kind of evidence"):
        lines = [line for line in design_example(heading).splitlines()
                 if line.strip() and not line.lstrip().startswith(("#", '"""'))]
        assert len(lines) <= 20, (heading, len(lines))


def test_a_check_declared_outside_the_grader_is_graded_by_the_real_judge(course_check, tmp_path):
    from grader.isolation.check import Evaluation, job_for, run_job
    from grader.isolation.cells.source import Cell
    from grader.problems import get_problem

    keys = [f"myexercises.q{i}" for i in (1, 2, 3)]
    job = job_for(keys, [Cell("cell 5", textwrap.dedent(LEARNER))], reference="off",
                  problem_module=course_check, course_root=str(tmp_path), timeout_s=240)
    results = run_job(job)     # a judge process of its own, which starts the subject
    fixed, synced, wrong = (Evaluation(get_problem(k, course_check), results[k]) for k in keys)
    for ev in (fixed, synced, wrong):
        assert ev.status == Status.OK, (ev.result.get("message"), ev.result.get("traceback"))
        assert list(ev.parsed.checks) == ["correctness", "fullgraph", "no_host_sync"]
    # The honest solution: one graph, no host sync in it.
    assert fixed.ok("no_host_sync"), fixed.message("no_host_sync")
    assert fixed.message("no_host_sync") == "no host sync in your graph"
    assert fixed.title("no_host_sync") == "no host sync in the graph"
    # `.item()` reads a value back: not one graph, so not credited.
    assert synced.ok("correctness") and not synced.ok("no_host_sync")
    assert "not checked" in synced.message("no_host_sync")
    # Wrong outputs: the declared requirement gates it, with the gate's reason.
    assert not wrong.ok("correctness") and not wrong.ok("no_host_sync")
    assert wrong.outcome("no_host_sync").details["gated_by"] == "correctness"


def test_the_course_check_fails_a_graph_that_reads_a_value_back(course_check):
    """Its detector on a graph holding ``aten._local_scalar_dense`` (what ``.item()`` becomes
    where a graph keeps it): the check can fail on the graph itself, not only on a break."""
    check = importlib.import_module("host_sync").NO_HOST_SYNC

    def synced(x):
        return x * torch.ops.aten._local_scalar_dense.default(x.sum())

    graph = torch.fx.symbolic_trace(synced)
    case = types.SimpleNamespace(graph=types.SimpleNamespace(
        ok=True, module=types.SimpleNamespace(graph_module=graph)))
    outcome = check.decide(case)
    assert isinstance(outcome, CheckOutcome) and not outcome.ok
    assert "aten._local_scalar_dense" in outcome.message


def test_a_kind_of_evidence_declared_beside_its_check_is_gathered_by_the_real_judge(
        course_check, tmp_path):
    """docs/design.md's evidence part: the subject runs its ``answer`` beside the learner's code,
    the judge validates it, and the check declared with it decides on it; nothing else asks."""
    from grader.isolation.check import Evaluation, job_for, run_job
    from grader.isolation.cells.source import Cell
    from grader.problems import get_problem

    keys = ["myexercises.q4", "myexercises.q5"]
    job = job_for(keys, [Cell("cell 5", textwrap.dedent(LEARNER))], reference="off",
                  problem_module=course_check, course_root=str(tmp_path), timeout_s=240)
    results = run_job(job)
    fixed, hooked = (Evaluation(get_problem(k, course_check), results[k]) for k in keys)
    for ev in (fixed, hooked):
        assert ev.status == Status.OK, (ev.result.get("message"), ev.result.get("traceback"))
        assert list(ev.parsed.checks) == ["correctness", "no_hooks"]
    assert fixed.ok("no_hooks"), fixed.message("no_hooks")
    assert fixed.message("no_hooks") == "no forward hooks in your model"
    assert hooked.ok("correctness") and not hooked.ok("no_hooks")
    assert hooked.message("no_hooks") == "your model holds 1 forward hook(s)"


def test_a_declared_part_is_asked_only_where_a_wanted_check_needs_it(course_check):
    from grader.checks.results import EvidencePart
    from grader.isolation.judge.evidence import declared
    from grader.problems import get_problem

    hooks = importlib.import_module("hooks")
    problem = get_problem("myexercises.q5", course_check)
    assert problem.needs() == {Need.OUTPUTS, hooks.HOOKS}
    assert problem.needs(["correctness"]) == {Need.OUTPUTS}
    assert declared.parts_of(problem.needs()) == [hooks.HOOKS]
    assert isinstance(hooks.HOOKS, EvidencePart)


class _Subject:
    """A subject that answers a declared part's request with ``reply``."""

    def __init__(self, reply):
        self.reply, self.asked = reply, []

    def request(self, message, blob=b""):
        self.asked.append(message)
        return self.reply, b""


def test_a_declared_parts_answer_is_validated_in_the_judge(course_check):
    from grader.isolation.judge.evidence import declared
    from grader.isolation.judge.evidence.record import Evidence
    from grader.isolation.judge.subject_session import SubjectGone
    from grader.problems import get_problem

    problem = get_problem("myexercises.q5", course_check)
    ev = Evidence()
    subject = _Subject({"data": 2})
    declared.ask(subject, problem, problem.needs(), ev)
    assert subject.asked == [{"op": "evidence", "problem": "myexercises.q5", "part": "hooks"}]
    assert ev.declared == {"hooks": 2} and ev.status == "ok"
    # A forged answer is refused; the learner's exception is their error.
    with pytest.raises(SubjectGone) as refused:
        declared.ask(_Subject({"data": "none, trust me"}), problem, problem.needs(), Evidence())
    assert refused.value.status == Status.REJECTED and "not a number of hooks" in str(
        refused.value)
    raised = Evidence()
    declared.ask(_Subject({"error": "your code raised: boom"}), problem, problem.needs(), raised)
    assert raised.status == "learner_error" and "boom" in raised.message
    assert raised.declared == {}
