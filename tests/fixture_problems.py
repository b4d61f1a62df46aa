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


_BASELINES_BUILT = [0]


def _baseline_that_breaks_on_capture(device):
    """The grader's own code failing in the subject where no learner code runs: the baseline is
    built once when the learner's cells load, and fails the second time (the capture's fresh
    model), as a bug in the grader's capture path would."""
    _BASELINES_BUILT[0] += 1
    if _BASELINES_BUILT[0] > 1:
        raise RuntimeError("a bug in the grader's own code")
    return Original().to(device).eval()


PROBLEMS = {
    "fx.q1": Problem(
        key="fx.q1", title="remove the break", entry="Fixed",
        make_baseline=lambda device: Original().to(device).eval(),
        make_inputs=make_inputs, solution_grade_id="fx-q1-solution",
        checks=("correctness", "fullgraph", "breaks", "speed"),
        baseline_compile={"backend": "eager"}, learner_compile={"backend": "eager"},
        target=SpeedTarget(fraction_of_reference=0.5), budget_s=5.0,
        hints={"fullgraph": "replace `.item()` with a tensor op"}),
    "fx.grader_bug": Problem(
        key="fx.grader_bug", title="a problem whose grader code is broken", entry="Fixed",
        make_baseline=_baseline_that_breaks_on_capture, make_inputs=make_inputs,
        solution_grade_id="fx-grader-bug-solution", checks=("correctness", "fullgraph"),
        learner_compile={"backend": "eager"}),
}
