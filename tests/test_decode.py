"""The capstone's decode loop (ps6): the grader-owned loop around a learner's step, what it
compares, and how each wrong way to write a cached step is caught.

In-process parts are tested directly; the grading of the demo cohort's wrong steps goes through
the judge with the timed check left out.
"""
from __future__ import annotations

import os

import pytest
import torch

from grader.cohort.demo import demo_solutions
from grader.isolation.check import evaluate
from grader.problems import get_problem
from grader.problems import ps6
from grader.isolation.cells.source import Cell, solution_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERSONAS = demo_solutions(ROOT)["ps6"]


def _reference_source() -> str:
    [cell] = solution_cells(os.path.join(ROOT, "source", "ps6", "ps6.ipynb"), ["ps6-q1-solution"])
    return cell.source


def _step(source: str):
    namespace = dict(vars(ps6))
    exec(source, namespace)
    return ps6.build_step(namespace["CachedGPT"], ps6.TinyGPT(), "cpu")


@pytest.mark.parametrize("batch,prompt_len", [(1, 8), (3, 32)])
def test_the_cached_step_gives_the_baselines_logits_through_the_padded_loop(batch, prompt_len):
    gen = torch.Generator().manual_seed(batch)
    tokens = torch.randint(0, ps6.VOCAB, (batch, prompt_len + ps6.NEW_TOKENS), generator=gen)
    prompt, continuation = tokens[:, :prompt_len], tokens[:, prompt_len:]
    with torch.no_grad():
        expected = ps6.decode(ps6.TinyGPT(), prompt, continuation)
        got = ps6.decode(_step(_reference_source()), prompt, continuation)
    assert got.shape == (batch, ps6.NEW_TOKENS, ps6.VOCAB)
    torch.testing.assert_close(got, expected, rtol=1e-3, atol=1e-4)
    # Greedy decoding runs the same step: its first generated token is the argmax of the first
    # teacher-forced logits (the prompt is the same either way).
    greedy = ps6.generate(_step(_reference_source()), prompt)
    assert torch.equal(greedy[:, prompt_len], expected[:, 0].argmax(-1))


def test_the_problem_times_the_loop_and_traces_the_step():
    problem = get_problem("ps6.q1")
    step = _step(_reference_source())
    assert problem.graded_call(step)(*ps6.example_inputs(1)).shape[1:] == (ps6.NEW_TOKENS, ps6.VOCAB)
    assert problem.step_inputs("cpu")[0].shape == (ps6.MAX_BATCH,)
    # The recompile check sees every step call of four generations, batch sizes 1..4.
    assert len(ps6.recompile_inputs("cpu")) == sum(p + ps6.NEW_TOKENS - 1 for p in (8, 16, 24, 32))
    with pytest.raises(ValueError, match="compile_mode"):
        problem.compile_kwargs(type("Bad", (), {"compile_mode": "fast please"}))


def test_ps6_catches_each_wrong_step_in_the_judge():
    """Through the judge and its subject (no timing): the reference passes; a cache sliced with
    `int(pos)` is right but not one graph; a step without the mask is wrong, and its graph earns
    nothing (it computes the wrong thing)."""
    checks = ["correctness", "fullgraph", "recompiles"]
    runs = {name: evaluate("ps6.q1", cells=[Cell("cell 7", source)], reference="off",
                           checks=checks, cache=False)
            for name, source in {"reference": _reference_source(),
                                 "sliced": PERSONAS["partial"]["ps6-q1-solution"],
                                 "unmasked": PERSONAS["wrong"]["ps6-q1-solution"]}.items()}
    assert [runs["reference"].verdict(c) for c in checks] == ["pass"] * 3, str(runs["reference"])
    assert runs["sliced"].verdict("correctness") == "pass"
    assert runs["sliced"].verdict("fullgraph") == "fail"
    assert "int(pos)" in runs["sliced"].message("fullgraph")
    assert runs["unmasked"].verdict("correctness") == "fail"
    assert runs["unmasked"].verdict("fullgraph") == "fail"
    assert "see the correctness check" in runs["unmasked"].message("fullgraph")   # the gate
    assert runs["unmasked"].verdict("recompiles") == "fail"
