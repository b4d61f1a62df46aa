"""Recompile check: over a list of inputs, how many times does Dynamo compile, and why.

>>> report = recompile_check(model, [(torch.randn(b, 16),) for b in range(2, 65)], dynamic=True)
>>> report.compiles        # 1: "compiles once for batch sizes 2..64"
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Callable, Sequence

import torch

from grader.checks import _torch_internals as ti

# Dynamo quotes the guarded name, which may itself contain quotes (torch 2.14 writes
# ``tensor 'd['a']'``, torch 2.6 ``tensor 'L['x']'``): the name runs up to the quote that is
# followed by the kind of mismatch.
_NAME = r"tensor '(?P<name>.+?)'"
_SIZE = re.compile(_NAME + r" size mismatch at index (?P<dim>\d+)\. "
                   r"expected (?P<old>\d+), actual (?P<new>\d+)")
_DTYPE = re.compile(_NAME + r" dtype mismatch\. expected (?P<old>\w+), actual (?P<new>\w+)")
_STRIDE = re.compile(_NAME + r" stride mismatch")
_DEVICE = re.compile(_NAME + r" device mismatch")
_REQUIRES_GRAD = re.compile(_NAME + r" requires_grad mismatch")
# A Python value baked into the graph: ``n == 2`` (``L['n'] == 2`` on older torch).
_VALUE = re.compile(r"^(?P<name>[\w.\[\]'\"]+) == (?P<value>.+)$")


def _first_line(text: str) -> str:
    """The guard itself: Dynamo follows it with padding, ``# source  # file:line`` and a
    "User stack trace:" block."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return re.split(r"\s{2,}#|\s+# ", line, maxsplit=1)[0].strip()


def explain_guard_failure(message: str, give_fix: bool = True) -> str:
    """A failed Dynamo guard in plain words (one line), with what to do about it.
    ``give_fix=False``: the direction only, not the API call that fixes it (a graded problem's
    feedback: the fix is the lesson)."""
    text = re.sub(r"^\d+/\d+: ", "", message.strip())
    if m := _SIZE.search(text):
        name = _short(m["name"])
        head = (f"dimension {m['dim']} of `{name}` changed from {m['old']} to {m['new']}; the "
                f"graph was specialised to the old size.")
        if not give_fix:
            return (f"{head} Tell torch.compile which sizes vary from call to call (chapter 6, "
                    f"dynamic shapes)")
        return (f"{head} Compile with `dynamic=True` or call "
                f"`torch._dynamo.mark_dynamic({name}, {m['dim']})` on the input")
    if m := _DTYPE.search(text):
        return (f"the dtype of `{_short(m['name'])}` changed from {m['old']} to {m['new']}; "
                f"every dtype needs its own graph: cast inputs to one dtype before the call")
    if m := _STRIDE.search(text):
        return (f"the memory layout (strides) of `{_short(m['name'])}` changed; pass contiguous "
                f"inputs (`x.contiguous()`)")
    if m := _DEVICE.search(text):
        return f"`{_short(m['name'])}` moved to another device; keep inputs on one device"
    if m := _REQUIRES_GRAD.search(text):
        return (f"`requires_grad` of `{_short(m['name'])}` changed; run under one grad mode "
                f"(e.g. always inside `torch.no_grad()`)")
    guard = _first_line(text)
    if "___check_obj_id" in guard or "ID_MATCH" in guard or "id(" in guard:
        return (f"a Python object the graph depends on was replaced ({_short(guard)}); avoid "
                f"rebinding globals or module attributes between calls")
    if m := _VALUE.match(guard):
        name = _short(m["name"])
        return (f"the Python value `{name}` changed: the graph was compiled for "
                f"`{name} == {m['value']}`; pass it as a tensor, or keep it constant between calls")
    if "==" in guard or "EQUALS_MATCH" in guard:
        return (f"a Python value the graph baked in changed ({_short(guard)}); pass it as a "
                f"tensor, or keep it constant between calls")
    return guard


def _short(name: str) -> str:
    """``L['x']`` -> ``x``; ``L['self']._modules['fc']._parameters['weight']`` ->
    ``self.fc.weight``; ``G['w']`` -> ``w``."""
    name = re.sub(r"\b[LG]\['(\w+)'\]", r"\1", name)
    name = re.sub(r"\._(modules|parameters|buffers)\['(\w+)'\]", r".\2", name)
    return name


@dataclasses.dataclass
class RecompileReport:
    """How many compilations a series of calls caused, and the reason for each recompile."""

    compiles: int
    calls: int
    reasons: list[str]
    raw_reasons: list[str]
    compiling_calls: list[int]
    hit_limit: bool
    max_compiles: int
    recompile_limit: int = dataclasses.field(default_factory=ti.recompile_limit)
    failed_call: int | None = None   # with fullgraph=True: the call (from 0) that raised
    failure: str = ""                # ... and why

    @property
    def recompiles(self) -> int:
        return max(self.compiles - 1, 0)

    @property
    def ok(self) -> bool:
        return self.compiles <= self.max_compiles and not self.hit_limit \
            and self.failed_call is None

    def __str__(self) -> str:
        head = (f"{self.compiles} compilation{'s' * (self.compiles != 1)} over {self.calls} calls "
                f"(allowed: {self.max_compiles})")
        lines = [head]
        if self.failed_call is not None and not self.hit_limit:
            lines.append(f"- call {self.failed_call + 1} raised: {self.failure}")
        for call, reason in zip(self.compiling_calls[1:], self.reasons):
            lines.append(f"- call {call + 1} recompiled: {reason}")
        if self.hit_limit and self.failed_call is not None:
            lines.append(f"- the recompile limit ({self.recompile_limit}) was reached at call "
                         f"{self.failed_call + 1}: with fullgraph=True that raises (without it, "
                         f"Dynamo would silently run the function eagerly from there on)")
        elif self.hit_limit:
            lines.append(f"- the recompile limit ({self.recompile_limit}) was reached: past it "
                         f"Dynamo silently runs the function eagerly")
        return "\n".join(lines)

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731


