"""Problem set 4: a small transformer's inference step, for prompts of every length.

``TinyGPT`` is a one-block decoder that returns the next-token distribution for a batch of token
sequences of any length up to ``SEQ``. Its ``forward`` carries two habits from eager-mode
debugging: a call counter (``self.calls``) that steers a periodic check, so every call changes a
Python value the graph depends on and Dynamo recompiles; and the check itself, an ``.item()`` and
a ``print`` that break the graph. The learner's ``FastGPT`` must compile with ``fullgraph=True``,
compile **once** over a stream of requests whose prompt lengths vary (16 to 64 tokens), match the
outputs and reach the speed target over eager ``TinyGPT``.

Deleting the two habits is not enough: with the default ``dynamic=None`` Dynamo compiles the first
length it sees as a constant and compiles again, dynamic, at the second (automatic dynamic shapes,
chapter 6). The learner chooses how the grader compiles ``FastGPT`` with the class attribute
``compile_dynamic`` (``None``, ``True`` or ``False``), and the graph Dynamo captures must serve
every length: the judge runs it on each of them.
"""
import math

import torch
from torch import nn

from grader.problems import Problem, TestCell
from grader.checks.targets import SpeedTarget
from grader.problems.tiny_gpt import DIM, HEADS, VOCAB, Block, TinyGPTLayers

__all__ = ["TinyGPT", "Block", "make_inputs", "make_prompts", "example_inputs", "torch", "nn",
           "math", "VOCAB", "DIM", "HEADS", "LAYERS", "SEQ", "MIN_PROMPT", "PROMPT_LENGTHS"]

LAYERS, SEQ, BATCH = 1, 64, 4
MIN_PROMPT = 16
DYNAMIC_CHOICES = (None, True, False)


class TinyGPT(TinyGPTLayers):
    """A one-block decoder: ``attention`` and ``mlp`` are in ``grader/problems/tiny_gpt.py``
    (shared with ps6); the two habits are in ``forward``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)
        self.calls = 0

    def forward(self, idx):
        self.calls += 1
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
            if self.calls % 100 == 1 and x.abs().max().item() > 1e4:
                print(f"call {self.calls}: activations are getting large")
        logits = self.head(self.ln(x[:, -1]))
        return torch.softmax(logits, dim=-1)


def make_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A batch of ``BATCH`` token sequences of ``SEQ`` tokens (the timed shape)."""
    return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen).to(device),)


def make_prompts(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A batch of ``BATCH`` prompts of a length drawn from ``MIN_PROMPT``..``SEQ``."""
    length = int(torch.randint(MIN_PROMPT, SEQ + 1, (), generator=gen))
    return (torch.randint(0, VOCAB, (BATCH, length), generator=gen).to(device),)


def example_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_inputs(torch.Generator().manual_seed(seed), device)


def _prompts_of(length: int):
    def make(gen: torch.Generator, device: str = "cpu") -> tuple:
        return (torch.randint(0, VOCAB, (BATCH, length), generator=gen).to(device),)
    return make


def _other_lengths(rng) -> dict:
    """Two other prompt lengths, drawn per grading job from ``MIN_PROMPT``..``SEQ - 1``."""
    lengths = sorted(rng.sample(range(MIN_PROMPT, SEQ), 2))
    return {f"prompts of {n} tokens": _prompts_of(n) for n in lengths}


PROMPT_LENGTHS = (64, 48, 32, 57, 16, 40)


def repeated_calls(device: str = "cpu") -> list[tuple]:
    """Six requests, new tokens each time, with prompts of six lengths."""
    gen = torch.Generator().manual_seed(11)
    return [(torch.randint(0, VOCAB, (BATCH, n), generator=gen).to(device),)
            for n in PROMPT_LENGTHS]


def _chosen_dynamic(entry) -> dict:
    """The learner's (or the reference's) choice: the class attribute ``compile_dynamic``."""
    dynamic = getattr(entry, "compile_dynamic", None)
    if dynamic not in DYNAMIC_CHOICES:
        raise ValueError(f"compile_dynamic must be one of {DYNAMIC_CHOICES}, got {dynamic!r}")
    return {"dynamic": dynamic}


HINTS = {
    "correctness": "FastGPT must return the same next-token distribution as TinyGPT: keep the "
                   "same maths (subclass TinyGPT and reuse `attention` and `mlp`).",
    "fullgraph": "the debug check breaks the graph (`.item()` and `print`): drop it from forward "
                 "(check activations outside the compiled step if you need to).",
    "breaks": "every break listed above still splits the graph.",
    "recompiles": "read the recompile report: a Python value the graph depends on (`self.calls` "
                  "changes every call), or a prompt length baked into the graph (chapter 6: with "
                  "`dynamic=None` the first length compiles as a constant; set the class "
                  "attribute `compile_dynamic` to say how the grader compiles FastGPT).",
    "speed": "one graph lets Inductor fuse the softmax, GELU and layer norms around the matmuls; "
             "make sure forward does no extra work.",
}

PROBLEMS = {
    "ps4.q1": Problem(
        key="ps4.q1", title="a fast, single-graph inference step", entry="FastGPT",
        make_baseline=lambda device: TinyGPT().to(device).eval(), make_inputs=make_inputs,
        solution_grade_id="ps4-q1-solution",
        checks=("correctness", "fullgraph", "breaks", "recompiles", "speed"),
        baseline_compile=None, learner_compile={"fullgraph": True},
        compile_options=_chosen_dynamic, choices={"dynamic": DYNAMIC_CHOICES},
        recompile_inputs=repeated_calls, max_compiles=1,
        inputs_name=f"prompts of {SEQ} tokens", other_inputs=_other_lengths,
        target=SpeedTarget(fraction_of_reference=0.85, faster_than_baseline=True),
        budget_s=15.0, hints=HINTS),
}

# How each autograded test cell of ps4.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    # Correct outputs alone earn nothing (the given model has them): the correctness cell's
    # points need the set's lesson too, and the judge credits no other check to code whose
    # outputs are wrong on any class of inputs (docs/design.md, "A score means learned it").
    TestCell("ps4-q1-correctness", 2, requires=(("ps4.q1", "correctness"), ("ps4.q1", "fullgraph"))),
    TestCell("ps4-q1-fullgraph", 2, requires=(("ps4.q1", "fullgraph"), ("ps4.q1", "breaks"))),
    TestCell("ps4-q1-recompiles", 2, requires=(("ps4.q1", "recompiles"),)),
    TestCell("ps4-q1-speed", 4, scored=("ps4.q1", "speed")),
]
