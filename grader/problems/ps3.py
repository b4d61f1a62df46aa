"""Problem set 3: modes and recompiles.

q1. ``TinyMLP`` at batch size 2 is launch bound: per-op overhead, not arithmetic, sets its speed.
    Two jobs call it in a fresh process: a short one (``SHORT_JOB_CALLS`` calls) and a long one
    (``LONG_JOB_CALLS``). For each, the learner picks how to run it (the class attribute
    ``compile_mode`` of ``ShortJobMLP`` / ``LongJobMLP``: ``"none"`` for eager, or a
    ``torch.compile`` mode) and is graded on the job's total time, cold compile included,
    against the reference's choice in the same run and against eager: compiling a short job
    loses (its compile costs more than it saves); not compiling a long one loses. The written
    answer (graded by hand) explains the choices with the learner's own figures.
q2. ``PerSampleScorer`` loops over the batch in Python, so Dynamo specialises the graph to each
    batch size and recompiles, even with ``dynamic=True``. The learner's ``BatchScorer`` must
    compile once for every batch size 2..64 under ``torch.compile(model, dynamic=True)``.
"""
import torch
from torch import nn
import torch.nn.functional as F

from grader.problems import NO_COMPILE, Problem, TestCell
from grader.checks.targets import SpeedTarget

__all__ = ["TinyMLP", "PerSampleScorer", "MODES", "SHORT_JOB_CALLS", "LONG_JOB_CALLS", "make_mlp_inputs", "make_scorer_inputs",
           "example_mlp_inputs", "example_scorer_inputs", "torch", "nn", "F"]

MODES = (NO_COMPILE, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# How many calls q1's jobs make. Measured on a 2-core CPU (torch 2.14): a cold compile of
# TinyMLP takes 3-4 s and saves ~110 us per call (eager ~180 us, compiled ~70 us), so compiling
# pays after ~35,000 calls; the short job is far below that, the long one far above.
SHORT_JOB_CALLS = 2_000
LONG_JOB_CALLS = 200_000
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
    "correctness": "keep TinyMLP's forward: the classes only choose how the model is run.",
    "fullgraph": "keep TinyMLP's forward: it compiles as one graph.",
    "job": "a job is judged on its total time: the first call (the compile, in a fresh process) "
           "plus every call after it. Measure both for each choice with the exploration cell "
           "and add them up for the job's number of calls.",
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
}

PROBLEMS = {
    "ps3.q1short": Problem(
        key="ps3.q1short", title=f"a short job ({SHORT_JOB_CALLS:,} calls): compile or not",
        entry="ShortJobMLP", make_baseline=lambda device: TinyMLP().to(device).eval(),
        make_inputs=make_mlp_inputs, solution_grade_id="ps3-q1-solution",
        checks=("correctness", "job"), compile_options=_chosen_mode, baseline_compile=None,
        choices={"mode": MODES}, timed_model="baseline", job_calls=SHORT_JOB_CALLS,
        target=SpeedTarget(fraction_of_reference=0.8, faster_than_baseline=False, min_speedup=0.8),
        pool_size=8, hints=Q1_HINTS),
    "ps3.q1long": Problem(
        key="ps3.q1long", title=f"a long job ({LONG_JOB_CALLS:,} calls): which mode",
        entry="LongJobMLP", make_baseline=lambda device: TinyMLP().to(device).eval(),
        make_inputs=make_mlp_inputs, solution_grade_id="ps3-q1-solution",
        checks=("correctness", "fullgraph", "job"), compile_options=_chosen_mode,
        baseline_compile=None, choices={"mode": MODES}, timed_model="baseline",
        job_calls=LONG_JOB_CALLS,
        target=SpeedTarget(fraction_of_reference=0.8, faster_than_baseline=True, min_speedup=1.2),
        pool_size=8, hints=Q1_HINTS),
    "ps3.q2": Problem(
        key="ps3.q2", title="compile once for batch sizes 2..64", entry="BatchScorer",
        make_baseline=lambda device: PerSampleScorer().to(device).eval(),
        make_inputs=make_scorer_inputs, solution_grade_id="ps3-q2-solution",
        checks=("correctness", "fullgraph", "recompiles"), learner_compile={"dynamic": True},
        recompile_inputs=scorer_recompile_inputs, max_compiles=1, hints=Q2_HINTS),
}

# How each autograded test cell of ps3.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    TestCell("ps3-q1-correctness", 1,
             requires=(("ps3.q1long", "correctness"), ("ps3.q1long", "fullgraph"))),
    TestCell("ps3-q1-short", 2, requires=(("ps3.q1short", "correctness"),),
             scored=("ps3.q1short", "job")),
    TestCell("ps3-q1-long", 2, requires=(("ps3.q1long", "correctness"),),
             scored=("ps3.q1long", "job")),
    TestCell("ps3-q2-correctness", 2, requires=(("ps3.q2", "correctness"),)),
    TestCell("ps3-q2-recompiles", 3, requires=(("ps3.q2", "recompiles"), ("ps3.q2", "fullgraph"))),
]
