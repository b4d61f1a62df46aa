"""grader.checks.timing: medians with confidence intervals and interleaved comparisons.

A FakeClock (conftest.py) makes time virtual: each fake function advances it by a fixed cost,
so speedups are exact and every assertion is deterministic. Costs are powers of two so the
virtual sums are exact in binary floating point.
"""
from __future__ import annotations

import math
import random
import statistics

import pytest
import torch

from conftest import FakeClock, pool
from grader.checks.timing import (DEFAULT_CLOCK, Clock, Comparison, Estimate, compare,
                           interleave_order, median_ci, time_first_call, time_per_call)

SLOW, FAST = 2.0 ** -8, 2.0 ** -10          # 4x apart


# --- median_ci ----------------------------------------------------------------------------------

def test_median_ci_known_samples():
    xs = list(range(1, 12))                  # n = 11
    assert median_ci(xs) == (6, 2, 10)       # P(B <= 1) = 12/2048 <= 0.025 < P(B <= 2)
    shuffled = random.Random(0).sample(xs, len(xs))
    assert median_ci(shuffled) == (6, 2, 10)  # order does not matter
    assert median_ci([3.0]) == (3.0, 3.0, 3.0)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_median_ci_small_samples_span_the_sample(n):
    xs = [float(i * i) for i in range(n)]
    med, lo, hi = median_ci(xs)
    assert (lo, hi) == (min(xs), max(xs))
    assert med == statistics.median(xs)


def test_median_ci_empty_raises():
    with pytest.raises(ValueError):
        median_ci([])


def test_median_ci_brackets_the_median_and_shrinks_with_n():
    widths = []
    for n in (11, 21, 41, 81, 161, 321):
        xs = [(i + 0.5) / n for i in range(n)]          # quantiles of U(0, 1)
        med, lo, hi = median_ci(xs)
        assert lo <= med <= hi
        assert lo < 0.5 < hi
        widths.append(hi - lo)
    assert all(a > b for a, b in zip(widths, widths[1:])), widths


def test_median_ci_higher_confidence_is_wider():
    xs = [(i + 0.5) / 51 for i in range(51)]
    _, lo95, hi95 = median_ci(xs, 0.95)
    _, lo99, hi99 = median_ci(xs, 0.99)
    assert lo99 <= lo95 and hi99 >= hi95 and (hi99 - lo99) > (hi95 - lo95)


def test_median_ci_coverage():
    """Distribution-free: the 95% interval covers the true median in >= 95% of samples (up to
    simulation error) for skewed and symmetric distributions alike."""
    rng = random.Random(1234)
    for draw, true_median in ((lambda: rng.gauss(0, 1), 0.0),
                              (lambda: rng.expovariate(1.0), math.log(2))):
        hits, reps = 0, 2000
        for _ in range(reps):
            _, lo, hi = median_ci([draw() for _ in range(21)])
            hits += lo <= true_median <= hi
        assert hits / reps >= 0.93, hits / reps


# --- Estimate -----------------------------------------------------------------------------------

def test_estimate_of_and_versus():
    est = Estimate.of(list(range(1, 12)))
    assert (est.median, est.low, est.high, est.n) == (6, 2, 10, 11)
    assert est.versus(2) == "pass"          # the whole interval at or above
    assert est.versus(10.5) == "fail"       # the whole interval below
    assert est.versus(6) == "inconclusive"  # straddles
    assert str(Estimate(1.5, 1.25, 1.75, 9)) == "1.50x [1.25, 1.75]"


# --- compare with a fake clock ------------------------------------------------------------------

def _double(x):
    return x * 2


