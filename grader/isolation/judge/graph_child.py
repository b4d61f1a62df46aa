"""The judge's own work on a learner's graph, in a child of the judge with limits of its own.

The judge (:mod:`grader.isolation.judge.steps`) never runs learner Python, but it does compile and
run the learner's graph (rebuilt from data it checked): a graph can be made to cost far more than
its problem needs. So the checks of one problem's graph run in a child forked from the judge
after its references are built (:func:`run_bounded`): the child inherits the built baseline and
reference (nothing is rebuilt, nothing of the learner's is imported), keeps only the environment
a compile needs, lowers its own address-space limit (``RLIMIT_AS``: lowering needs no privilege,
as root or as any user) to what it holds now plus the problem's allowance, compiles with one
compile worker (no pool of compile processes to start or leave behind), computes, and sends the
outcomes back as JSON on a pipe. The judge validates them; it kills the child at the time limit.

What the judge makes of each ending (:class:`Bounded`):

- ``done``: the child's outcomes (validated by the caller);
- ``memory``: the child ran out of its address space (an allocation failed): the graph needed
  more memory than its problem allows, the learner's 0 with the reason;
- ``time``: no answer within the time limit: the child is killed, the learner's 0 with the reason;
- ``failed``: the child raised in the grader's own code, died of a signal without saying it ran
  out of memory, or answered nonsense: a grader error, held for a person.

Where each problem's checks run (docs/trust.md):

- an inference problem on a CPU: in a child forked from the judge (:func:`run_bounded`), which
  inherits the judge's built reference side;
- a training problem (ps5, ps8) on a CPU: a child forked from the judge could not run backward
  (autograd's worker threads do not survive a fork: once a compiled training step ran backward
  in a process, a backward in its forked child raises "Unable to handle autograd's threading in
  combination with fork-based multiprocessing"; the judge ran such steps building its reference
  side). So the judge
  starts a :class:`Zygote` the first time it needs one: a fresh Python that imports the grader,
  torch and the compiler and never runs autograd itself. For each training problem's decision
  the zygote forks a child (:func:`run_bounded` again, the same limits and endings) that builds
  the problem's reference side itself (the judge's own trusted code, the instructor's cells;
  Inductor's on-disk caches, warm from the judge's build, make it a few seconds), rebuilds the
  learner's evidence from the data the judge sends (what the subject sent, already checked by
  the judge: graphs as their headers and blobs, the seed of the input classes, the custom
  operator's registration data), and only then lowers its memory limit and runs the checks;
- on a GPU (:func:`can_fork` is false: a CUDA context does not survive a fork either): in a
  child spawned for each decision (:mod:`grader.isolation.judge.spawned_child`), a fresh Python that
  builds the reference side again and rebuilds the evidence as a child of the zygote does, with
  a bound on its CUDA memory instead of an address-space limit.

Why one module: the zygote's child is the judge's forked child once more — the
zygote runs :func:`run_bounded` for each request and sends back its :class:`Bounded` ending as
is — so the limits, the endings and the two ways of forking stay in one place. Each child's
gate (it times only once the judge has waited for the next subject) is
:mod:`grader.isolation.judge.timing_gate`.
"""
from __future__ import annotations

import dataclasses
import json
import os
import resource
import signal
import threading
import time
import traceback

from grader.checks import _torch_internals as ti
from grader.common.wire import ProtocolError
from grader.isolation.judge import timing_gate
from grader.isolation.sandbox import channel, confine

# The variables the child keeps (a name, or a prefix ending in "_"): the compiler, its caches,
# the locale. Everything else of the judge's environment is dropped before the graph is compiled.
CHILD_ENV = ("PATH", "HOME", "TMPDIR", "USER", "LANG", "LC_", "TZ", "LD_LIBRARY_PATH", "CC",
             "CXX", "PYTHONPATH", "PYTHONHASHSEED", "TORCHINDUCTOR_", "TORCH_", "OMP_", "MKL_")
# What an allocation that failed says (torch's CPU allocator, Python, the C library).
OUT_OF_MEMORY = ("can't allocate memory", "cannot allocate memory", "not enough memory",
                 "out of memory", "std::bad_alloc")
# The exit status of a child that ran out of memory and could not even say so on the pipe.
NO_MEMORY_TO_REPLY = 75


