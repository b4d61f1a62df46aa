"""Compile in the training stack (chapter 10): DDP, FSDP2 and random numbers in two processes.

Part of :mod:`grader.course.chapters` (the chapter imports it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules).

A notebook cannot hand a function defined in one of its cells to processes started with
``spawn`` (they import what they run, by module and name), so the code each process runs lives
here: :func:`launch` starts ``world_size`` processes with :func:`torch.multiprocessing.start_processes`,
each joins one process group (``gloo`` on a CPU, ``nccl`` when there is a GPU per process) and
runs the tasks asked for, in order, in the same processes (starting processes and importing
torch costs seconds): :func:`ddp_task`, :func:`fsdp_task`, :func:`seeds_task`. Each process
writes what it measured as JSON; :func:`launch` returns ``{task: [rank 0's dict, rank 1's ...]}``.
The chapter prints a task's source with :func:`show_source` so the code is read where it runs.

Private torch APIs (``torch._dynamo.config``) are reached through
:mod:`grader.checks._torch_internals` only.

Why one module: the processes import the tasks by this module's name, and each task
reads the model, the bucket rule and the launch's conventions defined beside it; the few helpers
of the chapter's own process (generated code, the selective-checkpoint policy) are its other
sections.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import shutil
import statistics
import tempfile
import time
import traceback
from typing import Callable

import torch

from grader.checks import _torch_internals as ti
from grader.course.chapters.dynamic import CompileCounter

WORLD_SIZE = 2
DDP_MODES = ("no_optimization", "ddp_optimizer", "python_reducer")
"""The values of ``torch._dynamo.config.optimize_ddp`` the DDP task compiles with (``True`` is
``"ddp_optimizer"``, ``False`` is ``"no_optimization"``; ``"python_reducer"`` needs compiled
autograd)."""


class Block(torch.nn.Module):
    """A transformer-style MLP block: layer norm, ``d -> 4d -> d`` with GELU, a residual."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Net(torch.nn.Module):
    """``layers`` blocks in a row, then a linear head to one output; with ``checkpoint``, each
    block runs under ``torch.utils.checkpoint.checkpoint(use_reentrant=False)`` (its
    activations are recomputed in the backward instead of saved), and ``context_fn`` (a
    selective-checkpoint policy) is passed on to it."""

    def __init__(self, d: int, layers: int, *, checkpoint: bool = False,
                 context_fn: Callable | None = None) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(layers))
        self.head = torch.nn.Linear(d, 1)
        self.checkpoint, self.context_fn = checkpoint, context_fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            if self.checkpoint:
                extra = {"context_fn": self.context_fn} if self.context_fn else {}
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False, **extra)
            else:
                x = block(x)
        return self.head(x)


