"""grader.checks.breaks: graph_break_report, fullgraph_check, classify.

Structure only (graph counts, causes, learner lines), in the style of torch/_dynamo/testing.py.
"""
from __future__ import annotations

import os

import pytest
import torch

import models
from grader.checks import _torch_internals as ti
from grader.checks import breaks
from grader.checks.breaks import classify, fullgraph_check, graph_break_report

CASE_IDS = [cause for _, _, cause in models.BREAK_CASES]


@pytest.mark.parametrize("broken, fixed, cause", models.BREAK_CASES, ids=CASE_IDS)
def test_cause_and_learner_line(broken, fixed, cause):
    report = graph_break_report(broken(), models.example_input())
    assert not report.ok
    assert cause in report.causes, report
    brk = next(b for b in report.breaks if b.cause == cause)
    lineno, text = models.break_line(cause)
    assert brk.location is not None
    assert os.path.samefile(brk.location.filename, models.__file__)
    assert brk.location.lineno == lineno
    assert brk.location.line == text
    assert brk.location.label == f"models.py, line {lineno}"
    assert brk.fix.strip() and brk.explanation.strip() and brk.reason.strip()
    # The printed report names the learner's line and the fix.
    shown = str(report)
    assert f"models.py, line {lineno}" in shown and text in shown and brk.fix in shown


@pytest.mark.parametrize("broken, fixed, cause", models.BREAK_CASES, ids=CASE_IDS)
def test_fixed_twin_is_one_graph(broken, fixed, cause):
    x = models.example_input()
    report = graph_break_report(fixed(), x)
    assert report.ok, report
    assert report.graph_count == 1 and report.break_count == 0 and report.causes == []
    assert report.op_count >= 1
    assert "one graph" in str(report)
    result = fullgraph_check(fixed(), x)
    assert result.ok, result
    assert result.report is None and result.error == ""
    # The twin computes what the broken model computes.
    torch.testing.assert_close(fixed()(x), broken()(x))


@pytest.mark.parametrize("broken, fixed, cause", models.BREAK_CASES, ids=CASE_IDS)
def test_fullgraph_check_rejects_broken_model(broken, fixed, cause):
    """Every model that graph_break_report says breaks must fail fullgraph_check.

    Regression (scalar_read and dynamic_shape_op on torch 2.14): with ``fullgraph=True`` Dynamo
    turns on capture_scalar_outputs / capture_dynamic_output_shape_ops
    (torch/_dynamo/output_graph.py: "allow capture scalar outputs and
    allow_dynamic_output_shape_ops when fullgraph=True"), so ``.item()`` and ``x[x > 0]`` compile
    as one graph there while a plain ``torch.compile`` breaks on them; fullgraph_check therefore
    runs the graph-break report first and fails on any break it finds.
    """
    result = fullgraph_check(broken(), models.example_input())
    assert not result.ok
    assert result.error
    assert result.report is not None
    assert cause in result.report.causes
    assert "does not compile with fullgraph=True" in str(result)


def test_graph_counts():
    """Breaks in the middle of forward split it in two graphs (torch/_dynamo/testing style)."""
    x = models.example_input()
    assert graph_break_report(models.BranchOnValue(), x).graph_count == 2
    assert graph_break_report(models.ItemRead(), x).graph_count == 2
    assert graph_break_report(models.MaskSelect(), x).graph_count == 2
    # print after one op: one graph before it, the `+ 1` after it.
    assert graph_break_report(models.PrintInForward(), x).break_count == 1


def test_numpy_is_traced_not_a_break():
    """``.numpy()`` is traced by Dynamo (torch._numpy) on torch 2.14: one graph, no break."""
    report = graph_break_report(models.ToNumpy(), models.example_input())
    assert report.ok and report.graph_count == 1, report


def test_report_does_not_reset_other_compiled_functions(counting_backend):
    def other(y):
        return y.sin() + 1

    opt_other = torch.compile(other, backend=counting_backend)
    y = torch.randn(3)
    opt_other(y)
    assert counting_backend.frame_count == 1

    report = graph_break_report(models.ItemRead(), models.example_input())
    assert report.causes == ["scalar_read"]

    opt_other(y)
    assert counting_backend.frame_count == 1, "graph_break_report wiped another function's cache"


def test_report_is_quiet_on_stderr(capfd):
    """nbgrader scores a test cell zero when anything reaches stderr."""
    x = models.example_input()
    for broken, _, cause in models.BREAK_CASES:
        assert cause in graph_break_report(broken(), x).causes
        fullgraph_check(broken(), x)
    captured = capfd.readouterr()
    assert captured.err == ""
    assert "debug: forward called" in captured.out  # the print really ran (on stdout)


def test_report_survives_reruns_of_the_same_model():
    """A learner re-running a notebook cell reports the same break every time.

    Regression: each report compiles with a new ExplainWithBackend, which fails Dynamo's backend
    guard; when every report compiled the same code object, that counted as a recompile, and
    after ``recompile_limit`` (8) runs Dynamo silently ran eagerly and the report said
    "0 graphs ... compiles as one graph" (ok=True). Reports now compile a fresh copy.
    """
    model, x = models.ItemRead(), models.example_input()
    for run in range(ti.recompile_limit() + 2):
        report = graph_break_report(model, x)
        assert report.causes == ["scalar_read"], f"run {run + 1}: {report}"
        assert report.graph_count == 2


def test_fullgraph_check_not_fooled_by_an_earlier_compile():
    """Regression: after the learner ran ``torch.compile(m, backend="eager")(x)``,
    fullgraph_check(m, x) used to hit that cache entry (same backend, guards pass), compile
    nothing and say ok."""
    model, x = models.BranchOnValue(), models.example_input()
    torch.compile(model, backend="eager")(x)
    result = fullgraph_check(model, x)
    assert not result.ok
    assert "data_dependent_branch" in result.report.causes


