"""Problem set 8: a library call Dynamo cannot trace, wrapped as a custom operator, and the points
need the operator.

- the premise: the library's ``rms_pool`` breaks ``fullgraph=True`` and cuts the gradient;
- the learner's registration crosses to the judge as graphs only: the judge's operator runs the
  problem's kernel, the learner's fake and backward are checked as data on every shape;
- the routes that skip the lesson earn nothing: a pure-torch rewrite of the library (with or
  without an unused operator registered), ``torch.compiler.allow_in_graph`` or
  ``torch.compiler.disable`` around an autograd.Function, a fake wrong on odd windows, no
  autograd formula, the given model; a wrong backward is named with the shapes it is wrong on;
- the demo personas score what ``grader/problems/psN/demo_expected.json`` says on every cell but
  speed (speed, which needs the reference's compile, is checked by ``make grade``'s demo).

The judge is asked only for the checks each route needs and never for speed here: a training
step's Inductor compile takes 20-40 s on a loaded 2-core machine.
"""
from __future__ import annotations

import dataclasses
import os
import random

import pytest
import torch

from grader.checks import custom_ops, graph_artifact
from grader.common.wire import Packer
from grader.cohort.demo import demo_solutions, expected_scores
from grader.isolation.cell_scores import Evaluation, score_cell
from grader.isolation.judge.judging import job_for
from grader.isolation.judge.steps import Judge
from grader.isolation.cells.source import Cell, solution_cells
from grader.problems import get_problem, ps8
from grader.problems import test_cells as declared_test_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERSONAS = demo_solutions(ROOT)["ps8"]
NO_SPEED = ["correctness", "custom_op", "fullgraph", "breaks"]


def _reference_source() -> str:
    [cell] = solution_cells(os.path.join(ROOT, "source", "ps8", "ps8.ipynb"), ["ps8-q1-solution"])
    return cell.source


@pytest.fixture(scope="module")
def judge():
    return Judge()


def grade(judge, source: str, checks: list[str] = NO_SPEED) -> dict:
    job = job_for(["ps8.q1"], [Cell("cell 7", source)], course_root=ROOT, reference="off",
                  checks={"ps8.q1": checks})
    return judge.grade(job).to_dict()["results"]


def points(results: dict) -> float:
    evaluations = {k: Evaluation(get_problem(k), r) for k, r in results.items()}
    return sum(score_cell(cell, evaluations).points
               for cell in declared_test_cells("ps8").values() if cell.scored is None)


def test_the_library_call_breaks_fullgraph_and_the_gradient():
    x, target = ps8.example_inputs(0, steps=ps8.STEPS - 1)
    with pytest.raises(Exception, match="numpy"):
        torch.compile(ps8.SignalModel(), fullgraph=True, backend="eager")(x, target)
    model = ps8.SignalModel()
    model(x, target).backward()
    assert model.inp.weight.grad is None and model.head.weight.grad is not None


def test_the_librarys_gradient_is_what_torch_computes_in_float64():
    x = torch.randn(2, 3, 7, dtype=torch.float64, requires_grad=True)
    pairs = torch.nn.functional.pad(x, (0, 1)).unflatten(-1, (-1, 2))
    y = torch.sqrt((pairs * pairs).sum(-1) / 2 + ps8.EPS)
    grad = torch.randn_like(y)
    y.backward(grad)
    assert torch.allclose(ps8.rms_pool(x.detach()), y.detach())
    assert torch.allclose(ps8.rms_pool_backward(x.detach(), y.detach(), grad), x.grad)


SPREAD = "per_pair.unsqueeze(-1).expand(*per_pair.shape, 2).flatten(-2)"


