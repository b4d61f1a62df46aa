"""grader.checks.recompiles: recompile_check and explain_guard_failure (backend="eager": Dynamo only)."""
from __future__ import annotations

import pytest
import torch

import models
from grader.checks import _torch_internals as ti
from grader.checks.recompiles import explain_guard_failure, recompile_check

DTYPES = [torch.float32, torch.float64, torch.float16]


def test_dynamic_true_compiles_once_for_all_batch_sizes():
    report = recompile_check(models.SmallMLP(), models.batches(range(2, 65)), dynamic=True)
    assert report.calls == 63
    assert report.compiles == 1 and report.recompiles == 0
    assert report.compiling_calls == [0]
    assert report.reasons == [] and report.raw_reasons == []
    assert not report.hit_limit
    assert report.ok
    assert str(report).startswith("1 compilation over 63 calls")


def test_default_dynamic_recompiles_once_on_dimension_0():
    report = recompile_check(models.SmallMLP(), models.batches(range(1, 65)))
    assert report.calls == 64
    # size 1 is specialised; the first new size turns dimension 0 dynamic (automatic dynamic)
    assert report.compiles == 2 and report.recompiles == 1
    assert report.compiling_calls == [0, 1]
    assert len(report.reasons) == 1
    assert "dimension 0" in report.reasons[0]
    assert "`x`" in report.reasons[0] and "dynamic=True" in report.reasons[0]
    assert any("size mismatch at index 0" in r for r in report.raw_reasons)
    assert not report.hit_limit
    assert not report.ok                       # max_compiles defaults to 1
    assert "call 2 recompiled: dimension 0" in str(report)
    # two compilations are fine when the caller allows them
    torch._dynamo.reset()
    assert recompile_check(models.SmallMLP(), models.batches(range(1, 65)), max_compiles=2).ok


def test_static_shapes_recompile_for_every_size():
    report = recompile_check(models.SmallMLP(), models.batches([3, 3, 5, 5]), dynamic=False)
    assert report.compiles == 2 and report.compiling_calls == [0, 2]
    assert report.reasons == [explain_guard_failure(report.raw_reasons[0])]
    assert "changed from 3 to 5" in report.reasons[0]


def test_dtype_changes_recompile_and_say_dtype():
    report = recompile_check(models.pointwise, models.dtype_inputs(DTYPES), max_compiles=3)
    assert report.compiles == 3 and report.compiling_calls == [0, 1, 2]
    assert len(report.reasons) == 2
    assert all("dtype" in r for r in report.reasons)
    assert "Float to Double" in report.reasons[0]
    assert "Half" in report.reasons[1]
    assert report.ok and not report.hit_limit


def test_same_dtype_again_does_not_recompile():
    report = recompile_check(models.pointwise,
                             models.dtype_inputs([torch.float32, torch.float64, torch.float32]),
                             max_compiles=2)
    assert report.compiles == 2 and report.compiling_calls == [0, 1]
    assert report.ok


def test_hit_limit_when_more_variants_than_the_limit():
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32]
    with ti.set_recompile_limit(2):
        report = recompile_check(models.pointwise, models.dtype_inputs(dtypes), max_compiles=10)
        text = str(report)
    assert report.compiles == 2                 # past the limit Dynamo runs eagerly, silently
    assert report.hit_limit
    assert not report.ok                        # even though max_compiles allows 10
    assert "recompile limit" in text and "(2)" in text and "eagerly" in text


def test_hit_limit_report_remembers_the_limit_it_ran_under():
    """Regression: RecompileReport.__str__ read the recompile limit when it was printed, not
    when the check ran; printed after the ``set_recompile_limit`` block it said "(8)" although
    the limit that was hit was 2."""
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32]
    with ti.set_recompile_limit(2):
        report = recompile_check(models.pointwise, models.dtype_inputs(dtypes), max_compiles=10)
    assert "recompile limit (2)" in str(report)


def test_no_false_hit_limit_below_the_limit():
    """Regression: hit_limit compared the number of guard-failure *messages* with the limit, but
    Dynamo records one message per cache entry tried, so k recompiles give k(k+1)/2 messages.
    Five dtypes and one repeated call (5 compiles, limit 8) reported hit_limit=True and
    ok=False."""
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
              torch.float32]
    report = recompile_check(models.pointwise, models.dtype_inputs(dtypes), max_compiles=10)
    assert report.compiles == 5
    assert ti.recompile_limit() == 8
    assert not report.hit_limit
    assert report.ok