def test_compare_exact_speedup_and_first_call():
    clock = FakeClock()
    fns = {"eager": clock.fn("eager", SLOW), "compiled": clock.fn("compiled", FAST)}
    res = compare(fns, pool(4), baseline="eager", clock=clock)
    assert isinstance(res, Comparison)
    assert res.names == ["eager", "compiled"] and res.baseline == "eager"
    assert res.trials == 15
    assert res.reps == math.ceil(0.02 / SLOW)           # calibrated on the baseline: 6
    assert all(len(v) == 15 for v in res.seconds.values())
    assert res.first_call_s == {"eager": SLOW, "compiled": FAST}
    sp = res.speedup("compiled")
    assert (sp.median, sp.low, sp.high, sp.n) == (4.0, 4.0, 4.0, 15)
    assert res.ratio("compiled", "eager").median == 0.25
    assert res.per_call("eager").median == SLOW
    assert res.per_call("compiled").median == FAST
    assert res.device == "cpu"
    assert all(entry == ("sync", "cpu") for entry in clock.log if entry[0] == "sync")
    text = res.table()
    assert "4.00x [4.00, 4.00]" in text and "baseline" in text and "15 interleaved trials" in text


def test_compare_warmup_then_trials_call_counts():
    clock = FakeClock()
    fns = {"a": clock.fn("a", SLOW), "b": clock.fn("b", FAST)}
    res = compare(fns, pool(3), baseline="a", clock=clock, warmup=2, trials=5)
    calls = [e[1] for e in clock.log if e[0] == "call"]
    # first call + warm-up each, 3 calibration calls of the baseline, then the timed blocks
    assert calls.count("a") == 1 + 2 + 3 + 5 * res.reps
    assert calls.count("b") == 1 + 2 + 5 * res.reps


def _trial_orders(clock, names, trials):
    blocks = clock.blocks()[-trials * len(names):]
    orders = []
    for t in range(trials):
        trial = blocks[t * len(names):(t + 1) * len(names)]
        orders.append([block[0][1] for block in trial])
        assert all(len({e[1] for e in block}) == 1 for block in trial)  # one callable per block
    return orders


@pytest.mark.parametrize("names", [["a", "b", "c"], ["a", "b"]], ids=["three", "two"])
def test_interleaving_order_rotates(names):
    """Every callable runs in every position of a round, so drift hits all alike.

    For two callables this was once broken: rotating by t % n and reversing on odd rounds
    undoes the rotation for n = 2 (the baseline always ran first; for any even n, odd-indexed
    names never ran first). judge_speed without a reference compares exactly two callables.
    """
    clock = FakeClock()
    fns = {n: clock.fn(n, SLOW) for n in names}
    trials = 12
    compare(fns, pool(5), baseline=names[0], clock=clock, trials=trials)
    orders = _trial_orders(clock, names, trials)
    assert all(sorted(o) == sorted(names) for o in orders)
    for position in range(len(names)):
        at_position = {o[position] for o in orders}
        assert at_position == set(names), f"position {position}: {orders}"
    firsts = [o[0] for o in orders]
    assert max(firsts.count(n) for n in names) <= math.ceil(trials / len(names)) + 1, orders


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_interleave_order_is_balanced(n):
    """Over each 2n rounds every name runs exactly twice in every position, and every pair of
    names runs in both orders equally often (position and carry-over effects cancel)."""
    names = [chr(ord("a") + i) for i in range(n)]
    for offset in (0, 2 * n, 7 * 2 * n):
        orders = [interleave_order(names, t) for t in range(offset, offset + 2 * n)]
        assert all(sorted(o) == names for o in orders)
        for position in range(n):
            column = [o[position] for o in orders]
            assert all(column.count(name) == 2 for name in names), orders
        for x in names:
            for y in names:
                if x != y:
                    before = sum(o.index(x) < o.index(y) for o in orders)
                    assert before == n, (x, y, orders)
    if n == 2:
        assert [interleave_order(names, t) for t in range(4)] == [
            ["a", "b"], ["b", "a"], ["b", "a"], ["a", "b"]]     # ABBA