def _registered(qualname: str, backward_scale: str = "2 * y", spread: str = SPREAD):
    """The reference's operator registered in this process under ``qualname``, its spec, and
    its registration as the subject sends it (reply, blob); ``spread``: how its backward spreads
    a per-pair value over the pair's two steps."""
    namespace = dict(vars(ps8))
    assert SPREAD in _reference_source()
    source = _reference_source().replace("ps8::rms_pool", qualname).replace(
        "grad / (2 * y)", f"grad / ({backward_scale})").replace(SPREAD, spread)
    exec(compile(source, "<solution>", "exec"), namespace)  # noqa: S102  the reference's text
    spec = dataclasses.replace(ps8.RMS_POOL_OP, qualname=qualname)
    packer = Packer()
    return spec, custom_ops.registration_data(spec, packer), packer.blob()


def test_the_registration_travels_as_graphs_and_the_judges_operator_runs_the_problems_kernel():
    spec, reply, blob = _registered("ps8test::rms_pool")
    assert set(reply) == {"schema", "fake", "backward", "fake_on", "fake_on_errors"}, reply
    # The fake is traced on a float32 input, and again on float64, bfloat16 and meta ones.
    assert set(reply["fake_on"]) == set(custom_ops.FAKE_INPUTS) and not reply["fake_on_errors"]
    for graph in (reply["fake"], reply["backward"], *reply["fake_on"].values()):
        # graphs of allow-listed operators, nothing else
        assert all(n["target"].startswith(("aten.", "operator.")) for n in graph["nodes"])
    calls = []
    kernel = spec.kernel
    spec = dataclasses.replace(spec, kernel=lambda x: calls.append(1) or kernel(x))
    rebuilt = custom_ops.rebuild(spec, reply, blob)
    assert not rebuilt.problems and rebuilt.op.name().startswith("grader_ps8test_")
    x = torch.randn(2, 3, 5, requires_grad=True)
    rebuilt.op(x).sum().backward()
    assert calls and torch.allclose(x.grad, ps8.rms_pool_backward(
        x.detach(), ps8.rms_pool(x.detach()), torch.ones(2, 3, 3)))
    shapes = ps8._op_shapes(random.Random(1))
    verdict = custom_ops.registration_verdict(spec, rebuilt, shapes, (spec.graph_name,), seed=3)
    assert verdict.ok, verdict.message
    # The model's graph must call it: a graph without the operator is a rewrite of the library.
    verdict = custom_ops.registration_verdict(spec, rebuilt, shapes, ("aten.sqrt.default",), seed=3)
    assert not verdict.ok and "does not call" in verdict.message


def test_a_wrong_backward_is_named_with_the_shapes_it_is_wrong_on():
    spec, reply, blob = _registered("ps8wrong::rms_pool", backward_scale="y")
    verdict = custom_ops.registration_verdict(spec, custom_ops.rebuild(spec, reply, blob),
                               ps8._op_shapes(random.Random(2)), (spec.graph_name,), seed=4)
    assert not verdict.ok and "autograd formula: DISAGREES" in verdict.message, verdict.message


def test_repeat_interleave_by_an_integer_count_is_a_backward_the_grader_takes():
    """An integer repeat count traces to operations of fixed shapes (no aten.repeat_interleave in
    the graph): a backward that spreads each pair's value with repeat_interleave(2, dim=-1) passes
    the custom_op check. A tensor of counts makes a shape that depends on the data: refused."""
    spec, reply, blob = _registered("ps8repeat::rms_pool", spread="per_pair.repeat_interleave(2, dim=-1)")
    assert "backward" in reply, reply.get("backward_error")
    targets = {n["target"] for n in reply["backward"]["nodes"]}
    assert not any("repeat_interleave" in t for t in targets), targets
    verdict = custom_ops.registration_verdict(spec, custom_ops.rebuild(spec, reply, blob),
                               ps8._op_shapes(random.Random(5)), (spec.graph_name,), seed=6)
    assert verdict.ok, verdict.message

    counts = "per_pair.repeat_interleave(torch.full(per_pair.shape[-1:], 2), dim=-1)"
    spec, reply, blob = _registered("ps8counts::rms_pool", spread=counts)
    if "backward_error" in reply:                  # not traced: a data-dependent shape
        return
    rebuilt = custom_ops.rebuild(spec, reply, blob)      # or traced, and refused as data
    assert any("repeat_interleave is not allowed" in p for p in rebuilt.problems), rebuilt.problems


