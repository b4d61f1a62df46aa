"""Every fix the chapters teach scores full marks through the real judge, and the escape hatch a
set forbids is refused with its reason (issue: "Every fix the course teaches is accepted").

Which fix the chapters teach for what:

- chapter 4 (a data-dependent ``if``): ``torch.where`` on both sides, or ``torch.cond`` (both
  branches in the graph, one run per call); a boolean mask's mean as a sum over a count kept in
  shape (masking arithmetic); ``.item()`` kept a tensor; ``print`` out of ``forward``: ps1;
- chapter 6 (shapes that vary): ``dynamic=True`` (a set's ``compile_dynamic``) and
  ``torch._check`` stating a size's bounds: ps4. ``mark_dynamic`` applies to no set: it marks an
  input *before* ``torch.compile`` sees it, and in a set the grader compiles, with the learner's
  ``compile_dynamic``; Dynamo refuses it inside the traced ``forward``;
- chapter 8: ``torch.compiler.disable`` for code that cannot be rewritten, "a clean break": every
  set grades one graph (fullgraph), so there it is refused, by name, and only the cells that need
  no graph score.

Each answer is graded as ``make grade`` grades a notebook
(:func:`grader.cohort.scoring.grade_notebook`: the screen, the judge with its sandboxed subject,
the scored test cells), with one judge for the module. About 3 minutes on a 2-core machine. Speed cells are timed: on a loaded machine their
verdict may be inconclusive (flagged for review), never a fail.
"""
from __future__ import annotations

import pytest

import notebook_solutions as ns
from grader.cohort import scoring

PS1_BODY = """
        scale = h.abs().max()                          # .item() kept a tensor
        h = h / (scale + 1e-6)
        pos = h > 0
        {mask}
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())
"""

PS1_COND = """
class FixedModel(Original):
    def forward(self, x):
        h = self.fc1(x)
        h = torch.cond(x.mean() > 0, lambda h: torch.tanh(h) * 1.5,
                       lambda h: torch.sigmoid(h) - 0.5, (h,))
""" + PS1_BODY.format(mask="pos_mean = (h * pos).sum() / pos.sum()   # masking arithmetic")

PS1_WHERE = """
class FixedModel(Original):
    def forward(self, x):
        h = self.fc1(x)
        h = torch.where(x.mean() > 0, torch.tanh(h) * 1.5, torch.sigmoid(h) - 0.5)
""" + PS1_BODY.format(mask="pos_mean = torch.where(pos, h, 0.0).sum() / pos.sum()")

PS1_DISABLE = """
@torch.compiler.disable
def log_norm(h):
    print("hidden norm:", h.norm())


class FixedModel(Original):
    def forward(self, x):
        h = self.fc1(x)
        h = torch.where(x.mean() > 0, torch.tanh(h) * 1.5, torch.sigmoid(h) - 0.5)
        log_norm(h)                                    # a clean break: still a break
""" + PS1_BODY.format(mask="pos_mean = (h * pos).sum() / pos.sum()")

# The reference (compile_dynamic = True) with the prompt length's bounds stated for the compiler.
BOUNDS = ("torch._check(T >= MIN_PROMPT)                  # the bounds, stated for the compiler\n"
          "        torch._check(T <= SEQ)\n        ")


def _solution_cell(ps: str) -> str:
    nb = ns.solved_release(ps)
    [cell] = [c for c in nb["cells"] if (c["metadata"].get("nbgrader") or {}).get("grade_id")
              == f"{ps}-q1-solution"]
    return "".join(cell["source"])


@pytest.fixture(scope="module")
def judge():
    from grader.isolation.judge.judge_process import JudgeProcess

    process = JudgeProcess()
    yield process
    process.close()


def _grade(judge, tmp_path, ps: str, solution: str) -> scoring.JudgedScores:
    path = str(tmp_path / f"{ps}.ipynb")
    ns.save(ns.release_with(ps, {f"{ps}-q1-solution": solution}), path)
    return scoring.grade_notebook(path, ps, ns.ROOT, judge=judge)


def _full_marks(scores: scoring.JudgedScores) -> None:
    for grade_id, cell in scores.cells.items():
        # With the grader's own traceback, where it failed (a grader error is the grader's bug).
        problems = {k: (r.get("status"), r.get("message"), str(r.get("traceback", ""))[-4000:])
                    for k, r in scores.problems.items()}
        assert cell["points"] == cell["max_points"] or cell["review"], (grade_id, cell, problems)
    assert any(c["points"] for c in scores.cells.values())


@pytest.mark.parametrize("ps,solution", [("ps1", PS1_COND), ("ps1", PS1_WHERE)],
                         ids=["ps1-torch.cond", "ps1-torch.where"])
def test_a_taught_fix_scores_full_marks(judge, tmp_path, ps, solution):
    _full_marks(_grade(judge, tmp_path, ps, solution))


def test_a_size_stated_with_torch_check_under_dynamic_shapes_scores_full_marks(judge, tmp_path):
    reference = _solution_cell("ps4")
    assert "compile_dynamic = True" in reference
    with_bounds = reference.replace("x = self.emb(idx)", BOUNDS + "x = self.emb(idx)", 1)
    assert with_bounds.count("torch._check") == 2
    _full_marks(_grade(judge, tmp_path, "ps4", with_bounds))


def test_a_disabled_region_is_refused_where_a_set_grades_one_graph(judge, tmp_path):
    scores = _grade(judge, tmp_path, "ps1", PS1_DISABLE)
    fullgraph = scores.cells["ps1-q1-fullgraph"]
    assert fullgraph["points"] == 0
    assert "torch.compiler.disable" in fullgraph["failure"], fullgraph
    assert "log_norm(h)" in fullgraph["text"], fullgraph     # the learner's line
    assert scores.cells["ps1-q1-speed"]["points"] == 0
    assert scores.problems["ps1.q1"]["status"] == "ok"       # graded, not refused or crashed