def make_net(d: int, layers: int, *, seed: int = 0, device: str = "cpu", **options) -> Net:
    """A :class:`Net` with weights drawn after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    return Net(d, layers, **options).to(device)


def ddp_optimizer_pieces(d: int, layers: int, bucket_cap_mb: float) -> list[int]:
    """The parameter bytes of each piece DDPOptimizer cuts a :class:`Net` into, from the output
    back, by its rule (``DDPOptimizer.compile_fn`` in ``torch/_dynamo/backends/distributed.py``,
    the same in 2.8 and 2.14): it walks the graph from the output back (the order in which the
    gradients become ready) adding each layer's parameter bytes to a bucket, and starts a new
    bucket at the next layer once the bucket holds the cap. Dynamo hands it only DDP's
    ``bucket_bytes_cap`` (``torch/_dynamo/convert_frame.py``), so its first cap is always its
    default, 1 MiB (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``), whatever
    ``bucket_cap_mb`` DDP was given; the later ones are ``bucket_cap_mb``."""
    cap, first = int(bucket_cap_mb * 2 ** 20), 2 ** 20
    linear_in, linear_out, norm = 4 * (d * 4 * d + 4 * d), 4 * (4 * d * d + d), 4 * 2 * d
    sizes = [4 * (d + 1)] + [linear_out, linear_in, norm] * layers   # the head's gradient is ready first
    pieces = [0]
    for size in sizes:
        if pieces[-1] >= (first if len(pieces) == 1 else cap):
            pieces.append(0)
        pieces[-1] += size
    return pieces


def expected_ddp_buckets(d: int, layers: int, bucket_cap_mb: float) -> int:
    """How many pieces DDPOptimizer cuts a :class:`Net` into (:func:`ddp_optimizer_pieces`)."""
    return len(ddp_optimizer_pieces(d, layers, bucket_cap_mb))


# ---------------------------------------------------------------------------------------------
# Launching


def process_backend() -> str:
    """``"nccl"`` when this machine has a GPU for each of the :data:`WORLD_SIZE` processes,
    else ``"gloo"`` (the processes then run on the CPU, even where one GPU is present)."""
    usable = torch.cuda.is_available() and torch.cuda.device_count() >= WORLD_SIZE
    return "nccl" if usable and torch.distributed.is_nccl_available() else "gloo"


def launch(tasks: list[str], options: dict | None = None, *, world_size: int = WORLD_SIZE,
           backend: str | None = None, timeout: float = 900) -> dict:
    """Run ``tasks`` (names of this module's ``*_task`` functions) in ``world_size`` fresh
    processes joined in one process group, and return ``{task: [result of rank 0, rank 1, ...]}``.

    ``options[task]`` is passed to the task as keyword arguments. ``backend``: default
    :func:`process_backend`. Raises ``RuntimeError`` with the failing process's traceback when a
    task fails, and ``TimeoutError`` (after stopping the processes) past ``timeout`` seconds."""
    backend = backend or process_backend()
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown tasks {unknown}; known: {sorted(TASKS)}")
    folder = tempfile.mkdtemp(prefix="course-ch10-")
    context = torch.multiprocessing.start_processes(
        _worker, args=(world_size, backend, list(tasks), options or {}, folder),
        nprocs=world_size, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    results = {}
    try:   # the files go whatever happens: a failed or timed-out run leaves nothing behind
        try:
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for process in context.processes:
                        if process.is_alive():
                            process.kill()
                    raise TimeoutError(f"the {world_size} processes ran past {timeout:.0f} s")
        except torch.multiprocessing.ProcessRaisedException as exc:
            raise RuntimeError(f"a process failed:\n{exc}") from None
        for task in tasks:
            results[task] = []
            for rank in range(world_size):
                with open(os.path.join(folder, f"{task}-{rank}.json")) as fh:
                    results[task].append(json.load(fh))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for path in context.error_files:   # where a failing process wrote its traceback
            if path and os.path.exists(path):
                os.remove(path)
    return results


def _worker(rank: int, world_size: int, backend: str, tasks: list[str],
            options: dict, folder: str) -> None:
    """One process: join the group, run each task, write its result as JSON."""
    import torch.distributed as dist

    # The processes share the machine's cores: a share of the threads each, and one compile worker
    # (Inductor would otherwise start a pool of compile processes in each process).
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world_size))
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    # The processes meet through a file (a FileStore), not a TCP port chosen beforehand, which
    # another program may take before rank 0 listens on it. (A clean-clone test run, beside the
    # other half of the suite, once lost rank 0 to SIGABRT, "terminate called without an active
    # exception"; whether a taken port caused it is not known.)
    dist.init_process_group(backend, init_method=f"file://{os.path.join(folder, 'rendezvous')}",
                            rank=rank, world_size=world_size)
    try:
        with ti.inductor_config_patch(compile_threads=1), ti.quiet_torch_logs():
            for task in tasks:
                start = time.monotonic()
                result = TASKS[task](rank=rank, world_size=world_size, device=device,
                                     **options.get(task, {}))
                result.update(seconds=time.monotonic() - start, backend=backend, device=device)
                with open(os.path.join(folder, f"{task}-{rank}.json"), "w") as fh:
                    json.dump(result, fh)
    finally:
        dist.destroy_process_group()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _timed_steps(step: Callable[[], torch.Tensor], steps: int, device: str) -> list[float]:
    """Seconds of each of ``steps`` calls of ``step`` (all processes start each step together)."""
    import torch.distributed as dist

    times = []
    for _ in range(steps):
        dist.barrier()
        _sync(device)
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times


def _same_on_every_rank(value: torch.Tensor) -> bool:
    """Is ``value`` bitwise the same in every process?"""
    import torch.distributed as dist

    gathered = [torch.empty_like(value) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, value.contiguous())
    return all(torch.equal(g, gathered[0]) for g in gathered)


# ---------------------------------------------------------------------------------------------
# Tasks: each runs in every process and returns a JSON-able dict


def _pay_one_time_costs(device: str) -> None:
    """What only a process's first compiles pay (imports, the C++ toolchain, the first traces of
    Dynamo inside DDP, of AOTAutograd and of compiled autograd), paid here on a tiny model wrapped
    in DDP, in a throwaway cache, so that no mode of :func:`ddp_task` is charged for it."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    x = torch.randn(2, 8, device=device)
    with ti.fresh_inductor_cache():
        for mode in ("no_optimization", "ddp_optimizer"):
            ti.dynamo_reset()
            with ti.dynamo_config_patch(optimize_ddp=mode):
                tiny = DDP(make_net(8, 1, device=device))
                torch.compile(tiny)(x).sum().backward()
        ti.dynamo_reset()
        tiny = make_net(8, 1, device=device)
        with ti.compiled_autograd_enabled(torch.compile(backend="eager")):
            torch.compile(tiny, backend="eager")(x).sum().backward()
    ti.dynamo_reset()


