"""Problem set 1: fix the graph breaks.

``Original`` is a small model whose ``forward`` breaks the graph four times: a data-dependent
``if``, a ``print``, an ``.item()`` and a boolean mask (``h[h > 0]``, an output whose shape depends
on the data). The learner writes ``FixedModel`` (same parameters, same outputs) that compiles
with ``fullgraph=True``; its speed is compared with the *original compiled* model, breaks and all.
"""
import torch
from torch import nn

from grader.problems import Problem, TestCell
from grader.checks.targets import SpeedTarget

__all__ = ["Original", "make_inputs", "example_inputs", "torch", "nn"]

D = 256
ROWS = 1024


class Original(nn.Module):
    """Two linear layers with pointwise work in between, and four graph breaks in ``forward``."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.fc1 = nn.Linear(D, D)
        self.fc2 = nn.Linear(D, D)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_((torch.rand(p.shape, generator=gen) - 0.5) * (2.0 / D ** 0.5))

    def forward(self, x):
        h = self.fc1(x)
        if x.mean() > 0:                        # 1. data-dependent branch
            h = torch.tanh(h) * 1.5
        else:
            h = torch.sigmoid(h) - 0.5
        print("hidden norm:", h.norm())         # 2. print
        scale = h.abs().max().item()            # 3. .item()
        h = h / (scale + 1e-6)
        pos_mean = h[h > 0].mean()              # 4. boolean mask: data-dependent shape
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())


def make_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A batch of ``ROWS`` x ``D`` inputs (mean slightly positive)."""
    return ((torch.randn(ROWS, D, generator=gen) + 0.25).to(device),)


def make_inputs_negative(gen: torch.Generator, device: str = "cpu") -> tuple:
    """Inputs whose mean is negative: the other side of the ``if``."""
    return ((torch.randn(ROWS, D, generator=gen) - 0.25).to(device),)


def example_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_inputs(torch.Generator().manual_seed(seed), device)


def _baseline(device: str):
    return Original().to(device).eval()


HINTS = {
    "correctness": "FixedModel must compute what Original computes on every kind of input named "
                   "above. Wrong only on inputs with a negative mean: a side of the `if` is "
                   "missing (both are computed, `torch.where` picks one). Wrong on both: look at "
                   "the arithmetic you changed, the mask above all (a mean of the selected values "
                   "divides by their count, `mask.sum()`, not by every element).",
    "fullgraph": "each break listed above still splits the graph: the list names the line, the "
                 "cause and a direction for the fix (chapter 4, section 4). For the boolean mask: "
                 "a mean is a sum divided by a count, and both can be computed without dropping "
                 "elements.",
    "breaks": "each break listed above still splits the graph (where none is listed, tracing "
              "stopped first: the one-graph check says where); fix them one by one, and run "
              "grader.checks.breaks.graph_break_report after each fix.",
    "speed": "the speed target needs one graph so that Inductor can fuse the pointwise work "
             "around the two matmuls; check that forward does no extra work.",
}

def _other_side(rng) -> dict:
    """The other side of the data-dependent `if`: every check runs there too."""
    return {"inputs with a negative mean": make_inputs_negative}


PROBLEMS = {
    "ps1.q1": Problem(
        key="ps1.q1", title="fix the graph breaks", entry="FixedModel",
        make_baseline=_baseline, make_inputs=make_inputs, solution_grade_id="ps1-q1-solution",
        checks=("correctness", "fullgraph", "breaks", "speed"),
        baseline_compile={}, learner_compile={"fullgraph": True},
        inputs_name="inputs with a positive mean", other_inputs=_other_side,
        target=SpeedTarget(fraction_of_reference=0.85, faster_than_baseline=True),
        budget_s=30.0, hints=HINTS),
}

# How each autograded test cell of ps1.ipynb earns its points (grade_id -> checks): the grading
# judged scoring reads this, and the test cells show the same checks to the learner.
TEST_CELLS = [
    # Correct outputs alone earn nothing (the given model has them): the correctness cell's
    # points need the set's lesson too, and the judge credits no other check to code whose
    # outputs are wrong on any class of inputs (docs/design.md, "A score means learned it").
    TestCell("ps1-q1-correctness", 3, requires=(("ps1.q1", "correctness"), ("ps1.q1", "fullgraph"))),
    TestCell("ps1-q1-fullgraph", 3, requires=(("ps1.q1", "fullgraph"), ("ps1.q1", "breaks"))),
    TestCell("ps1-q1-speed", 4, scored=("ps1.q1", "speed")),
]
