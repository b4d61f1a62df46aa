"""Problem set 5: compile a training step.

``Classifier`` is a small residual MLP whose ``forward`` returns the training loss of a batch in
which some examples carry no label (``IGNORE``). It carries four habits from eager training code,
each of which costs ``torch.compile`` something: an example counter kept in a Python int (a new
value every step, so Dynamo recompiles every step), a check for non-finite activations (a
data-dependent ``if``), a boolean mask that drops the unlabeled examples (an output whose shape
depends on the data) and a ``.item()`` that keeps the loss for logging (a host sync).

The graded call is the grader's training step (:func:`grader.problems.training_step`): forward,
backward, and every parameter's gradient — so the learner's model is compiled for the backward
pass too (AOTAutograd). The learner's ``FastClassifier`` must give the same loss and gradients,
compile with ``fullgraph=True``, compile once over six steps, and make the step faster.
"""
import torch
import torch.nn.functional as F
from torch import nn

from grader.problems import Problem, TestCell, training_step
from grader.checks.targets import SpeedTarget

__all__ = ["Classifier", "make_inputs", "example_inputs", "training_step", "torch", "nn", "F", "IGNORE", "FEATURES", "CLASSES", "BATCH"]

FEATURES, HIDDEN, CLASSES, BATCH = 256, 256, 10, 64
IGNORE = -1  # the label of an example nobody labeled: it must not count in the loss


class Classifier(nn.Module):
    """Two residual blocks (linear, layer norm, tanh-GELU) and a linear head; ``forward(x, y)``
    returns the mean label-smoothed cross-entropy over the labeled examples."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(7)
        self.fc1, self.ln1 = nn.Linear(FEATURES, HIDDEN), nn.LayerNorm(HIDDEN)
        self.fc2, self.ln2 = nn.Linear(HIDDEN, HIDDEN), nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)
        self.examples_seen = 0
        self.last_loss = None

    def block(self, fc, ln, x):
        h = ln(fc(x))
        return x + 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))

    def forward(self, x, y):
        self.examples_seen += x.shape[0]
        h = self.block(self.fc1, self.ln1, x)
        h = self.block(self.fc2, self.ln2, h)
        if not torch.isfinite(h).all():
            raise FloatingPointError(f"non-finite activations after {self.examples_seen} examples")
        logits = self.head(h)
        labeled = y != IGNORE
        loss = F.cross_entropy(logits[labeled], y[labeled], label_smoothing=0.1)
        self.last_loss = loss.item()
        return loss


def make_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A batch: ``BATCH`` feature vectors and their labels, about one in six unlabeled."""
    x = torch.randn(BATCH, FEATURES, generator=gen)
    y = torch.randint(0, CLASSES, (BATCH,), generator=gen)
    unlabeled = torch.rand(BATCH, generator=gen) < 1 / 6
    unlabeled[0] = False  # at least one labeled example, so the mean is defined
    y = torch.where(unlabeled, torch.full_like(y, IGNORE), y)
    return x.to(device), y.to(device)


def example_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_inputs(torch.Generator().manual_seed(seed), device)


def six_steps(device: str = "cpu") -> list[tuple]:
    """Six training steps' batches, same shapes, new data each time."""
    gen = torch.Generator().manual_seed(13)
    return [make_inputs(gen, device) for _ in range(6)]


HINTS = {
    "correctness": "the loss and every gradient must match Classifier's on fresh batches, "
                   "including the unlabeled examples: they must not count in the loss, and the "
                   "mean is over the labeled ones only. Compare your model's loss with "
                   "Classifier's on example_inputs() in eager mode first.",
    "fullgraph": "each break listed above still splits the graph: the list names the line and "
                 "the cause (chapter 4 explains each kind). What a break computes for logging or "
                 "for a safety check can happen outside the compiled model, in the training loop.",
    "breaks": "every break listed above still splits the graph; run "
              "grader.checks.breaks.graph_break_report(model, *example_inputs()) after each fix.",
    "recompiles": "the recompile report above names the guard that failed: a Python value the "
                  "graph depends on changes from step to step (chapter 6: what Dynamo guards "
                  "on; TORCH_LOGS=\"recompiles\" shows it too).",
    "speed": "one graph lets Inductor fuse the layer norms, the GELU and the loss around the "
             "matmuls, in the forward and the backward pass; check that forward does no extra "
             "work.",
}

PROBLEMS = {
    "ps5.q1": Problem(
        key="ps5.q1", title="compile a training step", entry="FastClassifier",
        make_baseline=lambda device: Classifier().to(device).train(), make_inputs=make_inputs,
        solution_grade_id="ps5-q1-solution", training=True,
        checks=("correctness", "fullgraph", "breaks", "recompiles", "speed"),
        baseline_compile=None, learner_compile={"fullgraph": True},
        recompile_inputs=six_steps, max_compiles=1,
        target=SpeedTarget(fraction_of_reference=0.85, faster_than_baseline=True),
        budget_s=20.0, hints=HINTS),
}

# How each autograded test cell of ps5.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    # Correct outputs alone earn nothing (the given model has them): the correctness cell's
    # points need the set's lesson too, and the judge credits no other check to code whose
    # outputs are wrong on any class of inputs (docs/design.md, "A score means learned it").
    TestCell("ps5-q1-correctness", 3, requires=(("ps5.q1", "correctness"), ("ps5.q1", "fullgraph"))),
    TestCell("ps5-q1-fullgraph", 2, requires=(("ps5.q1", "fullgraph"), ("ps5.q1", "breaks"))),
    TestCell("ps5-q1-recompiles", 2, requires=(("ps5.q1", "recompiles"),)),
    # Speed is credited to one graph as the grader defines it (from torch 2.10 on, a plain
    # fullgraph=True accepts some breaks, e.g. `.item()`, and the timed compile uses it; torch 2.8
    # and 2.9 raise on them).
    TestCell("ps5-q1-speed", 3, requires=(("ps5.q1", "fullgraph"),), scored=("ps5.q1", "speed")),
]
