"""Problem set 3: modes and recompiles.

q1. ``TinyMLP`` at batch size 2 is launch bound: per-op overhead, not arithmetic, sets its speed.
    A job calls it ``calls`` times (compiled, its first call compiles, from a cold cache). The
    learner writes a rule, ``JobPlanner.mode_for(calls, device)``, that returns how to run such
    a job (one of ``MODES``: ``"none"`` for eager, or a ``torch.compile`` mode): compiling pays
    when ``calls x (eager per call - compiled per call) > compile time``, figures the learner
    measures in the exploration cell (:func:`grader.checks.jobs.measure_modes`, the judge's own
    measurement). The rule is graded on jobs the learner cannot try
    (:class:`grader.problems.JobPlan`): pairs of sizes drawn fresh for each submission, 1.5 to 3
    times below and above the grading machine's own break-even, each choice judged on its
    modelled total from figures the judge measured itself; a rule earns a pair only when it is
    right on both sides, which a rule without measured figures is not. The examples the
    notebook names are both well below the break-even, so they give no threshold away. The
    written answer (graded by hand) gives a prediction with its reason before the measurement,
    then the figures and the rule.
q2. ``PerSampleScorer`` loops over the batch in Python, so Dynamo specialises the graph to each
    batch size and recompiles, even with ``dynamic=True``. The learner's ``BatchScorer`` must
    compile once for every batch size 2..64 under ``torch.compile(model, dynamic=True)``, with
    one batched computation: the ``operators`` check bounds the ATen operators of its graph, so
    padding to 64 rows and keeping the per-row loop (one compile, 64 copies of the body) does
    not pass.
"""
import torch
from torch import nn
import torch.nn.functional as F

from grader.problems import NO_COMPILE, JobPlan, Problem, TestCell

__all__ = ["TinyMLP", "PerSampleScorer", "MODES", "EXAMPLE_JOB_CALLS", "make_mlp_inputs",
           "make_scorer_inputs", "example_mlp_inputs", "example_scorer_inputs", "torch", "nn", "F"]

MODES = (NO_COMPILE, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# The two jobs q1's prediction asks about: both well below the break-even measured on a CPU (tens
# of thousands of calls), so that no threshold between them is a right answer (the graded jobs
# are drawn around the grading machine's own break-even, for each submission).
EXAMPLE_JOB_CALLS = (500, 5_000)
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
    """One call per batch size 2..64 (in a shuffled but fixed order), the largest first: the
    first call's graph is the one the grader checks (a loop over rows copies its body 64 times
    into it) and the one every later call must reuse."""
    gen = torch.Generator().manual_seed(7)
    sizes = [64, 2] + [int(b) for b in torch.randperm(61, generator=gen) + 3]
    return [(torch.randn(b, SCORER_D, generator=gen).to(device),) for b in sizes]


Q1_HINTS = {
    "rule": "JobPlanner.mode_for(calls, device) must return one of MODES for every number of "
            "calls (an int) on 'cpu' and 'cuda'.",
    "job": "a job's time is its first call (the compile, with a cold compiler cache) plus "
           "calls x the time per call. Measure both for each choice with the exploration cell, "
           "on the kind of machine you are graded on: compiling pays when calls x (eager per "
           "call - compiled per call) > compile time. The hidden jobs lie 1.5 to 3 times from "
           "the break-even on either side, so write the rule from your measured figures, for "
           "each device.",
}
Q2_HINTS = {
    "correctness": "BatchScorer must give each sample the same score PerSampleScorer gives it: "
                   "apply the layer to the whole batch at once and normalise each row by its "
                   "own norm (see the `dim` and `keepdim` arguments of `Tensor.norm`).",
    "fullgraph": "forward must stay one graph: run grader.checks.breaks.graph_break_report on it to "
                 "see each break and its line.",
    "recompiles": "no Python loop over the batch (`for i in range(x.shape[0])` bakes the batch "
                  "size into the graph, so every new size recompiles): use batched tensor ops "
                  "that work for any number of rows.",
    "operators": "no Python loop over rows at all, not even over a fixed (padded) number of "
                 "them: each iteration is traced into the graph again. One batched expression "
                 "computes every row at once.",
}

PROBLEMS = {
    "ps3.q1": Problem(
        key="ps3.q1", title="a rule: how to run a job of N calls", entry="JobPlanner",
        make_baseline=lambda device: TinyMLP().to(device).eval(), make_inputs=make_mlp_inputs,
        solution_grade_id="ps3-q1-solution", checks=("rule", "job"),
        plan=JobPlan(modes=MODES, examples=EXAMPLE_JOB_CALLS), pool_size=8, hints=Q1_HINTS),
    "ps3.q2": Problem(
        key="ps3.q2", title="compile once for batch sizes 2..64", entry="BatchScorer",
        make_baseline=lambda device: PerSampleScorer().to(device).eval(),
        make_inputs=make_scorer_inputs, solution_grade_id="ps3-q2-solution",
        checks=("correctness", "fullgraph", "recompiles", "operators"),
        learner_compile={"dynamic": True}, recompile_inputs=scorer_recompile_inputs,
        max_compiles=1, hints=Q2_HINTS,
        # The batched forward is 5 ATen operators (linear, relu, norm, add, div); a per-row loop
        # over 64 padded rows is more than 300.
        max_operators=20),
}

# How each autograded test cell of ps3.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    # One point per pair of hidden jobs, one below the grading machine's break-even and one above
    # it, both right (five pairs): a rule that answers the same for every size earns nothing.
    TestCell("ps3-q1-jobs", 5, requires=(("ps3.q1", "rule"),), scored=("ps3.q1", "job")),
    # Correct outputs alone earn nothing: the points need the lesson too (see ps1), which is one
    # batched computation: compiled once (recompiles) and no loop over rows (operators: a loop
    # over 64 padded rows compiles once too, but copies its body into the graph per row).
    TestCell("ps3-q2-correctness", 2, requires=(("ps3.q2", "correctness"), ("ps3.q2", "recompiles"),
                                                ("ps3.q2", "operators"))),
    TestCell("ps3-q2-recompiles", 3, requires=(("ps3.q2", "recompiles"), ("ps3.q2", "fullgraph"),
                                               ("ps3.q2", "operators"))),
]
