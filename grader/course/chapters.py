"""Helpers for the chapter notebooks (``notebooks/``): size switch, progress, plots, records.

The chapters import this module (``from grader import chapters as ch``) instead of copying code
into cells. Nothing here grades anything; measuring goes through :mod:`grader.checks.timing`, kernel
counts through :mod:`grader.checks.fusion`, and private torch APIs through :mod:`grader.checks._torch_internals`.

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

from grader.checks import _torch_internals as ti
from grader.checks.fusion import kernel_sources
from grader.checks.targets import device_class
from grader.checks.timing import Estimate, time_per_call
from grader._paths import REPO_ROOT
from grader import _environment as environment
from grader.checks.tables import markdown_table

SIZES = ("full", "small", "ci")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SIZE = os.environ.get(environment.SIZE) or ("full" if DEVICE == "cuda" else "small")
if SIZE not in SIZES:   # a typo in the environment must not stop a chapter's first cell
    import warnings

    warnings.warn(f"COURSE_SIZE={SIZE!r} is not one of {', '.join(SIZES)}: using the default for "
                  f"this device", stacklevel=2)
    SIZE = "full" if DEVICE == "cuda" else "small"
RECORD_ENV = environment.RECORD
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
    variable is set (``make gpu-check`` and the tests set it); otherwise only printed. Every row
    of this process is also kept for :func:`show_claims`. Returns nothing.
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
    return markdown_table(
        ["chapter", "measurement", "measured", "seed's claim", "device", "size", "torch"],
        [[r["chapter"], r["name"], _fmt(r), r.get("claim") or "—", r["device"], r["size"],
          r.get("torch", "")] for r in rows])


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


# ---------------------------------------------------------------------------------------------
# Dynamic shapes and recompiles (chapter 6)

class CompileCounter:
    """A ``torch.compile`` backend that counts the graphs Dynamo hands it and passes each on to
    a real backend (default ``"inductor"``).

    ``graphs`` is the number of compiles; ``inputs`` the shapes of each graph's tensor inputs,
    as Dynamo saw them (a symbol such as ``s77`` is a dynamic size).

    >>> counter = ch.CompileCounter()
    >>> f = torch.compile(fn, backend=counter); f(x); counter.graphs
    """

    def __init__(self, backend: str | Callable = "inductor") -> None:
        self.backend_name = backend if isinstance(backend, str) else getattr(backend, "__name__", "")
        self._inner = ti.lookup_backend(backend) if isinstance(backend, str) else backend
        self.graphs = 0
        self.inputs: list[list[tuple]] = []

    def __call__(self, gm, example_inputs):
        compiled = self._inner(gm, example_inputs)
        # counted only when the backend returns: a backend may raise to make Dynamo restart the
        # analysis (e.g. to specialize a value), and then it is called again for the same compile
        self.graphs += 1
        self.inputs.append(graph_input_shapes(gm, example_inputs))
        return compiled


def graph_input_shapes(gm, example_inputs=()) -> list[tuple]:
    """The shapes of a captured graph's tensor inputs as Dynamo traced them: a dynamic size is
    a symbol (``s77``), a static one a number. Falls back to the example inputs' shapes."""
    shapes = []
    for node in gm.graph.nodes:
        value = node.meta.get("example_value") if node.op == "placeholder" else None
        if isinstance(value, torch.Tensor):
            shapes.append(tuple(int(str(s)) if str(s).isdigit() else str(s) for s in value.shape))
    return shapes or [tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)]


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


# ---------------------------------------------------------------------------------------------
# Training (chapter 7)

def aot_graphs(fn: Callable, *args, partitioner: str = "min_cut") -> dict:
    """AOTAutograd's graphs for ``fn(*args)`` (forward and backward once): ``"joint"``,
    ``"forward"``, ``"backward"`` (``torch.fx.GraphModule``) and ``"saved"``, a list of
    ``(name, shape, dtype, bytes, kind)`` of the values the forward graph saves for the backward
    (``kind``: ``"input"``, ``"view of an input"``, ``"activation"``, ``"view of an
    activation"``), and ``"activation_bytes"``: the memory those activations keep alive beyond
    the parameters and inputs (which exist anyway), each base counted once.
    ``partitioner``: ``"min_cut"`` (Inductor's) or ``"default"``."""
    return ti.aot_graphs(fn, *args, partitioner=partitioner)


