"""The judge's checks of a learner's graph on a GPU: in a spawned child with its own memory bound.

On a CPU the judge checks a learner's graph in a child forked from itself or from its zygote
(:mod:`grader.isolation.judge.graph_child`). A CUDA context does not survive a fork (torch refuses
to initialise CUDA again in a forked child of a process that had), so on a GPU the child is
*spawned*: a fresh Python (``python -m grader.isolation.judge.spawned_child``) that is sent one
request, as a child of the zygote is: it calls ``ENTRY(request, blob)`` (the judge's
:func:`grader.isolation.judge.judge_child.training_worker`: the problem's reference side built again
from the instructor's cells, the learner's evidence rebuilt from the data the judge sends), which
returns the work to run under the bound; then it bounds its own memory, runs the work, checks
the bound held, and answers once on its reply pipe.

Its memory bound, on the device the problem runs on:

- ``cuda``: the caching allocator's limit (``torch.cuda.set_per_process_memory_fraction``): what
  the child holds on the device once its reference side is built, plus the problem's allowance,
  as a fraction of the device's memory. Past it an allocation raises torch's out-of-memory error
  (the ``memory`` ending). After the work the child reads its peak (``max_memory_reserved``) and
  answers ``memory`` too when the peak passed the bound (memory the caching allocator did not
  stop); the bound and the peak travel back with every answer (:attr:`Bounded.device_memory`).
  Host memory is not bounded by an address-space limit there (the CUDA driver reserves far more
  address space than it uses): the time limit and the subject-side limits stay.
- ``cpu``: the address-space limit a forked child has (``RLIMIT_AS``: what it holds once set up,
  plus the allowance). The judge forks on a CPU; the spawned child runs on a CPU in the tests,
  where the whole path (the spawn, the request, the reference side rebuilt, the answer) is
  driven end to end.

The endings are :class:`grader.isolation.judge.graph_child.Bounded`'s: ``done``, ``memory``,
``time`` (killed, with its process group, at the time limit), ``failed`` (the grader's own failure).
``--device-memory MODULE:CLASS`` names the class that bounds and reads the device's memory
(:class:`CudaMemory` on a GPU; none on a CPU); the tests name a fake of it, to drive the CUDA
path's protocol and refusals on a CPU.
"""
from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import threading
import time
import traceback

from grader.common.wire import ProtocolError
from grader.isolation.sandbox import channel, confine
from grader.isolation.judge import graph_child
from grader.isolation.judge.graph_child import Bounded

DEFAULT_MEMORY = "grader.isolation.judge.spawned_child:CudaMemory"
# How long past the request's own time limit the judge waits for the child's import of torch
# and its CUDA start (the work's own limit starts when the child has read the request).
START_MARGIN_S = 60.0


def spawns(device: str) -> bool:
    """Whether the judge checks a graph in a spawned child on ``device``: on a GPU."""
    return str(device).startswith("cuda")


def meter_for(device: str) -> str | None:
    """The class (``MODULE:CLASS``) that bounds a spawned child's memory on ``device``: torch's
    CUDA allocator on a GPU; ``None`` (an address-space limit) on a CPU."""
    return DEFAULT_MEMORY if spawns(device) else None


class CudaMemory:
    """The bound and the peak of a CUDA device's memory in this process (torch's caching
    allocator)."""

    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.index = torch.device(device).index or 0

    def total(self) -> int:
        return int(self.torch.cuda.get_device_properties(self.index).total_memory)

    def held(self) -> int:
        """What this process holds on the device now (reserved by the caching allocator)."""
        return int(self.torch.cuda.memory_reserved(self.index))

    def bound(self, limit_bytes: int) -> float:
        """Refuse allocations past ``limit_bytes`` in all; returns the fraction set."""
        fraction = float(min(1.0, max(0.0, limit_bytes / self.total())))
        self.torch.cuda.set_per_process_memory_fraction(fraction, self.index)
        self.torch.cuda.reset_peak_memory_stats(self.index)
        return fraction

    def peak(self) -> int:
        """The most this process held on the device since :meth:`bound`."""
        self.torch.cuda.synchronize(self.index)
        return int(self.torch.cuda.max_memory_reserved(self.index))


def run(entry: str, request: dict, blob: bytes, *, seconds: float, memory_bytes: int,
        device: str, memory: str | None = None) -> Bounded:
    """``request`` (and ``blob``) handled in a spawned child (see the module): ``ENTRY(request,
    blob)`` there returns the work, which runs under a memory bound of what the child then holds
    plus ``memory_bytes``: on the device through ``memory`` (``MODULE:CLASS``, by default
    :func:`meter_for` ``device``), else its address space. Killed after ``seconds`` and
    :data:`START_MARGIN_S` (its start: the import of torch, a CUDA context). How it ended."""
    memory = memory if memory is not None else meter_for(device)
    since = time.time()
    started = time.monotonic()
    read_fd, write_fd = os.pipe()
    env = {k: v for k, v in os.environ.items()
           if any(k == name or (name.endswith("_") and k.startswith(name))
                  for name in graph_child.CHILD_ENV)}
    # The child imports what this process imports (a test's worker included).
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "grader.isolation.judge.spawned_child", "--entry", entry,
             *(["--device-memory", memory] if memory else []), "--reply-fd", str(write_fd)],
            stdin=subprocess.PIPE, pass_fds=(write_fd,), env=env, start_new_session=True)
    except OSError as exc:
        os.close(read_fd)
        return Bounded("failed", why=f"the grader's child process did not start: {exc}")
    finally:
        os.close(write_fd)
    message = channel.encode_message({"seconds": seconds, "memory_bytes": memory_bytes,
                                      "device": device, "request": request}, blob)
    threading.Thread(target=_send, args=(proc, message), daemon=True).start()
    try:
        bounded = _answer(proc, read_fd, started + seconds + START_MARGIN_S, started)
    finally:
        os.close(read_fd)
        graph_child._kill(proc.pid)   # its group: whatever it started
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    if bounded.kind != "done":
        graph_child.remove_broken_kernels(since)
    return bounded