def ddp_task(*, rank: int, world_size: int, device: str, d: int = 256, layers: int = 2,
             batch: int = 32, bucket_cap_mb: float = 2.0, steps: int = 5,
             modes: tuple = DDP_MODES, fresh_cache: bool = True) -> dict:
    """DDP on :class:`Net`, eagerly and compiled with each ``optimize_ddp`` mode in ``modes``.

    Per mode: the graphs the backend compiled (a counting backend in front of Inductor), the
    first step's seconds (compiles included), the steady steps' seconds (median), and the
    largest difference of the loss and of the gradients from eager DDP's after the first step.
    Each process feeds its own batch (seeded by rank), as data parallelism does.

    With ``fresh_cache`` the first steps are compared on equal terms: one throwaway compile first
    pays what only the process's first compile pays (imports, the C++ toolchain), and each mode
    compiles into an empty Inductor cache (otherwise a later mode finds the kernels of an earlier
    one on disk). Without it (``COURSE_SIZE=ci``) the first steps compare nothing, and the
    throwaway compile, cold by design, is not paid either. Also: eager DDP's buckets (first
    iteration, rebuilt), DDPOptimizer's log lines at the debug level
    (``TORCH_LOGS="+distributed"``), and the graphs of
    ``"python_reducer_without_compiled_forward"`` and ``"no_optimization"`` counted with the
    ``eager`` backend (a trace, no compile)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(100 + rank)                           # each process its own data
    x = torch.randn(batch, d, device=device)

    def train_step(model, opt, context=contextlib.nullcontext):
        def step():
            with context():
                opt.zero_grad()             # first, so the step's gradients can be read after it
                loss = model(x).pow(2).mean()
                loss.backward()
                opt.step()
            return loss.detach()
        return step

    def first_gradients(model, step):
        loss = step()
        return loss, [p.grad.detach().clone() for p in model.parameters()]

    def grad_diff(grads, want):
        return max(float((g - w).abs().max()) for g, w in zip(grads, want))

    out: dict = {"modes": {}, "expected_buckets": expected_ddp_buckets(d, layers, bucket_cap_mb),
                 "ddp_optimizer_pieces": ddp_optimizer_pieces(d, layers, bucket_cap_mb),
                 "parameter_bytes": sum(p.numel() * 4 for p in make_net(d, layers).parameters()),
                 "fresh_cache": fresh_cache}
    # eager DDP: the reference for the gradients (SGD with lr=0 leaves the weights as they are,
    # so the first step's gradients can be read after opt.step())
    eager = DDP(make_net(d, layers, seed=rank, device=device), bucket_cap_mb=bucket_cap_mb)
    # DDP broadcast rank 0's weights at construction: every process now has the same model
    out["weights_same_on_every_rank_after_ddp"] = _same_on_every_rank(
        torch.cat([p.detach().flatten() for p in eager.parameters()]))
    eager_step = train_step(eager, torch.optim.SGD(eager.parameters(), lr=0.0))
    want_loss, want_grads = first_gradients(eager, eager_step)
    eager_times = _timed_steps(eager_step, steps, device)
    out["eager"] = {"step_s": statistics.median(eager_times)}
    # DDP's own buckets: one for every gradient in the first iteration (find_unused_parameters
    # is False), rebuilt at the second forward in the order the gradients became ready
    out["ddp_buckets"] = ti.ddp_bucket_sizes(eager)
    out["gradients_same_on_every_rank"] = _same_on_every_rank(torch.cat([g.flatten() for g in want_grads]))

    if fresh_cache:
        _pay_one_time_costs(device)     # charged to no mode
    for mode in modes:
        ti.dynamo_reset()
        counter = CompileCounter("inductor")
        # python_reducer's DDP switches on Inductor's fusion of its all-reduces for the whole
        # process: the patch puts the settings back when the mode is done
        restore = {name: ti.inductor_setting(name)
                   for name in ("_fuse_ddp_communication", "_fuse_ddp_bucket_size")
                   if ti.inductor_setting(name) is not None}
        cache = ti.fresh_inductor_cache() if fresh_cache else contextlib.nullcontext()
        with ti.dynamo_config_patch(optimize_ddp=mode), ti.inductor_config_patch(**restore), cache:
            model = DDP(make_net(d, layers, seed=0, device=device), bucket_cap_mb=bucket_cap_mb)
            opt = torch.optim.SGD(model.parameters(), lr=0.0)
            context = contextlib.nullcontext
            if mode == "python_reducer":
                # compiled autograd captures loss.backward() whole, the all-reduces included,
                # and hands the graph to the same counting backend
                context = functools.partial(ti.compiled_autograd_enabled,
                                            torch.compile(backend=counter))
            step = train_step(torch.compile(model, backend=counter), opt, context)
            with ti.capture_log_messages(ti.DDP_OPTIMIZER_LOGGER) as log_lines:
                start = time.perf_counter()
                loss, grads = first_gradients(model, step)
                first_s = time.perf_counter() - start
            graphs_after_first = counter.graphs
            times = _timed_steps(step, steps, device)
        out["modes"][mode] = {
            "graphs": graphs_after_first, "graphs_after_steps": counter.graphs,
            "first_step_s": first_s, "step_s": statistics.median(times),
            "loss_diff": float((loss - want_loss).abs()), "grad_diff": grad_diff(grads, want_grads),
            "grad_scale": max(float(w.abs().max()) for w in want_grads),
            # its summary lines; its "run_node ..." lines (one per node) are left out
            "log": [line.strip() for line in log_lines
                    if line.strip() and not line.startswith("run_node")][:5]}

    # The fourth value optimize_ddp accepts: traced with the eager backend (no compile), beside
    # no_optimization
    out["traced_only"] = {}
    for mode in ("no_optimization", "python_reducer_without_compiled_forward"):
        ti.dynamo_reset()
        counter = CompileCounter("eager")
        with ti.dynamo_config_patch(optimize_ddp=mode):
            model = DDP(make_net(d, layers, seed=0, device=device), bucket_cap_mb=bucket_cap_mb)
            step = train_step(torch.compile(model, backend=counter),
                              torch.optim.SGD(model.parameters(), lr=0.0))
            _, grads = first_gradients(model, step)
        out["traced_only"][mode] = {"graphs": counter.graphs, "grad_diff": grad_diff(grads, want_grads)}
    ti.dynamo_reset()
    return out


def fsdp_task(*, rank: int, world_size: int, device: str, d: int = 256, layers: int = 2,
              batch: int = 32, steps: int = 5) -> dict:
    """FSDP2 (``fully_shard`` on each block, then on the whole model) on :class:`Net`, eagerly
    and with each block compiled (``block.compile()``, a counting backend in front of Inductor).

    Returns the parameter bytes this process holds (its shards) against the whole model's, the
    type of the parameters registered on the blocks and on the root between a forward and its
    backward (``DTensor``: sharded again; ``Parameter``: whole), the graphs compiled, the first
    and the steady steps' seconds, and the largest difference of the loss and of the gradients
    (gathered whole) from eager FSDP2's."""
    fully_shard = fully_shard_function()
    torch.manual_seed(100 + rank)
    x = torch.randn(batch, d, device=device)

    def sharded(compile_blocks: CompileCounter | None):
        model = make_net(d, layers, seed=0, device=device)
        for block in model.blocks:
            fully_shard(block)
            if compile_blocks is not None:
                block.compile(backend=compile_blocks)      # the block's call, hooks outside the graph
        fully_shard(model)
        return model

    def train_step(model, opt):
        def step():
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            return loss.detach()
        return step

    def whole_gradients(model):
        return [p.grad.full_tensor() for p in model.parameters()]

    out: dict = {"where": f"{fully_shard.__module__}.fully_shard"}
    eager = sharded(None)
    full_bytes = sum(p.numel() * p.element_size() for p in eager.parameters())      # DTensor: global size
    local_bytes = sum(p.to_local().numel() * p.element_size() for p in eager.parameters())
    out.update(parameter_bytes=full_bytes, local_parameter_bytes=local_bytes,
               parameter_type=type(next(eager.parameters())).__name__)
    eager_step = train_step(eager, torch.optim.SGD(eager.parameters(), lr=0.0))
    want_loss = eager_step()
    want_grads = whole_gradients(eager)
    # Between a forward and its backward: which parameters are sharded again (a DTensor is
    # registered) and which stay whole (the unsharded tensor is): the blocks reshard after their
    # forward; the root (fully_shard(model), here the head's parameters) does not, by default
    loss = eager(x).pow(2).mean()
    out["registered_after_forward"] = {
        "blocks": sorted({type(p).__name__ for p in eager.blocks.parameters()}),
        "root": sorted({type(p).__name__ for p in eager.head.parameters()})}
    loss.backward()
    out["eager"] = {"step_s": statistics.median(_timed_steps(eager_step, steps, device))}

    ti.dynamo_reset()
    counter = CompileCounter("inductor")
    model = sharded(counter)
    step = train_step(model, torch.optim.SGD(model.parameters(), lr=0.0))
    start = time.perf_counter()
    loss = step()
    first_s = time.perf_counter() - start
    grads = whole_gradients(model)
    graphs_after_first = counter.graphs
    times = _timed_steps(step, steps, device)
    out["compiled"] = {
        "graphs": graphs_after_first, "graphs_after_steps": counter.graphs, "first_step_s": first_s,
        "step_s": statistics.median(times), "loss_diff": float((loss - want_loss).abs()),
        "grad_diff": max(float((g - w).abs().max()) for g, w in zip(grads, want_grads)),
        "grad_scale": max(float(w.abs().max()) for w in want_grads)}
    ti.dynamo_reset()
    return out


