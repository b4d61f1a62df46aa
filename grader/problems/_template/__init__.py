"""The template of a problem set: one graph break to fix (``.item()``), scored on correct
outputs and one graph. ``python -m grader.cli new-set ps9`` copies this folder to
``grader/problems/ps9/`` and ``source/_template/`` to ``source/ps9/``, with every ``_template``
in them (keys, grade ids, file names) renamed ``ps9``; then write the set's own model, problems
and test cells here and its notebook there (docs/design.md, "Adding a problem set").

What a set's ``__init__.py`` holds: the given model and its inputs (the student notebook
imports them: ``from grader.problems._template import *``), ``PROBLEMS`` (each question's
:class:`grader.problems.Problem`: what is compared, compiled and timed) and ``TEST_CELLS`` (how
each autograded test cell of the notebook earns its points).
"""
import torch
from torch import nn

from grader.problems import Problem, TestCell

__all__ = ["Original", "make_inputs", "example_inputs", "torch", "nn"]

D = 64
ROWS = 128


class Original(nn.Module):
    """A linear layer scaled by its largest output, read with ``.item()``: one graph break."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.fc = nn.Linear(D, D)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_((torch.rand(p.shape, generator=gen) - 0.5) * (2.0 / D ** 0.5))

    def forward(self, x):
        h = self.fc(x)
        scale = h.abs().max().item()            # a Python float: the graph breaks here
        return torch.tanh(h / (scale + 1e-6))


def make_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A batch of ``ROWS`` x ``D`` inputs."""
    return (torch.randn(ROWS, D, generator=gen).to(device),)


def example_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_inputs(torch.Generator().manual_seed(seed), device)


def _baseline(device: str):
    return Original().to(device).eval()


HINTS = {
    "fullgraph": "the `.item()` turns a tensor into a Python number, which Dynamo cannot keep in "
                 "the graph: keep the scale a tensor.",
}

PROBLEMS = {
    "_template.q1": Problem(
        key="_template.q1", title="fix the graph break", entry="FixedModel",
        make_baseline=_baseline, make_inputs=make_inputs,
        solution_grade_id="_template-q1-solution",
        checks=("correctness", "fullgraph"), learner_compile={"fullgraph": True},
        budget_s=20.0, hints=HINTS),
}

# How each autograded test cell of _template.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    # Correct outputs alone earn nothing (the given model has them): the cell needs the lesson,
    # one graph, too (docs/design.md, "A score means learned it").
    TestCell("_template-q1-correctness", 2,
             requires=(("_template.q1", "correctness"), ("_template.q1", "fullgraph"))),
    TestCell("_template-q1-fullgraph", 2, requires=(("_template.q1", "fullgraph"),)),
]