def graph_ops(gm) -> list[str]:
    """The operators a ``torch.fx.GraphModule`` calls, in order (``aten.mm.default``, ...)."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def saved_for_backward_bytes(fn: Callable, *args) -> int:
    """Bytes of the tensors autograd saves for the backward pass during ``fn(*args)`` (eager or
    compiled), counted with ``torch.autograd.graph.saved_tensors_hooks``; then runs backward."""
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    (out.sum() if out.dim() else out).backward()
    return total[0]


def peak_memory_bytes(fn: Callable, *args, device: str = DEVICE) -> int | None:
    """Peak device memory allocated during ``fn(*args)`` on CUDA (above what was allocated
    before it); ``None`` on a CPU, where torch keeps no such counter."""
    if not str(device).startswith("cuda"):
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(*args)
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - base)


# ---------------------------------------------------------------------------------------------
# Compile time and debugging (chapter 8)

def run_python(args: Sequence[str], *, env: dict | None = None, timeout: float = 600,
               cwd: str | None = None):
    """Run ``python args...`` with this interpreter in a fresh process that imports this
    checkout's ``grader``; ``env`` adds to the environment. Returns ``(CompletedProcess,
    seconds)`` with text ``stdout`` / ``stderr``."""
    import subprocess

    repo = REPO_ROOT
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = repo + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.pop(environment.RECORD, None)
    full_env.update(env or {})
    start = time.monotonic()
    done = subprocess.run([sys.executable, *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)
    return done, time.monotonic() - start


def compile_in_fresh_process(cache_dir: str | None, *, save: str | None = None,
                             load: str | None = None, env: dict | None = None,
                             size: str | None = None, extras: bool = False,
                             cwd: str | None = None) -> dict:
    """Compile and run a small model in a new Python process (:mod:`grader.course.compile_child`) with
    the Inductor cache in ``cache_dir`` (``TORCHINDUCTOR_CACHE_DIR``: an empty folder is what a
    new machine or a new Colab session starts with; ``None``: this machine's default cache).
    ``load``: a file of ``torch.compiler.save_cache_artifacts`` bytes to load first; ``save``: where to write them after compiling; ``extras``: also compile a
    function with a graph break and a recompile (for a log worth reading); ``cwd``: the child's
    working folder (``TORCH_COMPILE_DEBUG`` writes there). Returns the child's JSON
    report (``first_call_s``, ``torch``, ``saved_bytes``, ...) plus ``process_s``; raises
    ``RuntimeError`` with the child's stderr when it fails."""
    args = ["-m", "grader.course.compile_child", "--size", size or SIZE, "--device", DEVICE]
    if save:
        args += ["--save", save]
    if load:
        args += ["--load", load]
    if extras:
        args.append("--extras")
    cache = {"TORCHINDUCTOR_CACHE_DIR": cache_dir} if cache_dir else {}
    done, seconds = run_python(args, env={**cache, **(env or {})}, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"the child process failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["process_s"] = seconds
    report["stderr"] = done.stderr
    return report


def cold_cache_dir(path: str) -> str | None:
    """``path``, a folder for a cold Inductor cache in a fresh process, except at
    ``COURSE_SIZE=ci``, where ``None`` keeps this machine's warm default cache (like
    :func:`cold_compile`: a cold start in a new folder costs CI many seconds)."""
    return None if SIZE == "ci" else path


def scratch_dir(prefix: str = "course-", keep_hours: float = 6.0) -> str:
    """A new temporary folder for a chapter's logs, caches and reports.

    It is deleted when the Python process exits normally (a Jupyter kernel that is shut down may
    skip that), and folders with the same prefix left by earlier runs are deleted once they are
    ``keep_hours`` old, so that runs do not pile up in the temporary folder."""
    import atexit
    import glob
    import shutil
    import tempfile

    for old in glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*")):
        try:
            if os.path.isdir(old) and time.time() - os.path.getmtime(old) > keep_hours * 3600:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def fresh_copy(fn: Callable) -> Callable:
    """A copy of a function or module whose code Dynamo has never seen (so its compiles, caches
    and decorators start from nothing); see :func:`grader.checks._torch_internals.fresh_copy`."""
    return ti.fresh_copy(fn)


def tlparse_binary() -> str | None:
    """The ``tlparse`` program (``pip install tlparse``): next to this Python, or on ``PATH``.
    On Google Colab, where the course is installed without its instructor extras, it is
    installed from PyPI on first use, as the course itself is (no manual step for learners)."""
    import shutil
    import subprocess

    here = os.path.join(os.path.dirname(sys.executable), "tlparse")
    found = here if os.access(here, os.X_OK) else shutil.which("tlparse")
    if found is None and "google.colab" in sys.modules:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "tlparse"], check=False)
        found = here if os.access(here, os.X_OK) else shutil.which("tlparse")
    return found


def run_tlparse(trace: str, out_dir: str) -> tuple[int, str] | None:
    """Run ``tlparse <log> -o <out_dir> --overwrite --no-browser`` on a ``TORCH_TRACE`` log (a
    file, or the folder ``TORCH_TRACE`` named: its newest log is read). Returns ``(exit status,
    its output)``, or ``None`` when tlparse is not installed."""
    import subprocess

    binary = tlparse_binary()
    if binary is None:
        return None
    if os.path.isdir(trace):
        logs = [os.path.join(trace, f) for f in os.listdir(trace) if f.endswith(".log")]
        if not logs:
            return 1, f"no log file in {trace}"
        trace = max(logs, key=os.path.getmtime)
    done = subprocess.run([binary, trace, "-o", out_dir, "--overwrite", "--no-browser"],
                          capture_output=True, text=True, timeout=300)
    return done.returncode, (done.stdout + done.stderr).strip()


def list_files(folder: str, limit: int = 25) -> list[str]:
    """Up to ``limit`` files under ``folder``, relative to it, sorted, with sizes."""
    found = []
    for root, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(root, f)
            found.append((os.path.relpath(path, folder), os.path.getsize(path)))
    found.sort()
    lines = [f"{name}  ({size:,} bytes)" for name, size in found[:limit]]
    if len(found) > limit:
        lines.append(f"... and {len(found) - limit} more files")
    return lines


def warm_inductor(device: str = DEVICE) -> None:
    """Pay the one-time cost of a process's first Inductor compile (compile workers, the C++ or
    Triton toolchain) on a throwaway function, so that it is not charged to the first real one."""
    ti.warm_inductor(device)


def graphs_compiled() -> int:
    """How many graphs Dynamo has compiled so far in this process (any backend, any mode):
    compare before and after a block to count its compiles."""
    return ti.unique_graphs()


def nonstrict_trace() -> Callable | None:
    """The ``nonstrict_trace`` decorator of this torch (``torch.compiler.nonstrict_trace``, or
    ``torch._dynamo.nonstrict_trace`` in releases that had it only there), or ``None``."""
    return ti.nonstrict_trace_decorator()


# ---------------------------------------------------------------------------------------------
# When compiled code is wrong, crashes or is slow (chapter 9; problem set 7)

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
