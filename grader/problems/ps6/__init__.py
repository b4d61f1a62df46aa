"""Problem set 6 (capstone): a compiled decode loop with a key/value cache.

``TinyGPT`` (two blocks) generates text one token at a time through a *decode step*,
``step(tokens, pos) -> logits``: ``tokens`` holds the token at position ``pos`` for every row
(``int64[MAX_BATCH]``; rows past the real batch are padding), ``pos`` is a 0-d ``int64`` tensor.
Its own ``forward`` is such a step with no memory but the tokens: at position ``pos`` it
recomputes every position so far (and ``int(pos)`` stops a compile). The learner writes
``CachedGPT(TinyGPT)``, a step with a preallocated key/value cache, that compiles as one graph,
compiles once over every step of generations of batch sizes 1..4 and prompt lengths 8..32, gives
the same logits, and is faster.

The loop around the step belongs to the grader (:func:`decode`, :func:`generate`): it pads the
batch to ``MAX_BATCH`` rows and passes the position as a tensor, so one graph serves every batch
size and position. What is compared and timed is :func:`decode`, *teacher-forced*: it feeds
given tokens (the prompt, then a continuation) through the step and returns the logits at every
generated position. Greedy decoding (:func:`generate`) feeds back its own argmax instead: the
same computation, but one near-tied argmax would change everything after it, so it is shown in
the notebook and not compared.
"""
import math

import torch
from torch import nn

from grader.checks import _torch_internals as ti
from grader.checks.targets import SpeedTarget
from grader.problems import Problem, TestCell
from grader.problems.tiny_gpt import (DIM, HEAD_DIM, HEADS, VOCAB, Block, TinyGPTLayers,
                                      softmax_last)

__all__ = ["TinyGPT", "Block", "softmax_last", "decode", "generate", "make_inputs", "example_inputs",
           "torch", "nn", "math", "VOCAB", "DIM", "HEADS", "LAYERS",
           "MAX_SEQ", "MAX_BATCH", "NEW_TOKENS", "HEAD_DIM", "step_inputs"]

LAYERS = 2
MAX_SEQ, MAX_BATCH, NEW_TOKENS = 64, 4, 24
PROMPT_MIN, PROMPT_MAX = 8, 32          # PROMPT_MAX + NEW_TOKENS <= MAX_SEQ


