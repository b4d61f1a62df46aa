"""A small problem set used by the judge and check tests (not part of the course)."""
import torch
from torch import nn

from grader.problems import Problem
from grader.checks.targets import SpeedTarget

__all__ = ["Original", "torch", "nn"]


class Original(nn.Module):
    """A pointwise-heavy block with a graph break (`.item()`) in the middle."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.full((256,), 0.5))

    def forward(self, x):
        y = torch.sin(x) * self.scale
        m = y.abs().max().item()
        return torch.cos(y / (m + 1.0)).exp()


def make_inputs(gen, device):
    return (torch.randn(64, 256, generator=gen).to(device),)


PROBLEMS = {
    "fx.q1": Problem(
        key="fx.q1", title="remove the break", entry="Fixed",
        make_baseline=lambda device: Original().to(device).eval(),
        make_inputs=make_inputs, solution_grade_id="fx-q1-solution",
        checks=("correctness", "fullgraph", "breaks", "speed"),
        baseline_compile={"backend": "eager"}, learner_compile={"backend": "eager"},
        target=SpeedTarget(fraction_of_reference=0.5), budget_s=5.0,
        hints={"fullgraph": "replace `.item()` with a tensor op"}),
}
