"""A learner's custom operator as data: its fake implementation and its autograd formula, traced
into graphs by the subject, rebuilt and checked by the judge around the problem's own kernel.

Problem set 8 asks the learner to wrap a library function Dynamo cannot trace (computed through
NumPy) as a custom operator (``torch.library.custom_op``) with a fake implementation
(``register_fake``) and an autograd formula (``register_autograd``). The judge never runs
learner Python, so what crosses from the subject is data only (:func:`registration_data`):

- the operator's schema, as text;
- its fake implementation, traced with ``make_fx(tracing_mode="symbolic")`` on an example input
  into a graph of ATen operators and size arithmetic (shipped with
  :mod:`grader.checks.graph_artifact`'s format and allow-list);
- its autograd formula (``setup_context`` then ``backward``), traced the same way into a graph
  of ``(x, output, grad_output) -> grad_x``: the output is an input of that graph, so the
  formula is traced apart from the fake.

The judge (:func:`rebuild`) registers an operator of its own whose real implementation is the
problem's kernel (never the learner's), whose fake is the learner's fake graph and whose
backward runs the learner's backward graph; the learner's model graph then calls it in place of
``ps8::rms_pool`` (:func:`grader.checks.graph_artifact.extra_operators`). :func:`check` decides
the ``custom_op`` check: the schema, the fake against the real kernel (shape, dtype, strides)
on every shape the judge gives it, the backward against the problem's own formula on fresh
inputs of those shapes, and that the learner's model graph calls the operator (the lesson:
a pure-torch rewrite of the library skips it); :func:`computes_through` that the model's result
comes through it.

Why one long module: the subject's half of the exchange (what it traces and sends) and the
judge's (what it rebuilds and checks from that) are one format, kept together so that a change
to one is seen beside the other.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import random
from typing import Any, Callable

import torch

from grader.checks import _torch_internals as ti
from grader.checks import graph_artifact
from grader.checks.results import CheckOutcome
from grader.common.wire import Packer

# How far the learner's backward may be from the problem's own (float32, one op).
GRAD_TOLERANCE = (1e-4, 1e-5)
# The inputs a fake is traced on besides the float32 example: other dtypes the operator may be
# given, and the meta device (the device of its output must be its input's, whatever it is).
FAKE_INPUTS = {"float64": (torch.float64, "cpu"), "bfloat16": (torch.bfloat16, "cpu"),
               "meta": (torch.float32, "meta")}


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """The custom operator a problem asks for.

    - ``qualname``: the name the learner registers (``"ps8::rms_pool"``);
    - ``schema``: the schema it must have (``"(Tensor x) -> Tensor"``);
    - ``kernel``: the problem's own real implementation, ``kernel(x) -> y`` (the library call);
    - ``fake``: the problem's own fake implementation (the reference side's operator);
    - ``backward``: the problem's own formula, ``backward(x, y, grad_y) -> grad_x``;
    - ``example``: the input the subject traces the learner's functions with;
    - ``shapes``: ``shapes(rng)``, the input shapes the judge checks the fake and the backward
      on (every shape the problem's model hands the operator, and a few more).
    """

    qualname: str
    schema: str
    kernel: Callable[[torch.Tensor], torch.Tensor]
    fake: Callable[[torch.Tensor], torch.Tensor]
    backward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    example: Callable[[], torch.Tensor]
    shapes: Callable[[Any], list[tuple[int, ...]]]

    @property
    def graph_name(self) -> str:
        """The name a graph node calling the operator travels under ("ps8.rms_pool.default")."""
        namespace, name = self.qualname.split("::")
        return f"{namespace}.{name}.default"


# ---------------------------------------------------------------------------------------------
# The library call, as the judge's own code makes it

_SUBSTITUTE: dict[str, Callable] = {}


def library(spec: OpSpec, x: torch.Tensor) -> torch.Tensor:
    """The library's kernel on ``x`` as the judge's operators and the problem's baseline call it:
    ``spec.kernel``, or what :func:`library_replaced` put in its place."""
    return _SUBSTITUTE.get(spec.qualname, spec.kernel)(x)


@contextlib.contextmanager
def library_replaced(spec: OpSpec, kernel: Callable[[torch.Tensor], torch.Tensor]):
    """Within: every call of ``spec``'s library made through :func:`library` (the judge's
    operator in a learner's graph, the problem's baseline) runs ``kernel`` instead."""
    _SUBSTITUTE[spec.qualname] = kernel
    try:
        yield
    finally:
        _SUBSTITUTE.pop(spec.qualname, None)


# ---------------------------------------------------------------------------------------------
# Subject side

class _Context:
    """What ``setup_context`` and ``backward`` are given as ``ctx`` while they are traced."""

    def __init__(self) -> None:
        self.saved_tensors: tuple = ()
        self.needs_input_grad = (True,)

    def save_for_backward(self, *tensors) -> None:
        self.saved_tensors = tensors

    def mark_non_differentiable(self, *tensors) -> None:  # noqa: ARG002 (as autograd's ctx)
        pass

    def set_materialize_grads(self, value: bool) -> None:  # noqa: ARG002 (as autograd's ctx)
        pass


def _ship(gm: torch.fx.GraphModule, inputs: int, packer: Packer) -> dict:
    captured = graph_artifact.Captured(gm, [{"kind": "input", "index": i} for i in range(inputs)],
                                       [0], True, [])
    return graph_artifact.to_wire(captured, packer)


def _symbolic(fn: Callable, *args) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(fn, tracing_mode="symbolic")(*args)


def registration_data(spec: OpSpec, packer: Packer) -> dict:
    """(In the subject.) The learner's registration of ``spec.qualname`` as data: ``{"schema",
    "fake" | "fake_error", "backward" | "backward_error"}``, or ``{"error"}`` when no operator of
    that name was made with ``torch.library.custom_op``."""
    found = ti.custom_op_registration(spec.qualname)
    if found is None:
        return {"error": f"no operator `{spec.qualname}` was made with torch.library.custom_op"}
    namespace, name = spec.qualname.split("::")
    packet = getattr(getattr(torch.ops, namespace), name)
    out: dict = {"schema": str(packet.default._schema)}
    example = spec.example()
    if found["fake"] is None:
        out["fake_error"] = "no fake implementation was registered (torch.library.register_fake)"
    else:
        try:
            out["fake"] = _ship(_symbolic(lambda x: found["fake"](x), example), 1, packer)
        except Exception as exc:
            out["fake_error"] = f"{type(exc).__name__}: {str(exc).strip()[:400]}"
        # Traced again on inputs of every other dtype and device the operator may be given
        # (tracing bakes each in: a fake that names float32 or the CPU shows it only there).
        out["fake_on"], out["fake_on_errors"] = {}, {}
        for label, (dtype, device) in FAKE_INPUTS.items():
            try:
                other = example.to(dtype=dtype, device=device)
                out["fake_on"][label] = _ship(_symbolic(lambda x: found["fake"](x), other), 1,
                                              packer)
            except Exception as exc:
                out["fake_on_errors"][label] = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    if found["backward"] is None or found["setup_context"] is None:
        out["backward_error"] = ("no autograd formula was registered "
                                 "(torch.library.register_autograd)")
        return out

    def formula(x, y, grad):
        ctx = _Context()
        found["setup_context"](ctx, (x,), y)
        grads = found["backward"](ctx, grad)
        return grads[0] if isinstance(grads, (tuple, list)) else grads

    try:
        y = spec.kernel(example)
        out["backward"] = _ship(_symbolic(formula, example, y, torch.ones_like(y)), 3, packer)
    except Exception as exc:
        out["backward_error"] = f"{type(exc).__name__}: {str(exc).strip()[:400]}"
    return out


# ---------------------------------------------------------------------------------------------
# Judge side

@dataclasses.dataclass
class Rebuilt:
    """The judge's operator built from the problem's kernel and the learner's graphs."""

    op: Any                                  # the judge's OpOverload
    schema: str = ""
    fake: Callable | None = None             # the learner's fake graph, rebuilt
    backward: Callable | None = None         # the learner's backward graph, rebuilt
    graphs: dict = dataclasses.field(default_factory=dict)     # part -> its LoadedGraph
    problems: list = dataclasses.field(default_factory=list)   # what could not be rebuilt
    fake_on: dict = dataclasses.field(default_factory=dict)    # FAKE_INPUTS label -> fake graph


