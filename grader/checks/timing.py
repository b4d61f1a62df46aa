"""Honest timing: warm-up, synchronize, interleaved trials, medians with confidence intervals.

The clock and the CUDA synchronize are bound when this module is imported, before any learner
code runs, so a learner who later replaces ``time.perf_counter`` or ``torch.cuda.synchronize``
changes nothing here. (Grading times only in the judge, :mod:`grader.isolation.judge.steps`, a
process that never runs learner code.)

>>> result = compare({"eager": model, "compiled": opt_model}, make_inputs, baseline="eager")
>>> print(result)     # speedup 1.84x [1.79, 1.90] (95% CI), compile 12.1 s, 41 trials
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Callable, Mapping, Sequence

import torch

# Bound at import: learner code that rebinds the public names cannot reach these.
_PERF_COUNTER = time.perf_counter
_CUDA_SYNCHRONIZE = torch.cuda.synchronize
_MONOTONIC = time.monotonic


class Clock:
    """Reads time and waits for the device. Tests inject fake clocks; graders use the default."""

    def now(self) -> float:
        return _PERF_COUNTER()

    def sync(self, device: str) -> None:
        if str(device).startswith("cuda"):
            _CUDA_SYNCHRONIZE()


DEFAULT_CLOCK = Clock()


# ---------------------------------------------------------------------------------------------
# Statistics

def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Median and a distribution-free confidence interval from order statistics.

    The interval [x_(j), x_(k)] covers the true median with probability >= ``confidence``
    whatever the distribution (the number of samples below the median is Binomial(n, 1/2)).
    With fewer than 6 samples no such interval exists: it spans the whole sample.
    """
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        raise ValueError("no samples")
    med = statistics.median(xs)
    alpha = 1.0 - confidence
    cdf, j = 0.0, 0
    # largest j with P(B <= j-1) <= alpha/2, B ~ Binomial(n, 1/2)
    for i in range(n + 1):
        cdf += math.comb(n, i) / 2.0 ** n
        if cdf > alpha / 2:
            j = i
            break
    lo, hi = (xs[j - 1], xs[n - j]) if j >= 1 else (xs[0], xs[-1])
    return med, lo, hi


@dataclasses.dataclass
class Estimate:
    """A median with its confidence interval."""

    median: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        return f"{self.median:.2f}x [{self.low:.2f}, {self.high:.2f}]"

    @classmethod
    def of(cls, samples: Sequence[float], confidence: float = 0.95) -> "Estimate":
        med, lo, hi = median_ci(samples, confidence)
        return cls(med, lo, hi, len(samples))

    def versus(self, threshold: float) -> str:
        """'pass' when the whole interval is at or above ``threshold``, 'fail' when it is all
        below, 'inconclusive' when it straddles it."""
        if self.low >= threshold:
            return "pass"
        if self.high < threshold:
            return "fail"
        return "inconclusive"


# ---------------------------------------------------------------------------------------------
# Measuring

def fresh_views(args: tuple) -> tuple:
    """``args`` with every tensor replaced by a new view of it (same data, a new object): a
    cache keyed by the identity of its inputs never hits."""
    return tuple(a.view(a.shape) if isinstance(a, torch.Tensor) else a for a in args)


def _call_block(fn: Callable, args_pool: Sequence[tuple], start: int, reps: int, device: str,
                clock: Clock) -> tuple[float, object]:
    """Seconds per call over ``reps`` calls (cycling through ``args_pool``, each call's tensors
    fresh views made before the clock starts), and the last output."""
    calls = [fresh_views(args_pool[(start + i) % len(args_pool)]) for i in range(reps)]
    clock.sync(device)
    t0 = clock.now()
    out = None
    for args in calls:
        out = fn(*args)
    clock.sync(device)
    return (clock.now() - t0) / reps, out


def first_call_seconds(fn: Callable, args: tuple, device: str = "cpu",
                       clock: Clock = DEFAULT_CLOCK) -> float:
    """Time one call: for a freshly compiled function this is compile time plus one run."""
    seconds, _ = _call_block(fn, [args], 0, 1, device, clock)
    return seconds


def calibrate_reps(fn: Callable, args_pool: Sequence[tuple], device: str, clock: Clock,
                   block_seconds: float) -> int:
    """How many calls make a timed block last about ``block_seconds`` (reads the clock's
    resolution and launch noise out of short calls)."""
    per_call, _ = _call_block(fn, args_pool, 0, 3, device, clock)
    if per_call <= 0:
        return 1000
    return max(1, min(1000, math.ceil(block_seconds / per_call)))


