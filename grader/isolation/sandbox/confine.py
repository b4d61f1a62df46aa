"""What the Linux kernel lets a process do to confine itself before it runs learner code, with no
root, no namespaces and no helper program: the layers :mod:`grader.isolation.sandbox.launcher` puts
on the subject where bubblewrap cannot run (and inside bubblewrap too, as a second wall).

- **Landlock** (Linux 5.13+; :func:`landlock_abi` says which version this kernel has): the
  process may read and run files only beneath the paths it is given, write only beneath its own
  folder, use no TCP port (ABI 4+), send no signal and reach no abstract Unix socket outside its
  own domain (ABI 6+), and ptrace nothing outside its domain: ``/proc/<pid>/mem``, ``environ``,
  ``maps`` and ``io`` of the judge and of every other submission's process are refused (ABI 1+;
  a check on the domain, not on the user id). What Landlock does not cover: ``stat`` (a path's
  existence, size and mode stay visible) and a file's metadata (chmod, chown, times, xattrs).
- **seccomp** (:func:`install_seccomp`): no socket of any kind (so no UDP, no netlink, no Unix
  socket or socket pair either), no new namespace, no io_uring (whose requests bypass the socket
  rule), no ptrace, no BPF or perf events, no kernel keyrings, no System V or POSIX message IPC,
  no mounts or kernel modules; by :class:`Policy`, no memfd where no memory cgroup counts it and
  no fallocate where the disk is measured; where the process shares the grader's user id, no
  chmod, chown, utime or xattr change either (Landlock lets those through), and every call that
  names another process (a signal, a limit, a priority) is decided by the launcher
  (:class:`grader.isolation.sandbox.supervise.Supervisor`): only the subject's own processes may be
  named.
- **a user namespace of its own** (:func:`own_user_namespace`, an ordinary user's learner code,
  where the kernel allows one): the process limit counts only the subject's own processes.
- **no_new_privs**: no set-user-id program gives it privileges back.
- **a user id of its own** (:func:`drop_to`, root only): the kernel's checks between users then
  apply to it (files, signals, ``/proc``), and the process limit counts only its own tasks.
- **the child subreaper** (:func:`become_subreaper`): every process it starts that is orphaned,
  whatever its session, group or environment, becomes a child of the launcher, which finds and
  kills it (:func:`descendants`).

All of it is a handful of system calls made through ctypes: no library on PyPI was both sound and
maintained for this (py-landlock 0.1.1 is an alpha release; pyseccomp 0.1.2, of 2021, wraps the
system's libseccomp), and the subject runs on Gradescope too, whose setup.sh would have to install
it. Each function raises :class:`Unavailable` with the kernel's reason.

Why one long module: every system call the layers make, and the tables of call numbers the
filter names per architecture, are in one place, which one test checks against the kernel's
headers (tests/test_confine.py); the launcher's decisions on the calls the filter hands it are
in :mod:`grader.isolation.sandbox.supervise`.
"""
from __future__ import annotations

import ctypes
import dataclasses
import errno as errnos
import functools
import os
import platform
import struct
import sys

from grader import _environment as environment
from grader.isolation.sandbox import procfs


class Unavailable(OSError):
    """This kernel (or this container's seccomp profile) refuses a layer; the message says why."""


@functools.lru_cache(maxsize=None)
def _libc() -> ctypes.CDLL:
    """The C library, on Linux only (this module is imported everywhere the sandbox is: a
    learner's self-check on macOS or Windows must not fail at import)."""
    if not sys.platform.startswith("linux"):
        raise Unavailable(errnos.ENOSYS, "kernel confinement needs Linux")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    return libc


def _word(arg):
    """A variadic argument as the kernel reads it: a whole machine word."""
    return ctypes.c_long(arg) if isinstance(arg, int) else arg


def _syscall(number: int, *args) -> int:
    return _libc().syscall(ctypes.c_long(number), *map(_word, args))


def _prctl(option: int, *args) -> int:
    return _libc().prctl(ctypes.c_int(option), *map(_word, args))


def _fail(what: str) -> Unavailable:
    err = ctypes.get_errno()
    return Unavailable(err, f"{what}: {os.strerror(err)}")


# ---------------------------------------------------------------------------------------------
# prctl and user ids

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38


def set_no_new_privs() -> None:
    """No program this process runs from now on gains privileges (set-user-id bits, file
    capabilities); required before an unprivileged process may use Landlock or seccomp."""
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")