@dataclasses.dataclass
class Bounded:
    """How the child ended: ``kind`` is 'done', 'memory', 'time' or 'failed'; ``value`` the
    child's answer ('done'), ``why`` the reason in words, ``traceback`` the grader's own failure
    (for the instructor), ``seconds`` the child's wall time; ``device_memory``, from a spawned
    child on a GPU (:mod:`grader.isolation.judge.spawned_child`), its bound and peak in bytes."""

    kind: str
    value: object = None
    why: str = ""
    traceback: str = ""
    seconds: float = 0.0
    device_memory: dict = dataclasses.field(default_factory=dict)


def can_fork(device: str) -> bool:
    """Whether the checks can run in a forked child here: on a CPU, from the main thread (a
    fork copies only the calling thread; the judge process has no other of its own)."""
    return device == "cpu" and threading.current_thread() is threading.main_thread() \
        and hasattr(os, "fork")


def address_space_bytes() -> int:
    """This process's virtual memory size now (``VmSize``): what a fork starts with."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmSize in /proc/self/status")


def run_bounded(work=None, *, seconds: float, memory_bytes: int, setup=None,
                meanwhile=None) -> Bounded:
    """``work()`` (returning JSON-able data) in a forked child whose address space may grow by
    ``memory_bytes`` at most, killed after ``seconds``; how it ended. ``setup()``, where given,
    runs first in the child, before its memory limit is set (the grader's own trusted work, such
    as building a reference side), and returns the ``work`` to run under it; ``seconds`` covers
    both. ``meanwhile()``, where given, runs in this process once the child has started and
    returns the seconds the child spent waiting for it (at a
    :class:`grader.isolation.judge.timing_gate.Gate`), which ``seconds`` does not count.
    A child that did not finish may have left a kernel half-written in Inductor's shared cache
    (its compiler killed, or out of memory, mid-link): such files are removed
    (:func:`remove_broken_kernels`), or every later compile of that kernel would fail."""
    since = time.time()
    bounded = _run_bounded(work, seconds, memory_bytes, setup, meanwhile)
    if bounded.kind != "done":
        remove_broken_kernels(since)
    return bounded


def remove_broken_kernels(since: float, folder: str | None = None) -> list[str]:
    """Remove the compiled kernels (``.so``) written to Inductor's cache (``folder``) at or after
    ``since`` (a ``time.time()``) that are not whole shared libraries (empty, or no ELF header):
    Inductor loads a cached kernel by its name and never checks it ("file too short"). Returns
    the paths removed."""
    folder = folder or ti.inductor_cache_dir()
    removed = []
    for root, _, names in os.walk(folder):
        for name in names:
            if not name.endswith(".so"):
                continue
            path = os.path.join(root, name)
            try:
                if os.stat(path).st_mtime < since - 1.0:
                    continue
                with open(path, "rb") as fh:
                    whole = fh.read(4) == b"\x7fELF"
                if not whole:
                    os.unlink(path)
                    removed.append(path)
            except OSError:
                continue
    return removed


def _run_bounded(work, seconds: float, memory_bytes: int, setup, meanwhile) -> Bounded:
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:   # the child: never returns
        os.close(read_fd)
        _child(work, write_fd, memory_bytes, setup)
    os.close(write_fd)
    try:
        os.setpgid(pid, pid)   # its own group (the child sets it too): killed with whatever it started
    except OSError:
        pass
    deadline = started + seconds
    if meanwhile is not None:
        try:    # the parent's own work: its failure is not the child's
            deadline += max(0.0, float(meanwhile()))
        except BaseException:
            _wait(pid)
            os.close(read_fd)
            raise
    try:
        header, _ = channel.read_message(read_fd, channel.deadline_reader(deadline))
    except TimeoutError:
        _wait(pid)
        return Bounded("time", why=f"it ran past {seconds:.0f} s",
                       seconds=time.monotonic() - started)
    except (EOFError, OSError, ProtocolError) as exc:
        status = _wait(pid, grace_s=5.0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == NO_MEMORY_TO_REPLY:
            return Bounded("memory", why="an allocation failed",
                           seconds=time.monotonic() - started)
        return Bounded("failed", why=f"the grader's child process {_status(status)} without an "
                                     f"answer ({type(exc).__name__})",
                       seconds=time.monotonic() - started)
    finally:
        os.close(read_fd)
    _wait(pid)
    took = time.monotonic() - started
    if "value" in header:
        return Bounded("done", header["value"], seconds=took)
    if isinstance(header.get("memory"), str):
        return Bounded("memory", why=header["memory"][:300], seconds=took)
    return Bounded("failed", why=str(header.get("error", "an answer of no known kind"))[:300],
                   traceback=str(header.get("traceback", ""))[-8000:], seconds=took)


def _child(work, write_fd: int, memory_bytes: int, setup=None) -> None:
    code = 0
    try:
        os.setpgid(0, 0)
        try:
            confine.die_with_parent()
        except confine.Unavailable:
            pass
        for name in list(os.environ):
            if not any(name == k or (k.endswith("_") and name.startswith(k)) for k in CHILD_ENV):
                del os.environ[name]
        reply = None
        if setup is not None:
            try:   # the grader's own work, before the limit: any failure here is the grader's
                work = setup()
            except BaseException as exc:  # noqa: BLE001
                reply = {"error": f"while setting up: {type(exc).__name__}: {exc}"[:2000],
                         "traceback": traceback.format_exc()}
        try:
            if reply is None:
                limit = address_space_bytes() + memory_bytes
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                reply = {"value": work()}
        except MemoryError:
            reply = {"memory": "an allocation failed (MemoryError)"}
        except BaseException as exc:  # noqa: BLE001 (the child answers for every failure)
            if out_of_memory(exc):
                reply = {"memory": f"an allocation failed ({type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0][:200] if str(exc) else ''})"}
            else:
                reply = {"error": f"{type(exc).__name__}: {exc}"[:2000],
                         "traceback": traceback.format_exc()}
        try:
            channel.write_message(write_fd, json.loads(json.dumps(reply, default=str)))
        except MemoryError:
            code = NO_MEMORY_TO_REPLY
    except MemoryError:
        code = NO_MEMORY_TO_REPLY
    except BaseException:  # noqa: BLE001
        code = 70
    finally:
        os._exit(code)


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says an allocation failed."""
    text = str(exc).lower()
    return isinstance(exc, MemoryError) or any(s.lower() in text for s in OUT_OF_MEMORY)


