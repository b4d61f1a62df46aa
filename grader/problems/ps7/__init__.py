"""Problem set 7: when the compiled model is wrong and slow -- find it, shrink it, fix it.

``SensorModel`` reads windows of sensor readings taken every ``PERIOD`` seconds (``t``: each
reading's time in seconds since the start of the hour, float32; ``x``: its features) and
predicts per reading. Its embedding of *when* in the window a reading falls was learnt in eager
mode, per ``BUCKET_S``-second bucket of the time since the window's first reading, computed with
float floor division (``//``). Run eagerly it is right by definition: the table was trained on
eager's buckets.

Compiled, it is wrong and slow, for two causes the learner has to find (nothing in the notebook
names them):

- **wrong**: eager's float ``//`` is Python's floor division, computed from ``fmod`` (exact: for
  float32 ``1.0 // 0.1`` it gives ``9.0``, as Python does, because float32 ``0.1`` is a little above
  0.1 and ten of it exceed 1.0); Inductor lowers it to ``floor(a / b)`` after a rounded division, and
  the quotient 9.99999985 rounds to 10.0 (``10.0``) -- torch 2.8 as ``floor(div(a, b))``, 2.14 as
  ``floor(div_rn(a, b))``; pytorch/pytorch#197895.
  On grid-aligned timestamps a few percent of the buckets move by one, and the embedding rows
  with them. Backend bisection: ``eager``, ``aot_eager`` and ``aot_eager_decomp_partition`` match
  eager, ``inductor`` does not; the compiler bisector names the lowering of ``div``.
- **slow**: ``forward`` counts the readings it has seen in a Python int attribute, a new value
  every call; Dynamo treats integer attributes of a module as constants, guards on them and
  compiles again every call (``TORCH_LOGS="recompiles"``: ``self.readings_seen == ...``) until
  the recompile limit, then runs eagerly.

The learner's ``FixedSensorModel(SensorModel)`` must give eager's outputs (``correctness``), and
so must the judge's own Inductor compile of its graph, within :data:`TOLERANCE` (``compiled``),
as one graph that compiles once over six windows, faster than eager ``SensorModel``. Blind
rewrites of the bucket (``floor(t / B)``, float64, integer ticks, ``torch.bucketize``) change
eager's buckets too and fail ``correctness``: the fix has to reproduce eager's floor division
in operators Inductor computes the same way (``tests/test_ps7.py``).
"""
import torch
from torch import nn

from grader.problems import Problem, TestCell
from grader.checks.targets import SpeedTarget

__all__ = ["SensorModel", "make_inputs", "example_inputs", "six_windows", "torch", "nn",
           "FEATURES", "DIM", "OUTPUTS", "PERIOD", "BUCKET_S", "BUCKETS", "BATCH", "READINGS",
           "TOLERANCE"]

FEATURES, DIM, OUTPUTS = 16, 64, 8
PERIOD = 0.1        # seconds between two readings of a sensor
BUCKET_S = 0.3      # the time embedding's bucket, in seconds since the window's first reading
BUCKETS = 24        # buckets the embedding has (later readings share the last one)
BATCH, READINGS = 32, 64
HOUR_TICKS = 36_000  # a window starts at a whole reading within the hour
TOLERANCE = (1e-3, 1e-4)  # (rtol, atol): the compiled model's outputs against eager's


