"""A training step as the graded call (ps5): what the grader compares, compiles and counts.

The in-process parts (``grader.problems.training_step``, ``Problem.graded_call`` /
``traced_call``) are tested directly; the grading of ps5's traps goes through the judge and its subject,
with the timed checks left out (seconds, not a minute). The judge's own checks of a training
step's graph run in a child of its zygote with their own memory and time limits: a graph made to
hold the judge, or one past the child's memory, scores nothing with the reason, in seconds, and
the submission after it keeps its exact verdicts.
"""
from __future__ import annotations

import os
import time

import pytest
import torch

from grader.checks.breaks import graph_break_report
from grader.isolation.check import Evaluation, job_for
from grader.isolation.judge.steps import Judge
from grader.problems import get_problem, training_step
from grader.problems.ps5 import IGNORE, Classifier, example_inputs
from grader.isolation.cells.source import Cell, solution_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The reference solution, as the source notebook has it.
[_CELL] = solution_cells(os.path.join(ROOT, "source", "ps5", "ps5.ipynb"), ["ps5-q1-solution"])
REFERENCE = _CELL.source


def _fast_classifier():
    namespace: dict = {}
    exec("from grader.problems.ps5 import *\n" + REFERENCE, namespace)
    model = namespace["FastClassifier"]()
    model.load_state_dict(Classifier().state_dict())
    return model


def test_a_training_step_returns_the_loss_and_every_gradient_and_clears_them():
    model = Classifier()
    x, y = example_inputs(seed=3)
    out = training_step(model)(x, y)
    assert len(out) == 1 + len(list(model.parameters()))
    assert not out[0].requires_grad and out[0].ndim == 0
    assert all(p.grad is None for p in model.parameters())  # the next call starts clean

    model.zero_grad(set_to_none=True)
    model(x, y).backward()
    for grad, p in zip(out[1:], model.parameters()):
        torch.testing.assert_close(grad, p.grad)
    # Every call starts from the same state: the same batch gives the same result.
    again = training_step(model)(x, y)
    for a, b in zip(out, again):
        torch.testing.assert_close(a, b)


def test_the_unlabeled_examples_do_not_count_and_the_fixed_shape_loss_agrees():
    x, y = example_inputs(seed=5)
    assert (y == IGNORE).any() and (y != IGNORE).any()
    expected = training_step(Classifier())(x, y)
    compiled = training_step(torch.compile(_fast_classifier(), fullgraph=True))(x, y)
    for got, want in zip(compiled, expected):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-4)
    # Counting the unlabeled examples (as class 0) gives another loss: the check can tell.
    model = _fast_classifier()
    counted = model(x, y.clamp(min=0))
    assert not torch.allclose(counted.detach(), expected[0], rtol=1e-3, atol=1e-4)


def test_a_training_problem_compares_a_step_and_compiles_the_model_with_gradients():
    problem = get_problem("ps5.q1")
    model = Classifier()
    x, y = example_inputs()
    loss_and_grads = problem.graded_call(model)(x, y)
    assert len(loss_and_grads) == 1 + len(list(model.parameters()))
    assert problem.traced_call(model) is model   # Dynamo cannot trace `.backward()`: the model
    report = graph_break_report(problem.traced_call(model), x, y)
    assert report.break_count == 3, str(report)   # the `if`, the mask and the `.item()`
    inference = get_problem("ps4.q1")
    assert inference.traced_call(model) is not model


@pytest.fixture(scope="module")
def judge():
    """One judge (and zygote) for the module: ps5's reference side is built once."""
    return Judge()


def _graded(judge: Judge, source: str, *, screen: bool = True, reference: str = "auto",
            checks=("correctness", "fullgraph", "breaks", "recompiles")) -> dict:
    """ps5.q1 graded by ``judge`` (its subject, then the child of its zygote), speed left out;
    the reference from source/ (``reference="auto"``) sizes what the judge compiles and runs."""
    job = job_for(["ps5.q1"], [Cell("cell 7", source)], course_root=ROOT, screen=screen,
                  reference=reference, checks={"ps5.q1": list(checks)})
    return judge.grade(job).to_dict()["results"]["ps5.q1"]