def test_repeated_checks_are_independent():
    """Neither an earlier check nor the learner's own compile of the same function changes the
    answer: no cache hits, no recompile limit used up, no automatic-dynamic history."""
    sizes = models.batches(range(1, 9))
    model = models.SmallMLP()
    learner = torch.compile(model, backend="eager")
    for args in sizes:
        learner(*args)               # the learner's compile has seen every size already
    for _ in range(3):
        report = recompile_check(model, sizes)
        assert report.compiles == 2 and report.compiling_calls == [0, 1], report
        assert len(report.reasons) == 1 and not report.hit_limit
    dtypes = models.dtype_inputs([torch.float32, torch.float64])
    for _ in range(ti.recompile_limit() + 1):
        assert recompile_check(models.pointwise, dtypes, max_compiles=2).compiles == 2


def test_report_remembers_the_limit_when_not_hit():
    with ti.set_recompile_limit(3):
        report = recompile_check(models.pointwise, models.dtype_inputs([torch.float32]))
    assert report.recompile_limit == 3 and not report.hit_limit


# Guard-failure messages as torch 2.14 records them.
REAL_GUARD_FAILURES = [
    ("0/0: tensor 'x' size mismatch at index 0. expected 3, actual 5",
     ["dimension 0", "`x`", "from 3 to 5", "dynamic=True", "mark_dynamic(x, 0)"]),
    ("0/1: tensor 'x' dtype mismatch. expected Double, actual Half",
     ["dtype", "`x`", "from Double to Half"]),
    ("0/0: tensor 'x' stride mismatch at index 0. expected 6, actual 1",
     ["strides", "contiguous"]),
    ("0/0: tensor 'x' requires_grad mismatch. expected requires_grad=0",
     ["requires_grad", "no_grad"]),
    ("0/0: tensor 'x' device mismatch. expected cpu, actual cuda:0",
     ["device"]),
    ("0/0: ___check_obj_id(G['weights'], 140211)",
     ["replaced", "globals"]),
]


@pytest.mark.parametrize("message, words", REAL_GUARD_FAILURES)
def test_explain_guard_failure(message, words):
    text = explain_guard_failure(message)
    for word in words:
        assert word in text, text
    assert not text.startswith("0/")


def test_explain_guard_failure_names_with_quotes():
    """Regression: the name pattern ``'(?P<name>[^']+)'`` stopped at the first quote, so a
    tensor inside a dict (torch 2.14 writes ``tensor 'd['a']'``) or the ``L['x']`` /
    ``L['self']._modules[...]`` names that older torch (2.6, which the grader claims to support)
    writes were not explained at all: the raw text came back."""
    real = "0/0: tensor 'd['a']' size mismatch at index 0. expected 3, actual 4"  # torch 2.14
    assert "dimension 0 of `d['a']` changed from 3 to 4" in explain_guard_failure(real)
    old = "0/0: tensor 'L['x']' size mismatch at index 1. expected 8, actual 16"
    assert "dimension 1 of `x` changed from 8 to 16" in explain_guard_failure(old)
    old = ("0/0: tensor 'L['self']._modules['fc']._parameters['weight']' dtype mismatch. "
           "expected Float, actual Double")
    assert "`self.fc.weight`" in explain_guard_failure(old)


def test_dict_input_recompile_is_explained():
    """The same regression as above, end to end."""

    def from_dict(d):
        return d["a"] * 2

    report = recompile_check(from_dict, [({"a": torch.randn(3)},), ({"a": torch.randn(4)},)],
                             dynamic=False, max_compiles=2)
    assert report.compiles == 2
    assert "dimension 0" in report.reasons[0], report.reasons


def test_mark_dynamic_hint_names_the_tensor():
    """Regression: the hint always said ``mark_dynamic(x, 0)`` whatever the tensor is called
    (here ``xs[0]``)."""

    def first_plus_second(xs):
        return xs[0] + xs[1]

    inputs = [([torch.randn(3), torch.randn(3)],), ([torch.randn(5), torch.randn(5)],)]
    report = recompile_check(first_plus_second, inputs, dynamic=False, max_compiles=2)
    assert "dimension 0 of `xs[0]`" in report.reasons[0]
    assert "mark_dynamic(xs[0], 0)" in report.reasons[0], report.reasons[0]


def test_explain_guard_failure_unknown_text_passes_through():
    assert explain_guard_failure("0/0: something new") == "something new"


def test_python_value_change_is_explained_in_one_line():
    """Regression: for a changed Python value (``n == 2``) the explanation embedded Dynamo's raw
    guard text: 50 spaces of padding, the source comment and a "User stack trace:" block."""

    def scaled(x, n):
        return x * n

    report = recompile_check(scaled, [(torch.randn(4), 2), (torch.randn(4), 3)], max_compiles=2)
    assert report.compiles == 2
    reason = report.reasons[0]
    assert "n == 2" in report.raw_reasons[0]
    assert "`n`" in reason or "n == 2" in reason
    assert "\n" not in reason and "User stack trace" not in reason, reason
    assert "  " not in reason and "#" not in reason, reason
