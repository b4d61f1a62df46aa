"""Run the grading worker on one problem in a fresh, limited, sandboxed process and bring back a
result that learner code could not write.

The job (spec, reference source, a one-time key, the result channel's number) goes in on stdin,
which the worker reads to the end and closes before any learner code runs; the result comes back
through a pipe, authenticated with the key (:mod:`grader.isolation.verify`). A crash, a hang, an
``os._exit`` or a memory blow-up of the learner's code becomes a result with a reason
(``status`` = 'crashed', 'timeout'), never an exception in the caller.
"""
from __future__ import annotations

import importlib.util
import json
import os
import secrets
import signal
import time

from grader.isolation import sandbox
from grader.checks.results import Status
from grader.isolation.verify import Rejected, authenticate

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MEMORY_BYTES = 6 * 1024 ** 3


def _module_dirs(module: str | None) -> list[str]:
    """Where a problem module outside the grader package lives (test fixtures): bound into the
    sandbox read-only and put on the worker's path. Nothing else of the course is."""
    if not module or module.startswith("grader."):
        return []
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return []
    return [os.path.dirname(os.path.realpath(spec.origin))]


def run_worker(spec: dict, *, timeout_s: float = DEFAULT_TIMEOUT_S,
               memory_bytes: int | None = DEFAULT_MEMORY_BYTES,
               isolation: sandbox.Isolation | None = None, sandbox_mode: str = "auto") -> dict:
    """Run :mod:`grader.isolation.worker` on ``spec`` in a fresh process and return its result dict
    (authenticated, not yet verified against the problem: see :func:`grader.isolation.verify.verify`).

    ``isolation`` defaults to :func:`grader.isolation.sandbox.probe` of ``sandbox_mode``. The result's
    ``sandbox`` field says which was used. The worker's own output (what learner code printed)
    is kept under ``output_tail`` for the instructor's logs and never shown to learners.
    """
    isolation = isolation or sandbox.probe(sandbox_mode)
    device = str(spec.get("device") or "cpu")
    key = secrets.token_bytes(32)
    extra = _module_dirs(spec.get("problem_module"))
    env = sandbox.environment({"TORCHINDUCTOR_CACHE_DIR": "/tmp/inductor",
                               "TRITON_CACHE_DIR": "/tmp/triton",
                               "PYTHONPATH": os.pathsep.join(extra)})
    if not isolation.sandboxed:  # the same layout without a sandbox: a private temporary home
        import tempfile

        home = tempfile.mkdtemp(prefix="grader-")
        env.update(HOME=home, TMPDIR=home, TORCHINDUCTOR_CACHE_DIR=os.path.join(home, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(home, "triton"))
        # Put the grader package on the path too: without the sandbox the work folder is not
        # where the package's checkout is.
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(sandbox.grader_package_dir()), *extra])
    else:
        home = None

    sent_at = time.time()  # the worker reports how long it took to start ("worker start")

    def job(result_fd: int | None) -> bytes:
        return json.dumps({"spec": spec, "key": key.hex(), "result_fd": result_fd,
                           "sent_at": sent_at}).encode()

    try:
        finished = sandbox.run(
            [sandbox.python_executable(), "-m", "grader.isolation.worker"], isolation=isolation,
            limits=sandbox.Limits(timeout_s=timeout_s, memory_bytes=memory_bytes),
            stdin=job, read_only=extra, env=env, cwd=home, device=device, result_channel=True)
    finally:
        if home:
            import shutil

            shutil.rmtree(home, ignore_errors=True)
    tail = _tail(finished.output)
    if finished.timed_out:
        return {"status": Status.TIMEOUT, "message": f"your code did not finish within "
                f"{timeout_s:.0f} s (an endless loop, or far too slow); it was stopped",
                "output_tail": tail, "sandbox": isolation.mode}
    if not finished.channel:
        reason = _exit_reason(finished.returncode, finished.output)
        return {"status": Status.CRASHED, "returncode": finished.returncode,
                "message": f"the grading process died before it could report ({reason})",
                "output_tail": tail, "sandbox": isolation.mode}
    try:
        result = authenticate(finished.channel, key)
    except Rejected as exc:
        return {"status": Status.REJECTED, "output_tail": tail, "sandbox": isolation.mode,
                "message": f"the grader could not trust this result, so nothing was credited: {exc}"}
    result["output_tail"] = tail
    result["sandbox"] = isolation.mode
    return result


def _exit_reason(returncode: int | None, output: bytes) -> str:
    text = output.decode(errors="replace")
    if returncode is None:
        return text or "it could not be started"
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    if signum in {s.value for s in signal.Signals}:
        name = signal.Signals(signum).name
        return f"killed by {name}" + (", probably out of memory" if name == "SIGKILL" else "")
    if "MemoryError" in text or "out of memory" in text.lower():
        return "it ran out of memory"
    return f"exit status {returncode}: the learner code ended the process (e.g. os._exit / sys.exit)"


def _tail(output: bytes | None, chars: int = 2000) -> str:
    return (output or b"").decode(errors="replace")[-chars:]
