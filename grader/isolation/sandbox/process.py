"""Run a command in a fresh, limited, confined process: the one way the grader starts a process
that executes learner code (the judge's subject, :mod:`grader.isolation.sandbox.subject`).

Three ways to confine, tried in this order by :func:`probe` (each for real, never assumed):

1. **bubblewrap** (``mode == "bwrap"``): a filesystem built from a short list of read-only paths
   (the system: ``/usr``, a few files of ``/etc``; the Python installation; the ``grader``
   package; what the caller names): not the course folder, not ``source/``, not the gradebook,
   not other submissions, not the instructor's home; a private, size-limited, writable ``/tmp``
   (a tmpfs) plus the folders the caller names as writable; no network; its own PID namespace
   (when its first process ends, every process in it ends); no terminal; when the grader runs as
   root, an unprivileged user id of its own (one per concurrent sandbox) and no capabilities.
2. **kernel confinement** (``mode == "kernel"``), where bubblewrap cannot run (no user
   namespaces in a container, not installed): what the kernel lets a process do to itself
   (:mod:`grader.isolation.sandbox.confine`): Landlock (reads only the system, Python, the grader
   package and what the caller names; writes only its own folder; no TCP; no signal, ptrace or
   ``/proc/<pid>/mem``/``environ``/``maps`` of any process outside), seccomp (no socket, no
   namespace, no io_uring, no ptrace, no keyrings, no System V or POSIX message IPC; no chmod,
   chown, utime or xattr where it shares the grader's user id), ``no_new_privs``, and when the
   grader is root a user id of its own (with a Python that user can run:
   :mod:`grader.isolation.sandbox.learner_python`).
3. **nothing** (``mode == "none"``): limits, a cleared environment and deadlines only; the
   instructor must have asked for it (``--sandbox off``) for real submissions.

In every mode the subject is started by :mod:`grader.isolation.sandbox.launcher`, a child subreaper:
every process learner code starts, whatever its session, group or environment, stays below it, and
is killed and counted when the subject ends (:attr:`Running.leftovers`). Limits (``prlimit``):
address space (CPU only: CUDA reserves a large virtual range), processes and threads, file size,
no core files; and a wall-clock deadline, after which everything is killed.

Why one long module: every limit, namespace, layer and kill of a learner process is
decided here, so that a reviewer checks the isolation in one file (the system calls themselves
are in :mod:`grader.isolation.sandbox.confine`, the launcher's loop in
:mod:`grader.isolation.sandbox.launcher`); sections follow a process's life (probe, limits, start,
wait, kill, clean up).
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
from grader.isolation.sandbox import cgroups, channel, confine, learner_python, procfs, usage

GIB = 1024 ** 3
# The address-space limit of a process that runs learner code, on CPU, where nothing else says
# one: the one default of the self-check (evaluate, run_test) and of make grade (MEMORY_GB,
# grader.cohort.settings.GradeSettings.memory_gb, reads it from here).
DEFAULT_MEMORY_BYTES = 6 * GIB
# Unprivileged user ids for sandboxes started by root: far above real users and the ranges
# systemd and container runtimes hand out. One per running sandbox on the machine (its pid
# namespace): each grader process (a Ray worker, a second `make grade`, a test worker) has ids
# of its own, since one sandbox's end kills every process of its id and they share one count.
UID_BASE = int(os.environ.get(environment.SANDBOX_UID_BASE, "1990000000"))
PID_LIMIT = 2 ** 22      # the most a pid can be (PID_MAX_LIMIT)
# Without bubblewrap, the launcher's own pid is added to this: unique while it lives.
KERNEL_UID_BASE = UID_BASE
# With bubblewrap, the starting process's pid picks a block of UIDS_PER_PROCESS ids above the
# launchers' ones, shared out among its sandboxes (:func:`take_uid`); the last is below 2**31.
BWRAP_UID_BASE = UID_BASE + PID_LIMIT
UIDS_PER_PROCESS = 32
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
    # Address space per process (not on CUDA, which reserves far more than it uses), and the
    # memory of its cgroup where it gets one (:mod:`grader.isolation.sandbox.cgroups`, CUDA too).
    memory_bytes: int | None = DEFAULT_MEMORY_BYTES
    processes: int | None = None           # tasks (processes + threads); None: scales with cores
    disk_bytes: int = 2 * GIB              # what it may write: the private /tmp, or its home
    file_bytes: int = 2 * GIB              # the largest file it may write

    def task_limit(self) -> int:
        # torch starts a thread pool per process and Inductor a pool of compile workers.
        return self.processes or 256 + 64 * (os.cpu_count() or 2)


@dataclasses.dataclass(frozen=True)
class Isolation:
    """How learner code is confined on this machine: 'bwrap', 'kernel' or 'none' (:func:`probe`),
    with the reason a better mode was not used."""

    mode: str
    reason: str = ""

    @property
    def sandboxed(self) -> bool:
        """bubblewrap: learner code sees a filesystem of its own."""
        return self.mode == "bwrap"

    def setting(self) -> str:
        """The ``--sandbox`` value that gives this isolation again (another process, a Ray node)."""
        return {"bwrap": "bwrap", "kernel": "kernel"}.get(self.mode, "off")

    def describe(self) -> str:
        counted = "every process it starts killed and counted when it ends"
        if self.sandboxed:
            return ("bubblewrap sandbox (own filesystem view, no network, own user and PID "
                    f"namespace; {counted}); {limits_words(self)}")
        if self.mode == "kernel":
            why = f" ({self.reason})" if self.reason else ""
            return (f"kernel confinement without bubblewrap{why}: {kernel_layers()}; {counted}; "
                    f"{limits_words(self)}")
        user = (" (learner code runs as an unprivileged user id)"
                if drops_privileges_unsandboxed() else "")
        return (f"NO sandbox: {self.reason}" if self.reason else "NO sandbox") + user

    def warning(self) -> str:
        """What the process that runs learner code (the subject) can and cannot do here without
        bubblewrap, exactly: printed at the start of a run that grades without it."""
        if self.mode == "kernel":
            return ("WARNING: no bubblewrap. The process that runs learner code for the judge (the "
                    "subject) gets kernel confinement instead: it cannot read source/, the "
                    "gradebook or other submissions, write anything outside its own temporary "
                    "folder, reach the network, or signal, trace or read the memory, environment "
                    "or maps of the judge or of another submission's process; every process it "
                    "starts is killed and counted when it ends; it sees no other process in "
                    "/proc. It can still see which paths exist (not their contents), and it "
                    "shares the machine's CPU and memory within its limits (docs/trust.md).")
        can = ("under a user id of its own with limits and deadlines only: it can read every "
               "file other users may read (source/ unless closed to them, other submissions) and "
               "print it into its feedback; the grading user's other files and processes are "
               "out of its reach" if drops_privileges_unsandboxed() else
               "as the grading user with limits and deadlines only: it can read and write what "
               "that user can (source/, the gradebook, other submissions), print it into its "
               "feedback, and signal that user's processes, the judge's among them")
        return (f"WARNING: learner code is not confined here ({self.reason}): it runs {can}; "
                f"every process it starts is still killed and counted when it ends "
                f"(docs/trust.md).")


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
    """An unprivileged user id no other running sandbox on this machine uses: one of the
    :data:`UIDS_PER_PROCESS` of this process's block (its pid is unique while it runs). Raises
    ``OSError`` when all of them are taken (that many sandboxes at once from one process)."""
    with _uid_lock:
        first = BWRAP_UID_BASE + (os.getpid() % PID_LIMIT) * UIDS_PER_PROCESS
        for uid in range(first, first + UIDS_PER_PROCESS):
            if uid not in _uids_in_use:
                _uids_in_use.add(uid)
                return uid
    raise OSError(f"{UIDS_PER_PROCESS} sandboxes are already running from this process: no user "
                  f"id of its own is left for another")


def give_back_uid(uid: int | None) -> None:
    with _uid_lock:
        _uids_in_use.discard(uid)


def switches_user() -> bool:
    """Root drops to an unprivileged user id inside the sandbox (setpriv)."""
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


@functools.lru_cache(maxsize=None)
def drops_privileges_unsandboxed() -> bool:
    """Without bubblewrap, root runs learner code under a user id of its own wherever a Python
    that user can run exists (:func:`grader.isolation.sandbox.learner_python.for_other_users`: this
    environment's own where other users can read it, as in Gradescope's image, else a copy of its
    base interpreter made inside the venv). Where even the environment's packages are closed to
    other users, learner code would run as the grader's user: kernel confinement then refuses to
    run (root is exempt from the process limit, and owns the course), and the isolation says so."""
    if os.geteuid() != 0:
        return False
    try:
        learner_python.for_other_users(grader_package_dir())
    except learner_python.Unavailable:
        return False
    return True


def kernel_layers() -> str:
    """What kernel confinement puts on learner code on this machine, in words (the isolation
    line of ``make grade`` and Gradescope's results)."""
    abi = min(confine.landlock_abi(), confine.KNOWN_ABI)
    own = os.geteuid() == 0
    walls = ["reads only the system, Python and the grader package",
             "of /proc only its own folder", "writes only its own folder"]
    if abi >= 4:
        walls.append("no TCP")
    if abi >= 6:
        walls.append("no signal or abstract socket to any process outside")
    walls.append("no ptrace or /proc memory, environ or maps of any process outside")
    calls = "no socket, namespace, io_uring, ptrace, keyring or IPC" + (
        "" if own else "; no chmod, chown, utime or xattr; a signal, limit or priority only for "
                       "its own processes (decided by its launcher)")
    user = "a user id of its own" if own else "the grader's user id (the grader is not root)"
    return f"Landlock ABI {abi} ({'; '.join(walls)}), seccomp ({calls}), no_new_privs, {user}"


def limits_words(isolation: "Isolation") -> str:
    """How memory, processes and disk are bounded for learner code here, in words."""
    group = cgroups.available()
    own_uid = os.geteuid() == 0 and (isolation.sandboxed or isolation.mode == "kernel"
                                     or drops_privileges_unsandboxed())
    if group is not None:
        memory = f"memory in a cgroup v{group.version} of its own (shared memory counted)"
    else:
        memory = ("memory by address space" + ("" if isolation.sandboxed else ", no memfd")
                  + f" (no cgroup: {cgroups.why_not()})")
    counting = task_accounting(isolation, own_uid=own_uid, group=group)
    tasks = {"uid": "processes counted by its user id", "cgroup": "processes counted by its cgroup",
             "userns": "processes counted in a user namespace of its own",
             "shared": "processes on top of the grader user's, stopped past its own count"
             }[counting]
    disk = ("disk in a size-limited /tmp" if isolation.sandboxed else
            f"disk measured every {usage.POLL_S:g} s by file descriptor, no fallocate")
    return f"{memory}; {tasks}; {disk}"


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
    """The full command line that runs ``argv`` limited (and sandboxed, for 'bwrap'; 'kernel' and
    'none' alike otherwise: the kernel's layers are the launcher's, :func:`start`).

    ``env`` is the complete environment (see :func:`environment`); ``uid`` the unprivileged
    user id when :func:`switches_user` (see :func:`run`, which takes and gives one back).
    """
    env = dict(env if env is not None else environment())
    prefix = _prlimit(limits, device, _nproc(limits, "uid" if uid is not None and
                                             os.geteuid() == 0 else "shared"))
    if not isolation.sandboxed:
        drop = []
        if uid is not None:
            drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                    "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        return prefix + drop + ["env", "-i", *(f"{k}={v}" for k, v in sorted(env.items())), *argv]
    box = _bwrap(limits=limits, read_only=read_only, writable=writable, env=env, cwd=cwd,
                 device=device)
    if uid is not None and switches_user():
        box += ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
    else:
        box[1:1] = ["--cap-drop", "ALL"]
    return prefix + box + list(argv)


def _prlimit(limits: Limits, device: str, nproc: int | None) -> list[str]:
    if not shutil.which("prlimit"):
        return []
    return ["prlimit", *(f"--{name}={value}" for name, value in
                         child_limits(limits, device, nproc).items()), "--"]


def _bwrap(*, limits: Limits, read_only, writable, env: dict[str, str], cwd: str | None,
           device: str) -> list[str]:
    """bubblewrap's part of a command line, up to the program it runs."""
    # The grader package is bound where it lies: put it first on the path there, so the sandboxed
    # Python imports this very copy whatever installed it (an editable install pointing at
    # another checkout, a copy unpacked from a Gradescope autograder zip). Its parent folder
    # holds nothing else inside the sandbox.
    env = dict(env, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(grader_package_dir())]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
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
    # bubblewrap's /dev holds a /dev/shm the sandbox's user may write without a size (an
    # ordinary user's): a tmpfs of 1 MiB takes its place.
    box += ["--ro-bind-try", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev",
            "--size", str(2 ** 20), "--tmpfs", "/dev/shm",
            "--perms", "1777", "--size", str(limits.disk_bytes), "--tmpfs", "/tmp"]
    for path in _gpu_devices(device):
        box += ["--dev-bind", path, path]
    for path in _read_only_paths(list(read_only)):
        box += _bind("--ro-bind", path, made)
    # Writable binds last, so that they stay writable inside a path bound read-only above.
    for path in writable:
        box += _bind("--bind", os.path.abspath(path), made)
    # The sandbox's own root is a tmpfs its user may write (an ordinary user's bubblewrap maps it
    # to that user): read-only, so that only /tmp (size-limited) and the writable binds are.
    box += ["--remount-ro", "/"]
    for key, value in sorted(env.items()):
        box += ["--setenv", key, value]
    return box + ["--chdir", cwd or env.get("HOME", "/tmp")]


def _gpu_devices(device: str) -> list[str]:
    return sorted(glob.glob("/dev/nvidia*")) if device.startswith("cuda") else []


# Device files every process may read and write (and ioctl: Landlock's IOCTL_DEV right).
COMMON_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Of /proc and /sys, what a compile reads: the process's own /proc folder (``/proc/self`` is
# opened by the confined process itself, so the rule is on its own), the processors and memory
# (Inductor picks its vector instructions from /proc/cpuinfo), the CPU topology. Nothing of any
# other process: not its command line, status, clock or limits, not even that it exists.
PROC_AND_SYS = ("/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/sys/devices/system/cpu",
                "/sys/devices/system/node")
# What a CUDA process may read beyond that: the driver's files (/proc/driver/nvidia), the
# kernel's module and device lists and settings, the devices' (not the cgroups): machine-wide
# files, none of another process. Not yet run on a GPU (make gpu-check will show what is missing).
PROC_AND_SYS_CUDA = ("/proc/driver", "/proc/modules", "/proc/devices", "/proc/sys",
                     "/proc/stat", "/proc/version", "/sys/devices", "/sys/bus", "/sys/module",
                     "/sys/class", "/sys/dev")


def landlock_paths(*, read_only, writable, device: str) -> dict[str, list[str]]:
    """What Landlock lets learner code reach (the launcher's ``read``, ``write`` and ``devices``):
    the same paths bubblewrap binds, and of ``/proc`` and ``/sys`` only :data:`PROC_AND_SYS`
    (another process's memory, environment and maps stay closed even where a rule would give
    them: Landlock refuses ptrace access across domains)."""
    cuda = PROC_AND_SYS_CUDA if device.startswith("cuda") else ()
    read = [*SYSTEM_DIRS, *(f"/etc/{name}" for name in ETC_FILES), *PROC_AND_SYS, *cuda,
            *_read_only_paths(list(read_only))]
    return {"read": [p for p in read if os.path.exists(p)],
            "write": [os.path.abspath(p) for p in writable],
            "devices": [*COMMON_DEVICES, *_gpu_devices(device)]}


def _nproc(limits: Limits, counting: str) -> int | None:
    """The RLIMIT_NPROC a subject's command line starts with (:func:`task_accounting`): a user id
    of its own gets the limit itself; a cgroup or a user namespace counts its tasks on their own
    (the namespace's limit is set inside it: outside, the user's own stays, which the namespace's
    count is checked against too); otherwise it comes on top of what this user already runs."""
    if counting == "uid":
        return limits.task_limit()
    if counting == "shared":
        return procfs.shared_task_limit(limits.task_limit())
    return None


# prlimit's option names and the resource each sets.
_RESOURCES = {"nproc": "RLIMIT_NPROC", "fsize": "RLIMIT_FSIZE", "core": "RLIMIT_CORE",
              "as": "RLIMIT_AS"}


def hard_limit(name: str) -> int | None:
    """This process's hard limit of ``name`` (a key of :data:`_RESOURCES`); None: unlimited."""
    import resource

    hard = resource.getrlimit(getattr(resource, _RESOURCES[name]))[1]
    return None if hard == resource.RLIM_INFINITY else int(hard)


def child_limits(limits: Limits, device: str = "cpu", nproc: int | None = None) -> dict[str, int]:
    """The limits a sandboxed child gets (prlimit's names: nproc where ``nproc`` is given, fsize,
    core, as), each at most this process's hard limit.

    A child can only lower its limits: raising a hard limit above its parent's needs
    CAP_SYS_RESOURCE, which root lacks in most containers. Asking for more would not merely be
    refused, it would stop the child from starting (``prlimit: failed to set the NPROC resource
    limit``): nbgrader saw a kernel that died before replying. So what the parent has is the
    ceiling; :func:`limit_notes` says where that made a limit lower than asked."""
    wanted = {"fsize": limits.file_bytes, "core": 0}
    if nproc is not None:
        wanted["nproc"] = nproc
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
    nproc = limits.task_limit() if switches_user() else \
        procfs.shared_task_limit(limits.task_limit())
    wanted = {"nproc": nproc, "fsize": limits.file_bytes}
    if limits.memory_bytes and not device.startswith("cuda"):
        wanted["as"] = limits.memory_bytes
    got = child_limits(limits, device, nproc)
    words = {"nproc": "processes and threads (ulimit -u)", "fsize": "file size (ulimit -f)",
             "as": "address space (ulimit -v)"}
    return [f"{words[name]}: {got[name]} (this shell's hard limit), not the {value} the grader "
            f"asks for" for name, value in wanted.items() if got[name] < value]


# ---------------------------------------------------------------------------------------------
# Is the sandbox usable here?

@functools.lru_cache(maxsize=None)
def _probe_bwrap() -> str:
    """'' when a real sandboxed call works, else why it does not."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    uid = take_uid()
    try:
        check = ("import importlib.util, os, sys; import grader.isolation.sandbox.process; "
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


# A Python run under kernel confinement by the probe: it must fail to read a file that every user
# may read, to open a socket, to signal the probing process, to lower its limits and to read its
# command line, and still import the grader and find torch, and write its own folder.
_KERNEL_CHECK = """
import importlib.util, os, resource, socket, sys
canary, outside = sys.argv[1], int(sys.argv[2])
for what, attempt in (("read", lambda: open(canary).read()), ("socket", socket.socket),
                      ("signal", lambda: os.kill(outside, 0)),
                      ("limit", lambda: resource.prlimit(outside, resource.RLIMIT_CORE)),
                      ("/proc", lambda: open(f"/proc/{outside}/cmdline").read())):
    try:
        attempt()
        print("UNCONFINED:", what)
    except PermissionError:
        pass
open(os.path.join(os.environ["HOME"], "probe"), "w").write("ok")
import grader.isolation.sandbox.process
os.listdir(os.path.dirname(importlib.util.find_spec("torch").origin))
print("confined-ok", os.getuid())
"""


@functools.lru_cache(maxsize=None)
def _probe_kernel() -> str:
    """'' when kernel confinement really works here, else why not. Nothing is assumed from the
    kernel's version: a container's seccomp profile may refuse Landlock's calls, a distribution
    may leave Landlock out of its boot list, a kernel may claim an ABI it does not fully have;
    so a real Python is confined by the launcher and must fail what it must fail."""
    if not sys.platform.startswith("linux"):
        return "kernel confinement needs Linux"
    if not confine.architecture():
        import platform

        return f"this grader has no system call table for {platform.machine()} (seccomp)"
    abi = confine.landlock_abi()
    if abi < 1:
        return ("Landlock is not available (Linux older than 5.13, Landlock not in the kernel's "
                "boot list of security modules, or a container's seccomp profile refuses it)")
    if os.geteuid() == 0:
        try:
            learner_python.for_other_users(grader_package_dir())
        except learner_python.Unavailable as exc:
            return f"learner code would run as root: {exc}"
    import tempfile

    folder = tempfile.mkdtemp(prefix="kernel-probe-")
    try:
        os.chmod(folder, 0o755)
        canary = os.path.join(folder, "canary")
        with open(canary, "w") as fh:
            fh.write("every user may read this file; a confined process may not")
        os.chmod(canary, 0o644)
        home = os.path.join(folder, "home")
        os.mkdir(home)
        try:
            running = start([python_executable(), "-c", _KERNEL_CHECK, canary, str(os.getpid())],
                            isolation=Isolation("kernel"), limits=Limits(timeout_s=60),
                            env=environment(home=home), home=home, reply=False)
        except OSError as exc:
            return f"the launcher did not start: {exc}"
        try:
            running.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        finished = running.finish(grace_s=0)
        out = finished.output.decode(errors="replace")
        if running.setup_error:
            return f"the kernel refused a layer: {running.setup_error}"
        if "confined-ok" not in out or "UNCONFINED" in out:
            lines = [line for line in out.strip().splitlines() if line][-2:] or ["no output"]
            return f"a confined Python did not behave as confined here ({' / '.join(lines)})"
        return ""
    finally:
        try:
            usage.remove_tree(folder)
        except OSError:
            pass


MODES = ("auto", "bwrap", "kernel", "off")


def probe(mode: str = "auto") -> Isolation:
    """How learner code will be confined, each way tried for real first.

    ``mode``: 'auto' (bubblewrap where it works, else kernel confinement where that works, else
    none, with the reasons), 'bwrap' or 'kernel' (required: raises :class:`SandboxUnavailable`
    with the reason), 'off' (no bubblewrap: kernel confinement where it works, else none).
    """
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, not {mode!r}")
    why_bwrap = ("bubblewrap turned off (--sandbox off)" if mode == "off" else
                 "bubblewrap not asked for (--sandbox kernel)" if mode == "kernel" else
                 _probe_bwrap() if sys.platform.startswith("linux") else "bubblewrap needs Linux")
    if not why_bwrap:
        return Isolation("bwrap")
    if mode == "bwrap":
        raise SandboxUnavailable(why_bwrap)
    why_kernel = _probe_kernel()
    if not why_kernel:
        return Isolation("kernel", why_bwrap)
    if mode == "kernel":
        raise SandboxUnavailable(why_kernel)
    return Isolation("none", f"{why_bwrap}; kernel confinement: {why_kernel}")


# ---------------------------------------------------------------------------------------------
# Running

class Running:
    """A limited, confined process the caller talks to while it runs (:func:`start`): requests go
    to its stdin, replies come back on a channel of their own (a pipe whose number the process is
    told on its command line), and what it prints is kept apart (the last
    :data:`OUTPUT_TAIL_BYTES`). Its launcher (:mod:`grader.isolation.sandbox.launcher`) reports how
    it ended. :meth:`finish` ends it and everything it started."""

    def __init__(self, proc: subprocess.Popen, *, token: str, uid: int | None,
                 uid_base: int | None, reply_fd: int | None, report_fd: int, control_fd: int,
                 started: float, group=None):
        self.proc, self.token, self.uid, self.reply_fd = proc, token, uid, reply_fd
        self.group = group          # its cgroup (grader.isolation.sandbox.cgroups.Group), or None
        self.cgroup_events: dict = {}
        self.report_fd, self.control_fd, self.started = report_fd, control_fd, started
        # Kernel confinement as root: the user id the launcher gave learner code (its own pid
        # added to the base), swept again here should the launcher itself be gone. (Under
        # bubblewrap the PID namespace ends everything, and the same user id may be another
        # worker's sandbox.)
        self.learner_uid = None if uid_base is None else uid_base + proc.pid
        self._output = bytearray()
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()
        self._report: dict | None = None
        self.leftovers: list[int] = []
        self.survivors: list[int] = []

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
        return channel.deadline_reader(deadline)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def report(self) -> dict:
        """What the launcher said when it ended (``{}`` while it runs, or if it was killed):
        ``status``, ``leftovers``, ``survivors``, ``error``."""
        if self._report is None and self.proc.poll() is not None:
            import json

            data = b""
            try:
                os.set_blocking(self.report_fd, False)
                while chunk := os.read(self.report_fd, 1 << 16):
                    data += chunk
            except (BlockingIOError, OSError):
                pass
            try:
                self._report = json.loads(data.decode()) if data.strip() else {}
            except ValueError:
                self._report = {}
        return self._report or {}

    @property
    def exceeded(self) -> str:
        """The limit the process was stopped for: 'disk' or 'processes' (the launcher measured
        it past its limit), 'memory' (its cgroup's limit: the kernel killed a process of it), or
        ''. :attr:`exceeded_why` says more where there is more to say."""
        events = self.cgroup_events or (self.group.events() if self.group is not None else {})
        if events.get("oom_kills"):
            return "memory"
        return str(self.report().get("exceeded") or "")

    @property
    def exceeded_why(self) -> str:
        return str(self.report().get("why") or "")

    @property
    def setup_error(self) -> str:
        """Why the launcher could not confine and start the program ('' when it did): a grader
        failure, never the learner's."""
        error = str(self.report().get("error") or "")
        if not error and self.proc.poll() == 125:
            from grader.isolation.sandbox.cgroups import JOIN_FAILED

            text = bytes(self._output[-4000:]).decode(errors="replace")
            if JOIN_FAILED in text:
                error = "the process could not join its cgroup: " + text.split(JOIN_FAILED, 1)[1]
        return error

    def finish(self, grace_s: float = 5.0) -> Finished:
        """End the process: close its stdin and give it ``grace_s`` to exit; then tell its
        launcher to stop (it kills everything below it); as a last resort kill the launcher's
        process group. Then sweep for anything of it still running, by its environment token and
        its user id: :attr:`leftovers` is every process learner code left running when its
        process ended (each killed), :attr:`survivors` what was still there after all that."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        timed_out = False
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _close(self.control_fd)       # the launcher kills everything below it, and ends
            self.control_fd = None
            try:
                self.proc.wait(timeout=launcher_sweep_s())
            except subprocess.TimeoutExpired:
                _kill_group(self.proc)
                self.proc.wait()
        _close(self.control_fd)
        self.control_fd = None
        report = self.report()
        left = set(report.get("leftovers") or ())
        _kill_group(self.proc)
        # The launcher swept already; these sweeps find only what escaped it (it was killed).
        deadline = time.monotonic() + 5.0
        while True:
            found = set(_kill_leftovers(self.token)) | set(_kill_user(self.learner_uid))
            left |= found
            if not found or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if self.group is not None:
            # Nothing leaves a cgroup but through its folder, which learner code cannot write:
            # whatever is still in it is killed. Below a launcher that reported, that is only
            # what its sweep killed and the kernel has not yet ended (counted already, under
            # bubblewrap by another pid); below one that did not, it is counted here.
            found = self.group.kill(settle_s=1.0)
            if not report:
                left |= set(found)
            self.cgroup_events = self.group.events()
            self.group.remove()
            self.group = None
        self.leftovers = sorted(left)
        self.survivors = sorted(set(report.get("survivors") or ()) | set(
            _kill_leftovers(self.token)) | set(_kill_user(self.learner_uid)))
        self._reader.join(timeout=10)
        _close(self.reply_fd, self.report_fd)
        give_back_uid(self.uid)
        return Finished(self.proc.returncode, bytes(self._output[-OUTPUT_TAIL_BYTES:]), timed_out,
                        time.monotonic() - self.started)


OUTPUT_TAIL_BYTES = 64 * 1024


def launcher_sweep_s() -> float:
    from grader.isolation.sandbox.launcher import SWEEP_S

    return SWEEP_S + 5.0


def task_accounting(isolation: Isolation, *, own_uid: bool, group) -> str:
    """How a subject's processes and threads are counted on their own (docs/trust.md):
    'uid' (a user id of its own: RLIMIT_NPROC counts only its tasks), 'cgroup' (its own pids
    cgroup), 'userns' (a user namespace of its own, bubblewrap's or the launcher's: the kernel
    counts RLIMIT_NPROC per namespace), or 'shared' (none of these: the limit is on top of what
    the grader's user runs when it starts, and the launcher stops it past its own count)."""
    if own_uid:
        return "uid"
    if group is not None:
        return "cgroup"
    if isolation.sandboxed or (isolation.mode == "kernel" and confine.user_namespaces()):
        return "userns"
    return "shared"


def start(argv: list[str], *, isolation: Isolation, limits: Limits = Limits(),
          read_only: list[str] | tuple = (), writable: list[str] | tuple = (),
          env: dict[str, str] | None = None, home: str | None = None, device: str = "cpu",
          reply: bool = True) -> Running:
    """Start ``argv`` limited and confined as ``isolation`` says, below a launcher
    (:mod:`grader.isolation.sandbox.launcher`) that finds, kills and counts whatever it leaves
    running, in a cgroup of its own where this machine lets the grader make one
    (:mod:`grader.isolation.sandbox.cgroups`).

    ``reply``: give it a reply channel, whose number is appended to ``argv`` (``--reply-fd N``).
    ``home``: without bubblewrap, the process's own folder (its working folder, the only one it
    may write besides ``writable``; given to its user id); with bubblewrap it has the private
    ``/tmp``. Where ``argv`` starts with this Python and learner code gets a user id of its own,
    that user's Python is run instead (:mod:`grader.isolation.sandbox.learner_python`).
    ``limits.timeout_s`` is the caller's to enforce (:meth:`Running.reader` deadlines,
    :meth:`Running.finish`). Raises ``OSError`` when the process cannot be started at all."""
    import json

    env = dict(env if env is not None else environment())
    token = secrets.token_hex(16)
    env[TOKEN_ENV] = token
    root = os.geteuid() == 0
    program, child_env = list(argv), {}
    uid = uid_base = None
    if isolation.sandboxed:
        uid = take_uid() if root else None
        write = ["/tmp", *writable]
    else:
        if home is None:
            raise ValueError("without bubblewrap a confined process needs a home folder")
        if root and (isolation.mode == "kernel" or drops_privileges_unsandboxed()):
            uid_base = KERNEL_UID_BASE
            python, extra = learner_python.for_other_users(grader_package_dir())
            if program[0] == python_executable():
                program[0] = python
            for key, value in extra.items():
                child_env[key] = os.pathsep.join([value, *[p for p in [env.get(key)] if p]])
        child_env["PYTHONPATH"] = os.pathsep.join(
            [_grader_path(home), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
        env["PYTHONPATH"] = os.path.dirname(grader_package_dir())    # the launcher's own
        write = [home, *writable]
    fds: list[int] = []
    group = None
    try:
        group = cgroups.make(token[:16], limits.memory_bytes, limits.task_limit() + 8)
        counting = task_accounting(isolation, own_uid=uid is not None or uid_base is not None,
                                   group=group)
        reply_r = reply_w = None
        if reply:
            reply_r, pipe_w = os.pipe()
            reply_w = fcntl_dup_high(pipe_w)
            os.close(pipe_w)
            fds += [reply_r, reply_w]
        report_r, report_w = os.pipe()
        control_r, control_w = os.pipe()
        fds += [report_r, report_w, control_r, control_w]
        kernel = isolation.mode == "kernel"
        spec = {"uid": uid, "uid_base": uid_base, "own": [home] if uid_base is not None else [],
                **landlock_paths(read_only=read_only, writable=write, device=device),
                "layers": {"bwrap": "best", "kernel": "required"}.get(isolation.mode, "none"),
                "policy": {"shares_uid": kernel and not root,
                           "refuse_memfd": group is None or not limits.memory_bytes,
                           "refuse_fallocate": not isolation.sandboxed},
                # bubblewrap's own user namespace (not root) or the launcher's counts it
                "userns_tasks": limits.task_limit()
                if counting == "userns" and kernel else None,
                "nproc": limits.task_limit()
                if counting == "userns" and isolation.sandboxed else None,
                "tasks": limits.task_limit() if counting == "shared" else None,
                # on top of what the user runs then: set in the launcher's child as it starts
                "shared_nproc": limits.task_limit() if counting == "shared" else None,
                "disk": None if isolation.sandboxed else {"folder": home,
                                                          "bytes": limits.disk_bytes,
                                                          "file_bytes": limits.file_bytes},
                "report_fd": report_w, "control_fd": control_r,
                "keep_fds": [reply_w] if reply else [], "env": child_env}
        launcher = [python_executable(), "-m", "grader.isolation.sandbox.launcher",
                    json.dumps(spec), "--", *program, *(["--reply-fd", str(reply_w)] if reply else [])]
        # A limit shared with the user's other processes is the child's alone: on the launcher
        # it would stop its own fork once other subjects of the user grow meanwhile.
        nproc = None if counting == "shared" else _nproc(limits, counting)
        if isolation.sandboxed:
            box = _bwrap(limits=limits, read_only=read_only, writable=writable, env=env,
                         cwd=None, device=device)
            if not root:
                box[1:1] = ["--cap-drop", "ALL"]
            cmd = _prlimit(limits, device, nproc) + box + launcher
        else:
            cmd = _prlimit(limits, device, nproc) + launcher
        if group is not None:
            cmd = group.entering(cmd)
        preexec = None if shutil.which("prlimit") else _fallback_limits(limits, device)
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                pass_fds=tuple(fd for fd in (reply_w, report_w, control_r)
                                               if fd is not None),
                                start_new_session=True, preexec_fn=preexec,
                                cwd=None if isolation.sandboxed else home,
                                env=None if isolation.sandboxed else env)
    except (OSError, learner_python.Unavailable):
        _close(*fds)
        give_back_uid(uid)
        if group is not None:
            group.remove()
        raise
    # The process holds the only writing ends of its channels: EOF when it is gone.
    _close(reply_w, report_w, control_r)
    return Running(proc, token=token, uid=uid, uid_base=uid_base, reply_fd=reply_r,
                   report_fd=report_r, control_fd=control_w, started=started, group=group)


def _grader_path(home: str) -> str:
    """A folder in ``home`` holding only a link to the grader package: put on the path, learner
    code imports this very copy of it (whatever installed one elsewhere), and listing the folder
    shows nothing else (the package's own parent, the course, is not to be read)."""
    folder = os.path.join(home, ".grader-path")
    os.makedirs(folder, mode=0o755, exist_ok=True)
    link = os.path.join(folder, "grader")
    if not os.path.islink(link):
        os.symlink(grader_package_dir(), link)
    return folder


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


def _kill_user(uid: int | None) -> list[int]:
    """Kill every process whose real user id is ``uid`` (a learner's own, never the grader's);
    the ones found."""
    if uid is None or uid < UID_BASE:
        return []
    killed = []
    for pid in procfs.processes_of_user(uid):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            continue
    return killed


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
    """``paths`` under ``root`` (those that exist) as a gzipped tar. Compressed fast (level 1,
    not tarfile's 9): a set's judge cache holds Inductor's precompiled header (150 MB on CPU),
    which level 9 took 16.6 s to pack and level 1 1.0 s, for 25 MB instead of 21."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for path in paths:
            if os.path.exists(os.path.join(root, path)):
                tar.add(os.path.join(root, path), arcname=path)
    return buffer.getvalue()


def unpack_folder(data: bytes, root: str) -> None:
    """Extract :func:`pack_folder`'s archive under ``root`` (created if missing); the tar's
    "data" filter refuses links and paths that leave ``root``. (Pythons before 3.11.4, Debian
    12's 3.11.2 among them, have no filters: there the same refusals are made here.)"""
    import io
    import tarfile

    os.makedirs(root, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(root, filter="data")
            return
        top = os.path.realpath(root)
        for member in tar.getmembers():
            target = os.path.realpath(os.path.join(top, member.name))
            if not (member.isfile() or member.isdir()) or os.path.isabs(member.name) \
                    or not (target == top or target.startswith(top + os.sep)):
                raise tarfile.TarError(f"{member.name!r}: not a plain file or folder inside "
                                       f"the archive's root")
            member.mode &= 0o755
        tar.extractall(root)
