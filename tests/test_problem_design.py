"""Points need the lesson: answers that skip it score what the design says, through the judge
and its subject (the timed checks left out where the verdict does not depend on them).

- a forward that does none of the work earns no structural point (one graph, breaks, kernels,
  recompiles) in any set: they are credited only to a graph that computes what the original does;
- ps2's two-line library answer (F.group_norm, then the tanh-GELU) is not credited for fusion or
  speed: a library norm skips writing the statistics, which is the lesson;
- ps6's "static history" step (write the token into a buffer, recompute every position, select
  one) is one graph that compiles once, but it does ~60x the reference's work a step: not timed.
"""
from __future__ import annotations

import os

import pytest

from grader.isolation.check import Evaluation, job_for, score_cell
from grader.isolation.judge import Judge
from grader.isolation.source import Cell
from grader.problems import get_problem
from grader.problems import test_cells as declared_test_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRUCTURAL = ("fullgraph", "breaks", "recompiles", "fusion")


@pytest.fixture(scope="module")
def judge():
    return Judge()


def grade(judge, keys: list[str], source: str, checks: list[str] | None = None) -> dict:
    job = job_for(keys, [Cell("cell 7", source)], course_root=ROOT,
                  checks={k: [c for c in get_problem(k).checks if checks is None or c in checks]
                          for k in keys})
    job["budget_s"] = 8.0
    return judge.grade(job)["results"]


def points(assignment: str, results: dict) -> float:
    evaluations = {k: Evaluation(get_problem(k), r) for k, r in results.items()}
    return sum(score_cell(cell, evaluations).points
               for cell in declared_test_cells(assignment).values()
               if all(k in evaluations for k in cell.problems))


DO_NOTHING = {
    "ps1.q1": "class FixedModel(Original):\n    def forward(self, x):\n        return x\n",
    "ps2.q1": "class FusedGroupNormGELU(GroupNormGELU):\n    def forward(self, x):\n        return x\n",
    "ps3.q2": "class BatchScorer(PerSampleScorer):\n    def forward(self, x):\n        return x\n",
    "ps4.q1": ("class FastGPT(TinyGPT):\n    def forward(self, idx):\n"
               "        return torch.softmax(self.head(self.emb(idx[:, -1])), dim=-1)\n"),
    "ps5.q1": ("class FastClassifier(Classifier):\n    def forward(self, x, y):\n"
               "        return self.head(x[:, :256]).logsumexp(-1).mean()\n"),
    "ps6.q1": ("class CachedGPT(TinyGPT):\n    def forward(self, tokens, pos):\n"
               "        return self.head(self.emb(tokens))\n"),
}


@pytest.mark.parametrize("key", sorted(DO_NOTHING))
def test_a_forward_that_does_none_of_the_work_earns_no_structural_point(judge, key):
    wanted = [c for c in get_problem(key).checks if c in STRUCTURAL + ("correctness",)]
    result = grade(judge, [key], DO_NOTHING[key], wanted)[key]
    assert result["status"] == "ok", result
    assert not result["checks"]["correctness"]["ok"]
    for name in STRUCTURAL:
        if name in result["checks"]:
            assert not result["checks"][name]["ok"], (name, result["checks"][name]["message"])


LIBRARY_PS2 = """import torch.nn.functional as F


class FusedGroupNormGELU(GroupNormGELU):
    def forward(self, x):
        y = F.group_norm(x, self.groups, self.weight, self.bias, self.eps)
        return F.gelu(y, approximate="tanh")
"""


def test_ps2s_library_answer_earns_correctness_only(judge):
    results = grade(judge, ["ps2.q1", "ps2.q1rows"], LIBRARY_PS2)
    assert results["ps2.q1"]["checks"]["correctness"]["ok"]
    assert "aten.group_norm" in results["ps2.q1"]["checks"]["fusion"]["message"]
    assert points("ps2", results) == 3


STATIC_HISTORY_PS6 = """class CachedGPT(TinyGPT):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(MAX_BATCH, MAX_SEQ, dtype=torch.long),
                             persistent=False)

    def forward(self, tokens, pos):
        self.seen.index_copy_(1, pos.view(1), tokens[:, None])
        logits = self.logits(self.seen)                       # every position, every step
        return logits.index_select(1, pos.view(1))[:, 0]
"""


def test_ps6s_static_history_step_is_not_timed(judge):
    results = grade(judge, ["ps6.q1"], STATIC_HISTORY_PS6)
    checks = results["ps6.q1"]["checks"]
    assert checks["correctness"]["ok"] and checks["fullgraph"]["ok"] and checks["recompiles"]["ok"]
    assert not checks["speed"]["ok"] and "FLOPs" in checks["speed"]["message"]
    assert points("ps6", results) == 7   # correctness 3, one graph 2, one compile 2: no speed


DELETION_PS4 = """class FastGPT(TinyGPT):
    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        logits = self.head(self.ln(x[:, -1]))
        return torch.softmax(logits, dim=-1)
"""


def test_ps4s_two_line_deletion_is_not_enough(judge):
    """Deleting the counter and the debug check gives one graph, but torch.compile's default
    compiles the first prompt length as a constant: the second recompiles, and the graph does not
    serve every length. Correctness and one graph only (4 of 10); with compile_dynamic = True it
    is the reference (10)."""
    checks = ["correctness", "fullgraph", "breaks", "recompiles", "speed"]
    results = grade(judge, ["ps4.q1", "ps4.q1lengths"], DELETION_PS4, checks)
    recompiles = results["ps4.q1"]["checks"]["recompiles"]
    assert not recompiles["ok"] and "2 compilations" in recompiles["message"]
    assert points("ps4", results) == 4
    fixed = DELETION_PS4.replace("class FastGPT(TinyGPT):\n",
                                 "class FastGPT(TinyGPT):\n    compile_dynamic = True\n\n")
    results = grade(judge, ["ps4.q1", "ps4.q1lengths"], fixed, checks[:4])
    assert all(c["ok"] for c in results["ps4.q1"]["checks"].values()), results["ps4.q1"]["checks"]
