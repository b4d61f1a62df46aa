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


def compare_output(out, expected, what: str = "output") -> str | None:
    """None when ``out`` matches ``expected``; otherwise what is wrong, in plain words."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(expected):
            return f"{what} should be a {type(expected).__name__} of {len(expected)} tensors, got {_kind(out)}"
        for i, (o, e) in enumerate(zip(out, expected)):
            if (msg := compare_output(o, e, f"{what}[{i}]")) is not None:
                return msg
        return None
    if not isinstance(expected, torch.Tensor):
        return None if out == expected else f"{what} is {out!r}, expected {expected!r}"
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
    o, e = out.detach(), expected.detach()
    if not torch.allclose(o, e, rtol=rtol, atol=atol, equal_nan=True):
        diff = (o.double() - e.double()).abs()
        diff = torch.nan_to_num(diff, nan=float("inf"))
        idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape)) if diff.ndim else ()
        return (f"{what} differs from the reference: max abs difference {diff.max().item():.3g} "
                f"at index {idx} (tolerance rtol={rtol}, atol={atol})")
    return None


def _kind(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"{type(x).__name__} of shape {tuple(x.shape)}"
    return type(x).__name__


@dataclasses.dataclass
class CorrectnessReport:
    ok: bool
    checked: int
    failures: list[str]

    def __str__(self) -> str:
        if self.ok:
            return f"outputs match the reference on {self.checked} fresh random inputs."
        return "outputs do not match the reference:\n" + "\n".join(f"- {f}" for f in self.failures)

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731


def check_outputs(candidate: Callable, reference: Callable, make_inputs: Callable[[int], tuple],
                  seeds: Sequence[int] | None = None, n: int = 3) -> CorrectnessReport:
    """Compare ``candidate(*make_inputs(seed))`` with ``reference(...)`` for fresh seeds.

    Inputs are built twice per seed so that a candidate that changes its inputs in place cannot
    change what the reference sees.
    """
    seeds = list(seeds) if seeds is not None else fresh_seeds(n)
    failures = []
    for seed in seeds:
        with torch.no_grad():
            expected = reference(*make_inputs(seed))
            try:
                out = candidate(*make_inputs(seed))
            except Exception as exc:
                failures.append(f"raised {type(exc).__name__}: {exc}")
                break
        if (msg := compare_output(out, expected)) is not None and msg not in failures:
            failures.append(msg)
    return CorrectnessReport(not failures, len(seeds), failures)