def become_subreaper() -> None:
    """Orphaned descendants of this process become its children instead of init's."""
    if _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_CHILD_SUBREAPER)")


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (set after the user id changes: a change of
    credentials clears it)."""
    import signal

    if _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise _fail("prctl(PR_SET_PDEATHSIG)")


def drop_to(uid: int) -> None:
    """Become ``uid`` (group ``uid``, no supplementary groups) for good: real, effective and saved
    ids, so no capability is left (root only)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid):
        raise Unavailable(errnos.EPERM, f"could not become user id {uid}")


# ---------------------------------------------------------------------------------------------
# Landlock

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446   # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

# Filesystem rights (include/uapi/linux/landlock.h), by the ABI that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15          # ABI 2, 3, 5
# Network rights (ABI 4) and scopes (ABI 6).
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

_FS_BY_ABI = {1: (1 << 13) - 1, 2: REFER, 3: TRUNCATE, 5: IOCTL_DEV}
# The rights a rule on a file (not a folder) may carry.
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
# Known here: newer ABIs add rights this module does not handle (seccomp covers what matters).
KNOWN_ABI = 7

READ_AND_RUN = EXECUTE | READ_FILE | READ_DIR
EVERYTHING = (1 << 16) - 1


def kernel_landlock_abi() -> int:
    """This kernel's Landlock ABI version; 0 when it has none (too old, not enabled at boot, or a
    seccomp profile that forbids the call, as some container runtimes have)."""
    try:
        version = _syscall(_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    except Unavailable:
        return 0
    return max(int(version), 0)


def landlock_abi() -> int:
    """The Landlock ABI the grader uses: the kernel's, at most :data:`KNOWN_ABI`, and at most
    what ``COURSE_LANDLOCK_ABI`` says (the suite confines with ABI 1, 3, 4, 5 and 6 on a newer
    kernel, as an older one would; 0: as if the kernel had none)."""
    abi = min(kernel_landlock_abi(), KNOWN_ABI)
    cap = os.environ.get(environment.LANDLOCK_ABI, "").strip()
    if cap:
        try:
            abi = min(abi, max(int(cap), 0))
        except ValueError:
            raise Unavailable(errnos.EINVAL, f"{environment.LANDLOCK_ABI}={cap!r} is not a "
                                             f"number") from None
    return abi


def handled_fs(abi: int) -> int:
    """Every filesystem right an ABI knows (all of them are denied unless a rule grants them)."""
    return sum(bits for version, bits in _FS_BY_ABI.items() if version <= abi)


def landlock(read: list[str] | tuple = (), write: list[str] | tuple = (),
             devices: list[str] | tuple = (), *, abi: int | None = None) -> int:
    """Confine this thread and everything it starts from now on: read and run beneath ``read``;
    everything beneath ``write``; read, write and ioctl on the device files ``devices``; nothing
    else of the filesystem; no TCP bind or connect (ABI 4+); no signal to, and no abstract Unix
    socket of, any process outside (ABI 6+). Needs :func:`set_no_new_privs` first. Returns the
    ABI used (at most :data:`KNOWN_ABI`)."""
    abi = min(landlock_abi() if abi is None else abi, KNOWN_ABI)
    if abi < 1:
        raise Unavailable(errnos.EOPNOTSUPP, "Landlock is not available in this kernel")
    fs = handled_fs(abi)
    net = BIND_TCP | CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = ctypes.create_string_buffer(struct.pack("=QQQ", fs, net, scoped))
    ruleset = _syscall(_CREATE_RULESET, attr, len(attr.raw), 0)
    if ruleset < 0:
        raise _fail(f"landlock_create_ruleset (ABI {abi})")
    try:
        for paths, rights in ((read, READ_AND_RUN), (write, EVERYTHING),
                              (devices, READ_FILE | WRITE_FILE | IOCTL_DEV)):
            for path in paths:
                _add_rule(int(ruleset), path, rights & fs)
        if _syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            raise _fail("landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _add_rule(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd))
        if _syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, rule, 0) != 0:
            raise _fail(f"landlock_add_rule({path})")
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# seccomp

# System calls refused, by architecture: x86_64 (arch/x86/entry/syscalls/syscall_64.tbl) and
# aarch64 (include/uapi/asm-generic/unistd.h); numbers from 424 up are the same on both.
_X86_64 = {
    "socket": 41, "socketpair": 53, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
    "request_key": 249, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
    "pivot_root": 155, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "shmget": 29, "shmat": 30, "shmctl": 31, "msgget": 68,
    "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semget": 64, "semop": 65, "semctl": 66,
    "semtimedop": 220, "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242,
    "mq_timedreceive": 243, "mq_notify": 244, "mq_getsetattr": 245,
    # metadata: refused only where the process shares the grader's user id
    "chmod": 90, "fchmod": 91, "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94,
    "fchownat": 260, "utime": 132, "utimes": 235, "utimensat": 280, "futimesat": 261,
    "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
    "lremovexattr": 198, "fremovexattr": 199,
    # memory and disk the limits would not see (refused where nothing else counts them)
    "memfd_create": 319, "fallocate": 285,
}
_AARCH64 = {
    "socket": 198, "socketpair": 199, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271,
    "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "keyctl": 219, "add_key": 217,
    "request_key": 218, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39,
    "pivot_root": 41, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
    "finit_module": 273, "delete_module": 106, "open_by_handle_at": 265,
    "name_to_handle_at": 264, "shmget": 194, "shmat": 196, "shmctl": 195, "msgget": 186,
    "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "semget": 190, "semop": 193, "semctl": 191,
    "semtimedop": 192, "mq_open": 180, "mq_unlink": 181, "mq_timedsend": 182,
    "mq_timedreceive": 183, "mq_notify": 184, "mq_getsetattr": 185,
    "fchmod": 52, "fchmodat": 53, "fchown": 55, "fchownat": 54, "utimensat": 88,
    "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
    "fremovexattr": 16,
    "memfd_create": 279, "fallocate": 47,
}
_COMMON = {
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "pidfd_getfd": 438, "mount_setattr": 442, "open_tree_attr": 467,
    "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466, "file_setattr": 469,
}
# Calls that act on another process by its id, which the kernel allows between processes of one
# user id: where learner code shares the grader's, the launcher decides each one (the target
# must be a process of the subject: grader.isolation.sandbox.supervise). Landlock's ABI 6 scopes
# signals only.
_TARGETED_X86_64 = {
    "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "prlimit64": 302, "setpriority": 141, "sched_setaffinity": 203, "sched_setscheduler": 144,
    "sched_setparam": 142, "sched_setattr": 314, "ioprio_set": 251,
}
_TARGETED_AARCH64 = {
    "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
    "prlimit64": 261, "setpriority": 140, "sched_setaffinity": 122, "sched_setscheduler": 119,
    "sched_setparam": 118, "sched_setattr": 274, "ioprio_set": 30,
}
_TARGETED_COMMON = {"pidfd_send_signal": 424}
# fcntl and ioctl: the commands that make the kernel signal a process of the caller's choosing
# when a file is ready (F_SETOWN, F_SETOWN_EX; FIOSETOWN, SIOCSPGRP, TIOCSPGRP).
_OWNER_CALLS = {"x86_64": {"fcntl": 72, "ioctl": 16}, "aarch64": {"fcntl": 25, "ioctl": 29}}
_F_SETOWN, _F_SETOWN_EX = 8, 15
_FIOSETOWN, _SIOCSPGRP, _TIOCSPGRP = 0x8901, 0x8902, 0x5410
# prctl(PR_SET_DUMPABLE, 0) would close the process's /proc files (its open files among them) to
# the launcher, which counts what they hold.
_PRCTL = {"x86_64": 157, "aarch64": 167}
_PR_SET_DUMPABLE = 4
_SECCOMP = {"x86_64": 317, "aarch64": 277}
CLONE, CLONE3 = {"x86_64": 56, "aarch64": 220}, 435
METADATA = {"chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
            "utime", "utimes", "utimensat", "futimesat", "setxattr", "lsetxattr", "fsetxattr",
            "removexattr", "lremovexattr", "fremovexattr", "setxattrat", "removexattrat",
            "file_setattr"}
# Refused only where a policy says so (see :class:`Policy`).
_CONDITIONAL = METADATA | {"memfd_create", "fallocate"}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000
# clone() flags that make a namespace: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000

# Classic BPF, as seccomp reads it (linux/filter.h, linux/seccomp.h).
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_RET_ALLOW, _RET_ERRNO, _RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
_RET_USER_NOTIF = 0x7FC00000
_NR, _ARCH = 0, 4                 # offsets in struct seccomp_data


def _arg(n: int) -> int:
    """The offset of argument ``n``'s low 32 bits in struct seccomp_data (every argument tested
    here is an int, a pid or a command, which the kernel reads from those bits)."""
    return 16 + 8 * n


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the seccomp filter refuses beyond its fixed list, by what else confines the process.

    ``shares_uid``: learner code runs under the grader's own user id (the grader is not root):
    chmod, chown, utime and xattr changes are refused (Landlock does not cover a file's
    metadata), the calls that act on another process by its id go to the launcher, which lets
    through only those aimed at the subject's own processes, and F_SETOWN and
    PR_SET_DUMPABLE are refused. ``refuse_memfd``: no memfd (where no memory cgroup counts its
    pages: they are in no process's address space). ``refuse_fallocate``: no fallocate (where
    the disk written is measured rather than bounded by a filesystem of its own: it reserves
    gigabytes between two measurements), with EOPNOTSUPP, which makes the C library's
    ``posix_fallocate`` write instead."""

    shares_uid: bool = False
    refuse_memfd: bool = False
    refuse_fallocate: bool = False


def architecture() -> str:
    """'x86_64' or 'aarch64', the architectures whose system call numbers are listed here; ''
    for any other."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine) \
        if machine in ("x86_64", "amd64", "aarch64", "arm64") else ""


def _refused(policy: Policy) -> set[str]:
    """The names refused outright under ``policy`` (of every architecture's list)."""
    names = set(_X86_64) | set(_AARCH64) | set(_COMMON)
    return (names - _CONDITIONAL) | (METADATA if policy.shares_uid else set()) \
        | ({"memfd_create"} if policy.refuse_memfd else set()) \
        | ({"fallocate"} if policy.refuse_fallocate else set())


def _errno_for(name: str) -> int:
    return {"socket": errnos.EACCES, "socketpair": errnos.EACCES,
            "fallocate": errnos.EOPNOTSUPP}.get(name, errnos.EPERM)


def targeted_calls(arch: str) -> dict[str, int]:
    """The calls :class:`grader.isolation.sandbox.supervise.Supervisor` decides, by name, on
    ``arch``."""
    return {**{"x86_64": _TARGETED_X86_64, "aarch64": _TARGETED_AARCH64}[arch],
            **_TARGETED_COMMON}


def seccomp_program(arch: str, policy: Policy = Policy()) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions: another architecture's calls (i386 or x32
    from an x86_64 process) kill the process; a refused call fails with EPERM (a socket with
    EACCES, fallocate with EOPNOTSUPP, clone3 with ENOSYS so that the C library falls back to
    clone, whose namespace flags are refused); under ``policy.shares_uid`` a call aimed at
    another process goes to the launcher (the same call aimed at the caller itself, id 0, is
    allowed); everything else is allowed."""
    table = {**{"x86_64": _X86_64, "aarch64": _AARCH64}[arch], **_COMMON}
    refused = _refused(policy)
    denied = {name: nr for name, nr in table.items() if name in refused}
    prog = [(_LD_W_ABS, 0, 0, _ARCH), (_JEQ, 1, 0, _AUDIT_ARCH[arch]),
            (_RET, 0, 0, _RET_KILL_PROCESS), (_LD_W_ABS, 0, 0, _NR)]
    if arch == "x86_64":
        prog += [(_JGE, 0, 1, _X32_SYSCALL_BIT), (_RET, 0, 0, _RET_KILL_PROCESS)]
    for name, nr in sorted(denied.items(), key=lambda item: item[1]):
        prog += [(_JEQ, 0, 1, nr), (_RET, 0, 0, _RET_ERRNO | _errno_for(name))]
    if policy.shares_uid:
        notify, eperm = _RET_USER_NOTIF, _RET_ERRNO | errnos.EPERM
        # (name, argument tests that all hold for the call to be allowed as it is; else notify)
        for name, nr in sorted(targeted_calls(arch).items(), key=lambda item: item[1]):
            own = {"kill": [(0, 0)], "prlimit64": [(0, 0)], "sched_setaffinity": [(0, 0)],
                   "sched_setscheduler": [(0, 0)], "sched_setparam": [(0, 0)],
                   "sched_setattr": [(0, 0)], "setpriority": [(0, 0), (1, 0)],
                   "ioprio_set": [(0, 1), (1, 0)]}.get(name, [])
            prog += _rule(nr, own, match=_RET_ALLOW, otherwise=notify)
        calls = _OWNER_CALLS[arch]
        prog += _refuse_values(calls["fcntl"], 1, (_F_SETOWN, _F_SETOWN_EX), eperm)
        prog += _refuse_values(calls["ioctl"], 1, (_FIOSETOWN, _SIOCSPGRP, _TIOCSPGRP), eperm)
        prog += _refuse_values(_PRCTL[arch], 0, (_PR_SET_DUMPABLE,), eperm)
    prog += [(_JEQ, 0, 1, CLONE3), (_RET, 0, 0, _RET_ERRNO | errnos.ENOSYS),
             (_JEQ, 0, 3, CLONE[arch]), (_LD_W_ABS, 0, 0, _arg(0)),
             (_JSET, 0, 1, _CLONE_NEW_NAMESPACES), (_RET, 0, 0, _RET_ERRNO | errnos.EPERM),
             (_RET, 0, 0, _RET_ALLOW)]
    return prog


def _rule(nr: int, tests: list[tuple[int, int]], *, match: int, otherwise: int) -> list[tuple]:
    """For call ``nr``: ``match`` when every (argument, value) of ``tests`` holds, else
    ``otherwise``. Other calls skip the block (the accumulator still holds their number)."""
    body = []
    for n, (arg, value) in enumerate(tests):
        left = len(tests) - n - 1            # tests after this one
        body += [(_LD_W_ABS, 0, 0, _arg(arg)), (_JEQ, 0, 2 * left + 1, value)]
    body += [(_RET, 0, 0, match)] if tests else []
    body += [(_RET, 0, 0, otherwise)]
    return [(_JEQ, 0, len(body), nr), *body]


def _refuse_values(nr: int, arg: int, values: tuple, action: int) -> list[tuple]:
    """For call ``nr``: ``action`` when argument ``arg`` is one of ``values``, else allowed."""
    body = [(_LD_W_ABS, 0, 0, _arg(arg))]
    for n, value in enumerate(values):
        body += [(_JEQ, len(values) - n, 0, value)]
    body += [(_RET, 0, 0, _RET_ALLOW), (_RET, 0, 0, action)]
    return [(_JEQ, 0, len(body), nr), *body]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER = 1, 1 << 3


def install_seccomp(policy: Policy = Policy()) -> int | None:
    """Install :func:`seccomp_program` on this thread (kept across fork and exec, and by every
    process it starts). Needs :func:`set_no_new_privs` first. Under ``policy.shares_uid``
    returns the listener a :class:`grader.isolation.sandbox.supervise.Supervisor` reads
    (close-on-exec), else None."""
    arch = architecture()
    if not arch:
        raise Unavailable(errnos.ENOSYS, f"no system call table here for {platform.machine()}")
    prog = seccomp_program(arch, policy)
    raw = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *insn) for insn in prog))
    fprog = _SockFprog(len(prog), ctypes.cast(raw, ctypes.c_void_p))
    flags = SECCOMP_FILTER_FLAG_NEW_LISTENER if policy.shares_uid else 0
    result = _syscall(_SECCOMP[arch], SECCOMP_SET_MODE_FILTER, flags, ctypes.byref(fprog))
    if result < 0:
        raise _fail("seccomp(SECCOMP_SET_MODE_FILTER)" + (" with a listener (Linux 5.5+)"
                                                          if flags else ""))
    return int(result) if flags else None


# ---------------------------------------------------------------------------------------------
# A user namespace of its own: a process count of its own (an ordinary user's learner code)

CLONE_NEWUSER = 0x10000000


@functools.lru_cache(maxsize=None)
def user_namespaces() -> bool:
    """Whether a process of this user may make a user namespace of its own here (tried in a
    child: kernels and container profiles differ)."""
    if not sys.platform.startswith("linux") or os.geteuid() == 0:
        return False
    pid = os.fork()
    if pid == 0:
        try:
            own_user_namespace(64)
            os._exit(0)
        except BaseException:       # noqa: BLE001 (any failure means no)
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def own_user_namespace(tasks: int) -> None:
    """Move this process into a new user namespace where its user and group ids map to
    themselves, and limit it to ``tasks`` processes and threads there. The kernel counts
    RLIMIT_NPROC per user namespace (Linux 5.14+): processes of the same user id elsewhere (the
    grader's, another submission's) no longer count against this one's limit, and its own do not
    count against theirs beyond the user's limit where it was made. Needs unprivileged user
    namespaces (a container's seccomp profile often refuses them: then :class:`Unavailable`)."""
    import resource

    uid, gid = os.geteuid(), os.getegid()
    if _libc().unshare(ctypes.c_int(CLONE_NEWUSER)) != 0:
        raise _fail("unshare(CLONE_NEWUSER)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))


# ---------------------------------------------------------------------------------------------
# Processes

def process_table() -> dict[int, tuple[int, str]]:
    """Every process now: pid -> (parent pid, state letter)."""
    table = {}
    for pid in procfs.process_pids():
        fields = procfs.process_stat(pid)
        if fields is not None:
            table[pid] = (int(fields[procfs.PARENT]), fields[procfs.STATE].decode())
    return table


def descendants(pid: int, table: dict | None = None) -> set[int]:
    """Every living (not zombie) process below ``pid``."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = set(), list(children.get(pid, ()))
    while todo:
        child = todo.pop()
        if child in found:
            continue
        found.add(child)
        todo += children.get(child, ())
    return {p for p in found if table[p][1] != "Z"}