def test_a_graph_may_call_only_the_judges_own_operator():
    header = {"format": graph_artifact.FORMAT, "slots": [{"kind": "input", "index": 0}],
              "nodes": [{"op": "call_function", "name": "v0", "target": "ps8.rms_pool.default",
                         "args": [{"n": "a0"}], "kwargs": {}}],
              "graph_outputs": [{"n": "v0"}], "outputs": [0], "single": True}
    with pytest.raises(graph_artifact.GraphRefused, match="custom operators"):
        graph_artifact.load(header, b"", baseline=torch.nn.Module(), device="cpu")
    mine = custom_ops.trusted_operators(ps8.RMS_POOL_OP)
    with graph_artifact.extra_operators(mine):
        loaded = graph_artifact.load(header, b"", baseline=torch.nn.Module(), device="cpu")
    assert loaded.operators == ("ps8.rms_pool.default",)
    x = torch.randn(2, 3, 4)
    assert torch.equal(loaded.module(torch.nn.Module(), "cpu")(x), ps8.rms_pool(x))


PURE_TORCH = '''class FixedSignalModel(SignalModel):
    def pool(self, h):
        if h.shape[-1] % 2:
            h = torch.nn.functional.pad(h, (0, 1))
        pairs = h.unflatten(-1, (-1, 2))
        return torch.sqrt((pairs * pairs).sum(-1) / 2 + EPS)
'''
AUTOGRAD_FUNCTION = '''class _Pool(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = rms_pool(x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        spread = (grad / (2 * y)).unsqueeze(-1).expand(*grad.shape, 2).flatten(-2)
        return spread[..., : x.shape[-1]] * x


@DECORATOR
def pooled(h):
    return _Pool.apply(h)


class FixedSignalModel(SignalModel):
    def pool(self, h):
        return pooled(h)
'''


def _op_then(model: str) -> str:
    return _reference_source().split("class FixedSignalModel")[0] + model


# The operator called once, on a slice, its result multiplied by 0, beside the pooling written in
# torch: the graph calls it, but the model's result does not come through it (it earned 13/13).
DEAD_CALL = '''class FixedSignalModel(SignalModel):
    def pool(self, h):
        dead = rms_pool_op(h[:1, :1, :2]).sum() * 0
        padded = torch.nn.functional.pad(h, (0, h.shape[-1] % 2))
        pairs = padded.unflatten(-1, (-1, 2))
        return torch.sqrt((pairs * pairs).sum(-1) / 2 + EPS) + dead
'''
# A fake that names float32 (and the default device) whatever it is given: right on the float32
# CPU inputs of the model, wrong on every other (it earned 13/13).
FLOAT32_FAKE = ("def _rms_pool_fake(x):", "def _rms_pool_fake(x):\n"
                "    return torch.empty(*x.shape[:-1], (x.shape[-1] + 1) // 2, "
                "dtype=torch.float32)\n\ndef _unused(x):")


@pytest.mark.parametrize("route, said", [
    # Rewriting the library in torch: correct and one graph, but the library is the one to call.
    ("pure torch", "no operator `ps8::rms_pool`"),
    ("a dead call beside a pure-torch pool", "does not come through `ps8::rms_pool`"),
    ("a fake that names float32", "on a float64 input of shape"),
    ("an operator registered but a pure-torch pool", "does not call `ps8::rms_pool`"),
    # allow_in_graph: Dynamo puts the call in the graph, then tracing it runs NumPy on fake
    # tensors; disable: the graph breaks at the call. Either way, not one graph.
    ("allow_in_graph", "no operator `ps8::rms_pool`"),
    ("compiler.disable", "no operator `ps8::rms_pool`"),
])
def test_routes_that_skip_the_operator_earn_nothing(judge, route, said):
    source = {"pure torch": PURE_TORCH,
              "an operator registered but a pure-torch pool": _op_then(PURE_TORCH),
              "a dead call beside a pure-torch pool": _op_then(DEAD_CALL),
              "a fake that names float32": _reference_source().replace(*FLOAT32_FAKE),
              "allow_in_graph": AUTOGRAD_FUNCTION.replace("DECORATOR",
                                                          "torch.compiler.allow_in_graph"),
              "compiler.disable": AUTOGRAD_FUNCTION.replace("DECORATOR",
                                                            "torch.compiler.disable")}[route]
    result = grade(judge, source)["ps8.q1"]
    checks = result["checks"]
    assert checks["correctness"]["ok"], checks["correctness"]   # right eagerly ...
    assert not checks["custom_op"]["ok"] and said in checks["custom_op"]["message"], \
        checks["custom_op"]["message"]
    if route in ("pure torch", "allow_in_graph", "compiler.disable", "an operator registered "
                                                                      "but a pure-torch pool"):
        assert not checks["fullgraph"]["ok"]                    # ... and no structural point
    assert points({"ps8.q1": result}) == 0


