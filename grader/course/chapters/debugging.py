"""When compiled code is wrong, crashes or is slow (chapter 9; problem set 7).

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader import chapters
as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

import contextlib
import math
import os
from typing import Callable, Iterator, Sequence

import torch

from grader.checks import _torch_internals as ti
from grader.course.chapters.core import DEVICE, quiet
from grader.course.chapters.compile_time import run_python

BISECT_BACKENDS = ("eager", "aot_eager", "aot_eager_decomp_partition", "inductor")


def time_call(fn: Callable, *args, device: str = DEVICE) -> float:
    """Seconds of one call of ``fn(*args)`` (compile included when it compiles), synchronised."""
    from grader.checks.timing import DEFAULT_CLOCK as clock

    clock.sync(device)
    start = clock.now()
    fn(*args)
    clock.sync(device)
    return clock.now() - start


def _max_difference(got, want) -> float:
    if isinstance(want, (tuple, list)):
        return max((_max_difference(g, w) for g, w in zip(got, want)), default=0.0)
    diff = (got.detach().double() - want.detach().double()).abs()
    return float(torch.nan_to_num(diff, nan=math.inf).max()) if diff.numel() else 0.0


def compare_backends(fn: Callable, *args, backends: Sequence[str] = BISECT_BACKENDS,
                     tolerance: tuple[float, float] | None = None, show: bool = True) -> dict:
    """Bisect by backend: ``fn(*args)`` eagerly, then compiled with each backend in turn (a fresh
    compile each, under ``torch.no_grad()``), each compared with eager: ``{backend: (max
    |compiled - eager|, matches)}``. ``eager`` runs Dynamo only; ``aot_eager`` adds AOTAutograd
    (functionalization, the joint graph); ``aot_eager_decomp_partition`` adds Inductor's
    decompositions and partitioner; ``inductor`` adds its passes, lowerings and generated code:
    the first backend that differs names the layer that changed the result. ``matches`` uses
    ``tolerance`` ((rtol, atol)) or the dtype's (grader.checks.correctness)."""
    from grader.checks.correctness import compare_output

    with torch.no_grad():
        want = fn(*args)
        out = {}
        for backend in backends:
            with quiet():
                got = ti.compile_fresh(fn, backend=backend)(*args)
            out[backend] = (_max_difference(got, want),
                            compare_output(got, want, tolerance=tolerance) is None)
    if show:
        for backend, (diff, ok) in out.items():
            print(f"{backend:28s} max |compiled - eager| = {diff:.3g}  "
                  f"{'matches eager' if ok else 'DIFFERS'}")
    return out


def has_compiler_bisector() -> bool:
    """Does this torch have the compiler bisector (``torch._inductor.compiler_bisector``,
    torch 2.6 and later)?"""
    return ti.has_compiler_bisector()


def compiler_bisector_stages() -> dict[str, list[str]]:
    """Backend -> the subsystems (or config changes) the compiler bisector tries in it, in this
    torch."""
    return ti.compiler_bisector_stages()


def compiler_bisect(test: Callable[[], bool], show: bool = True) -> dict | None:
    """Run the compiler bisector on ``test`` (compile and run, return True when the result is
    right; each call starts from a fresh Dynamo cache): the first backend that fails, the
    subsystem inside it, and the application of that subsystem that breaks it. Returns
    ``{"backend", "subsystem", "bisect_number", "debug_info", "log"}`` or ``None`` (no backend
    reproduces the failure, or this torch has no bisector: printed)."""
    if not ti.has_compiler_bisector():
        print(f"torch {torch.__version__} has no torch._inductor.compiler_bisector (it ships with "
              f"torch 2.6 and later): bisect by backend with ch.compare_backends")
        return None
    with quiet():
        result, log = ti.compiler_bisect(test)
    if show:
        steps = [ln for ln in log.splitlines() if ln.strip()]
        print("\n".join("  " + ln for ln in steps[-14:]))
        print("result:", result if result else "no backend reproduces the failure")
    if result is not None:
        result["log"] = log
    return result


def torch_logs(**options) -> contextlib.AbstractContextManager:
    """``TORCH_LOGS`` inside the block, set from Python (``recompiles=True``,
    ``perf_hints=True``, ``graph_breaks=True``, ``output_code=True``); reset afterwards. The
    lines go to stderr, as with the environment variable."""
    return ti.torch_logs(**options)


def emulate_precision_casts(on: bool = True) -> contextlib.AbstractContextManager:
    """Inductor's ``emulate_precision_casts`` inside the block (round bf16/fp16 intermediates as
    eager does)."""
    return ti.emulate_precision_casts(on)


def compiled_autograd(on: bool = True) -> contextlib.AbstractContextManager:
    """Compiled autograd for the ``torch.compile`` calls inside the block
    (``torch._dynamo.config.compiled_autograd``): a compiled function's ``.backward()`` is
    captured at run time, whole (hooks included, across the forward's graph breaks), and
    compiled."""
    return ti.dynamo_config_patch(compiled_autograd=on)


def compiled_autograd_captures() -> int:
    """Backward graphs compiled autograd has captured so far in this process."""
    return int(ti.compiled_autograd_counters().get("captures", 0))


