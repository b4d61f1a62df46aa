"""Size switch, device, progress, caches; generated code.

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

import contextlib
import os
import platform
import time
from typing import Callable, Iterable, Iterator

import torch

from grader.checks import _torch_internals as ti
from grader.checks.fusion import kernel_sources
from grader.checks.targets import device_class
from grader import _environment as environment

SIZES = ("full", "small", "ci")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SIZE = os.environ.get(environment.SIZE) or ("full" if DEVICE == "cuda" else "small")
if SIZE not in SIZES:   # a typo in the environment must not stop a chapter's first cell
    import warnings

    warnings.warn(f"COURSE_SIZE={SIZE!r} is not one of {', '.join(SIZES)}: using the default for "
                  f"this device", stacklevel=2)
    SIZE = "full" if DEVICE == "cuda" else "small"


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


def torch_at_least(major: int, minor: int) -> bool:
    """Is this torch release ``major.minor`` or newer? For the cells that say which release does
    what (docs/versions.md lists the differences)."""
    return ti.torch_at_least(major, minor)


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