_COUNTER = itertools.count()


def _register(spec: OpSpec, fake: Callable | None, backward: Callable | None):
    """A fresh operator of the judge's (its own namespace, one per submission: torch keeps every
    registration for the life of the process) with ``spec.kernel`` as its real implementation."""
    name = spec.qualname.split("::")[1]
    qualname = f"grader_{spec.qualname.split('::')[0]}_{next(_COUNTER)}::{name}"

    def real(x):
        return library(spec, x)

    op = torch.library.custom_op(qualname, real, mutates_args=(), schema=spec.schema)
    if fake is not None:
        op.register_fake(fake)
    if backward is not None:
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs, output)   # x, then the library's output

        def run_backward(ctx, grad):
            x, y = ctx.saved_tensors
            return backward(x, y, grad)
        op.register_autograd(run_backward, setup_context=setup_context)
    namespace, _ = qualname.split("::")
    return getattr(getattr(torch.ops, namespace), name).default


def trusted_operators(spec: OpSpec) -> dict:
    """``{graph name: operator}`` for the problem's own registration (the reference side's)."""
    if spec not in _TRUSTED:
        _TRUSTED[spec] = _register(spec, spec.fake, spec.backward)
    return {spec.graph_name: _TRUSTED[spec]}


_TRUSTED: dict = {}