def newest_file(folder: str, name: str) -> str | None:
    """The most recently written file called ``name`` under ``folder`` (the minifier's
    ``minifier_launcher.py`` or ``repro.py``), or ``None``."""
    found = [os.path.join(root, name) for root, _, files in os.walk(folder) if name in files]
    return max(found, key=os.path.getmtime) if found else None


@contextlib.contextmanager
def logged(**options) -> Iterator[list]:
    """Like :func:`torch_logs`, but the log lines are collected instead of printed: ``with
    ch.logged(recompiles=True) as lines: ...`` (torch's log handler writes to the ``sys.stderr``
    of the moment it is set up, which is a buffer inside the block). Yields the list, filled when
    the block ends, with only the lines of the artifacts asked for (``[__recompiles]`` ...)."""
    import io

    buffer = io.StringIO()
    lines: list[str] = []
    try:
        with contextlib.redirect_stderr(buffer), ti.torch_logs(**options):
            yield lines
    finally:
        tags = [f"[__{name}]" for name, on in options.items() if on]
        lines.extend(ln for ln in buffer.getvalue().splitlines()
                     if not tags or any(tag in ln for tag in tags))


def minify_in_fresh_process(fault: str, work_dir: str, *, after: str | None = None,
                            level: int = 2, timeout: float = 300) -> dict:
    """The minifier on a planted compiler failure, in fresh processes (each with ``timeout``):

    1. ``python -m grader.course.minify_child --fault FAULT`` compiles a small model whose
       compile fails (``backend``: the backend ``relu_compile_error_TESTING_ONLY`` that torch
       ships for testing the minifier, which raises on any ``relu``; ``inductor``: Inductor with
       its ``cpp.inject_relu_bug_TESTING_ONLY="compile_error"``, a C++ compile error on ``relu``),
       with ``TORCHDYNAMO_REPRO_AFTER=after`` (``"dynamo"`` for ``backend``, ``"aot"`` for
       ``inductor`` by default) and ``TORCHDYNAMO_REPRO_LEVEL=level``: it fails and leaves a
       ``minifier_launcher.py`` under ``work_dir/torch_compile_debug``;
    2. ``python minifier_launcher.py`` shrinks the failing graph and writes ``repro.py``;
    3. ``python repro.py`` fails the same way.

    Returns the child's error line, the launcher's and the repro's paths, the repro's text, the
    operators in the original graph and in the repro, each step's seconds and exit status."""
    import re
    import subprocess

    after = after or {"backend": "dynamo", "inductor": "aot"}[fault]
    env = {"TORCHDYNAMO_REPRO_AFTER": after, "TORCHDYNAMO_REPRO_LEVEL": str(level)}
    out: dict = {"fault": fault, "after": after, "level": level}

    def last_error(text: str) -> str:
        found = [ln for ln in text.splitlines() if re.match(r"^[\w.]*(Error|Exception)\b", ln)]
        return found[-1][:200] if found else (text.strip().splitlines() or [""])[-1][:200]

    try:
        done, out["child_s"] = run_python(["-m", "grader.course.minify_child", "--fault", fault],
                                          env=env, timeout=timeout, cwd=work_dir)
    except subprocess.TimeoutExpired:
        out["error"] = f"the compile did not fail within {timeout:.0f} s"
        return out
    out["child_status"], out["child_error"] = done.returncode, last_error(done.stderr)
    report = [ln for ln in done.stdout.splitlines() if ln.startswith("ops: ")]
    out["ops_before"] = int(report[-1].split()[1]) if report else None
    launcher = newest_file(os.path.join(work_dir, "torch_compile_debug"), "minifier_launcher.py")
    out["launcher"] = launcher
    if launcher is None:
        out["error"] = "no minifier_launcher.py was written"
        return out
    folder = os.path.dirname(launcher)
    try:
        done, out["minify_s"] = run_python([launcher], timeout=timeout, cwd=folder)
    except subprocess.TimeoutExpired:
        out["error"] = f"the minifier did not finish within {timeout:.0f} s"
        return out
    out["minify_status"] = done.returncode
    out["minify_tail"] = "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])
    repro = newest_file(folder, "repro.py")
    out["repro"] = repro
    if repro is None:
        out["error"] = "the minifier wrote no repro.py"
        return out
    out["repro_text"] = open(repro).read()
    forward = out["repro_text"].split("def forward", 1)[-1].split("mod = Repro()", 1)[0]
    out["ops_after"] = len(re.findall(r"= torch\.\w|= torch\.ops\.\w", forward))
    try:
        done, out["repro_s"] = run_python([repro], timeout=timeout, cwd=folder)
    except subprocess.TimeoutExpired:
        out["error"] = f"repro.py did not finish within {timeout:.0f} s"
        return out
    out["repro_status"], out["repro_error"] = done.returncode, last_error(done.stderr)
    return out


def cudagraph_skips() -> int:
    """How many times CUDA graphs were skipped so far in this process ("skipping cudagraphs due
    to ..."): compare before and after a block."""
    return ti.cudagraph_skips()