@dataclasses.dataclass
class Comparison:
    """Interleaved timings of several callables on the same inputs."""

    names: list[str]
    baseline: str
    seconds: dict[str, list[float]]       # per-trial seconds per call
    first_call_s: dict[str, float]        # compile (if any) + one call
    reps: int
    trials: int
    device: str
    last_outputs: dict[str, list[tuple[int, object]]] = dataclasses.field(default_factory=dict)

    def per_call(self, name: str, confidence: float = 0.95) -> Estimate:
        """Median seconds per call (not a ratio; ``str`` prints it as one)."""
        return Estimate.of(self.seconds[name], confidence)

    def ratio(self, slow: str, fast: str, confidence: float = 0.95) -> Estimate:
        """How many times faster ``fast`` runs than ``slow``: paired per-trial ratios."""
        return Estimate.of([a / b for a, b in zip(self.seconds[slow], self.seconds[fast])],
                           confidence)

    def speedup(self, name: str, confidence: float = 0.95) -> Estimate:
        """Speedup of ``name`` over the baseline."""
        return self.ratio(self.baseline, name, confidence)

    def table(self) -> str:
        rows = [f"{'':<14}{'ms/call':>10}{'first call s':>14}{'speedup [95% CI]':>26}"]
        for name in self.names:
            ms = statistics.median(self.seconds[name]) * 1e3
            sp = "baseline" if name == self.baseline else str(self.speedup(name))
            rows.append(f"{name:<14}{ms:>10.3f}{self.first_call_s[name]:>14.2f}{sp:>26}")
        rows.append(f"({self.trials} interleaved trials x {self.reps} calls, {self.device})")
        return "\n".join(rows)

    __str__ = table


def interleave_order(names: Sequence[str], t: int) -> list[str]:
    """The order in which ``names`` run in round ``t``.

    The order is rotated by ``t % n`` and, every other cycle of ``n`` rounds
    (``(t // n) % 2 == 1``), reversed. Over each ``2 n`` rounds every name runs in every position
    exactly twice, so each is first equally often, and every pair runs in both orders (for two
    callables: a b, b a, b a, a b: an ABBA design that cancels linear drift). Rotating and
    reversing on the same parity of ``t`` would undo the rotation for even ``n`` (for two
    callables the baseline would always run first).
    """
    n = len(names)
    order = list(names[t % n:]) + list(names[:t % n])
    if (t // n) % 2:
        order.reverse()
    return order


def compare(fns: Mapping[str, Callable], args_pool: Sequence[tuple], *, baseline: str,
            device: str = "cpu", warmup: int = 3, trials: int = 15, block_seconds: float = 0.02,
            keep_outputs: Sequence[str] = (), clock: Clock = DEFAULT_CLOCK,
            previous: Comparison | None = None) -> Comparison:
    """Time every callable in ``fns`` on the same inputs, interleaved, and return the samples.

    - The first call of each is timed on its own (``first_call_s``): for a compiled function
      that is compile time, reported apart from the steady state.
    - ``warmup`` more calls each, then ``trials`` rounds; in each round every callable runs one
      block of ``reps`` calls, in an order that rotates from round to round (and reverses every
      other cycle, see :func:`interleave_order`) so that drift and turbo states hit all alike. Inputs cycle through ``args_pool``: distinct tensors and
      values, so caching outputs by input identity or value does not pay.
    - ``keep_outputs``: names whose last output of every block is kept (with the index of its
      inputs) so the caller can check what the timed runs returned.
    - ``previous``: continue an earlier comparison (more trials, same reps).
    """
    names = list(fns)
    if baseline not in fns:
        raise ValueError(f"baseline {baseline!r} is not one of {names}")
    if not args_pool:
        raise ValueError("args_pool is empty: give at least one tuple of inputs")
    if previous is None:
        first = {n: first_call_seconds(fns[n], args_pool[0], device, clock) for n in names}
        for n in names:
            for i in range(warmup):
                fns[n](*args_pool[(i + 1) % len(args_pool)])
        reps = calibrate_reps(fns[baseline], args_pool, device, clock, block_seconds)
        result = Comparison(names, baseline, {n: [] for n in names}, first, reps, 0, device,
                            {n: [] for n in keep_outputs})
    else:
        result = previous
    for t in range(result.trials, result.trials + trials):
        order = interleave_order(names, t)
        start = t * result.reps
        for n in order:
            seconds, out = _call_block(fns[n], args_pool, start, result.reps, device, clock)
            result.seconds[n].append(seconds)
            if n in result.last_outputs:
                kept = out.detach().clone() if isinstance(out, torch.Tensor) else out
                result.last_outputs[n].append(((start + result.reps - 1) % len(args_pool), kept))
    result.trials += trials
    return result


def time_per_call(fn: Callable, *args, device: str = "cpu", trials: int = 9,
                  clock: Clock = DEFAULT_CLOCK) -> Estimate:
    """Median seconds per call of ``fn(*args)`` after a warm-up (for chapters and benches)."""
    res = compare({"fn": fn}, [args], baseline="fn", device=device, trials=trials, clock=clock)
    return res.per_call("fn")


def time_first_call(fn: Callable, *args, device: str = "cpu") -> float:
    """Seconds for one call; on a freshly compiled function, the compile time."""
    return first_call_seconds(fn, args, device)


def budget_deadline(seconds: float) -> float:
    return _MONOTONIC() + seconds


def time_left(deadline: float) -> float:
    return deadline - _MONOTONIC()
