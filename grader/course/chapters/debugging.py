"""When compiled code is wrong, crashes or is slow (chapter 9; problem set 7).

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

import contextlib
import math
import os
from typing import Callable, Iterator, Sequence

import torch

from grader.checks import _torch_internals as ti
from grader.course.chapters.core import DEVICE, fresh_cache, quiet
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


def cudagraph_skip_report(fn: Callable, make_args: Callable[[], tuple],
                          calls: int = 3) -> tuple[int, list[str]]:
    """``fn`` compiled with ``mode="reduce-overhead"`` (a fresh copy, in a fresh Inductor cache,
    so that it compiles, and logs, here) and called ``calls`` times, each on new arguments from
    ``make_args()``: how many times CUDA graphs were skipped meanwhile (``cudagraph_skips``), and
    the reasons logged ("skipping cudagraphs due to REASON": under ``perf_hints`` in torch 2.8,
    ``cudagraphs`` in 2.14)."""
    before = cudagraph_skips()
    with fresh_cache(), logged(perf_hints=True, cudagraphs=True) as lines:
        compiled = ti.compile_fresh(fn, mode="reduce-overhead")
        for _ in range(calls):
            compiled(*make_args())
    said = "skipping cudagraphs due to"
    return cudagraph_skips() - before, [ln.split(said, 1)[1].strip() for ln in lines if said in ln]


def cache_counts() -> dict[str, int]:
    """Hits and misses so far in this process of Inductor's FX graph cache and AOTAutograd's
    cache (``fxgraph_cache_hit``, ``fxgraph_cache_miss``, ``autograd_cache_hit``,
    ``autograd_cache_miss``): compare before and after a block (chapter 8 shows the caches)."""
    return ti.compile_cache_counters()


def inductor_setting(name: str):
    """The current value of an Inductor setting (``"fallback_random"``, ``"graph_partition"``,
    ``"triton.cudagraphs"`` ...), or ``None`` where this torch has no such setting."""
    return ti.inductor_setting(name)


# The floating-point options of GCC and Clang that -ffast-math sets, and the related ones.
_FLOAT_OPTIONS = ("associative-math", "reciprocal-math", "signed-zeros", "trapping-math",
                  "math-errno", "finite-math-only", "unsafe-math-optimizations", "fp-contract",
                  "excess-precision", "fast-math")


def cpp_float_flags() -> dict:
    """What Inductor asks of its C++ compiler about floating point, and what the compiler makes
    of it: ``{"compiler", "flags", "effective"}``. ``flags``: Inductor's floating-point flags, in
    the order it passes them (a later flag overrides an earlier one); ``effective``: each
    floating-point option's final state as GCC reports it (``g++ -Q --help=optimizers`` with
    those flags: ``"enabled"``, ``"disabled"`` or a value such as ``"off"``), or ``None`` when
    the compiler is not GCC or does not answer."""
    import re
    import subprocess

    compiler, flags = ti.inductor_cpp_flags()
    float_flags = [f for f in flags if any(o in f for o in _FLOAT_OPTIONS)]
    out = {"compiler": compiler, "flags": float_flags, "effective": None}

    try:
        done = subprocess.run([compiler, "-Q", "--help=optimizers", *[f"-{f}" for f in float_flags]],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return out
    states = {}
    for line in done.stdout.splitlines():
        found = re.match(r"\s+-f([\w-]+)(?:=\[[^\]]*\])?\s+\[?(\w+)\]?\s*$", line)
        if found and any(found[1] == o or found[1] == o.split("=")[0] for o in _FLOAT_OPTIONS):
            states[found[1]] = found[2]
    if done.returncode == 0 and states:
        out["effective"] = states
    return out


def compiled_region_rows(prof, keys: Sequence[str] = ("CompiledFunction", "CompiledFxGraph",
                                                       "cpp_fused", "triton_")) -> list[tuple[str, bool]]:
    """For each CPU-side event of a ``torch.profiler`` run whose name holds one of ``keys``, in
    the order they started: ``(name, inside)``, where ``inside`` says whether it ran within a
    ``Torch-Compiled Region`` event (Dynamo's annotation around each run of a frame it compiled:
    the compiled forward; a ``.backward()`` called after the frame returned runs outside it)."""
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    regions = [e.time_range for e in events if e.name.startswith("Torch-Compiled Region")]
    rows = []
    for event in sorted(events, key=lambda e: e.time_range.start):
        if any(k in event.name for k in keys):
            span = event.time_range
            rows.append((event.name, any(r.start <= span.start and span.end <= r.end for r in regions)))
    return rows
