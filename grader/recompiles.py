"""Recompile check: over a list of inputs, how many times does Dynamo compile, and why.

>>> report = recompile_check(model, [(torch.randn(b, 16),) for b in range(2, 65)], dynamic=True)
>>> report.compiles        # 1: "compiles once for batch sizes 2..64"
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Sequence

import torch

from . import _torch_internals as ti

_SIZE = re.compile(r"tensor '(?P<name>[^']+)' size mismatch at index (?P<dim>\d+)\. "
                   r"expected (?P<old>\d+), actual (?P<new>\d+)")
_DTYPE = re.compile(r"tensor '(?P<name>[^']+)' dtype mismatch\. expected (?P<old>\w+), "
                    r"actual (?P<new>\w+)")
_STRIDE = re.compile(r"tensor '(?P<name>[^']+)' stride mismatch")
_DEVICE = re.compile(r"tensor '(?P<name>[^']+)' device mismatch")
_REQUIRES_GRAD = re.compile(r"tensor '(?P<name>[^']+)' requires_grad mismatch")


def explain_guard_failure(message: str) -> str:
    """A failed Dynamo guard in plain words, with what to do about it."""
    text = re.sub(r"^\d+/\d+: ", "", message.strip())
    if m := _SIZE.search(text):
        return (f"dimension {m['dim']} of `{_short(m['name'])}` changed from {m['old']} to "
                f"{m['new']}; the graph was specialised to the old size. Compile with "
                f"`dynamic=True` or call `torch._dynamo.mark_dynamic(x, {m['dim']})` on the input")
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
    if "___check_obj_id" in text or "ID_MATCH" in text or "id(" in text:
        return (f"a Python object the graph depends on was replaced ({text}); avoid rebinding "
                f"globals or module attributes between calls")
    if "==" in text or "EQUALS_MATCH" in text:
        return (f"a Python value the graph baked in changed ({text}); pass it as a tensor, or "
                f"keep it constant between calls")
    return text


def _short(name: str) -> str:
    """``L['x']`` -> ``x``; ``L['self']._modules['fc'].weight`` -> ``self.fc.weight``."""
    name = re.sub(r"L\['(\w+)'\]", r"\1", name)
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

    @property
    def recompiles(self) -> int:
        return max(self.compiles - 1, 0)

    @property
    def ok(self) -> bool:
        return self.compiles <= self.max_compiles and not self.hit_limit

    def __str__(self) -> str:
        head = (f"{self.compiles} compilation{'s' * (self.compiles != 1)} over {self.calls} calls "
                f"(allowed: {self.max_compiles})")
        lines = [head]
        for call, reason in zip(self.compiling_calls[1:], self.reasons):
            lines.append(f"- call {call + 1} recompiled: {reason}")
        if self.hit_limit:
            lines.append(f"- the recompile limit ({ti.recompile_limit()}) was reached: past it "
                         f"Dynamo silently runs the function eagerly")
        return "\n".join(lines)

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731


def _code_of(fn: Callable):
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    target = getattr(target, "__func__", target)
    return getattr(target, "__code__", None)


def recompile_check(fn: Callable, inputs: Sequence[tuple], *, dynamic: bool | None = None,
                    max_compiles: int = 1, backend: str = "eager") -> RecompileReport:
    """Call ``torch.compile(fn, dynamic=dynamic)`` on each tuple in ``inputs`` and count the
    compilations (one per call that made Dynamo compile a frame).

    ``backend="eager"`` is enough: guards and recompiles are Dynamo's, not Inductor's.
    """
    compiled_on: list[int] = []
    graphs_this_call = [0]

    def counting_backend(gm, example_inputs):
        graphs_this_call[0] += 1
        return gm.forward

    code = _code_of(fn)
    ti.clear_guard_failures()
    opt = torch.compile(fn, backend=counting_backend, dynamic=dynamic)
    with ti.quiet_torch_logs():
        for i, args in enumerate(inputs):
            graphs_this_call[0] = 0
            opt(*args)
            if graphs_this_call[0]:
                compiled_on.append(i)
    raw = ti.guard_failures_for(code) if code is not None else []
    # One message per recompile: Dynamo lists every cache entry that failed; keep the first
    # failure of each recompile (entries for the newest graph, "N/0").
    firsts = [m for m in raw if re.match(r"^\d+/0:", m)] or raw
    hit_limit = len(raw) >= ti.recompile_limit() and len(compiled_on) < len(inputs)
    return RecompileReport(
        compiles=len(compiled_on), calls=len(inputs),
        reasons=[explain_guard_failure(m) for m in firsts[: max(len(compiled_on) - 1, 0)]],
        raw_reasons=raw, compiling_calls=compiled_on, hit_limit=hit_limit,
        max_compiles=max_compiles)