def test_ps5_grades_each_trap_of_a_training_step_in_the_judge(judge):
    """Through the judge and its subject (no timing): a loss that counts the unlabeled examples
    fails correctness (and its graph earns nothing); an example counter in a Python int fails
    recompiles, naming it; the reference passes both, and no break remains."""
    wrong = REFERENCE.replace("y, ignore_index=IGNORE,", "y.clamp(min=0),")
    counter = REFERENCE.replace("    def forward(self, x, y):\n",
                                "    def forward(self, x, y):\n        self.examples_seen += 1\n")
    checks = ["correctness", "fullgraph", "recompiles"]
    runs = {name: Evaluation(get_problem("ps5.q1"),
                             _graded(judge, src, reference="off", checks=checks))
            for name, src in {"wrong": wrong, "counter": counter}.items()}
    # (The reference's own pass: test_a_training_steps_graph_is_checked_in_a_bounded_child.)
    assert runs["wrong"].verdict("correctness") == "fail"
    assert runs["wrong"].title("correctness") == "loss and gradients match the original"
    assert runs["wrong"].verdict("fullgraph") == "fail"
    assert runs["counter"].verdict("correctness") == "pass"
    assert runs["counter"].verdict("recompiles") == "fail"
    assert "self.examples_seen" in runs["counter"].message("recompiles")


# The reference, correct and one graph, with a 192 MiB tensor of zeros alive in its step (under
# the graph budget, over the 64 MiB the test gives the child).
HEAVY = REFERENCE.replace("return F.cross_entropy(",
                          "pad = torch.zeros(48 * 1024 * 1024, device=x.device)\n"
                          "        return pad.sum() + F.cross_entropy(")


def test_a_training_steps_graph_is_checked_in_a_bounded_child(judge, monkeypatch):
    """A training step's graph is compiled and run in a child of the judge's zygote (a fresh
    Python that never ran backward), never in the judge: a graph of ~20,000 operators shipped in
    place of the learner's is refused in seconds with the reason; a child that needs more memory
    than its limit (here lowered to 64 MiB) gives no structural point, with the reason; the
    judge grades the honest reference after both with every check passed, in the same zygote."""
    from test_attacks_unscreened import SWOLLEN_GRAPH
    from grader.isolation.judge import judge_child

    started = time.monotonic()
    swollen = _graded(judge, SWOLLEN_GRAPH.format(how="nodes") + REFERENCE, screen=False)
    took = time.monotonic() - started
    said = swollen["checks"]["fullgraph"]["message"]
    assert not swollen["checks"]["fullgraph"]["ok"] and "will not compile or run it" in said, said
    assert "operators, more than" in said, said
    assert swollen["graph_child"]["forked_from"] == "zygote", swollen["graph_child"]
    judge_s = sum(swollen["phases"].get(p, 0.0) for p in ("graph checks", "graph child"))
    print(f"swollen graph: the judge's checks {judge_s:.1f} s, the whole grading {took:.1f} s")
    assert judge_s < 60, swollen["phases"]
    zygote = judge.zygote.proc.pid

    monkeypatch.setattr(judge_child, "child_memory_bytes", lambda side: 64 * 1024 ** 2)
    heavy = _graded(judge, HEAVY)
    assert heavy["status"] == "ok" and heavy["checks"]["correctness"]["ok"], heavy
    assert heavy["graph_child"]["ended"] in ("memory", "done"), heavy["graph_child"]
    said = heavy["checks"]["fullgraph"]["message"]
    assert not heavy["checks"]["fullgraph"]["ok"], said
    assert "GiB of memory this problem allows" in said or "allocate memory" in said, said
    monkeypatch.undo()

    honest = _graded(judge, REFERENCE)
    assert honest["status"] == "ok", honest
    assert {name: c["ok"] for name, c in honest["checks"].items()} == dict.fromkeys(
        ["correctness", "fullgraph", "breaks", "recompiles"], True), honest["checks"]
    assert honest["graph_child"]["ended"] == "done" and judge.zygote.proc.pid == zygote
