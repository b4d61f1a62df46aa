"""Problem set 3: modes and recompiles.

q1. ``TinyMLP`` at batch size 2 is launch bound: per-op overhead, not arithmetic, sets its speed.
    The learner picks a ``torch.compile`` mode by setting the class attribute ``compile_mode`` on
    ``SmallBatchMLP`` (and justifies it in a written answer, graded by hand); the grader compiles
    the learner's class with that mode.
q2. ``PerSampleScorer`` loops over the batch in Python, so Dynamo specialises the graph to each
    batch size and recompiles, even with ``dynamic=True``. The learner's ``BatchScorer`` must
    compile once for every batch size 2..64 under ``torch.compile(model, dynamic=True)``.
"""
import torch
from torch import nn
import torch.nn.functional as F

from ..check import check, evaluate, run_test
from . import Problem, TestCell
from ..targets import SpeedTarget

__all__ = ["TinyMLP", "PerSampleScorer", "MODES", "make_mlp_inputs", "make_scorer_inputs",
           "example_mlp_inputs", "example_scorer_inputs", "check", "evaluate", "run_test", "torch", "nn", "F"]

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MLP_D = 64
MLP_LAYERS = 8
MLP_BATCH = 2
SCORER_D = 32


class TinyMLP(nn.Module):
    """Eight small residual layers: at batch 2 every op is tiny, so launching them dominates."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(3)
        self.norm = nn.LayerNorm(MLP_D)
        self.layers = nn.ModuleList(nn.Linear(MLP_D, MLP_D) for _ in range(MLP_LAYERS))
        with torch.no_grad():
            for layer in self.layers:
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.1)
                layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen) * 0.1)

    def forward(self, x):
        for layer in self.layers:
            x = x + F.gelu(layer(self.norm(x)))
        return x


class PerSampleScorer(nn.Module):
    """Scores each sample separately, in a Python loop over the batch."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(4)
        self.fc = nn.Linear(SCORER_D, SCORER_D)
        with torch.no_grad():
            self.fc.weight.copy_(torch.randn(self.fc.weight.shape, generator=gen) * 0.2)
            self.fc.bias.copy_(torch.randn(self.fc.bias.shape, generator=gen) * 0.2)

    def forward(self, x):
        rows = []
        for i in range(x.shape[0]):
            r = torch.relu(self.fc(x[i]))
            rows.append(r / (r.norm() + 1e-6))
        return torch.stack(rows)


def make_mlp_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    return (torch.randn(MLP_BATCH, MLP_D, generator=gen).to(device),)


def make_scorer_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A batch of 2..64 samples (the size is drawn too)."""
    batch = int(torch.randint(2, 65, (1,), generator=gen))
    return (torch.randn(batch, SCORER_D, generator=gen).to(device),)


def example_mlp_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_mlp_inputs(torch.Generator().manual_seed(seed), device)


def example_scorer_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_scorer_inputs(torch.Generator().manual_seed(seed), device)


def scorer_recompile_inputs(device: str = "cpu") -> list[tuple]:
    """One call per batch size 2..64 (in a shuffled but fixed order)."""
    gen = torch.Generator().manual_seed(7)
    sizes = [2, 64] + [int(b) for b in torch.randperm(61, generator=gen) + 3]
    return [(torch.randn(b, SCORER_D, generator=gen).to(device),) for b in sizes]


def _chosen_mode(entry) -> dict:
    """The learner's (or the reference's) choice: the class attribute ``compile_mode``."""
    mode = getattr(entry, "compile_mode", None)
    if mode not in MODES:
        raise ValueError(f"set the class attribute `compile_mode` of {getattr(entry, '__name__', entry)}"
                         f" to one of {MODES} (got {mode!r})")
    return {"mode": mode}


Q1_HINTS = {
    "correctness": "SmallBatchMLP should compute what TinyMLP computes: subclass it and keep "
                   "forward, or rewrite it with the same arithmetic.",
    "fullgraph": "forward must stay one graph: no print, .item() or data-dependent if.",
    "speed": "at batch 2 each op is tiny: what costs time is launching ops, not computing them. "
             "Pick the mode made for launch-bound models (on CPU the modes differ little; "
             "`max-autotune` compiles for a long time).",
}
Q2_HINTS = {
    "correctness": "BatchScorer must give each sample the same score PerSampleScorer gives it: "
                   "apply the layer to the whole batch and normalise each row "
                   "(`r.norm(dim=-1, keepdim=True)`).",
    "fullgraph": "forward must stay one graph: no print, .item() or data-dependent if.",
    "recompiles": "no Python loop over the batch (`for i in range(x.shape[0])` bakes the batch "
                  "size into the graph, so every new size recompiles): use batched tensor ops "
                  "that work for any number of rows.",
}

PROBLEMS = {
    "ps3.q1": Problem(
        key="ps3.q1", title="pick a mode for a launch-bound model", entry="SmallBatchMLP",
        make_baseline=lambda device: TinyMLP().to(device).eval(), make_inputs=make_mlp_inputs,
        solution_grade_id="ps3-q1-solution", checks=("correctness", "fullgraph", "speed"),
        compile_options=_chosen_mode, baseline_compile=None,
        target=SpeedTarget(fraction_of_reference=0.8, faster_than_baseline=True),
        pool_size=8, budget_s=15.0, hints=Q1_HINTS),
    "ps3.q2": Problem(
        key="ps3.q2", title="compile once for batch sizes 2..64", entry="BatchScorer",
        make_baseline=lambda device: PerSampleScorer().to(device).eval(),
        make_inputs=make_scorer_inputs, solution_grade_id="ps3-q2-solution",
        checks=("correctness", "fullgraph", "recompiles"), learner_compile={"dynamic": True},
        recompile_inputs=scorer_recompile_inputs, max_compiles=1, hints=Q2_HINTS),
}

# How each autograded test cell of ps3.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    TestCell("ps3-q1-correctness", 2, requires=(("ps3.q1", "correctness"), ("ps3.q1", "fullgraph"))),
    TestCell("ps3-q1-speed", 3, requires=(("ps3.q1", "correctness"),), scored=("ps3.q1", "speed")),
    TestCell("ps3-q2-correctness", 2, requires=(("ps3.q2", "correctness"),)),
    TestCell("ps3-q2-recompiles", 3, requires=(("ps3.q2", "recompiles"), ("ps3.q2", "fullgraph"))),
]