def _load(header: dict, blob: bytes):
    loaded = graph_artifact.load(header, blob, baseline=torch.nn.Module(), device="cpu")
    return loaded, loaded.module(torch.nn.Module(), "cpu")


def _inputs(spec: OpSpec, part: str, shape: tuple[int, ...], gen: torch.Generator) -> tuple:
    """What the ``part`` graph is called with on an input of ``shape``."""
    x = torch.randn(shape, generator=gen)
    if part == "fake":
        return (x,)
    y = spec.kernel(x)
    return x, y, torch.randn(y.shape, generator=gen)


def _bounded(spec: OpSpec, part: str, loaded, module, shape: tuple[int, ...]) -> str:
    """'' when the ``part`` graph runs on fake inputs of ``shape`` within the grader's bounds
    (no data-dependent shape, no tensor over the size limit), else why not: checked before it
    runs for real."""
    try:
        graph_artifact.fake_run_on(loaded, module, _inputs(spec, part, shape,
                                                        torch.Generator().manual_seed(0)))
    except graph_artifact.GraphRefused as exc:
        return f"the grader will not run it on an input of shape {list(shape)}: {exc}"
    return ""


def rebuild(spec: OpSpec, reply: dict, blob: bytes) -> Rebuilt:
    """(In the judge.) The learner's registration (:func:`registration_data`'s reply, checked
    as data) rebuilt around ``spec.kernel``. What could not be rebuilt is in ``problems``."""
    problems = []
    if not isinstance(reply, dict) or "error" in reply:
        why = reply.get("error") if isinstance(reply, dict) else "nothing was sent"
        return Rebuilt(None, problems=[str(why)[:400]])
    schema = str(reply.get("schema", ""))[:200]
    fake = backward = None
    graphs: dict = {}
    for part in ("fake", "backward"):
        header = reply.get(part)
        if not isinstance(header, dict):
            problems.append(f"{part}: {str(reply.get(part + '_error', 'not sent'))[:400]}")
            continue
        try:
            # The backward graph may call the operator itself (a formula that recomputes the
            # forward): it then calls the judge's own, the problem's kernel.
            with graph_artifact.extra_operators({spec.graph_name: trusted_operators(spec)[
                    spec.graph_name]}):
                loaded, module = _load(header, blob)
        except graph_artifact.GraphRefused as exc:
            problems.append(f"{part}: the grader will not run it: {exc}")
            continue
        # Within bounds on the shapes the problem's model hands the operator (the judge's
        # compile and runs of the model use it there), before anything runs for real.
        why = next((w for w in (_bounded(spec, part, loaded, module, shape)
                                for shape in spec.shapes(random.Random(0))[:2]) if w), "")
        if why:
            problems.append(f"{part}: {why}")
            continue
        graphs[part] = loaded
        if part == "fake":
            fake = module
        else:
            backward = module
    fake_on = {}
    if fake is not None:
        sent = reply.get("fake_on") if isinstance(reply.get("fake_on"), dict) else {}
        errors = reply.get("fake_on_errors") if isinstance(reply.get("fake_on_errors"), dict) \
            else {}
        for label in FAKE_INPUTS:
            if label in errors or not isinstance(sent.get(label), dict):
                why = str(errors.get(label, "not sent"))[:300]
                problems.append(f"fake on a {label} input: {why}")
                continue
            try:
                loaded, fake_on[label] = _load(sent[label], blob)
                graphs[f"fake on {label}"] = loaded
            except graph_artifact.GraphRefused as exc:
                problems.append(f"fake on a {label} input: the grader will not run it: {exc}")
    return Rebuilt(_register(spec, fake, backward), schema, fake, backward, graphs, problems,
                   fake_on)


