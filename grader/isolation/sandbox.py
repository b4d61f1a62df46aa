"""Run a command in a fresh, limited, sandboxed process: the one way the grader starts a process
that executes learner code (the judge's subject, :mod:`grader.isolation.subject`).

What a sandboxed process gets (bubblewrap, ``mode == "bwrap"``):

- a filesystem built from a short list of read-only paths: the system (``/usr``, a few files of
  ``/etc``), the Python installation, the ``grader`` package, and what the caller names; nothing
  else of the host exists there: not the course folder, not ``source/``, not the gradebook, not
  other submissions, not the instructor's home;
- a private, size-limited, writable ``/tmp`` (a tmpfs: the disk a submission may write), plus the
  folders the caller names as writable;
- a cleared environment with only the variables named here (nothing of the instructor's);
- no network, its own PID namespace (when its first process ends, every process it started ends:
  double-forked and ``setsid`` children too), no terminal;
- when the grader runs as root: an unprivileged user id of its own (one per concurrent sandbox),
  no capabilities, ``no_new_privs``, so files are checked against "other" permissions and the
  process limit applies;
- limits (``prlimit``): address space (CPU only: CUDA reserves a large virtual range), processes
  and threads, file size, no core files; and a wall-clock timeout, after which the whole sandbox
  is killed.

Without bubblewrap (``mode == "none"``) only the limits, the environment and the timeout apply, and
the processes a submission started are found afterwards by a token in their environment and
killed. :func:`probe` tries the sandbox for real before anyone relies on it: containers and some
distributions forbid the namespaces it needs.

Why one long module (~650 lines): every limit, namespace and kill of a learner process is
decided here, so that a reviewer checks the isolation in one file; sections follow a process's
life (probe, limits, start, wait, kill, clean up).
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time

from grader import _environment as environment

GIB = 1024 ** 3
# Unprivileged user ids for sandboxes started by root: far above real users and the ranges
# systemd and container runtimes hand out. One per concurrent sandbox.
UID_BASE = int(os.environ.get(environment.SANDBOX_UID_BASE, "1990000000"))
# Variables a sandboxed process may inherit (names, or prefixes ending in "_"): locale, CUDA
# and the library path a GPU driver may need. Everything else is dropped.
ENV_PASSTHROUGH = ("LANG", "LC_", "TZ", "LD_LIBRARY_PATH", "CUDA_", "NVIDIA_", "CC", "CXX")
# /etc files the dynamic linker, gcc (Debian's alternatives) and Python's user lookups read.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group",
             "nsswitch.conf", "localtime", "os-release")
# Extra read-only paths for unusual installs (a compiler or CUDA outside /usr), colon-separated.
EXTRA_READ_ONLY_ENV = environment.SANDBOX_READ_ONLY
TOKEN_ENV = environment.SANDBOX_TOKEN


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one sandboxed process (and everything it starts) may use."""

    timeout_s: float | None = 300.0
    memory_bytes: int | None = 6 * GIB     # address space per process; ignored on CUDA
    processes: int | None = None           # tasks (processes + threads); None: scales with cores
    disk_bytes: int = 2 * GIB              # the private writable /tmp
    file_bytes: int = 2 * GIB              # the largest file it may write

    def task_limit(self) -> int:
        # torch starts a thread pool per process and Inductor a pool of compile workers.
        return self.processes or 256 + 64 * (os.cpu_count() or 2)


@dataclasses.dataclass(frozen=True)
class Isolation:
    """How learner code is isolated on this machine: 'bwrap', or 'none' with the reason."""

    mode: str
    reason: str = ""

    @property
    def sandboxed(self) -> bool:
        return self.mode == "bwrap"

    def describe(self) -> str:
        if self.sandboxed:
            return "bubblewrap sandbox (own filesystem view, no network, own user and PID namespace)"
        user = (" (learner code runs as an unprivileged user id)"
                if drops_privileges_unsandboxed() else "")
        return (f"NO sandbox: {self.reason}" if self.reason else "NO sandbox") + user