def test_args_cycle_through_the_pool():
    clock = FakeClock()
    inputs = pool(5)
    fns = {"a": clock.fn("a", SLOW), "b": clock.fn("b", FAST)}
    res = compare(fns, inputs, baseline="a", clock=clock, trials=6)
    blocks = clock.blocks()[-6 * 2:]
    seen_objects = set()
    for t in range(6):
        for block in blocks[2 * t: 2 * t + 2]:
            got = [int(entry[2][0][0]) for entry in block]  # input i is full of i
            # Both callables of a round see the same inputs, in pool order from t * reps.
            assert got == [(t * res.reps + i) % 5 for i in range(res.reps)]
            # Distinct inputs on consecutive calls (no memo by value pays) ...
            assert all(a != b for a, b in zip(got, got[1:]))
            for entry in block:
                tensor = entry[2][0]
                # ... and every call gets a new tensor object on the same data (no memo by
                # identity pays either, and nothing is copied).
                assert id(tensor) not in seen_objects and all(tensor is not x[0] for x in inputs)
                assert tensor.data_ptr() == inputs[int(tensor[0])][0].data_ptr()
                seen_objects.add(id(tensor))
    used = {int(e[2][0][0]) for e in clock.log if e[0] == "call"}
    assert used == set(range(5))


def test_keep_outputs_keeps_outputs_with_their_input_index():
    clock = FakeClock()
    inputs = pool(7)
    fns = {"a": clock.fn("a", SLOW, _double), "b": clock.fn("b", FAST, _double)}
    res = compare(fns, inputs, baseline="a", clock=clock, trials=5, keep_outputs=("b",))
    assert set(res.last_outputs) == {"b"}
    kept = res.last_outputs["b"]
    assert len(kept) == 5
    for t, (idx, out) in enumerate(kept):
        assert idx == (t * res.reps + res.reps - 1) % len(inputs)
        assert torch.equal(out, inputs[idx][0] * 2)
    # Kept outputs are copies: a later in-place change by the learner cannot alter them.
    outs = [out for _, out in kept]
    assert len({id(o) for o in outs}) == 5


def test_previous_continues_a_comparison():
    clock = FakeClock()
    fns = {"a": clock.fn("a", SLOW), "b": clock.fn("b", FAST)}
    res = compare(fns, pool(3), baseline="a", clock=clock, trials=5, keep_outputs=("b",))
    reps, first = res.reps, dict(res.first_call_s)
    n_calls = len([e for e in clock.log if e[0] == "call"])
    more = compare(fns, pool(3), baseline="a", clock=clock, trials=4, previous=res)
    assert more is res
    assert more.trials == 9 and more.reps == reps and more.first_call_s == first
    assert all(len(v) == 9 for v in more.seconds.values())
    assert len(more.last_outputs["b"]) == 9
    new_calls = len([e for e in clock.log if e[0] == "call"]) - n_calls
    assert new_calls == 4 * 2 * reps          # no new first call, warm-up or calibration


def test_compare_rejects_bad_arguments():
    clock = FakeClock()
    with pytest.raises(ValueError):
        compare({"a": clock.fn("a", SLOW)}, pool(2), baseline="nope", clock=clock)
    with pytest.raises(ValueError):
        compare({"a": clock.fn("a", SLOW)}, [], baseline="a", clock=clock)


def test_noise_gives_an_interval_around_the_true_speedup():
    clock = FakeClock(seed=3, sigma=0.2)
    fns = {"a": clock.fn("a", SLOW), "b": clock.fn("b", FAST)}
    res = compare(fns, pool(4), baseline="a", clock=clock, trials=41)
    sp = res.speedup("b")
    assert sp.low < sp.median < sp.high
    assert sp.low <= 4.0 <= sp.high


def test_time_per_call_with_fake_clock():
    clock = FakeClock()
    est = time_per_call(clock.fn("f", FAST), torch.zeros(2), trials=9, clock=clock)
    assert (est.median, est.low, est.high, est.n) == (FAST, FAST, FAST, 9)


def test_default_clock_structure():
    """The real clock: monotonic, and sync on CPU is a no-op (no CUDA needed)."""
    assert isinstance(DEFAULT_CLOCK, Clock)
    a = DEFAULT_CLOCK.now()
    DEFAULT_CLOCK.sync("cpu")
    assert DEFAULT_CLOCK.now() >= a
    assert time_first_call(lambda x: x + 1, torch.zeros(2)) >= 0.0


def test_clock_bound_at_import(monkeypatch):
    """A learner who replaces time.perf_counter later does not change the grader's clock."""
    import time

    real = DEFAULT_CLOCK.now()
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert DEFAULT_CLOCK.now() >= real