def seeds_task(*, rank: int, world_size: int, device: str, n: int = 4096) -> dict:
    """Dropout masks in each process: eager and compiled (Inductor), after the same
    ``torch.manual_seed(0)`` in every process and after ``torch.manual_seed(rank)``.

    Returns, for each way, the share of the mask that differs from rank 0's, and the share of
    this process's compiled mask that differs from its eager one (same seed)."""
    import torch.distributed as dist

    ones = torch.ones(n, device=device)

    def dropped(t):
        return torch.nn.functional.dropout(t, p=0.5, training=True)

    compiled = ti.compile_fresh(dropped)
    masks = {}
    for name, fn, seed in (("eager, same seed", dropped, 0), ("compiled, same seed", compiled, 0),
                           ("eager, seed + rank", dropped, rank),
                           ("compiled, seed + rank", compiled, rank)):
        torch.manual_seed(seed)
        masks[name] = (fn(ones) != 0).to(torch.uint8)
    out = {"differs_from_rank0": {}}
    for name, mask in masks.items():
        gathered = [torch.empty_like(mask) for _ in range(world_size)]
        dist.all_gather(gathered, mask)
        out["differs_from_rank0"][name] = float((mask != gathered[0]).float().mean())
    out["compiled_vs_eager_same_seed"] = float(
        (masks["compiled, same seed"] != masks["eager, same seed"]).float().mean())
    torch.manual_seed(0)
    again = (compiled(ones) != 0).to(torch.uint8)
    out["compiled_again_same_seed_equal"] = bool(torch.equal(again, masks["compiled, same seed"]))
    ti.dynamo_reset()
    return out