def _kill(pid: int) -> None:
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            kill()
        except OSError:
            pass


def _wait(pid: int, grace_s: float = 0.0) -> int:
    """The child's exit status: after ``grace_s`` for it to end by itself (so that its own end
    is told apart from ours), then killed."""
    end = time.monotonic() + grace_s
    try:
        while time.monotonic() < end:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                _kill(pid)   # whatever it started, in its group
                return status
            time.sleep(0.02)
        _kill(pid)
        return os.waitpid(pid, 0)[1]
    except ChildProcessError:
        return 0


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"


# ---------------------------------------------------------------------------------------------
# The zygote: a fresh Python that forks the children a process which ran backward cannot

# How long past a request's own time limit the judge waits for the zygote's answer (the zygote
# kills its child at the limit itself; past this, the zygote is the one that failed).
ZYGOTE_MARGIN_S = 30.0
ENDINGS = ("done", "memory", "time", "failed")


class Zygote:
    """A fresh Python (``python -m grader.isolation.judge.graph_child --zygote ENTRY``) that imports
    the grader and torch once, never runs autograd or touches a GPU itself, and for each request
    forks a child (:func:`run_bounded`): the child calls ``ENTRY(request, blob)`` (a
    ``module:function`` of the grader's own) before its memory limit is set, which returns the
    work to run under the limits. ``preload`` (a ``module:function``) runs once in the zygote
    first: imports every child would otherwise pay for. The judge starts one the first time it
    needs it and reuses it for every later request; a zygote that died or did not answer is
    started again."""

    def __init__(self, entry: str, preload: str | None = None):
        self.entry = entry
        self.preload = preload
        self.proc = None
        self.reply_fd = None
        self.gate_fd = None     # where the judge sends each request's token: its gate opens
        self.sent = 0

    def start(self) -> None:
        """Start the zygote now, if it is not running (its imports then overlap other work)."""
        import subprocess
        import sys

        if self.proc is not None and self.proc.poll() is None:
            return
        self.close()
        env = dict(os.environ)
        # The zygote imports what this process imports (a test's problem set included).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        read_fd, write_fd = os.pipe()
        gate_r, gate_w = os.pipe2(os.O_CLOEXEC)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grader.isolation.judge.graph_child", "--zygote", self.entry,
                 *(["--preload", self.preload] if self.preload else []),
                 "--reply-fd", str(write_fd), "--gate-fd", str(gate_r)], stdin=subprocess.PIPE,
                pass_fds=(write_fd, gate_r), env=env, start_new_session=True)
        except BaseException:
            os.close(read_fd)
            os.close(gate_w)
            raise
        finally:
            os.close(write_fd)
            os.close(gate_r)
        self.reply_fd, self.gate_fd = read_fd, gate_w

    def run(self, request: dict, blob: bytes, *, seconds: float, memory_bytes: int,
            meanwhile=None) -> Bounded:
        """``request`` (and ``blob``) handled in a child of the zygote with ``seconds`` and
        ``memory_bytes`` as :func:`run_bounded` gives them; how it ended. ``meanwhile()``, where
        given, runs here once the request is sent, and the child waits for it at its gate
        (:func:`grader.isolation.judge.timing_gate.zygote_gate`), which the zygote opens when
        this process sends the request's token; the time it waited is not counted in
        ``seconds``."""
        started = time.monotonic()
        self.start()
        self.sent += 1
        token = self.sent if meanwhile is not None else None
        try:
            self.proc.stdin.write(channel.encode_message(
                {"seconds": seconds, "memory_bytes": memory_bytes, "request": request,
                 "gate": token}, blob))
            self.proc.stdin.flush()
            if meanwhile is not None:
                try:
                    meanwhile()
                finally:
                    timing_gate.send_token(self.gate_fd, token)
            reply, _ = channel.read_message(self.reply_fd, channel.deadline_reader(
                time.monotonic() + seconds + ZYGOTE_MARGIN_S))
        except (TimeoutError, EOFError, OSError, ProtocolError, ValueError) as exc:
            # (ValueError: a request that is not strict JSON, such as a NaN, was not sent.)
            self.close()
            return Bounded("failed", why=f"the grader's zygote process did not answer "
                                         f"({type(exc).__name__})",
                           seconds=time.monotonic() - started)
        except BaseException:   # meanwhile's own: its answer, unread, is for no later request
            self.close()
            raise
        if reply.get("kind") not in ENDINGS or not isinstance(reply.get("why", ""), str) \
                or not isinstance(reply.get("seconds", 0.0), (int, float)):
            return Bounded("failed", why="the grader's zygote process answered nonsense",
                           seconds=time.monotonic() - started)
        return Bounded(reply["kind"], reply.get("value"), reply.get("why", ""),
                       str(reply.get("traceback", "")), float(reply.get("seconds", 0.0)))

    def close(self) -> None:
        """Stop the zygote (and, as they die with it, whatever child it has)."""
        if self.proc is not None:
            _kill(self.proc.pid)
            try:
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001 (it was killed; nothing more to do)
                pass
            for stream in (self.proc.stdin,):
                try:
                    stream.close()
                except OSError:
                    pass
            self.proc = None
        for fd in (self.reply_fd, self.gate_fd):
            if fd is not None:
                os.close(fd)
        self.reply_fd = self.gate_fd = None