class SensorModel(nn.Module):
    """Input projection plus a learnt embedding of the reading's time bucket, one pre-norm MLP
    block with a tanh-GELU, a normalised linear head: ``forward(t, x) -> [BATCH, READINGS,
    OUTPUTS]``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(9)
        self.inp = nn.Linear(FEATURES, DIM)
        self.when = nn.Embedding(BUCKETS, DIM)
        self.norm1 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)
        self.norm2 = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, OUTPUTS)
        self.readings_seen = 0          # for the service's metrics page

    def gelu(self, h):
        return 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))

    def bucket(self, t):
        """Each reading's time bucket: whole ``BUCKET_S`` seconds since the window's first."""
        return ((t - t[:, :1]) // BUCKET_S).long().clamp(max=BUCKETS - 1)

    def forward(self, t, x):
        self.readings_seen += t.numel()
        h = self.inp(x) + self.when(self.bucket(t))
        h = h + self.fc2(self.gelu(self.fc1(self.norm1(h))))
        return self.head(self.norm2(h))


def make_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """``BATCH`` windows of ``READINGS`` consecutive readings: each starts at a whole reading
    within the hour (``t`` in seconds, float32, as a sensor's clock ticks times ``PERIOD``)."""
    start = torch.randint(0, HOUR_TICKS, (BATCH, 1), generator=gen)
    t = (start + torch.arange(READINGS)).float() * PERIOD
    x = torch.randn(BATCH, READINGS, FEATURES, generator=gen)
    return t.to(device), x.to(device)


def example_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_inputs(torch.Generator().manual_seed(seed), device)


def six_windows(device: str = "cpu") -> list[tuple]:
    """Six calls at the same shapes, new windows each time (what a service sees)."""
    gen = torch.Generator().manual_seed(17)
    return [make_inputs(gen, device) for _ in range(6)]


HINTS = {
    "correctness": "run eagerly, FixedSensorModel must give SensorModel's outputs: its time "
                   "embedding was learnt on the buckets SensorModel computes eagerly, so a bucket "
                   "computed another way looks up another row. Compare your bucket() with "
                   "SensorModel's on example_inputs(), element by element.",
    "compiled": "your code is right eagerly, but compiled it is not: find which compiler layer "
                "changes the result (torch.compile with backend='eager', 'aot_eager', "
                "'aot_eager_decomp_partition', 'inductor'; then the compiler bisector, chapter 9), "
                "then what that layer computes differently from eager for this operator.",
    "fullgraph": "each break listed above still splits the graph.",
    "breaks": "every break listed above still splits the graph.",
    "recompiles": "the recompile report above names the guard that failed: something forward "
                  "reads changes every call (TORCH_LOGS=\"recompiles\" says what).",
    "speed": "speed is only credited to a compiled model whose outputs are right; one graph "
             "that compiles once lets Inductor fuse the norms, the GELU and the embedding "
             "around the matmuls; check that forward does no extra work.",
}

PROBLEMS = {
    "ps7.q1": Problem(
        key="ps7.q1", title="a model that is wrong and slow when compiled", entry="FixedSensorModel",
        make_baseline=lambda device: SensorModel().to(device).eval(), make_inputs=make_inputs,
        solution_grade_id="ps7-q1-solution",
        checks=("correctness", "fullgraph", "breaks", "recompiles", "compiled", "speed"),
        baseline_compile=None, learner_compile={"fullgraph": True},
        recompile_inputs=six_windows, max_compiles=1, tolerance=TOLERANCE,
        target=SpeedTarget(fraction_of_reference=0.85, faster_than_baseline=True),
        budget_s=15.0, hints=HINTS),
}

# How each autograded test cell of ps7.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    # Correct outputs alone earn nothing (the given model has them): the correctness cell's
    # points need the set's lesson too, and the judge credits no other check to code whose
    # outputs are wrong on any class of inputs (docs/design.md, "A score means learned it").
    TestCell("ps7-q1-correctness", 2, requires=(("ps7.q1", "correctness"), ("ps7.q1", "compiled"))),
    TestCell("ps7-q1-compiled", 3, requires=(("ps7.q1", "compiled"),)),
    TestCell("ps7-q1-onegraph", 2, requires=(("ps7.q1", "fullgraph"), ("ps7.q1", "breaks"),
                                             ("ps7.q1", "recompiles"))),
    # Speed is credited to one graph as the grader defines it whose compiled outputs are right
    # (the timed runs' outputs are compared with eager's too).
    TestCell("ps7-q1-speed", 3, requires=(("ps7.q1", "compiled"), ("ps7.q1", "fullgraph")),
             scored=("ps7.q1", "speed")),
]