@dataclasses.dataclass
class Finished:
    """How a sandboxed run ended."""

    returncode: int | None
    output: bytes
    timed_out: bool
    seconds: float


class SandboxUnavailable(RuntimeError):
    """The sandbox was required but cannot run here; the message says why and what to do."""


# ---------------------------------------------------------------------------------------------
# Which user id a sandbox runs as

_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()


def take_uid() -> int:
    """An unprivileged user id no other running sandbox of this process uses."""
    with _uid_lock:
        uid = UID_BASE
        while uid in _uids_in_use:
            uid += 1
        _uids_in_use.add(uid)
        return uid


def give_back_uid(uid: int | None) -> None:
    with _uid_lock:
        _uids_in_use.discard(uid)


def switches_user() -> bool:
    """Root drops to an unprivileged user id inside the sandbox (setpriv)."""
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def _others_can_reach(path: str, *, execute: bool = False) -> bool:
    """Can a user who owns nothing open ``path`` (every folder on the way enterable by others)?"""
    path = os.path.realpath(path)
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        if not os.stat("/" + "/".join(parts[:i])).st_mode & 0o001:
            return False
    mode = os.stat(path).st_mode
    return bool(mode & (0o001 if execute else 0o004))


@functools.lru_cache(maxsize=None)
def drops_privileges_unsandboxed() -> bool:
    """Without bubblewrap, root still runs learner code as an unprivileged user id (setpriv) when
    that user can run this Python and read the grader package (Gradescope's image: setup.sh makes
    its venv readable). Files the grading user keeps to itself (``chmod 700``) are then out of
    reach, the course's ``source/`` among them where the instructor closed it. Where that user
    could not even start Python (a venv under root's home), learner code runs as the grader's
    user, and the isolation says so."""
    if not switches_user():
        return False
    import site

    needed = [python_executable(), os.path.join(grader_package_dir(), "__init__.py"),
              *[p for p in site.getsitepackages() if os.path.isdir(p)]]
    return all(_others_can_reach(p, execute=(p == needed[0])) for p in needed)


# ---------------------------------------------------------------------------------------------
# The command line

def python_executable() -> str:
    """This interpreter, by a path that exists inside the sandbox too (no ``..``; the
    environment's own path, not its base interpreter's)."""
    return os.path.abspath(sys.executable)


def grader_package_dir() -> str:
    from grader._paths import PACKAGE_DIR

    return PACKAGE_DIR


