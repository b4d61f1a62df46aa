"""Every hint against the mistake it is for: the common mistakes of each set (first attempts
learners made, the demo personas' mistakes, the routes that skip a lesson), graded through the
real judge (in this process, the subject sandboxed as in `make grade`), with the verdict and the
hint each gets. A hint must point at the learner's line where a line is at fault, name the right
fix (never one that changes the value), and a wrong output must be named with the inputs it is
wrong on.

| set | mistake | fails | what the learner must read |
|---|---|---|---|
| ps1 | the boolean mask replaced literally: `torch.where(h > 0, h, 0).mean()` | correctness | which output, on which inputs; the mean divides by the count, `mask.sum()` |
| ps1 | the `print` kept | one graph | the line of the `print`; move logging out of `forward` |
| ps1 | `.item()` kept | one graph | the line of `.item()`; keep it a tensor |
| ps1 | the `print` hidden in a `nonstrict_trace` function | nothing: credited as deleting it (the graph is the same) | |
| ps2 | the per-group loop kept | fusion, and so speed | kernels counted; compute the statistics of all groups at once |
| ps8 | a fake that says `T // 2` (odd windows) | custom operator, one graph | the odd shape it is wrong on; the fake, not a direct call |
| ps8 | a fake with wrong strides | custom operator | the strides; nothing timed |
| ps8 | a backward without the cut to the input's length (`spread[..., :T]`) | correctness | the odd windows it is wrong on; `opcheck` on odd and even shapes |
"""
from __future__ import annotations

import os

import pytest

from grader.cohort.demo import demo_solutions
from grader.isolation.cell_scores import Evaluation, score_cell
from grader.isolation.judge.judging import job_for
from grader.isolation.judge.steps import Judge
from grader.isolation.cells.source import Cell, solution_cells
from grader.problems import get_problem
from grader.problems import test_cells as declared_test_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERSONAS = demo_solutions(ROOT)


def _reference(assignment: str) -> str:
    from grader.cohort.demo import _strip_markers

    [cell] = solution_cells(os.path.join(ROOT, "source", assignment, f"{assignment}.ipynb"),
                            [f"{assignment}-q1-solution"])
    return _strip_markers(cell.source)


def _edit(assignment: str, old: str, new: str) -> str:
    source = _reference(assignment)
    assert old in source, (assignment, old)
    return source.replace(old, new)


MISTAKES = {
    "ps1: the mask replaced literally": (
        "ps1", lambda: _edit("ps1", "pos_mean = torch.where(pos, h, 0.0).sum() / pos.sum()",
                             "pos_mean = torch.where(pos, h, 0.0).mean()"),
        "correctness", ["on inputs with a positive mean", "mask.sum()", "count"]),
    "ps1: the print kept": (
        "ps1", lambda: _edit("ps1", "        scale = h.abs().max()\n",
                             "        print('hidden norm:', h.norm())\n"
                             "        scale = h.abs().max()\n"),
        "fullgraph", ["print('hidden norm:', h.norm())", "move the `print`/logging out of "
                      "`forward`"]),
    "ps1: .item() kept": (
        "ps1", lambda: _edit("ps1", "scale = h.abs().max()", "scale = h.abs().max().item()"),
        "fullgraph", ["scale = h.abs().max().item()", ".item()"]),
    "ps2: the per-group loop kept": (
        "ps2", lambda: PERSONAS["ps2"]["partial"]["ps2-q1-solution"],
        "fusion", ["kernel", "statistics of all groups at once"]),
    "ps8: a fake that says T // 2": (
        "ps8", lambda: PERSONAS["ps8"]["wrong"]["ps8-q1-solution"],
        "custom_op", ["[16, 64, 63]", "DISAGREES"]),
    "ps8: a fake with wrong strides": (
        "ps8", lambda: _edit("ps8", "return x.new_empty(*x.shape[:-1], (x.shape[-1] + 1) // 2)",
                             "return x.new_empty(*x.shape[:-2], (x.shape[-1] + 1) // 2, "
                             "x.shape[-2]).transpose(-1, -2)"),
        "custom_op", ["strides", "DISAGREES"]),
    "ps8: a backward without the cut": (
        "ps8", lambda: _edit("ps8", "return spread[..., : x.shape[-1]] * x",
                             "return spread * torch.nn.functional.pad(x, (0, x.shape[-1] % 2))"),
        "correctness", ["windows of 63 steps (odd)", "opcheck on odd and even shapes"]),
}


@pytest.fixture(scope="module")
def judge():
    return Judge()


def _grade(judge, assignment: str, source: str) -> Evaluation:
    key = f"{assignment}.q1"
    checks = [c for c in get_problem(key).checks if c != "speed"]
    job = job_for([key], [Cell("cell 7", source)], course_root=ROOT, reference="off",
                  checks={key: checks})
    return Evaluation(get_problem(key), judge.grade(job).to_dict()["results"][key])


@pytest.mark.parametrize("mistake", sorted(MISTAKES))
def test_each_mistake_gets_the_hint_it_is_for(judge, mistake):
    assignment, source, failing, said = MISTAKES[mistake]
    ev = _grade(judge, assignment, source())
    assert ev.status == "ok", ev.result
    assert not ev.ok(failing), (mistake, ev.message(failing))
    text = ev.message(failing)
    for words in said:
        assert words in text, (mistake, words, text)
    # every cell: its points need the lesson: this mistake earns none of the cells it fails
    cells = [c for c in declared_test_cells(assignment).values()
             if any(name == failing for _, name in c.checks)]
    for cell in cells:
        score = score_cell(cell, {f"{assignment}.q1": ev})
        assert score.points == 0, (mistake, cell.grade_id, score.text)


def test_a_print_hidden_in_nonstrict_trace_is_credited_as_deleting_it(judge):
    """Chapter 8's escape hatch removes the break, and the print then runs only while Dynamo
    traces (ps1's text says so): the graph is the one deleting the print gives, and it is
    credited as that is."""
    source = _edit("ps1", "class FixedModel(Original):",
                   "@torch.compiler.nonstrict_trace\n"
                   "def log_norm(h):\n"
                   "    print('hidden norm:', h.norm())\n"
                   "    return h\n\n\n"
                   "class FixedModel(Original):").replace(
        "        scale = h.abs().max()\n", "        h = log_norm(h)\n        scale = h.abs().max()\n")
    ev = _grade(judge, "ps1", source)
    assert ev.ok("correctness") and ev.ok("fullgraph") and ev.ok("breaks"), ev.result
