"""Training (chapter 7).

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

from typing import Callable

import torch

from grader.checks import _torch_internals as ti
from grader.course.chapters.core import DEVICE

def aot_graphs(fn: Callable, *args, partitioner: str = "min_cut") -> dict:
    """AOTAutograd's graphs for ``fn(*args)`` (forward and backward once): ``"joint"``,
    ``"forward"``, ``"backward"`` (``torch.fx.GraphModule``) and ``"saved"``, a list of
    ``(name, shape, dtype, bytes, kind)`` of the values the forward graph saves for the backward
    (``kind``: ``"input"``, ``"view of an input"``, ``"activation"``, ``"view of an
    activation"``), and ``"activation_bytes"``: the memory those activations keep alive beyond
    the parameters and inputs (which exist anyway), each base counted once.
    ``partitioner``: ``"min_cut"`` (Inductor's) or ``"default"``."""
    return ti.aot_graphs(fn, *args, partitioner=partitioner)


def graph_ops(gm) -> list[str]:
    """The operators a ``torch.fx.GraphModule`` calls, in order (``aten.mm.default``, ...)."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def saved_for_backward_bytes(fn: Callable, *args) -> int:
    """Bytes of the tensors autograd saves for the backward pass during ``fn(*args)`` (eager or
    compiled), counted with ``torch.autograd.graph.saved_tensors_hooks``; then runs backward."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    (out.sum() if out.dim() else out).backward()
    return total[0]


def peak_memory_bytes(fn: Callable, *args, device: str = DEVICE) -> int | None:
    """Peak device memory allocated during ``fn(*args)`` on CUDA (above what was allocated
    before it); ``None`` on a CPU, where torch keeps no such counter."""
    if not str(device).startswith("cuda"):
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(*args)
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - base)
