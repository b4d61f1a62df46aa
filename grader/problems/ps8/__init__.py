"""Problem set 8: a library call Dynamo cannot trace, wrapped as a custom operator.

``SignalModel`` encodes windows of a signal (``x``: ``[BATCH, T, FEATURES]``) and halves their
time resolution with a library function, :func:`rms_pool` (root mean square over pairs of time
steps, an odd last step paired with zero), which is computed through NumPy (``np.add.reduceat``):
Dynamo cannot trace it (``torch.compile(fullgraph=True)`` raises; without ``fullgraph`` the
graph breaks there), and autograd cannot see through it, so nothing before it learns.

The learner wraps the library call as a custom operator ``ps8::rms_pool``
(``torch.library.custom_op``), gives it a fake implementation (``register_fake``: the output's
shape, dtype and strides without computing it, ``T`` odd included) and an autograd formula
(``register_autograd``), checks it with ``torch.library.opcheck``, and calls it from
``FixedSignalModel(SignalModel)``: one training step's forward and backward compile as one graph.

What the judge runs is never the learner's Python (docs/design.md, "A custom operator as data"):
the subject ships the learner's fake and backward as graphs (:mod:`grader.checks.custom_ops`),
the judge registers an operator of its own whose real implementation is this module's
:func:`rms_pool`, and runs the learner's model graph with it. The ``custom_op`` check compares
the fake with the real kernel on every shape the problem uses (odd and even ``T``) and more, and
the backward with :func:`rms_pool_backward`; a pure-torch rewrite of the library does not call
the operator and is not credited (``tests/test_ps8.py`` tries the routes that skip the lesson).
"""
import numpy as np
import torch
from torch import nn

from grader.checks import custom_ops
from grader.checks.custom_ops import OpSpec
from grader.checks.targets import SpeedTarget
from grader.problems import Problem, TestCell

__all__ = ["SignalModel", "rms_pool", "make_inputs", "odd_inputs", "example_inputs", "torch",
           "nn", "FEATURES", "DIM", "OUTPUTS", "BATCH", "STEPS", "EPS"]

FEATURES, DIM, OUTPUTS = 16, 64, 8
BATCH, STEPS = 16, 64          # STEPS: time steps of a window (the odd class has one fewer)
EPS = 1e-6


def rms_pool(x: torch.Tensor) -> torch.Tensor:
    """The library's function (think of a C extension you cannot change): the root mean square
    of each pair of steps along the last dimension, ``sqrt((a*a + b*b) / 2 + EPS)``; an odd last
    step is paired with zero. ``[..., T] -> [..., (T + 1) // 2]``, contiguous, the input's dtype.
    Computed through NumPy: Dynamo cannot trace it, and autograd does not see through it."""
    a = x.detach().cpu().numpy()
    sums = np.add.reduceat(a * a, np.arange(0, a.shape[-1], 2), axis=-1)
    return torch.from_numpy(np.ascontiguousarray(np.sqrt(sums / 2 + EPS))).to(x.device)


def _rms_pool_in_torch(x: torch.Tensor) -> torch.Tensor:
    """The library's function written in torch operators: the judge's yardstick for its
    gradient (``tests/test_ps8.py`` checks it against the library in float64)."""
    padded = torch.nn.functional.pad(x, (0, x.shape[-1] % 2))
    squares = padded.unflatten(-1, (-1, 2)) ** 2
    return torch.sqrt(squares.mean(-1) + EPS)