def _function(name: str):
    import importlib

    module_name, _, function_name = name.partition(":")
    return getattr(importlib.import_module(module_name), function_name)


def _zygote(entry: str, reply_fd: int, preload: str | None = None,
            gate_fd: int | None = None) -> int:
    """The zygote's loop: one request from stdin at a time, each handled in a forked child, one
    answer each on ``reply_fd``, until stdin closes. A request with a gate token has its child
    wait at a :class:`grader.isolation.judge.timing_gate.Gate` the zygote opens once the judge
    sends that token on ``gate_fd``."""
    try:
        confine.die_with_parent()
    except confine.Unavailable:
        pass
    ti.keep_precompiled_headers_in_cache_dir()   # before its children compile anything
    handler = _function(entry)
    if preload:
        _function(preload)()
    while True:
        try:
            message, blob = channel.read_message(0)
        except EOFError:
            return 0
        token = message.get("gate")
        gate = timing_gate.zygote_gate_now = \
            timing_gate.Gate() if isinstance(token, int) and gate_fd is not None else None

        def setup():
            if gate is not None:
                gate.in_the_child()
            return handler(message["request"], blob)

        try:
            bounded = run_bounded(setup=setup, seconds=float(message["seconds"]),
                                  memory_bytes=int(message["memory_bytes"]),
                                  meanwhile=None if gate is None else
                                  lambda: timing_gate.await_token(gate_fd, token, gate))
        finally:
            if gate is not None:
                gate.close()
            timing_gate.zygote_gate_now = None
        channel.write_message(reply_fd, json.loads(json.dumps(dataclasses.asdict(bounded),
                                                              default=str)))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="the judge's zygote: forks its bounded children")
    parser.add_argument("--zygote", required=True, metavar="MODULE:FUNCTION",
                        help="what each child calls with a request: returns the work to run")
    parser.add_argument("--preload", metavar="MODULE:FUNCTION",
                        help="run once in the zygote before its first request")
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--gate-fd", type=int,
                        help="where the judge sends the tokens that open its requests' gates")
    args = parser.parse_args(argv)
    return _zygote(args.zygote, args.reply_fd, args.preload, args.gate_fd)


if __name__ == "__main__":
    os._exit(main())
