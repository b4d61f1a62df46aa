"""Run learner code in a fresh, limited process: :mod:`grader.worker` under a time and memory
limit, in its own temporary folder, inside bubblewrap when it is installed.

A crash, a hang, an ``os._exit`` or a memory blow-up of the learner's code becomes a result with
a reason (``status`` = 'crashed', 'timeout'), never an exception in the caller.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MEMORY_BYTES = 6 * 1024 ** 3


def bwrap_available() -> bool:
    return shutil.which("bwrap") is not None


def _sandbox_prefix(workdir: str, device: str, read_only: list[str] | tuple = ()) -> list[str]:
    """bubblewrap: the whole filesystem read-only, a private /tmp, the work folder writable, no
    network, own PID namespace; CUDA devices passed through on a GPU box.

    The private /tmp hides whatever lies under the real one, so the course checkout, the Python
    environment and ``read_only`` paths are bound back (read-only) when they live there (a
    clone in /tmp, a grading copy of the course, pytest's folders)."""
    prefix = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in sorted({os.path.realpath(p) for p in (package_root, sys.prefix, *read_only) if p}):
        if (path == "/tmp" or path.startswith("/tmp/")) and os.path.exists(path):
            prefix += ["--ro-bind", path, path]
    # Last, so that the work folder stays writable even inside a path bound read-only above.
    prefix += ["--bind", workdir, workdir,
               "--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"]
    if device.startswith("cuda"):
        for name in sorted(os.listdir("/dev")):
            if name.startswith("nvidia"):
                prefix += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    return prefix


def _limit_memory(limit: int | None):
    def apply() -> None:
        os.setsid()  # its own process group: a timeout kills the compiler children too
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def run_worker(spec: dict, *, timeout_s: float = DEFAULT_TIMEOUT_S,
               memory_bytes: int | None = DEFAULT_MEMORY_BYTES, sandbox: str = "auto",
               warn: bool = True) -> dict:
    """Run :mod:`grader.worker` on ``spec`` in a fresh process and return its result dict.

    ``sandbox``: 'auto' (bubblewrap when installed, with a warning when not), 'bwrap' (required)
    or 'off'; ``warn=False`` leaves the missing-sandbox note to the result's ``sandbox`` field
    (test cells must not write to stderr: nbgrader scores such a cell zero). The address-space limit ``memory_bytes`` applies on CPU only: CUDA reserves a
    large virtual address space and fails to initialise under it.
    """
    device = str(spec.get("device") or "cpu")
    use_bwrap = sandbox == "bwrap" or (sandbox == "auto" and bwrap_available())
    if sandbox == "bwrap" and not bwrap_available():
        raise RuntimeError("sandbox='bwrap' but bubblewrap is not installed (apt-get install bubblewrap)")
    if sandbox == "auto" and not use_bwrap and warn:
        warnings.warn("bubblewrap is not installed: learner code runs without a filesystem "
                      "sandbox (apt-get install bubblewrap)", RuntimeWarning, stacklevel=2)
    workdir = tempfile.mkdtemp(prefix="grader-")
    try:
        spec_path = os.path.join(workdir, "spec.json")
        result_path = os.path.join(workdir, "result.json")
        with open(spec_path, "w") as fh:
            json.dump(spec, fh)
        cmd = [sys.executable, "-m", "grader.worker", spec_path, result_path]
        if use_bwrap:
            cmd = _sandbox_prefix(workdir, device, spec.get("extra_path", [])) + cmd
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JPY_", "COURSE_SECRET"))}
        env.update(TMPDIR=workdir, HOME=workdir, PYTHONDONTWRITEBYTECODE="1",
                   # Inductor's caches go in the work folder: nothing shared between learners.
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(workdir, "inductor"),
                   TRITON_CACHE_DIR=os.path.join(workdir, "triton"))
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        *spec.get("extra_path", []), env.get("PYTHONPATH", "")] if p)
        limit = memory_bytes if not device.startswith("cuda") else None
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=_limit_memory(limit))
        try:
            output, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            output, _ = proc.communicate()
            return {"status": "timeout", "message": f"your code did not finish within "
                    f"{timeout_s:.0f} s (an endless loop, or far too slow); it was stopped",
                    "output_tail": _tail(output)}
        if os.path.exists(result_path):
            with open(result_path) as fh:
                result = json.load(fh)
            result["output_tail"] = _tail(output)
            result["sandbox"] = "bwrap" if use_bwrap else "none"
            return result
        reason = _exit_reason(proc.returncode, output)
        return {"status": "crashed", "returncode": proc.returncode,
                "message": f"the grading process died before it could report ({reason})",
                "output_tail": _tail(output)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _exit_reason(returncode: int, output: bytes) -> str:
    text = output.decode(errors="replace")
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"killed by {name}" + (", probably out of memory" if name == "SIGKILL" else "")
    if "MemoryError" in text or "out of memory" in text.lower():
        return "it ran out of memory"
    return f"exit status {returncode}: the learner code ended the process (e.g. os._exit / sys.exit)"


def _tail(output: bytes | None, chars: int = 2000) -> str:
    return (output or b"").decode(errors="replace")[-chars:]