def _send(proc: subprocess.Popen, message: bytes) -> None:
    try:
        proc.stdin.write(message)
        proc.stdin.close()
    except (OSError, ValueError):   # it died first: its ending says why
        pass


def _answer(proc: subprocess.Popen, read_fd: int, deadline: float, started: float) -> Bounded:
    try:
        reply, _ = channel.read_message(read_fd, channel.deadline_reader(deadline))
    except TimeoutError:
        return Bounded("time", why=f"it ran past {deadline - started - START_MARGIN_S:.0f} s",
                       seconds=time.monotonic() - started)
    except (EOFError, OSError, ProtocolError) as exc:
        try:
            status = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            status = None
        if status == graph_child.NO_MEMORY_TO_REPLY:
            return Bounded("memory", why="an allocation failed",
                           seconds=time.monotonic() - started)
        said = "did not end" if status is None else (
            f"was killed by signal {-status}" if status < 0 else f"exited with status {status}")
        return Bounded("failed", why=f"the grader's child process {said} without an answer "
                                     f"({type(exc).__name__})", seconds=time.monotonic() - started)
    took = time.monotonic() - started
    if reply.get("kind") not in graph_child.ENDINGS or not isinstance(reply.get("why", ""), str) \
            or not isinstance(reply.get("device_memory", {}), dict):
        return Bounded("failed", why="the grader's child process answered nonsense", seconds=took)
    return Bounded(reply["kind"], reply.get("value"), reply.get("why", "")[:2000],
                   str(reply.get("traceback", ""))[-8000:], took,
                   dict(reply.get("device_memory") or {}))


# ---------------------------------------------------------------------------------------------
# The child

def _function(name: str):
    import importlib

    module_name, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def child(entry: str, memory: str | None, reply_fd: int) -> int:
    """Read one request from stdin, set up, bound, work, check, answer on ``reply_fd``."""
    try:
        confine.die_with_parent()
    except confine.Unavailable:
        pass
    reply: dict = {}
    code = 0
    try:
        message, blob = channel.read_message(0)
        device = str(message["device"])
        allowance = int(message["memory_bytes"])
        try:   # the grader's own work, before the bound: any failure here is the grader's
            work = _function(entry)(message["request"], blob)
        except BaseException as exc:  # noqa: BLE001
            reply = {"kind": "failed", "why": f"while setting up: {type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()}
        if not reply:
            reply = _bounded_work(work, device, allowance, memory)
    except MemoryError:
        reply = {"kind": "memory", "why": "an allocation failed (MemoryError)"}
    except BaseException as exc:  # noqa: BLE001 (the child answers for every failure)
        reply = {"kind": "failed", "why": f"{type(exc).__name__}: {exc}",
                 "traceback": traceback.format_exc()}
    try:
        channel.write_message(reply_fd, json.loads(json.dumps(reply, default=str)))
    except MemoryError:
        code = graph_child.NO_MEMORY_TO_REPLY
    except (OSError, ValueError):
        code = 70
    return code


def _bounded_work(work, device: str, allowance: int, memory: str | None) -> dict:
    """``work()`` under this process's memory bound (on the device through ``memory``, else its
    address space): the answer as data."""
    on_device = bool(memory)
    told: dict = {}
    try:
        if on_device:
            meter = _function(memory)(device)
            held, total = meter.held(), meter.total()
            fraction = meter.bound(held + allowance)
            told = {"total_bytes": total, "held_before_bytes": held,
                    "bound_bytes": min(held + allowance, total), "fraction": round(fraction, 6)}
        else:
            limit = graph_child.address_space_bytes() + allowance
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        value = work()
        if on_device:
            told["peak_bytes"] = meter.peak()
            if told["peak_bytes"] > told["bound_bytes"]:
                return {"kind": "memory", "device_memory": told,
                        "why": f"it held {told['peak_bytes'] / 2 ** 30:.2f} GiB of {device} "
                               f"memory at its peak, past its bound of "
                               f"{told['bound_bytes'] / 2 ** 30:.2f} GiB"}
        return {"kind": "done", "value": value, "device_memory": told}
    except BaseException as exc:  # noqa: BLE001
        if graph_child.out_of_memory(exc):
            if on_device:
                try:
                    told["peak_bytes"] = meter.peak()
                except Exception:  # noqa: BLE001 (the device may be in no state to say)
                    pass
            first = str(exc).splitlines()[0][:300] if str(exc) else ""
            return {"kind": "memory", "device_memory": told,
                    "why": f"an allocation failed ({type(exc).__name__}: {first})"}
        return {"kind": "failed", "why": f"{type(exc).__name__}: {exc}"[:2000],
                "traceback": traceback.format_exc(), "device_memory": told}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="the judge's spawned child (a GPU's checks)")
    parser.add_argument("--entry", required=True, metavar="MODULE:FUNCTION")
    parser.add_argument("--device-memory", default=None, metavar="MODULE:CLASS",
                        help="what bounds the device's memory (none: the address space)")
    parser.add_argument("--reply-fd", type=int, required=True)
    args = parser.parse_args(argv)
    from grader.checks import _torch_internals

    _torch_internals.keep_precompiled_headers_in_cache_dir()   # before it compiles anything
    return child(args.entry, args.device_memory, args.reply_fd)


if __name__ == "__main__":
    sys.stdout.flush()
    os._exit(main())
