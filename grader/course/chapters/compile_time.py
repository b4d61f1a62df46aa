"""Compile time and debugging (chapter 8).

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable, Sequence

from grader.checks import _torch_internals as ti
from grader._paths import REPO_ROOT
from grader import _environment as environment
from grader.course.chapters.core import DEVICE, SIZE

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


# Removes a folder once a process has ended, however it ended (argv: pid, folder).
_REMOVE_WHEN_ENDED = """
import os, select, shutil, sys, time
pid, folder = int(sys.argv[1]), sys.argv[2]
try:
    select.select([os.pidfd_open(pid)], [], [])
except (AttributeError, OSError):   # no pidfd (Linux before 5.3): look every second
    while os.path.exists(f"/proc/{pid}"):
        time.sleep(1)
shutil.rmtree(folder, ignore_errors=True)
"""


def scratch_dir(prefix: str = "course-", keep_hours: float = 6.0) -> str:
    """A new temporary folder for a chapter's logs, caches and reports.

    It is deleted when the Python process ends, however it ends: a Jupyter kernel that is shut
    down is killed when its exit takes more than a few seconds (torch's own exit work comes
    first), so a small process of its own waits for the kernel's end and deletes it; folders with
    the same prefix left by earlier runs are deleted once they are ``keep_hours`` old."""
    import atexit
    import glob
    import shutil
    import subprocess
    import tempfile

    for old in glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*")):
        try:
            if os.path.isdir(old) and time.time() - os.path.getmtime(old) > keep_hours * 3600:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    try:    # a session of its own: the kernel's process group is killed with the kernel
        subprocess.Popen([sys.executable, "-c", _REMOVE_WHEN_ENDED, str(os.getpid()), path],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    except OSError:
        pass
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
