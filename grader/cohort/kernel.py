"""The notebook kernel nbgrader starts during ``make grade``, inside the sandbox.

nbgrader's own process (the driver: it reads the gradebook and the hidden parts of the notebook,
and writes the graded notebook) never runs learner code; the kernel does, so only the kernel is
sandboxed (:mod:`grader.isolation.sandbox`): it sees the system, Python, the ``grader`` package, a
read-only copy of the learner's own submission folder (its working folder) and the file of the
judged results it displays; not the course, not the gradebook, not ``source/``.

It talks to the driver over ZeroMQ *ipc* sockets (files in a folder both can reach) instead of
TCP: the kernel has no network at all. :class:`SandboxedKernelManager` is what
:class:`grader.cohort.robust_execute.RobustExecute` uses when ``make grade`` sets ``COURSE_KERNEL_SANDBOX``
(a JSON description written by :func:`kernel_settings`); elsewhere (Formgrader, Validate) nbgrader
starts its usual kernel.
"""
from __future__ import annotations

import json
import os

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import HBChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import Type

from grader.isolation import sandbox
from grader import _environment as environment

KERNEL_SANDBOX_ENV = environment.KERNEL_SANDBOX


def kernel_settings(*, isolation: sandbox.Isolation, uid: int | None, runtime_dir: str,
                    workdir: str, results: str, memory_bytes: int | None,
                    device: str = "cpu") -> str:
    """The value of ``COURSE_KERNEL_SANDBOX`` for one submission's nbgrader run."""
    return json.dumps({"mode": isolation.mode, "reason": isolation.reason, "uid": uid,
                       "runtime_dir": runtime_dir, "workdir": workdir, "results": results,
                       "memory_bytes": memory_bytes, "device": device})


# A Unix socket's path holds at most 107 bytes: ZeroMQ's ipc sockets live in the kernel's runtime
# folder, so it must have a short path whatever TMPDIR (or a long student name) would give it.
MAX_SOCKET_PATH = 107


def short_runtime_dir() -> str:
    """A new folder with a short path for one kernel's connection file and ipc sockets."""
    import tempfile

    base = "/tmp" if os.path.isdir("/tmp") and os.access("/tmp", os.W_OK) else tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="ctc-", dir=base)


def configured() -> dict | None:
    raw = os.environ.get(KERNEL_SANDBOX_ENV)
    return json.loads(raw) if raw else None


class NoHeartbeat(HBChannel):
    """No heartbeat thread: whether the kernel lives is read from its process (the manager's
    ``is_alive``). Over ipc, a heartbeat to a kernel that died (or scribbled on its own
    sockets) blocks forever in ``send``, and stopping the channel then hangs nbgrader."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.close()

    def is_beating(self) -> bool:
        return True

    def pause(self) -> None:
        pass

    def unpause(self) -> None:
        pass


class SandboxedKernelClient(AsyncKernelClient):
    hb_channel_class = Type(NoHeartbeat)


class SandboxedKernelManager(AsyncKernelManager):
    """An IPython kernel started through :func:`grader.isolation.sandbox.command`, on ipc sockets."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.client_factory = SandboxedKernelClient
        self.settings = configured() or {}
        self.transport = "ipc"
        runtime = self.settings["runtime_dir"]
        os.makedirs(runtime, exist_ok=True)
        import secrets

        base = os.path.join(runtime, f"k{secrets.token_hex(4)}")
        self.connection_file = base + ".json"
        self.ip = base + "-ipc"
        if len((self.ip + "-99").encode()) > MAX_SOCKET_PATH:
            raise RuntimeError(f"the kernel's socket path {self.ip!r} is longer than a Unix socket "
                               f"allows ({MAX_SOCKET_PATH} bytes): use a shorter temporary folder")

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        argv = super().format_kernel_cmd(extra_arguments)
        # A signal would reach bubblewrap, not the kernel: interrupt (a cell's timeout) by a
        # message on the control channel, which the kernel turns into its own SIGINT.
        self.kernel_spec.interrupt_mode = "message"
        argv[0] = sandbox.python_executable() if argv[0].endswith(("python", "python3")) \
            else argv[0]
        s = self.settings
        uid = s.get("uid")
        if uid is not None and os.geteuid() == 0:
            # The kernel runs as its own user: it must read the connection file (written 0600)
            # and create its sockets next to it.
            os.chown(s["runtime_dir"], uid, uid)
            os.chown(self.connection_file, uid, uid)
        from grader.isolation.check import JUDGED_SCORES_ENV

        isolation = sandbox.Isolation(s["mode"], s.get("reason", ""))
        env = sandbox.environment({JUDGED_SCORES_ENV: s["results"],
                                   "NBGRADER_EXECUTION": "autograde"},
                                  home="/tmp" if isolation.sandboxed else s["runtime_dir"])
        return sandbox.command(
            argv, isolation=isolation,
            limits=sandbox.Limits(timeout_s=None, memory_bytes=s.get("memory_bytes")),
            read_only=[s["workdir"], s["results"]], writable=[s["runtime_dir"]], env=env,
            cwd=s["workdir"], device=s.get("device", "cpu"), uid=uid)