class CompileCounter:
    """A ``torch.compile`` backend that counts the graphs Dynamo hands it and passes each on to
    a real backend (default ``"inductor"``): the course's one compile counter (the recompile
    check and the chapters both count with it).

    ``graphs`` is the number of compiles; ``inputs`` the shapes of each graph's tensor inputs,
    as Dynamo saw them (a symbol such as ``s77`` is a dynamic size).

    Torch's own (``torch._dynamo.testing.CompileCounterWithBackend``) counts before calling the
    backend and keeps every graph alive; this one counts only compiles that finished and keeps
    only the shapes.

    >>> counter = CompileCounter()
    >>> f = torch.compile(fn, backend=counter); f(x); counter.graphs
    """

    def __init__(self, backend: str | Callable = "inductor") -> None:
        self.backend_name = backend if isinstance(backend, str) else getattr(backend, "__name__", "")
        self._inner = ti.lookup_backend(backend) if isinstance(backend, str) else backend
        self.graphs = 0
        self.inputs: list[list[tuple]] = []

    def __call__(self, gm, example_inputs):
        compiled = self._inner(gm, example_inputs)
        # counted only when the backend returns: a backend may raise to make Dynamo restart the
        # analysis (e.g. to specialize a value), and then it is called again for the same compile
        self.graphs += 1
        self.inputs.append(graph_input_shapes(gm, example_inputs))
        return compiled


def graph_input_shapes(gm, example_inputs=()) -> list[tuple]:
    """The shapes of a captured graph's tensor inputs as Dynamo traced them: a dynamic size is
    a symbol (``s77``), a static one a number. Falls back to the example inputs' shapes."""
    shapes = []
    for node in gm.graph.nodes:
        value = node.meta.get("example_value") if node.op == "placeholder" else None
        if isinstance(value, torch.Tensor):
            shapes.append(tuple(int(str(s)) if str(s).isdigit() else str(s) for s in value.shape))
    return shapes or [tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)]


def _code_of(fn: Callable):
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    target = getattr(target, "__func__", target)
    if isinstance(target, functools.partial):
        return _code_of(target.func)
    return getattr(target, "__code__", None)


def recompile_check(fn: Callable, inputs: Sequence[tuple], *, dynamic: bool | None = None,
                    max_compiles: int = 1, backend: str = "eager", fullgraph: bool = False,
                    give_fix: bool = True) -> RecompileReport:
    """Call ``torch.compile(fn, dynamic=dynamic)`` on each tuple in ``inputs`` and count the
    compilations (one per call that made Dynamo compile a frame).

    ``backend="eager"`` is enough: guards and recompiles are Dynamo's, not Inductor's.
    A fresh copy of ``fn`` is compiled (see :func:`grader.checks._torch_internals.fresh_copy`), so
    earlier compiles of ``fn`` neither hide compilations nor use up its recompile limit, and
    the check starts without what automatic dynamic shapes learnt from earlier calls.

    ``fullgraph=True``: a graph break on any call raises there, as it would in use; the calls
    stop, and the report says which call raised and why (``failed_call``, ``failure``); hitting
    the recompile limit raises too (``hit_limit``). ``give_fix``: see :func:`explain_guard_failure`.
    """
    compiled_on: list[int] = []
    counter = CompileCounter(backend)
    limit = ti.recompile_limit()
    failed_call, failure, limit_raised = None, "", False
    with ti.quiet_torch_logs(), ti.own_automatic_dynamic_state(), \
            ti.capture_recompile_limit_hits() as hits:
        fresh = ti.fresh_copy(fn)
        code = _code_of(fresh)
        options = {"fullgraph": True} if fullgraph else {}
        opt = ti.compile_isolated(fresh, backend=counter, dynamic=dynamic, **options)
        for i, args in enumerate(inputs):
            graphs_before = counter.graphs
            try:
                opt(*args)
            except Exception as exc:
                if not fullgraph:
                    raise
                failed_call, limit_raised = i, ti.is_recompile_limit_error(exc)
                lines = str(exc).strip().splitlines()
                failure = f"{type(exc).__name__}: {lines[0] if lines else ''}"
                break
            if counter.graphs > graphs_before:
                compiled_on.append(i)
    raw = ti.guard_failures_for(code, forget=True) if code is not None else []
    # Dynamo records one message per cache entry it tried (k recompiles leave k(k+1)/2 of
    # them); keep one per recompile: the failure against the first graph ("N/0").
    firsts = [m for m in raw if re.match(r"^\d+/0:", m)] or raw
    if hits:
        limit = hits[0][1]
    return RecompileReport(
        compiles=len(compiled_on), calls=len(inputs) if failed_call is None else failed_call + 1,
        reasons=[explain_guard_failure(m, give_fix)
                 for m in firsts[: max(len(compiled_on) - 1, 0)]],
        raw_reasons=raw, compiling_calls=compiled_on, hit_limit=bool(hits) or limit_raised,
        max_compiles=max_compiles, recompile_limit=limit, failed_call=failed_call,
        failure=failure)
