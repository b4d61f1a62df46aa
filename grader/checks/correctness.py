"""Correctness: the learner's output against the reference on fresh, seeded inputs.

Seeds are drawn from the operating system when the check runs, so a learner cannot predict (or
cache) the inputs. Tolerances follow the dtype: compiled code reorders floating-point sums.
"""
from __future__ import annotations

import dataclasses
import secrets
from typing import Callable, Sequence

import torch

# (rtol, atol) per dtype: compiled vs eager differ by reassociation, more in low precision.
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-3, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (0.0, 0.0))  # integers and bools: exact


def fresh_seeds(n: int) -> list[int]:
    """``n`` seeds nobody can guess in advance."""
    return [secrets.randbits(31) for _ in range(n)]


def compare_output(out, expected, what: str = "output",
                   tolerance: tuple[float, float] | None = None) -> str | None:
    """None when ``out`` matches ``expected``; otherwise what is wrong, in plain words.
    ``tolerance``: ``(rtol, atol)`` for floating-point tensors instead of the dtype's
    (:data:`TOLERANCES`; a problem's stated tolerance, ``Problem.tolerance``)."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(expected):
            return f"{what} should be a {type(expected).__name__} of {len(expected)} tensors, got {_kind(out)}"
        for i, (o, e) in enumerate(zip(out, expected)):
            if (msg := compare_output(o, e, f"{what}[{i}]", tolerance)) is not None:
                return msg
        return None
    if isinstance(expected, dict):
        if not isinstance(out, dict) or set(out) != set(expected):
            keys = ", ".join(repr(k) for k in expected)
            return f"{what} should be a dict with keys {keys}, got {_kind(out)}"
        for key, e in expected.items():
            if (msg := compare_output(out[key], e, f"{what}[{key!r}]", tolerance)) is not None:
                return msg
        return None
    if not isinstance(expected, torch.Tensor):
        if isinstance(out, torch.Tensor):  # `out == expected` would be a tensor, not a bool
            return f"{what} is a {_kind(out)}, expected {expected!r}"
        try:
            same = bool(out == expected)
        except Exception:  # e.g. arrays, whose == is elementwise
            same = False
        return None if same else f"{what} is {out!r}, expected {expected!r}"
    # A plain tensor: a subclass could override comparison and pass any check.
    if type(out) not in (torch.Tensor, torch.nn.Parameter):
        return f"{what} should be a plain torch.Tensor, got {_kind(out)}"
    if out.shape != expected.shape:
        return f"{what} has shape {tuple(out.shape)}, expected {tuple(expected.shape)}"
    if out.dtype != expected.dtype:
        return f"{what} has dtype {out.dtype}, expected {expected.dtype}"
    if out.device.type != expected.device.type:
        return f"{what} is on {out.device}, expected {expected.device}"
    rtol, atol = tolerances(expected.dtype)
    if tolerance is not None and (expected.is_floating_point() or expected.is_complex()):
        rtol, atol = (float(v) for v in tolerance)
    o, e = out.detach(), expected.detach()
    if not torch.allclose(o, e, rtol=rtol, atol=atol, equal_nan=True):
        diff = (o.double() - e.double()).abs()
        diff = torch.nan_to_num(diff, nan=float("inf"))
        idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.ndim else ()
        return (f"{what} differs from the reference: max abs difference {diff.max().item():.3g} "
                f"at index {idx} (tolerance rtol={rtol}, atol={atol})")
    return None


def _tensors(value, name: str):
    """``(name, tensor)`` for every tensor in a nest of tuples, lists and dicts."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{name}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{name}[{k!r}]")


def _snapshot(args: tuple) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Each input tensor with a copy of its current contents."""
    return [(name, t, t.detach().clone())
            for i, a in enumerate(args) for name, t in _tensors(a, f"input {i}")]


def _same(now: torch.Tensor, before: torch.Tensor) -> bool:
    if now.shape != before.shape or now.dtype != before.dtype:
        return False
    now = now.detach()
    if now.is_floating_point() or now.is_complex():
        return bool(torch.allclose(now, before, rtol=0.0, atol=0.0, equal_nan=True))
    return bool(torch.equal(now, before))


def _mutated(snapshot) -> list[str]:
    """The names of the input tensors whose contents (or shape) changed since the snapshot."""
    return [name for name, tensor, before in snapshot if not _same(tensor, before)]


def _kind(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{type(x).__name__} of shape {tuple(x.shape)}"
    return type(x).__name__


_CHANGED = "changed "  # how a failure that is only about changed inputs starts


@dataclasses.dataclass
class CorrectnessReport:
    """``failures`` holds one entry per input the candidate got wrong."""

    ok: bool
    checked: int
    failures: list[str]

    def __str__(self) -> str:
        if self.ok:
            return f"outputs match the reference on {self.checked} fresh random inputs."
        counts: dict[str, int] = {}
        for f in self.failures:  # the same message on several inputs is shown once
            counts[f] = counts.get(f, 0) + 1
        lines = [f"- {f}" + (f" (on {n} of {self.checked} inputs)" if n > 1 else "")
                 for f, n in counts.items()]
        if all(f.startswith(_CHANGED) for f in self.failures):
            head = "the outputs match the reference, but the solution changes its inputs:"
        else:
            head = "outputs do not match the reference:"
        return head + "\n" + "\n".join(lines)

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731


def check_outputs(candidate: Callable, reference: Callable, make_inputs: Callable[[int], tuple],
                  seeds: Sequence[int] | None = None, n: int = 3,
                  grad: bool = False,
                  tolerance: tuple[float, float] | None = None) -> CorrectnessReport:
    """Compare ``candidate(*make_inputs(seed))`` with ``reference(...)`` for fresh seeds.

    Inputs are built twice per seed so that a candidate that changes its inputs in place cannot
    change what the reference sees; and the candidate must leave its inputs as they were (a
    solution that overwrites the caller's tensors fails even when its output is right, unless
    the reference changes the same input too). ``grad``: run both with autograd enabled (a
    training step, which runs backward); by default they run under ``torch.no_grad()``.
    ``tolerance``: ``(rtol, atol)`` instead of the dtype's (see :func:`compare_output`).
    """
    seeds = list(seeds) if seeds is not None else fresh_seeds(n)
    failures = []
    for seed in seeds:
        with torch.set_grad_enabled(grad):
            ref_args = make_inputs(seed)
            ref_before = _snapshot(ref_args)
            expected = reference(*ref_args)
            # What the reference itself changes in place is part of the task, not a fault.
            allowed = set(_mutated(ref_before))
            del ref_args, ref_before
            args = make_inputs(seed)
            before = _snapshot(args)
            try:
                out = candidate(*args)
            except Exception as exc:
                if getattr(exc, "ends_the_check", False):  # e.g. the process that ran it is gone
                    raise
                failures.append(getattr(exc, "learner_message", "")
                                or f"raised {type(exc).__name__}: {exc}")
                break
        problems = []
        if (msg := compare_output(out, expected, tolerance=tolerance)) is not None:
            problems.append(msg)
        if changed := [name for name in _mutated(before) if name not in allowed]:
            problems.append(f"{_CHANGED}{', '.join(changed)} in place; a solution must leave its "
                            f"inputs as they were (use out-of-place ops, or work on a copy)")
        if problems:
            failures.append("; ".join(problems))
    return CorrectnessReport(not failures, len(seeds), failures)
