"""Dynamic shapes and recompiles (chapter 6).

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch

from grader.checks import _torch_internals as ti
from grader.checks.recompiles import CompileCounter, graph_input_shapes  # noqa: F401 (ch.CompileCounter)
from grader.course.chapters.core import DEVICE, pick, progress, quiet, trials


def compile_counted(fn: Callable, backend: str | Callable = "inductor",
                    **options) -> tuple[Callable, CompileCounter]:
    """``torch.compile(fn, backend=CompileCounter(backend), **options)`` on a fresh copy of
    ``fn`` (no compiled code shared with earlier compiles of it); returns the compiled function
    and its counter."""
    counter = CompileCounter(backend)
    return ti.compile_fresh(fn, backend=counter, **options), counter


def mark_dynamic(t: torch.Tensor, dim) -> torch.Tensor:
    """``torch._dynamo.mark_dynamic(t, dim)``; returns ``t``."""
    ti.mark_dynamic(t, dim)
    return t


def maybe_mark_dynamic(t: torch.Tensor, dim) -> torch.Tensor:
    """``torch._dynamo.maybe_mark_dynamic(t, dim)``; returns ``t``."""
    ti.maybe_mark_dynamic(t, dim)
    return t


def dynamo_config(**options) -> contextlib.AbstractContextManager:
    """Dynamo options for the compiles started inside the block (``torch._dynamo.config.patch``,
    e.g. ``capture_scalar_outputs=True``)."""
    return ti.dynamo_config_patch(**options)


def recompile_limit() -> tuple[str, int]:
    """The name of Dynamo's recompile-limit setting in this torch and its value."""
    return ti.recompile_limit_name(), ti.recompile_limit()


def recompile_limit_set(limit: int) -> contextlib.AbstractContextManager:
    """Dynamo's recompile limit set to ``limit`` inside the block."""
    return ti.set_recompile_limit(limit)


def recompile_limit_messages() -> contextlib.AbstractContextManager:
    """Collect (instead of printing) the warning Dynamo writes when a function hits the
    recompile limit: ``with ch.recompile_limit_messages() as messages: ...``."""
    return ti.capture_recompile_limit_messages()


def own_automatic_dynamic_state() -> contextlib.AbstractContextManager:
    """Compile inside the block without what automatic dynamic shapes learnt from earlier
    compiles of the same function (and forget what the block learns)."""
    return ti.own_automatic_dynamic_state()


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple`` (a bucket)."""
    return -(-n // multiple) * multiple


def pad_to(x: torch.Tensor, shape: Sequence[int], value: float = 0.0) -> torch.Tensor:
    """``x`` padded at the end of each dimension with ``value`` to ``shape`` (each at least
    ``x``'s size)."""
    pads: list[int] = []
    for have, want in zip(reversed(x.shape), reversed(list(shape))):
        if want < have:
            raise ValueError(f"cannot pad size {have} down to {want}")
        pads += [0, want - have]
    return torch.nn.functional.pad(x, pads, value=value) if any(pads) else x


def interleaved_seconds_per_call(fns: dict, args: tuple, *, device: str = DEVICE,
                                 block_seconds: float = 0.02,
                                 budget_seconds: float | None = None) -> dict:
    """Median seconds per call of each callable on the same ``args``, measured by
    :func:`grader.checks.timing.compare` (warm-up, blocks of about ``block_seconds`` sized on the
    first callable, ``trials()`` interleaved rounds in a balanced order).
    ``budget_seconds``: stop after the round that passes it (at least three rounds), so that a
    busy machine does not stretch the measurement without bound."""
    from grader.checks import timing

    clock = timing.DEFAULT_CLOCK
    deadline = None if budget_seconds is None else clock.now() + budget_seconds
    first = next(iter(fns))
    comp = timing.compare(fns, [args], baseline=first, device=device, trials=3,
                          block_seconds=block_seconds)
    while comp.trials < trials() and (deadline is None or clock.now() <= deadline):
        comp = timing.compare(fns, [args], baseline=first, device=device, trials=1,
                              block_seconds=block_seconds, previous=comp)
    return {name: comp.per_call(name).median for name in fns}


def shape_sweep(strategies: dict, inputs: Sequence[tuple], *, eager: Callable | None = None,
                device: str = DEVICE) -> dict:
    """Run each compile strategy over the same sequence of inputs, and time every shape.

    ``strategies``: name -> ``(fn, counter)`` where ``fn`` is the callable to run (a compiled
    function, or a wrapper that pads and then calls one) and ``counter`` its
    :class:`CompileCounter`. Each strategy first sees the inputs in order, one call each, inside
    its own automatic-dynamic state: for each call the result records the compiles so far and
    the seconds of that call (compile included when it compiled). Then, for each input, every
    strategy (and ``eager``, if given) is timed in the steady state, interleaved
    (:func:`interleaved_seconds_per_call`). Both passes call with the very tensors in
    ``inputs``, not with fresh views as :func:`grader.checks.timing.compare` does: Dynamo guards on
    whether an input is a view, so mixing the two would add compiles that the data never asked
    for.

    Returns ``{"shapes": [...], "compiles": {name: [cumulative compiles after each call]},
    "call_s": {name: [seconds]}, "per_call_s": {name: [median seconds per call]},
    "extra_compiles": {name: compiles during the steady-state timing}}``.
    """
    from grader.checks.timing import DEFAULT_CLOCK as clock

    def one_call(fn, args):
        clock.sync(device)
        start = clock.now()
        fn(*args)
        clock.sync(device)
        return clock.now() - start

    result: dict = {"shapes": [tuple(a[0].shape) for a in inputs], "compiles": {},
                    "call_s": {}, "per_call_s": {}, "extra_compiles": {}}
    for name in progress(strategies, "first pass over the shapes"):
        fn, counter = strategies[name]
        compiles, seconds = [], []
        with own_automatic_dynamic_state(), quiet():
            for args in inputs:
                seconds.append(one_call(fn, args))
                compiles.append(counter.graphs)
        result["compiles"][name], result["call_s"][name] = compiles, seconds
    before = {name: counter.graphs for name, (_, counter) in strategies.items()}
    fns = {name: fn for name, (fn, _) in strategies.items()}
    if eager is not None:
        fns = {"eager": eager, **fns}
    for name in fns:
        result["per_call_s"][name] = []
    with quiet():
        for args in progress(inputs, "steady-state timing per shape"):
            times = interleaved_seconds_per_call(fns, args, device=device,
                                                 block_seconds=pick(0.02, 0.02, 0.005),
                                                 budget_seconds=pick(30.0, 10.0, 1.5))
            for name in fns:
                result["per_call_s"][name].append(times[name])
    result["extra_compiles"] = {name: counter.graphs - before[name]
                                for name, (_, counter) in strategies.items()}
    return result