def _python_paths() -> list[str]:
    """The Python installation: the environment, its base interpreter, where its binary lives."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
             os.path.dirname(os.path.dirname(python_executable()))}
    return sorted({os.path.realpath(p) for p in paths} | paths)


def _read_only_paths(extra: list[str] | tuple) -> list[str]:
    wanted = [*_python_paths(), grader_package_dir(), *extra]
    wanted += [p for p in os.environ.get(EXTRA_READ_ONLY_ENV, "").split(":") if p]
    out = []
    for path in sorted({os.path.abspath(p) for p in wanted if p}):
        if os.path.exists(path) and not any(path.startswith(q + os.sep) or path == q
                                            for q in ("/usr",)):
            out.append(path)
    return out


def _parents(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _bind(flag: str, path: str, made: set[str]) -> list[str]:
    """``--ro-bind``/``--bind`` of ``path`` at the same place, its parent folders made first
    (world-readable: bubblewrap would make them 0700, which an unprivileged user cannot enter)."""
    args = []
    for parent in _parents(path):
        if parent not in made and parent not in ("/usr", "/tmp"):
            made.add(parent)
            args += ["--perms", "0755", "--dir", parent]
    return args + [flag, path, path]


def environment(extra: dict | None = None, home: str = "/tmp") -> dict[str, str]:
    """The whole environment of a sandboxed process: the pass-through variables of this one,
    a PATH to this Python and the system, a home in the private /tmp, and ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if any(k == p or (p.endswith("_") and k.startswith(p)) for p in ENV_PASSTHROUGH)}
    env.update(PATH=os.pathsep.join([os.path.dirname(python_executable()), "/usr/local/bin",
                                     "/usr/bin", "/bin"]),
               HOME=home, TMPDIR="/tmp", USER="learner", LOGNAME="learner",
               PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg")
    env.update(extra or {})
    return env


def command(argv: list[str], *, isolation: Isolation, limits: Limits = Limits(),
            read_only: list[str] | tuple = (), writable: list[str] | tuple = (),
            env: dict[str, str] | None = None, cwd: str | None = None, device: str = "cpu",
            uid: int | None = None) -> list[str]:
    """The full command line that runs ``argv`` limited (and sandboxed, for 'bwrap').

    ``env`` is the complete environment (see :func:`environment`); ``uid`` the unprivileged
    user id when :func:`switches_user` (see :func:`run`, which takes and gives one back).
    """
    env = dict(env if env is not None else environment())
    prefix: list[str] = []
    if shutil.which("prlimit"):
        prefix = ["prlimit", *(f"--{name}={value}" for name, value in
                               child_limits(limits, device, uid).items()), "--"]
    if not isolation.sandboxed:
        drop = []
        if uid is not None:
            drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        return prefix + drop + ["env", "-i", *(f"{k}={v}" for k, v in sorted(env.items())), *argv]
    # The grader package is bound where it lies: put it first on the path there, so the sandboxed
    # Python imports this very copy whatever installed it (an editable install pointing at
    # another checkout, a copy unpacked from a Gradescope autograder zip). Its parent folder
    # holds nothing else inside the sandbox.
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(grader_package_dir())]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    made: set[str] = set()
    box = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
           "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv",
           "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "sbin", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            box += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            box += ["--ro-bind", path, path]
    box += ["--perms", "0755", "--dir", "/etc"]
    made.add("/etc")
    for name in ETC_FILES:
        if os.path.lexists("/etc/" + name):
            box += ["--ro-bind-try", "/etc/" + name, "/etc/" + name]
    box += ["--ro-bind-try", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--size", str(limits.disk_bytes), "--tmpfs", "/tmp"]
    if device.startswith("cuda"):
        for path in sorted(glob.glob("/dev/nvidia*")):
            box += ["--dev-bind", path, path]
    for path in _read_only_paths(list(read_only)):
        box += _bind("--ro-bind", path, made)
    # Writable binds last, so that they stay writable inside a path bound read-only above.
    for path in writable:
        box += _bind("--bind", os.path.abspath(path), made)
    for key, value in sorted(env.items()):
        box += ["--setenv", key, value]
    box += ["--chdir", cwd or env.get("HOME", "/tmp")]
    if uid is not None and switches_user():
        box += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    else:
        box[1:1] = ["--cap-drop", "ALL"]
    return prefix + box + list(argv)


def _nproc(limits: Limits, uid: int | None) -> int:
    """RLIMIT_NPROC counts every task of the process's user: an own user id gets the limit
    itself; otherwise it comes on top of what this user already runs."""
    if uid is not None and switches_user():
        return limits.task_limit()
    return _tasks_of_user(os.getuid()) + limits.task_limit()


# prlimit's option names and the resource each sets.
_RESOURCES = {"nproc": "RLIMIT_NPROC", "fsize": "RLIMIT_FSIZE", "core": "RLIMIT_CORE",
              "as": "RLIMIT_AS"}


def hard_limit(name: str) -> int | None:
    """This process's hard limit of ``name`` (a key of :data:`_RESOURCES`); None: unlimited."""
    import resource

    hard = resource.getrlimit(getattr(resource, _RESOURCES[name]))[1]
    return None if hard == resource.RLIM_INFINITY else int(hard)


def child_limits(limits: Limits, device: str = "cpu", uid: int | None = None) -> dict[str, int]:
    """The limits a sandboxed child gets (prlimit's names: nproc, fsize, core, as), each at most
    this process's hard limit.

    A child can only lower its limits: raising a hard limit above its parent's needs
    CAP_SYS_RESOURCE, which root lacks in most containers. Asking for more would not merely be
    refused, it would stop the child from starting (``prlimit: failed to set the NPROC resource
    limit``): nbgrader saw a kernel that died before replying. So what the parent has is the
    ceiling; :func:`limit_notes` says where that made a limit lower than asked."""
    wanted = {"nproc": _nproc(limits, uid), "fsize": limits.file_bytes, "core": 0}
    if limits.memory_bytes and not device.startswith("cuda"):
        wanted["as"] = limits.memory_bytes
    out = {}
    for name, value in wanted.items():
        hard = hard_limit(name)
        out[name] = value if hard is None else min(value, hard)
    return out


def limit_notes(limits: Limits = Limits(), device: str = "cpu") -> list[str]:
    """Where this process's own hard limits make a sandboxed child's lower than the grader asks
    for (each is used as it is, and said once at the start of a grading run)."""
    uid = UID_BASE if switches_user() else None
    wanted = {"nproc": _nproc(limits, uid), "fsize": limits.file_bytes}
    if limits.memory_bytes and not device.startswith("cuda"):
        wanted["as"] = limits.memory_bytes
    got = child_limits(limits, device, uid)
    words = {"nproc": "processes and threads (ulimit -u)", "fsize": "file size (ulimit -f)",
             "as": "address space (ulimit -v)"}
    return [f"{words[name]}: {got[name]} (this shell's hard limit), not the {value} the grader "
            f"asks for" for name, value in wanted.items() if got[name] < value]


def _tasks_of_user(uid: int) -> int:
    count = 0
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status) as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                count += int(fields.get("Threads", "1"))
        except (OSError, ValueError, KeyError):
            continue
    return count