TASKS: dict[str, Callable[..., dict]] = {"ddp": ddp_task, "fsdp": fsdp_task, "seeds": seeds_task}


def fully_shard_function() -> Callable:
    """FSDP2's ``fully_shard``: ``torch.distributed.fsdp.fully_shard`` (torch 2.6 and later);
    torch 2.4 and 2.5 had it in ``torch.distributed._composable.fsdp``."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard
    return fully_shard


def dynamo_setting(name: str):
    """The current value of a Dynamo setting (``"optimize_ddp"``, ``"skip_fsdp_hooks"`` ...), or
    ``None`` where this torch has no such setting."""
    return ti.dynamo_setting(name)


def generated_code(fn: Callable, *args) -> str:
    """The code Inductor writes for ``fn(*args)``, compiled afresh (a copy of ``fn`` Dynamo has
    not seen): every generated module, joined."""
    _, code = ti.run_and_get_code(ti.compile_fresh(fn), *args)
    return "\n".join(code)


def selective_checkpoint_saving(ops: tuple) -> Callable:
    """A ``context_fn`` for ``torch.utils.checkpoint.checkpoint``: selective activation
    checkpointing that saves the outputs of ``ops`` (e.g. the matrix products) and recomputes
    everything else in the backward (``create_selective_checkpoint_contexts``)."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy)


def show_source(fn: Callable) -> None:
    """Print the source of ``fn`` (a task the chapter launches in other processes)."""
    print(inspect.getsource(fn))


__all__ = ["WORLD_SIZE", "DDP_MODES", "Block", "Net", "make_net",
           "expected_ddp_buckets", "ddp_optimizer_pieces", "process_backend", "launch", "ddp_task", "fsdp_task",
           "seeds_task", "fully_shard_function", "dynamo_setting", "generated_code",
           "selective_checkpoint_saving", "show_source"]