@pytest.mark.parametrize("persona", ["partial", "wrong", "given"])
def test_demo_personas_score_what_demo_expected_says(judge, persona):
    """The personas whose score does not depend on speed (each of these earns no speed point)."""
    student = {"partial": "ben_partial", "wrong": "eve_wrong", "given": "ivy_given"}[persona]
    source = ("class FixedSignalModel(SignalModel):\n    pass\n" if persona == "given"
              else PERSONAS[persona]["ps8-q1-solution"])
    results = grade(judge, source)
    assert points(results) == expected_scores()["ps8"][student], results["ps8.q1"]["checks"]
    if persona == "wrong":   # the fake's error is named, with the odd shape it is wrong on
        message = results["ps8.q1"]["checks"]["custom_op"]["message"]
        assert f"[{ps8.BATCH}, {ps8.DIM}, {ps8.STEPS - 1}]" in message and "DISAGREES" in message


def test_a_backward_beyond_the_graders_bounds_is_refused_before_it_runs():
    """The learner's graphs are run by the judge only within graph_artifact's bounds: a formula
    that makes a tensor of 10^10 elements is refused on the model's shapes, never allocated."""
    @torch.library.custom_op("ps8huge::rms_pool", mutates_args=())
    def huge(x: torch.Tensor) -> torch.Tensor:
        return ps8.rms_pool(x)

    huge.register_fake(lambda x: x.new_empty(*x.shape[:-1], (x.shape[-1] + 1) // 2))
    huge.register_autograd(lambda ctx, grad: ctx.saved_tensors[0] * grad.new_zeros(
        100_000, 100_000).sum(), setup_context=lambda ctx, inputs, output:
        ctx.save_for_backward(inputs[0]))
    spec = dataclasses.replace(ps8.RMS_POOL_OP, qualname="ps8huge::rms_pool")
    packer = Packer()
    rebuilt = custom_ops.rebuild(spec, custom_ops.registration_data(spec, packer), packer.blob())
    assert rebuilt.backward is None and any("too large" in p for p in rebuilt.problems), \
        rebuilt.problems


def test_a_fake_with_wrong_strides_is_a_verdict_and_its_graph_is_not_timed(judge):
    """Inductor trusts a fake's strides: a graph compiled from a wrong one failed in the speed
    step ("expected size 16==16, stride 2048==4096"), which made every cell a grader error. The
    fake is named by the custom-operator check, and nothing of it is compiled or timed."""
    wrong = ("return x.new_empty(*x.shape[:-1], (x.shape[-1] + 1) // 2)",
             "return x.new_empty(*x.shape[:-2], (x.shape[-1] + 1) // 2, x.shape[-2]).transpose("
             "-1, -2)")
    source = _reference_source()
    assert wrong[0] in source
    result = grade(judge, source.replace(*wrong), checks=[*NO_SPEED, "speed"])["ps8.q1"]
    assert result["status"] == "ok", result           # a verdict on the code, not the grader's
    checks = result["checks"]
    assert not checks["custom_op"]["ok"] and "strides" in checks["custom_op"]["message"]
    assert not checks["speed"]["ok"] and checks["speed"]["message"].startswith("not timed")
    assert points({"ps8.q1": result}) == 0
