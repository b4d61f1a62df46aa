"""Helpers for the chapter notebooks (``notebooks/``): size switch, progress, plots, records.

The chapters import this module (``from grader import chapters as ch``) instead of copying code
into cells. Nothing here grades anything; measuring goes through :mod:`grader.timing`, kernel
counts through :mod:`grader.fusion`, and private torch APIs through :mod:`grader._torch_internals`.

Size switch
    ``COURSE_SIZE`` = ``full`` (default on CUDA), ``small`` (default on CPU) or ``ci`` (tiny
    shapes, for the test suite). :func:`pick` chooses a value per size.

Records
    :func:`record` appends a measured figure, with the seed chapter's claim beside it, to the JSON
    file named by ``COURSE_RECORD`` (``make gpu-check`` and the tests set it); without that
    variable it only returns the row. :func:`claims_table` renders rows as a markdown table.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import sys
import time
from typing import Callable, Iterable, Iterator, Sequence

import torch

from . import _torch_internals as ti
from .fusion import kernel_sources
from .targets import device_class
from .timing import Estimate, time_per_call

SIZES = ("full", "small", "ci")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SIZE = os.environ.get("COURSE_SIZE") or ("full" if DEVICE == "cuda" else "small")
if SIZE not in SIZES:
    raise ValueError(f"COURSE_SIZE={SIZE!r}: use one of {', '.join(SIZES)}")
RECORD_ENV = "COURSE_RECORD"
_SESSION: list[dict] = []  # rows recorded in this process, whether or not COURSE_RECORD is set


def pick(full, small, ci):
    """The value for the current :data:`SIZE` (``full`` on a GPU, ``small`` on a laptop CPU,
    ``ci`` in the test suite)."""
    return {"full": full, "small": small, "ci": ci}[SIZE]


def trials() -> int:
    """Interleaved trials per timing: fewer in CI, where only the code path matters."""
    return pick(21, 15, 7)


def describe(device: str = DEVICE) -> str:
    """One line saying where the chapter runs: torch, device, CPU threads, size."""
    if str(device).startswith("cuda"):
        where = f"{torch.cuda.get_device_name(0)} ({device_class(device)})"
    else:
        where = f"CPU {platform.machine()} with {torch.get_num_threads()} threads"
    return f"torch {torch.__version__}, {where}, COURSE_SIZE={SIZE}"


def gpu_only(what: str, why: str, device: str = DEVICE) -> bool:
    """True on CUDA. On CPU, print that ``what`` is GPU-only and ``why``, and return False.

    >>> if ch.gpu_only("CUDA graphs", "CPUs have no graph replay"): ...
    """
    if str(device).startswith("cuda"):
        return True
    print(f"GPU-only: {what} (skipped on {device} because {why})")
    return False


def gpu_only_note(what: str, why: str, device: str = DEVICE) -> None:
    """Like :func:`gpu_only`, as a statement: prints the note on CPU, nothing on CUDA."""
    gpu_only(what, why, device)


def progress(items: Iterable, desc: str = "", total: int | None = None,
             every: float = 2.0) -> Iterator:
    """Yield from ``items``, printing ``desc: i/n, elapsed`` at most every ``every`` seconds and
    once at the end, so long loops in a notebook show that they are alive."""
    items = list(items) if total is None and not hasattr(items, "__len__") else items
    n = total if total is not None else len(items)
    start = last = time.monotonic()
    i = 0
    for i, item in enumerate(items, 1):
        yield item
        now = time.monotonic()
        if now - last >= every and i < n:
            print(f"{desc}: {i}/{n} done, {now - start:.1f} s", flush=True)
            last = now
    print(f"{desc}: {i}/{n} done in {time.monotonic() - start:.1f} s", flush=True)


def quiet() -> contextlib.AbstractContextManager:
    """Keep torch's warnings and log lines off the output inside the block."""
    return ti.quiet_torch_logs()


def fresh_cache() -> contextlib.AbstractContextManager:
    """An empty, temporary Inductor cache: compile times inside it are cold compiles."""
    return ti.fresh_inductor_cache()


def cold_compile() -> contextlib.AbstractContextManager:
    """A fresh Inductor cache for timing a cold compile, except at ``COURSE_SIZE=ci``, where the
    warm on-disk cache is kept (CI checks that the code runs, and cold compiles cost minutes)."""
    return contextlib.nullcontext() if SIZE == "ci" else ti.fresh_inductor_cache()


def reset() -> None:
    """Forget every compiled function's Dynamo cache (``torch._dynamo.reset``)."""
    ti.dynamo_reset()


