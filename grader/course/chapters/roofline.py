"""Bandwidth, compute and the roofline (chapter 2).

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from grader.checks import jobs as _jobs
from grader.checks.jobs import JobFigures  # noqa: F401 (ps3's exploration cell)
from grader.checks.targets import calls_to_pay_back
from grader.checks.timing import Estimate, time_per_call
from grader.course.chapters.core import DEVICE, SIZE, pick, trials

def seconds_per_call(fn: Callable, *args, device: str = DEVICE) -> Estimate:
    """Median seconds per call (after warm-up) with its 95% interval."""
    return time_per_call(fn, *args, device=device, trials=trials())


def peak_bandwidth(device: str = DEVICE, mib: int | None = None) -> float:
    """Achievable memory bandwidth in GB/s, measured as a large tensor copy (read + write).

    This is the practical peak a kernel can hope for on this device, not the datasheet figure.
    """
    mib = mib or pick(1024, 256, 64)
    src = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device).normal_()
    dst = torch.empty_like(src)
    t = seconds_per_call(dst.copy_, src, device=device).median
    return 2 * src.numel() * src.element_size() / t / 1e9


def peak_flops(device: str = DEVICE, n: int | None = None) -> float:
    """Achievable float32 compute in GFLOP/s, measured as a large square matmul."""
    n = n or pick(8192, 2048, 512)
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    t = seconds_per_call(torch.mm, a, b, device=device).median
    return 2 * n**3 / t / 1e9


def count_flops(fn: Callable, *args) -> int:
    """Floating-point operations of one ``fn(*args)`` call, as torch's FLOP counter sees them
    (matmuls and convolutions; pointwise work is not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn(*args)
    return int(counter.get_total_flops())


def roofline_plot(points: Sequence[dict], peak_gbs: float, peak_gflops: float | None = None,
                  title: str = "", ax=None):
    """A roofline-style plot: achieved GFLOP/s against arithmetic intensity (FLOP per byte).

    ``points``: dicts with ``label``, ``flops`` and ``bytes`` per call and ``seconds`` per call.
    The slanted roof is the measured bandwidth; the flat roof (if given) the measured matmul peak.
    Returns the axes.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.2))
    intensities = [p["flops"] / p["bytes"] for p in points]
    lo = min(intensities + [0.05]) / 4
    hi = max(intensities + [(peak_gflops or peak_gbs) / peak_gbs * 4, 10])
    xs = [lo * (hi / lo) ** (i / 99) for i in range(100)]
    roof = [min(peak_gbs * x, peak_gflops) if peak_gflops else peak_gbs * x for x in xs]
    ax.plot(xs, roof, "k-", lw=1.5, label=f"roof: {peak_gbs:.0f} GB/s"
            + (f", {peak_gflops:.0f} GFLOP/s" if peak_gflops else ""))
    for p, ai in zip(points, intensities):
        gflops = p["flops"] / p["seconds"] / 1e9
        gbs = p["bytes"] / p["seconds"] / 1e9
        ax.plot([ai], [gflops], "o", ms=8,
                label=f"{p['label']}: {gbs:.1f} GB/s ({gbs / peak_gbs:.0%} of roof)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(title or f"roofline on {DEVICE} (measured roofs)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    return ax


def break_even_calls(first_call_s: float, per_call_s: float, eager_per_call_s: float) -> float:
    """After how many calls compiling pays off: compile overhead (the first call over a warm
    one) / time saved per call (``inf`` when the compiled function is not faster)."""
    return calls_to_pay_back(first_call_s - per_call_s, eager_per_call_s - per_call_s)


def measure_modes(make_model: Callable[[], torch.nn.Module], inputs: tuple, modes: Sequence[str],
                  *, device: str = DEVICE, eager: str = "none") -> JobFigures:
    """ps3's exploration cell: :func:`grader.checks.jobs.measure_modes`, measured as ps3's judge
    measures (three rounds, each compile cold), except at ``COURSE_SIZE=ci``: one round, the
    compiles from the warm on-disk cache (as :func:`grader.course.chapters.core.cold_compile`:
    the test suite checks that the code runs; cold compiles cost it minutes)."""
    return _jobs.measure_modes(make_model, inputs, modes, device=device, eager=eager,
                               rounds=pick(_jobs.ROUNDS, _jobs.ROUNDS, 1), cold=SIZE != "ci")