def rms_pool_backward(x: torch.Tensor, y: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The library's gradient ``grad_y -> grad_x`` at ``x`` (``y`` is the library's output
    there), computed by autograd through :func:`_rms_pool_in_torch`."""
    with torch.enable_grad():
        leaf = x.detach().requires_grad_()
        (grad_x,) = torch.autograd.grad(_rms_pool_in_torch(leaf), leaf, grad)
    return grad_x


def _rms_pool_fake(x: torch.Tensor) -> torch.Tensor:
    shape = list(x.shape)
    shape[-1] = -(-shape[-1] // 2)      # pairs, an odd last step with one of its own
    return torch.empty(shape, dtype=x.dtype, device=x.device)


class _DifferentiableRmsPool(torch.autograd.Function):
    """The library call with the library's gradient: what the baseline trains with (eager)."""

    @staticmethod
    def forward(ctx, x):
        # The library as the judge calls it: the check that a learner's model computes its
        # result through the operator changes the library's output, here and in their graph.
        y = custom_ops.library(RMS_POOL_OP, x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return rms_pool_backward(x, y, grad)


class SignalModel(nn.Module):
    """Input projection, a tanh-GELU, the library's ``rms_pool`` over time (half the steps), a
    normalised head; ``forward(x, target)`` returns the mean squared error against ``target``
    (``[BATCH, (T + 1) // 2, OUTPUTS]``)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(8)
        self.inp = nn.Linear(FEATURES, DIM)
        self.mix = nn.Linear(DIM, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, OUTPUTS)

    def gelu(self, h):
        return 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))

    def pool(self, h):
        """Half the time steps: ``[B, DIM, T] -> [B, DIM, (T + 1) // 2]``."""
        return rms_pool(h)

    def forward(self, x, target):
        h = self.gelu(self.inp(x))                        # [B, T, DIM]
        h = self.pool(h.transpose(1, 2)).transpose(1, 2)  # [B, (T + 1) // 2, DIM]
        h = h + self.gelu(self.mix(self.norm(h)))
        return ((self.head(h) - target) ** 2).mean()


class _Baseline(SignalModel):
    """The original with the library's gradient (the judge's yardstick, run eagerly)."""

    def pool(self, h):
        return _DifferentiableRmsPool.apply(h)


def _inputs(gen: torch.Generator, device: str, steps: int) -> tuple:
    x = torch.randn(BATCH, steps, FEATURES, generator=gen)
    target = torch.randn(BATCH, (steps + 1) // 2, OUTPUTS, generator=gen)
    return x.to(device), target.to(device)


def make_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A batch of windows of ``STEPS`` (even) time steps, and the targets."""
    return _inputs(gen, device, STEPS)


def odd_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A batch of windows of ``STEPS - 1`` (odd) time steps: the last step has no partner."""
    return _inputs(gen, device, STEPS - 1)


def example_inputs(seed: int = 0, device: str = "cpu", steps: int = STEPS) -> tuple:
    return _inputs(torch.Generator().manual_seed(seed), device, steps)


def _other_inputs(rng) -> dict:
    """The odd windows: every claim is checked on them too (a fake that says ``T // 2`` is right
    only for even ``T``)."""
    return {f"windows of {STEPS - 1} steps (odd)": odd_inputs}


def _op_shapes(rng) -> list[tuple[int, ...]]:
    """What the fake and the backward are checked on: the shapes the model hands the operator
    (odd and even), the shortest windows, and a few more drawn for this job."""
    drawn = sorted({rng.randrange(2, 200) for _ in range(3)})
    return [(BATCH, DIM, STEPS), (BATCH, DIM, STEPS - 1), (2, 3, 1), (2, 3, 2),
            *((rng.randrange(1, 5), rng.randrange(1, 9), t) for t in drawn)]


RMS_POOL_OP = OpSpec(qualname="ps8::rms_pool", schema="(Tensor x) -> Tensor",
                     kernel=rms_pool, fake=_rms_pool_fake, backward=rms_pool_backward,
                     example=lambda: torch.randn(3, 4, 7), shapes=_op_shapes)

HINTS = {
    "correctness": "the loss and every parameter's gradient must match the original trained "
                   "with the library's gradient: a call autograd cannot see through leaves the "
                   "layers before it without gradients (register_autograd gives it one), and a "
                   "formula wrong on some shapes makes them wrong there (on odd windows the last "
                   "step pairs with zero, and the gradient has the input's own length): "
                   "torch.library.opcheck on odd and even shapes finds it.",
    "custom_op": "register `ps8::rms_pool` with torch.library.custom_op, a fake that gives the "
                 "output's shape for odd T too ((T + 1) // 2), and an autograd formula written "
                 "in torch operators; torch.library.opcheck on odd and even shapes finds most of "
                 "what this check finds.",
    "fullgraph": "forward must compile as one graph with fullgraph=True. A model that calls "
                 "the library directly must call it through your custom operator; one that "
                 "already does is stopped by the operator's fake (Dynamo trusts it: it must give "
                 "the output's shape, dtype and strides for every input, odd T included; the "
                 "custom-operator check above names the input where it is wrong) or by what "
                 "Dynamo's message above says.",
    "breaks": "each break the report above lists still splits the graph; where it lists none, "
              "tracing stopped before any break (the one-graph check above says where).",
    "speed": "speed is credited to one graph whose outputs and gradients are right: Inductor "
             "fuses the GELUs, the norm and the loss around the operator.",
}

def through_the_operator(case) -> str:
    """The set's lesson (``Problem.lessons``): '' when the learner's checked graph calls the
    library through the custom operator (:data:`RMS_POOL_OP`), else why a graph without it is
    not the lesson: a rewrite of the library in torch operators."""
    spec = case.problem.custom_op
    if spec.graph_name in (case.graph_operators() or ()):
        return ""
    return (f"it does not call the library through `{spec.qualname}` (this problem teaches "
            f"wrapping the library's kernel as a custom operator, not rewriting it)")


PROBLEMS = {
    "ps8.q1": Problem(
        key="ps8.q1", title="a library call wrapped as a custom operator", entry="FixedSignalModel",
        make_baseline=lambda device: _Baseline().to(device).train(), make_inputs=make_inputs,
        solution_grade_id="ps8-q1-solution",
        checks=("correctness", "custom_op", "fullgraph", "breaks", "speed"),
        training=True, learner_compile={"fullgraph": True},
        inputs_name=f"windows of {STEPS} steps (even)", other_inputs=_other_inputs,
        custom_op=RMS_POOL_OP, lessons=(through_the_operator,),
        target=SpeedTarget(fraction_of_reference=0.8, faster_than_baseline=False),
        budget_s=15.0, hints=HINTS),
}

# How each autograded test cell of ps8.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    # Correct outputs alone earn nothing: the correctness cell needs the operator the set
    # teaches too, and the judge credits no other check to code whose loss or gradients are
    # wrong on odd or even windows (docs/design.md, "A score means learned it").
    TestCell("ps8-q1-correctness", 2, requires=(("ps8.q1", "correctness"),
                                                ("ps8.q1", "custom_op"))),
    TestCell("ps8-q1-custom-op", 4, requires=(("ps8.q1", "custom_op"),)),
    # One graph is the lesson's reward only with the operator that makes it one.
    TestCell("ps8-q1-onegraph", 4, requires=(("ps8.q1", "fullgraph"), ("ps8.q1", "breaks"),
                                             ("ps8.q1", "custom_op"))),
    TestCell("ps8-q1-speed", 3, requires=(("ps8.q1", "fullgraph"), ("ps8.q1", "custom_op")),
             scored=("ps8.q1", "speed")),
]