def inductor_config(**options) -> contextlib.AbstractContextManager:
    """Inductor options for the compiles started inside the block (e.g. ``freezing=True``)."""
    return ti.inductor_config_patch(**options)


# ---------------------------------------------------------------------------------------------
# Generated code

def show_code(code: str, max_lines: int = 60) -> None:
    """Print the kernels in Inductor's output code, each cut to ``max_lines`` lines."""
    kernels = kernel_sources(code)
    if not kernels:
        print("(no generated kernel in this code: only library calls)")
    for i, src in enumerate(kernels):
        lines = src.splitlines()
        print(f"----- kernel {i} ({len(lines)} lines) -----")
        print("\n".join(lines[:max_lines]))
        if len(lines) > max_lines:
            print(f"... ({len(lines) - max_lines} more lines)")


def eager_kernel_count(fn: Callable, *args) -> int:
    """How many kernels eager PyTorch launches for ``fn(*args)``: CUDA kernels on a GPU, top-level
    ATen operators on CPU (each a separate pass over memory)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.no_grad(), profile(activities=activities) as prof:
        fn(*args)
        if cuda:
            torch.cuda.synchronize()
    events = prof.events()
    if cuda:
        return sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    return sum(1 for e in events if e.name.startswith("aten::") and e.cpu_parent is None)


# ---------------------------------------------------------------------------------------------
# Bandwidth, compute and the roofline

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
    """After how many calls compiling pays off: compile overhead / time saved per call
    (``inf`` when the compiled function is not faster)."""
    saved = eager_per_call_s - per_call_s
    overhead = first_call_s - per_call_s
    if saved <= 0:
        return math.inf
    return max(overhead, 0.0) / saved


# ---------------------------------------------------------------------------------------------
# Records: measured figures beside the seed's claims

def record(chapter: str, name: str, measured: float, claim: str | float | None = None,
           unit: str = "x", *, device: str = DEVICE, low: float | None = None,
           high: float | None = None, note: str = "") -> None:
    """Record a measured figure beside the seed chapter's claim, and print both.

    The row is appended to the JSON list in the file named by ``$COURSE_RECORD`` when that
    variable is set (``make gpu-check`` and the tests set it); otherwise only printed. Returns
    the row.
    """
    if isinstance(measured, Estimate):
        low, high, measured = measured.low, measured.high, measured.median
    row = {
        "chapter": chapter, "name": name, "measured": float(measured),
        "low": None if low is None else float(low), "high": None if high is None else float(high),
        "unit": unit, "claim": None if claim is None else str(claim),
        "device": device_class(device), "size": SIZE, "torch": torch.__version__, "note": note,
    }
    print(f"[{chapter}] {name}: measured {_fmt(row)} on {row['device']}"
          + (f"  | seed's claim: {row['claim']}" if row["claim"] else ""))
    _SESSION.append(row)
    path = os.environ.get(RECORD_ENV)
    if path:
        rows = load_records(path)
        rows.append(row)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(rows, fh, indent=1)
        os.replace(tmp, path)


def load_records(path: str | None = None) -> list[dict]:
    """The rows recorded so far in ``path`` (default ``$COURSE_RECORD``); [] when none."""
    path = path or os.environ.get(RECORD_ENV)
    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return []
    with open(path) as fh:
        return list(json.load(fh))


def _fmt(row: dict) -> str:
    value, unit = row["measured"], row["unit"]
    if math.isinf(value):
        text = "never"
    elif unit == "x":
        text = f"{value:.2f}x"
    elif unit == "s":
        text = f"{value:.2f} s"
    elif unit == "ms":
        text = f"{value:.3f} ms"
    else:
        text = f"{value:.4g} {unit}"
    if row.get("low") is not None and row.get("high") is not None:
        text += f" [{row['low']:.2f}, {row['high']:.2f}]"
    return text


def claims_table(rows: Sequence[dict] | None = None) -> str:
    """Markdown table of recorded rows: chapter, measurement, measured figure, seed's claim,
    device, size."""
    rows = load_records() if rows is None else rows
    lines = ["| chapter | measurement | measured | seed's claim | device | size | torch |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["chapter"], r["name"], _fmt(r), r.get("claim") or "—", r["device"],
                 r["size"], r.get("torch", "")]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def show_claims(chapter: str | None = None) -> None:
    """Display the rows recorded in this kernel (optionally one chapter's) as a table."""
    rows = [r for r in _SESSION if chapter is None or r["chapter"] == chapter]
    text = claims_table(rows) if rows else "(nothing recorded yet)"
    try:
        from IPython.display import Markdown, display

        if "ipykernel" in sys.modules:
            display(Markdown(text))
            return
    except ImportError:
        pass
    print(text)
