"""Problem set 2: make Inductor fuse it.

``GroupNormGELU`` is a hand-written, memory-bound block: a group norm computed one feature group
at a time in a Python loop, writing into slices of a preallocated output, then an affine map and a
tanh-GELU. Inductor turns every slice write into its own kernels. The learner rewrites it
(``FusedGroupNormGELU``) so Inductor emits at most ``MAX_KERNELS`` kernels.
"""
import torch
from torch import nn

from grader.problems import Problem, TestCell
from grader.checks.targets import SpeedTarget

__all__ = ["GroupNormGELU", "make_inputs", "example_inputs", "MAX_KERNELS", "torch", "nn"]

D = 512
GROUPS = 8
ROWS = 1024
MAX_KERNELS = 5


class GroupNormGELU(nn.Module):
    """Group norm over ``GROUPS`` groups of features, affine, then the tanh approximation of GELU."""

    def __init__(self):
        super().__init__()
        self.groups = GROUPS
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, D))
        self.bias = nn.Parameter(torch.linspace(-0.1, 0.1, D))

    def forward(self, x):
        out = torch.empty_like(x)
        size = x.shape[-1] // self.groups
        for g in range(self.groups):
            xs = x[:, g * size:(g + 1) * size]
            mu = xs.mean(dim=-1, keepdim=True)
            var = ((xs - mu) ** 2).mean(dim=-1, keepdim=True)
            out[:, g * size:(g + 1) * size] = (xs - mu) / torch.sqrt(var + self.eps)
        y = out * self.weight + self.bias
        return 0.5 * y * (1.0 + torch.tanh(0.7978845608 * (y + 0.044715 * y ** 3)))


def make_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    return (torch.randn(ROWS, D, generator=gen).mul(2.0).add(0.5).to(device),)


def _rows_inputs(rows: int):
    def make(gen: torch.Generator, device: str = "cpu") -> tuple:
        return (torch.randn(rows, D, generator=gen).mul(2.0).add(0.5).to(device),)
    return make


def _other_rows(rng) -> dict:
    """Two other numbers of rows, drawn per grading job (no hard-coded batch size)."""
    rows = sorted(set(rng.sample(range(3, 300), 2)))
    return {f"{r} rows": _rows_inputs(r) for r in rows}


def example_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_inputs(torch.Generator().manual_seed(seed), device)


def _baseline(device: str):
    return GroupNormGELU().to(device).eval()


HINTS = {
    "correctness": "compute the same group norm: mean and (biased) variance over each group of "
                   "D // groups consecutive features, eps inside the square root, then the affine "
                   "map and the same tanh-GELU.",
    "fusion": "compare grader.checks.fusion.fusion_report of your class with GroupNormGELU's: each "
              "kernel is a pass over memory. Inductor splits the work wherever a Python loop "
              "over groups or a write into a slice of a preallocated tensor ends an expression: "
              "compute the statistics of all groups at once, as whole-tensor expressions.",
    "speed": "the speed comes from fusion: fewer kernels means fewer passes over memory.",
}

# A library norm does the statistics in one call: the two-line answer (F.group_norm, then GELU)
# would skip writing them as whole-tensor expressions, which is the lesson. Not credited: the
# learner's graph must compute the group norm itself.
_WHY = ("ps2 asks you to write the group norm's statistics yourself, as whole-tensor expressions "
        "Inductor can fuse; a library norm does them in one call, so it is not credited")
LIBRARY_NORMS = {f"aten.{op}": _WHY for op in (
    "group_norm", "native_group_norm", "layer_norm", "native_layer_norm", "batch_norm",
    "_native_batch_norm_legit", "_native_batch_norm_legit_no_training", "instance_norm",
    "rms_norm")}

PROBLEMS = {
    "ps2.q1": Problem(
        key="ps2.q1", title="make Inductor fuse it", entry="FusedGroupNormGELU",
        make_baseline=_baseline, make_inputs=make_inputs, solution_grade_id="ps2-q1-solution",
        checks=("correctness", "fullgraph", "fusion", "speed"),
        baseline_compile=None, learner_compile={}, max_kernels=MAX_KERNELS,
        refused_operators=LIBRARY_NORMS, inputs_name=f"{ROWS} rows", other_inputs=_other_rows,
        target=SpeedTarget(fraction_of_reference=0.85, faster_than_baseline=True),
        budget_s=15.0, hints=HINTS),
}

# How each autograded test cell of ps2.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    # Correct outputs alone earn nothing (the given model has them): the correctness cell's
    # points need the set's lesson too, and the judge credits no other check to code whose
    # outputs are wrong on any class of inputs (docs/design.md, "A score means learned it").
    TestCell("ps2-q1-correctness", 3, requires=(("ps2.q1", "correctness"), ("ps2.q1", "fusion"))),
    TestCell("ps2-q1-fusion", 4, requires=(("ps2.q1", "fusion"), ("ps2.q1", "fullgraph"))),
    # Speed is the lesson's reward: credited only with the fusion it comes from (a per-group
    # loop that Inductor cannot fuse earns no speed points, however fast its machine).
    TestCell("ps2-q1-speed", 3, requires=(("ps2.q1", "fusion"),), scored=("ps2.q1", "speed")),
]