def _meta(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")


def registration_verdict(spec: OpSpec, rebuilt: Rebuilt | None,
                         shapes: list[tuple[int, ...]],
                         graph_operators: tuple | None, seed: int) -> CheckOutcome:
    """The ``custom_op`` check: the learner's registration, rebuilt, against the problem's own
    kernel and formula on every shape of ``shapes``; and the model's graph calls the operator
    (``graph_operators``: the names in the learner's checked graph, None when there is none)."""
    lines, ok = [], True
    if rebuilt is None or rebuilt.op is None:
        why = "; ".join(rebuilt.problems) if rebuilt is not None else "it was not sent"
        return CheckOutcome(False, f"no custom operator `{spec.qualname}` to check: {why}")
    expected_schema = f"{spec.qualname}{spec.schema}"
    if rebuilt.schema.replace(" ", "") != expected_schema.replace(" ", ""):
        ok = False
        lines.append(f"schema: `{rebuilt.schema}`, not `{expected_schema}`")
    else:
        lines.append(f"schema: `{rebuilt.schema}`")
    for problem in rebuilt.problems:
        ok = False
        lines.append(problem)
    gen = torch.Generator().manual_seed(seed)
    fake_lines, grad_lines = [], []
    for shape in shapes:
        x = torch.randn(shape, generator=gen)
        want = spec.kernel(x)
        if rebuilt.fake is not None:
            try:
                with torch.no_grad():
                    got = rebuilt.fake(_meta(x))
                same = (isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(want.shape)
                        and got.dtype == want.dtype and got.stride() == want.stride())
                if not same:
                    fake_lines.append(
                        f"  on an input of shape {list(shape)} your fake gives "
                        + (f"shape {list(got.shape)}, {got.dtype}, strides {got.stride()}"
                           if isinstance(got, torch.Tensor) else f"a {type(got).__name__}")
                        + f"; the library gives shape {list(want.shape)}, {want.dtype}, "
                          f"strides {want.stride()}")
            except Exception as exc:
                fake_lines.append(f"  on an input of shape {list(shape)} your fake raised "
                                  f"{type(exc).__name__}: {str(exc)[:160]}")
        if rebuilt.backward is not None:
            grad_y = torch.randn(want.shape, generator=gen)
            expected = spec.backward(x, want, grad_y)
            why = _bounded(spec, "backward", rebuilt.graphs["backward"], rebuilt.backward, shape)
            if why:
                grad_lines.append(f"  your backward: {why}")
                continue
            try:
                with torch.no_grad():
                    got = rebuilt.backward(x, want, grad_y)
                rtol, atol = GRAD_TOLERANCE
                if not (isinstance(got, torch.Tensor) and got.shape == expected.shape
                        and torch.allclose(got, expected, rtol=rtol, atol=atol)):
                    diff = ((got - expected).abs().max().item()
                            if isinstance(got, torch.Tensor) and got.shape == expected.shape
                            else "a different shape")
                    grad_lines.append(f"  on an input of shape {list(shape)} your backward's "
                                      f"gradient differs from the library's (largest "
                                      f"difference: {diff})")
            except Exception as exc:
                grad_lines.append(f"  on an input of shape {list(shape)} your backward raised "
                                  f"{type(exc).__name__}: {str(exc)[:160]}")
    for label, variant in rebuilt.fake_on.items():
        dtype, device = FAKE_INPUTS[label]
        for shape in shapes[:4]:
            x = torch.empty(shape, dtype=dtype, device="meta")
            want = spec.fake(x)
            try:
                # Within the grader's bounds first (a fake traced on the CPU may allocate there).
                graph_artifact.fake_run_on(rebuilt.graphs[f"fake on {label}"], variant, (x,))
                with torch.no_grad():
                    got = variant(x)
            except Exception as exc:
                fake_lines.append(f"  on a {label} input of shape {list(shape)} your fake raised "
                                  f"{type(exc).__name__}: {str(exc)[:160]}")
                break
            wrong = [f"{what} {g}, not {w}" for what, g, w in (
                ("dtype", getattr(got, "dtype", None), want.dtype),
                ("shape", list(getattr(got, "shape", [])), list(want.shape)),
                ("strides", got.stride() if isinstance(got, torch.Tensor) else None,
                 want.stride()),
                ("device", getattr(got, "device", None) if device == "meta" else want.device,
                 want.device)) if g != w]
            if wrong:
                fake_lines.append(f"  on a {label} input of shape {list(shape)} your fake gives "
                                  + "; ".join(wrong) + " (the output has the input's dtype and "
                                  "device: `x.new_empty`, or `dtype=x.dtype, device=x.device`)")
                break
    listed = ", ".join(str(list(s)) for s in shapes)
    if rebuilt.fake is not None:
        ok = ok and not fake_lines
        lines.append(f"fake implementation: {'agrees' if not fake_lines else 'DISAGREES'} with "
                     f"the library's real output (shape, dtype, strides) on inputs of shapes "
                     f"{listed}, and on {', '.join(FAKE_INPUTS)} inputs"
                     + (":" if fake_lines else ""))
        lines += fake_lines[:6]
    if rebuilt.backward is not None:
        ok = ok and not grad_lines
        lines.append(f"autograd formula: {'agrees' if not grad_lines else 'DISAGREES'} with the "
                     f"library's gradient on fresh inputs of those shapes"
                     + (":" if grad_lines else ""))
        lines += grad_lines[:6]
    if graph_operators is None:
        ok = False
        lines.append("your model's graph: not checked (there is no one graph to look in)")
    elif spec.graph_name not in graph_operators:
        ok = False
        lines.append(f"your model's graph does not call `{spec.qualname}`: the library's kernel "
                     f"is the one to call (this problem teaches wrapping it, not rewriting it)")
    else:
        lines.append(f"your model's graph calls `{spec.qualname}` "
                     f"{graph_operators.count(spec.graph_name)} time(s); the grader ran it as "
                     f"the library's kernel with your fake and your backward")
    return CheckOutcome(ok, "\n".join(lines), details={"shapes": [list(s) for s in shapes]})


# How the library's output is changed to see whether a model's result comes through it.
CHANGED_LIBRARY = (1.5, 0.25)      # y -> 1.5 y + 0.25


def computes_through(spec: OpSpec, graphs: dict, original: Callable, classes: dict,
                     device: str, seed: int) -> str:
    """'' when the learner's result depends on the library call as the original's does: with
    the library's output changed (:data:`CHANGED_LIBRARY`, through :func:`library_replaced`),
    the learner's graph (``graphs``: input class -> the graph run there) and ``original`` (the
    problem's model, calling the library through :func:`library`) give the same result again
    on a fresh input of every class; else why not. A call whose result is thrown away, or
    multiplied by zero, beside the pooling rewritten in torch does not follow the change."""
    from grader.checks import correctness

    scale, shift = CHANGED_LIBRARY
    kernel = spec.kernel
    rng = random.Random(seed)
    for name, make in classes.items():
        graph = graphs.get(name)
        if graph is None:
            continue
        args = make(torch.Generator(device="cpu").manual_seed(rng.randrange(2 ** 31)), device)
        with torch.no_grad(), library_replaced(spec, lambda x: kernel(x) * scale + shift):
            want = original(*args)
            got = graph(*args)
        why = correctness.compare_output(got, want, "the result")
        if why is not None:
            return (f"your model's result does not come through `{spec.qualname}`: with the "
                    f"library's output changed to {scale:g} y + {shift:g}, the original's "
                    f"result changes and yours does not change with it, on {name} ({why}). "
                    f"The operator must compute the pooling your model uses: a call whose "
                    f"result is unused, or multiplied by zero, is not the lesson")
    return ""