class TinyGPT(TinyGPTLayers):
    """A 2-block decoder. ``logits(idx)`` is the full forward pass. ``forward(tokens, pos)`` is
    the BASELINE decode step: it keeps the tokens it has seen (``history``) and recomputes the
    whole sequence at every step -- no cache. Correct, simple, slow; eager only (``int(pos)``).
    ``attention``, ``mlp`` and ``softmax_last`` are in ``grader/problems/tiny_gpt.py``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(6)
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Embedding(MAX_SEQ, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)
        self.register_buffer("history", torch.zeros(MAX_BATCH, MAX_SEQ, dtype=torch.long),
                             persistent=False)

    def logits(self, idx):
        """Next-token logits after every position: [B, T, VOCAB]."""
        T = idx.shape[1]
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        return self.head(self.ln(x))

    def forward(self, tokens, pos):
        """One decode step, no cache: logits [B, VOCAB] for the token after position ``pos``."""
        n = int(pos) + 1
        self.history[:, n - 1] = tokens
        return self.logits(self.history[:, :n])[:, -1]


def _step_tokens(tokens: torch.Tensor, t: int) -> torch.Tensor:
    # A copy with stride 1: a column view keeps the row length as its stride, and a one-row
    # column counts as contiguous already, so `.contiguous()` would not always copy.
    return tokens[:, t].clone(memory_format=torch.contiguous_format)


def _padded(tokens: torch.Tensor, length: int) -> torch.Tensor:
    """``tokens`` ([B, <= length]) in the top rows of a ``[MAX_BATCH, length]`` block of zeros:
    one shape for every batch size."""
    B, T = tokens.shape
    padded = tokens.new_zeros(MAX_BATCH, length)
    padded[:B, :T] = tokens
    return padded


def _steps(step, tokens: torch.Tensor, prompt_len: int):
    """Run ``step`` over the padded ``tokens`` one position at a time, the position passed as a
    tensor; yield ``(t, logits)`` at each position whose next token is generated. The caller may
    write ``tokens[:, t + 1]`` before the next step reads it (greedy decoding)."""
    for t in range(tokens.shape[1] - 1):
        torch.compiler.cudagraph_mark_step_begin()   # under CUDA graphs: a new step begins
        logits = step(_step_tokens(tokens, t), torch.tensor(t, device=tokens.device))
        if t >= prompt_len - 1:
            yield t, logits


def decode(step, prompt: torch.Tensor, continuation: torch.Tensor) -> torch.Tensor:
    """Teacher-forced decoding, the graded call: feed ``prompt`` ([B, P]) and then
    ``continuation`` ([B, N]) through ``step`` one position at a time, the batch padded to
    ``MAX_BATCH`` rows and the position passed as a tensor; return the logits predicting each
    continuation token, ``[B, N, VOCAB]``."""
    B, P = prompt.shape
    tokens = _padded(torch.cat([prompt, continuation], dim=1), P + continuation.shape[1])
    # clone: under CUDA graphs the next replay reuses the output's memory
    return torch.stack([logits[:B].clone() for _, logits in _steps(step, tokens, P)], dim=1)


@torch.no_grad()
def generate(step, prompt: torch.Tensor, new_tokens: int = NEW_TOKENS) -> torch.Tensor:
    """Greedy generation: the prompt ([B, P]) followed by ``new_tokens`` tokens, each the
    argmax of the step's logits, fed back as the next step's token."""
    B, P = prompt.shape
    tokens = _padded(prompt, P + new_tokens)
    for t, logits in _steps(step, tokens, P):
        tokens[:B, t + 1] = logits[:B].argmax(-1)
    return tokens[:B]


def make_inputs(gen: torch.Generator, device: str = "cpu") -> tuple:
    """A prompt (batch 1..MAX_BATCH, length PROMPT_MIN..PROMPT_MAX) and a continuation of
    ``NEW_TOKENS`` tokens, drawn from ``gen``."""
    B = int(torch.randint(1, MAX_BATCH + 1, (), generator=gen))
    P = int(torch.randint(PROMPT_MIN, PROMPT_MAX + 1, (), generator=gen))
    tokens = torch.randint(0, VOCAB, (B, P + NEW_TOKENS), generator=gen)
    return tokens[:, :P].contiguous().to(device), tokens[:, P:].contiguous().to(device)


def example_inputs(seed: int = 0, device: str = "cpu") -> tuple:
    return make_inputs(torch.Generator().manual_seed(seed), device)


def step_inputs(device: str = "cpu") -> tuple:
    """One step's arguments, as :func:`decode` passes them (for the graph-break checks)."""
    return (torch.zeros(MAX_BATCH, dtype=torch.long, device=device), torch.tensor(0, device=device))


def work_inputs(device: str = "cpu") -> list[tuple]:
    """Two step calls, early and late in a generation: a cached step does the same work at both
    (its attention reads the whole preallocated cache, masked); one that recomputes what came
    before does more, or does it all every time."""
    tokens = torch.zeros(MAX_BATCH, dtype=torch.long, device=device)
    return [(tokens, torch.tensor(1, device=device)),
            (tokens, torch.tensor(MAX_SEQ - 2, device=device))]


# A cached step may do at most this many times the FLOPs of the reference's step per call.
MAX_WORK_RATIO = 2.0


def _flops(problem: Problem, module, args: tuple) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), ti.quiet_torch_logs(), FlopCounterMode(display=False) as counter:
        problem.traced_call(module)(*args)
    return counter.get_total_flops()


def cached_step(case) -> str:
    """The set's lesson (``Problem.lessons``): '' when the learner's checked graph does the work
    of a cached step, no more on the last of :func:`work_inputs` than on the first (work that
    grows with the position is not a cached step) and at most :data:`MAX_WORK_RATIO` times the
    reference's FLOPs per call; else why not."""
    problem, side, graph = case.problem, case.side, case.graph
    calls = work_inputs(side.device)
    mine = [_flops(problem, graph.module, args) for args in calls]
    if mine[-1] > 1.1 * max(1, mine[0]):
        return (f"your step does more work later in a generation ({mine[0]:,} FLOPs at the first "
                f"call, {mine[-1]:,} at the last): a cached step computes one position per "
                f"layer, whatever the position")
    if side.reference_module is None:
        return ""
    theirs = max(_flops(problem, side.reference_module, args) for args in calls)
    if max(mine) > MAX_WORK_RATIO * theirs:
        return (f"your step does {max(mine):,} FLOPs a call, more than "
                f"{MAX_WORK_RATIO:g}x the reference's {theirs:,}: a cached step computes "
                f"one position per layer and reads the cache, it does not recompute the sequence")
    return ""