def test_report_on_a_wrapper_survives_reruns_and_leaves_the_model_compilable(counting_backend):
    """How the subject calls it: a wrapper (``no_grad``) around the learner's model.
    The model's ``forward`` is compiled as a frame of its own after the break; repeated reports
    must neither go stale nor use up the recompile limit of the learner's own compile."""
    model, x = models.ItemRead(), models.example_input()

    def wrapper(t):
        with torch.no_grad():
            return model(t)

    first = graph_break_report(wrapper, x)
    assert first.causes == ["scalar_read"]
    for run in range(ti.recompile_limit() + 1):
        report = graph_break_report(wrapper, x)
        assert report.causes == ["scalar_read"], f"run {run + 2}: {report}"
        if ti.isolates_recompiles():  # older torch reuses the inner frame's graph: not counted
            assert report.graph_count == first.graph_count
        assert not fullgraph_check(wrapper, x).ok
    if ti.isolates_recompiles():  # torch 2.12+; on older torch the inner frame's limit is shared
        torch.compile(model, backend=counting_backend)(x)
        assert counting_backend.frame_count >= 1, "the learner's compile ran eagerly (limit used up)"


def test_report_on_a_compiled_model_or_function():
    x = models.example_input()
    assert graph_break_report(torch.compile(models.ItemRead()), x).causes == ["scalar_read"]
    assert not fullgraph_check(torch.compile(models.BranchOnValue(), backend="eager"), x).ok


def test_empty_report_says_there_was_nothing_to_compile():
    report = graph_break_report(lambda t: t, torch.randn(2))
    assert report.ok and report.graph_count == 0
    text = str(report)
    assert text.startswith("0 graphs, 0 graph breaks")
    assert "no tensor operations" in text and "one graph" not in text
    assert fullgraph_check(lambda t: t, torch.randn(2)).ok


def test_fullgraph_error_names_the_break():
    result = fullgraph_check(models.ItemRead(), models.example_input())
    lineno, _ = models.break_line("scalar_read")
    # Dynamo's wording: "... Tensor.item" (2.6), "... item() ..." (later releases)
    assert f"models.py, line {lineno}" in result.error and "item" in result.error


def test_fullgraph_check_when_function_raises():
    def boom(x):
        raise ValueError("learner bug")

    result = fullgraph_check(boom, torch.randn(2))
    assert not result.ok
    assert "learner bug" in result.error
    assert result.report is None
    assert "does not compile with fullgraph=True" in str(result)


# Break reasons exactly as torch 2.14 words them (the headline that GraphBreak.reason keeps).
REAL_REASONS = {
    "scalar_read": (
        "Unsupported Tensor.item() call with capture_scalar_outputs=False\n"
        "  Explanation: Dynamo does not support tracing `Tensor.item()` with "
        "config.capture_scalar_outputs=False."),
    "print": (
        "Failed to trace builtin operator\n"
        "  Explanation: Dynamo does not know how to trace builtin operator `print` with argument "
        "types ['str'] (has_kwargs False)"),
    "data_dependent_branch": (
        "Data-dependent branching\n"
        "  Explanation: Detected data-dependent branching (e.g. `if my_tensor.sum() > 0:`). Dynamo "
        "does not support tracing dynamic control flow.\n\n"
        "      The branch condition involves a tensor computed as follows:\n"
        "        # File \"/tmp/m.py\", line 15, in forward, code: if x.sum() > 0:\n"
        "        gt = gt(sum_1, 0)"),
    "host_conversion": (
        "Tensor.tolist() with non-integer tensor\n"
        "  Explanation: Dynamo currently does not support tracing `tolist()` on non-integer "
        "tensors."),
    "disabled_or_skipped": (
        "Skip calling `torch.compiler.disable()`d function\n"
        "  Explanation: Skip calling function `<function helper at 0x7f801ca4fd80>` since it was "
        "wrapped with `torch.compiler.disable` (reason: None)"),
    "dynamic_shape_op": (
        "Dynamic shape operator\n"
        "  Explanation: Operator `aten.nonzero.default`'s output shape depends on input Tensor "
        "data."),
}


@pytest.mark.parametrize("cause", sorted(REAL_REASONS))
def test_classify_real_torch_reasons(cause):
    got, explanation, fix = classify(REAL_REASONS[cause])
    assert got == cause
    assert explanation and fix


@pytest.mark.parametrize("broken, fixed, cause", models.BREAK_CASES, ids=CASE_IDS)
def test_classify_live_reasons(broken, fixed, cause):
    """The texts this torch produces right now are still classified (a torch upgrade that
    rewords a message fails here)."""
    report = graph_break_report(broken(), models.example_input())
    brk = next(b for b in report.breaks if b.location and b.location.lineno == models.break_line(cause)[0])
    assert classify(brk.reason)[0] == cause, brk.reason


def test_classify_falls_back_to_the_source_line():
    assert classify("some future wording", "s = x.sum().item()")[0] == "scalar_read"
    assert classify("some future wording", "v = x.tolist()")[0] == "host_conversion"
    assert classify("some future wording", "print(x)")[0] == "print"
    assert classify("some future wording", "if x.sum() > 0:")[0] == "data_dependent_branch"
    assert classify("some future wording", "y = x[x > 0]")[0] == "dynamic_shape_op"
    assert classify("some future wording", "")[0] == "other"
    assert classify("some future wording", "y = x + 1") == breaks.OTHER