# ---------------------------------------------------------------------------------------------
# Is the sandbox usable here?

@functools.lru_cache(maxsize=None)
def _probe_bwrap() -> str:
    """'' when a real sandboxed call works, else why it does not."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    uid = take_uid()
    try:
        check = ("import importlib.util, os, sys; import grader.isolation.sandbox; "
                 "spec = importlib.util.find_spec('torch'); "
                 "os.listdir(os.path.dirname(spec.origin)); "
                 "open('/tmp/probe', 'w').write('ok'); print('sandbox-ok')")
        cmd = command([python_executable(), "-c", check], isolation=Isolation("bwrap"),
                      limits=Limits(memory_bytes=None), uid=uid)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bubblewrap did not run: {exc}"
        if proc.returncode != 0 or "sandbox-ok" not in proc.stdout:
            why = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return (f"bubblewrap is installed but a sandboxed Python failed here ({why[0]}): "
                    f"user namespaces may be disabled (containers, some distributions), or the "
                    f"Python environment is not readable by other users")
        return ""
    finally:
        give_back_uid(uid)


def probe(mode: str = "auto") -> Isolation:
    """How learner code will be isolated: 'bwrap' after a real sandboxed call succeeded.

    ``mode``: 'auto' (the sandbox when it works here, else none, with the reason), 'bwrap'
    (required: raises :class:`SandboxUnavailable` with the reason) or 'off'.
    """
    if mode == "off":
        return Isolation("none", "turned off (--sandbox off)")
    if mode not in ("auto", "bwrap"):
        raise ValueError(f"sandbox mode must be 'auto', 'bwrap' or 'off', not {mode!r}")
    why = _probe_bwrap() if sys.platform.startswith("linux") else "bubblewrap needs Linux"
    if not why:
        return Isolation("bwrap")
    if mode == "bwrap":
        raise SandboxUnavailable(why)
    return Isolation("none", why)


# ---------------------------------------------------------------------------------------------
# Running

def run(argv: list[str], *, isolation: Isolation, limits: Limits = Limits(),
        stdin: bytes = b"", read_only: list[str] | tuple = (), writable: list[str] | tuple = (),
        env: dict[str, str] | None = None, cwd: str | None = None,
        device: str = "cpu") -> Finished:
    """Run ``argv`` limited (and sandboxed) to the end or the timeout; never raises for what
    the process does. ``stdin`` is written to the process and closed."""
    uid = take_uid() if isolation.sandboxed and switches_user() else None
    token = secrets.token_hex(16)
    env = dict(env if env is not None else environment())
    env[TOKEN_ENV] = token
    cmd = command(argv, isolation=isolation, limits=limits, read_only=read_only,
                  writable=writable, env=env, cwd=cwd, device=device, uid=uid)
    preexec = None if shutil.which("prlimit") else _fallback_limits(limits, device)
    started = time.monotonic()
    output: list[bytes] = []
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=preexec, cwd=cwd if not isolation.sandboxed else None)
    except OSError as exc:
        give_back_uid(uid)
        return Finished(None, f"could not start: {exc}".encode(), False, 0.0)
    readers = [threading.Thread(target=lambda: output.append(proc.stdout.read()), daemon=True),
               threading.Thread(target=_feed, args=(proc, stdin), daemon=True)]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        # Wait for the process, not for the end of its output: something it started may hold
        # the pipes open after it ended. Then nothing of it is left running.
        proc.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    finally:
        _kill_leftovers(token)
        for reader in readers:
            reader.join(timeout=10)
        give_back_uid(uid)
    return Finished(proc.returncode, b"".join(output), timed_out, time.monotonic() - started)


class Running:
    """A limited (and sandboxed) process the caller talks to while it runs (:func:`start`):
    requests go to its stdin, replies come back on a channel of their own (a pipe whose number
    the process is told on its command line), and what it prints is kept apart (the last
    :data:`OUTPUT_TAIL_BYTES`). :meth:`finish` ends it and everything it started."""

    def __init__(self, proc: subprocess.Popen, token: str, uid: int | None, reply_fd: int,
                 started: float):
        self.proc, self.token, self.uid, self.reply_fd = proc, token, uid, reply_fd
        self.started = started
        self._output = bytearray()
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()
        self.leftovers: list[int] = []

    def _collect(self) -> None:
        try:
            while chunk := self.proc.stdout.read1(1 << 16):
                self._output += chunk
                if len(self._output) > 2 * OUTPUT_TAIL_BYTES:
                    del self._output[:-OUTPUT_TAIL_BYTES]
        except (OSError, ValueError):
            pass

    def send(self, data: bytes) -> None:
        """Write ``data`` to the process's stdin (``BrokenPipeError`` when it has gone)."""
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def reader(self, deadline: float):
        """An ``os.read`` for the reply channel that raises ``TimeoutError`` at ``deadline``
        (``time.monotonic()``) instead of waiting for a process that does not answer."""
        import select

        def read(fd: int, n: int) -> bytes:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("the process did not answer in time")
            return os.read(fd, n)
        return read

    def alive(self) -> bool:
        return self.proc.poll() is None

    def finish(self, grace_s: float = 5.0) -> Finished:
        """End the process: close its stdin, give it ``grace_s`` to exit, then kill its whole
        process group; kill whatever it started that is still running (its environment token),
        and check that nothing is left (:attr:`leftovers`: what the second sweep found)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        timed_out = False
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(self.proc)
            self.proc.wait()
        _kill_group(self.proc)
        # Sweep until a sweep finds nothing: a process killed a moment ago may still be dying,
        # and one may have forked in between. What the last sweep still found is reported.
        deadline = time.monotonic() + 5.0
        while _kill_leftovers(self.token) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.leftovers = _kill_leftovers(self.token)
        self._reader.join(timeout=10)
        _close(self.reply_fd)
        give_back_uid(self.uid)
        return Finished(self.proc.returncode, bytes(self._output[-OUTPUT_TAIL_BYTES:]), timed_out,
                        time.monotonic() - self.started)


OUTPUT_TAIL_BYTES = 64 * 1024


def _own_user(isolation: Isolation) -> bool:
    """Does a learner process started with ``isolation`` get a user id of its own?"""
    if isolation.sandboxed:
        return switches_user()
    return drops_privileges_unsandboxed()


def start(argv: list[str], *, isolation: Isolation, limits: Limits = Limits(),
          read_only: list[str] | tuple = (), writable: list[str] | tuple = (),
          env: dict[str, str] | None = None, cwd: str | None = None,
          device: str = "cpu", own: list[str] | tuple = ()) -> Running:
    """Start ``argv`` limited (and sandboxed) with a reply channel: the channel's number is
    appended to ``argv`` (``--reply-fd N``). ``limits.timeout_s`` is the caller's to enforce
    (:meth:`Running.reader` deadlines, :meth:`Running.finish`). ``own``: folders the process
    must be able to write, given to its user id when it gets one of its own. Raises ``OSError``
    when the process cannot be started at all."""
    uid = take_uid() if _own_user(isolation) else None
    for folder in own:
        if uid is not None:
            os.chown(folder, uid, uid)
    token = secrets.token_hex(16)
    env = dict(env if env is not None else environment())
    env[TOKEN_ENV] = token
    read_fd, pipe_w = os.pipe()
    write_fd = fcntl_dup_high(pipe_w)
    os.close(pipe_w)
    cmd = command([*argv, "--reply-fd", str(write_fd)], isolation=isolation, limits=limits,
                  read_only=read_only, writable=writable, env=env, cwd=cwd, device=device, uid=uid)
    preexec = None if shutil.which("prlimit") else _fallback_limits(limits, device)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                start_new_session=True, preexec_fn=preexec,
                                cwd=cwd if not isolation.sandboxed else None)
    except OSError:
        _close(read_fd, write_fd)
        give_back_uid(uid)
        raise
    os.close(write_fd)  # the process holds the only writing end: EOF when it is gone
    return Running(proc, token, uid, read_fd, started)


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    """Write ``data`` to the process's stdin and close it (a process that stops reading early
    just loses the rest)."""
    try:
        if data:
            proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def fcntl_dup_high(fd: int) -> int:
    """A duplicate of ``fd`` at a number above 100 (the reply channel's: clear of the low
    numbers a process opens for itself)."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 100 + secrets.randbelow(800))