def recompile_inputs(device: str = "cpu") -> list[tuple]:
    """Every step call of four generations, in order: batch sizes 1, 2, 3, 4 with prompt
    lengths 8, 16, 24, 32, padded as :func:`decode` pads them."""
    gen = torch.Generator().manual_seed(11)
    calls = []
    for B, P in zip(range(1, MAX_BATCH + 1), (8, 16, 24, 32)):
        tokens = torch.randint(0, VOCAB, (MAX_BATCH, P + NEW_TOKENS), generator=gen)
        tokens[B:] = 0
        calls += [(_step_tokens(tokens, t).to(device), torch.tensor(t, device=device))
                  for t in range(P + NEW_TOKENS - 1)]
    return calls


MODES = ("default", "reduce-overhead", "max-autotune-no-cudagraphs")


def _chosen_mode(entry) -> dict:
    mode = getattr(entry, "compile_mode", "default")
    if mode not in MODES:
        raise ValueError(f"compile_mode must be one of {MODES}, got {mode!r}")
    return {"mode": mode}


def build_step(entry, baseline, device):
    """The learner's step: ``entry()`` with TinyGPT's weights. Caches registered as persistent
    buffers are not an error (they are not in TinyGPT's weights); a missing or extra weight is."""
    model = entry()
    missing, unexpected = model.load_state_dict(baseline.state_dict(), strict=False)
    params = {name for name, _ in model.named_parameters()}
    if unexpected or params & set(missing):
        raise RuntimeError(f"CachedGPT must keep TinyGPT's parameters: missing "
                           f"{sorted(params & set(missing))}, unexpected {sorted(unexpected)}")
    return model.to(device).eval()


HINTS = {
    "correctness": "the logits at every generated position must match TinyGPT's: each position "
                   "attends to itself and every earlier one, and to nothing after it. Compare "
                   "decode(CachedGPT(), *example_inputs()) with decode(TinyGPT(), ...) in eager "
                   "mode first, position by position.",
    "fullgraph": "each break listed above names its line and cause: a shape that depends on "
                 "`pos`, or `pos` read into Python, cannot be in one graph (chapter 4; chapter 6 "
                 "on shapes).",
    "breaks": "every break listed above still splits the graph; run "
              "grader.checks.breaks.graph_break_report(model, *step_inputs()) after each fix.",
    "recompiles": "the recompile report above names the guard that failed: something the step "
                  "depends on changes from step to step as a Python value or a shape "
                  "(TORCH_LOGS=\"recompiles\" shows it too).",
    "speed": "a cached step computes one position per layer instead of all of them: check that "
             "nothing in forward grows with the position except the attention over the cache.",
}

PROBLEMS = {
    "ps6.q1": Problem(
        key="ps6.q1", title="a compiled decode step with a key/value cache", entry="CachedGPT",
        make_baseline=lambda device: TinyGPT().to(device).eval(), make_inputs=make_inputs,
        solution_grade_id="ps6-q1-solution", build=build_step,
        driver=decode, step_inputs=step_inputs,
        checks=("correctness", "fullgraph", "breaks", "recompiles", "speed"),
        baseline_compile=None, learner_compile={"fullgraph": True}, compile_options=_chosen_mode,
        choices={"mode": MODES},
        recompile_inputs=recompile_inputs, max_compiles=1,
        lessons=(cached_step,), reference_eager_baseline=True,
        target=SpeedTarget(fraction_of_reference=0.85, faster_than_baseline=True),
        budget_s=20.0, hints=HINTS),
}

# How each autograded test cell of ps6.ipynb earns its points (grade_id -> checks).
TEST_CELLS = [
    # Correct outputs alone earn nothing (the given model has them): the correctness cell's
    # points need the set's lesson too, and the judge credits no other check to code whose
    # outputs are wrong on any class of inputs (docs/design.md, "A score means learned it").
    TestCell("ps6-q1-correctness", 3, requires=(("ps6.q1", "correctness"), ("ps6.q1", "fullgraph"))),
    TestCell("ps6-q1-fullgraph", 2, requires=(("ps6.q1", "fullgraph"), ("ps6.q1", "breaks"))),
    TestCell("ps6-q1-recompiles", 2, requires=(("ps6.q1", "recompiles"),)),
    # Speed is credited to one graph as the grader defines it (from torch 2.10 on, a plain
    # fullgraph=True accepts some breaks, e.g. `int(pos)`, and the timed compile uses it; torch 2.8
    # and 2.9 raise on them).
    TestCell("ps6-q1-speed", 3, requires=(("ps6.q1", "fullgraph"),), scored=("ps6.q1", "speed")),
]