def _close(*fds) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _fallback_limits(limits: Limits, device: str):
    """Without prlimit (not Linux): the same limits set in the child before it starts."""
    values = child_limits(limits, device)

    def apply() -> None:
        import resource

        for name in ("as", "core"):
            if name in values:
                rid = getattr(resource, _RESOURCES[name])
                resource.setrlimit(rid, (values[name], values[name]))
    return apply


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_leftovers(token: str) -> list[int]:
    """Kill every process whose environment carries ``token``: what a run started and left
    behind (double-forked, ``setsid``), which a process group or a PID namespace missed."""
    killed = []
    needle = f"{TOKEN_ENV}={token}".encode()
    for path in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(path, "rb") as fh:
                if needle not in fh.read():
                    continue
            pid = int(path.split("/")[2])
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (OSError, ValueError):
            continue
    return killed


# ---------------------------------------------------------------------------------------------
# Folders as data: what travels into a sandboxed or remote process and back (no shared files)

def pack_folder(root: str, paths=(".",)) -> bytes:
    """``paths`` under ``root`` (those that exist) as a gzipped tar."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in paths:
            if os.path.exists(os.path.join(root, path)):
                tar.add(os.path.join(root, path), arcname=path)
    return buffer.getvalue()


def unpack_folder(data: bytes, root: str) -> None:
    """Extract :func:`pack_folder`'s archive under ``root`` (created if missing); the tar's
    "data" filter refuses links and paths that leave ``root``."""
    import io
    import tarfile

    os.makedirs(root, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(root, filter="data")
