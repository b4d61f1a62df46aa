"""The launcher's decision on each call of learner code that names another process, where learner
code runs under the grader's own user id (the grader is not root): a signal (``kill``, ``tgkill``,
``pidfd_send_signal``...), a resource limit (``prlimit``), a priority or CPU set
(``setpriority``, ``sched_setaffinity``, ``ioprio_set``...). The kernel allows all of them between
processes of one user, so learner code could stop the judge, lower its limits or slow it down;
Landlock's ABI 6 scopes signals only, and older kernels nothing. The seccomp filter
(:func:`grader.isolation.sandbox.confine.seccomp_program`, ``Policy.shares_uid``) sends each such
call to the launcher through seccomp's user notification (Linux 5.5+, older than any Landlock), and
:class:`Supervisor` lets it go ahead only when every process it names belongs to the subject.
"""
from __future__ import annotations

import ctypes
import errno as errnos
import struct

from grader.isolation.sandbox import procfs
from grader.isolation.sandbox.confine import _libc, architecture, descendants, targeted_calls

# ioctl numbers: _IOWR('!', 0, struct seccomp_notif) and _IOWR('!', 1, struct seccomp_notif_resp)
_NOTIF_SIZE, _RESP_SIZE = 80, 24
_NOTIF_RECV = (3 << 30) | (_NOTIF_SIZE << 16) | (ord("!") << 8) | 0
_NOTIF_SEND = (3 << 30) | (_RESP_SIZE << 16) | (ord("!") << 8) | 1
_USER_NOTIF_FLAG_CONTINUE = 1
_PRIO_PROCESS, _PRIO_PGRP = 0, 1
_IOPRIO_WHO_PROCESS, _IOPRIO_WHO_PGRP = 1, 2


class Supervisor:
    """Decides, for the launcher, each call of the subject's that names another process (a
    signal, a limit, a priority, a CPU set): it goes ahead when every process it names is below
    ``root`` (the launcher: the subject and what it started), and fails with EPERM otherwise
    (the judge, another submission's subject, any process of the grader's user).

    Between the decision and the call the kernel goes on with, the named process could end and
    its id be given to a new process of another program: a window of microseconds, in which
    ids would have to wrap around the whole pid space."""

    def __init__(self, listener: int, root: int):
        self.listener, self.root = listener, root
        names = targeted_calls(architecture())
        self.names = {nr: name for name, nr in names.items()}
        self.allowed = self.refused = 0

    def serve(self) -> None:
        """Answer one pending call (the listener was readable)."""
        buffer = ctypes.create_string_buffer(_NOTIF_SIZE)
        if _libc().ioctl(ctypes.c_int(self.listener), ctypes.c_ulong(_NOTIF_RECV), buffer) != 0:
            return      # the caller was killed meanwhile (ENOENT), or nothing was pending
        notif_id, caller, _flags, nr, _arch, _ip, *args = struct.unpack("=QIIiIQ6Q", buffer.raw)
        try:
            ok = self._allowed(self.names.get(nr, ""), [a & 0xFFFFFFFF for a in args], caller)
        except OSError:
            ok = False
        self.allowed, self.refused = self.allowed + ok, self.refused + (not ok)
        response = struct.pack("=QqiI", notif_id, 0, 0 if ok else -errnos.EPERM,
                               _USER_NOTIF_FLAG_CONTINUE if ok else 0)
        _libc().ioctl(ctypes.c_int(self.listener), ctypes.c_ulong(_NOTIF_SEND),
                      ctypes.create_string_buffer(response, _RESP_SIZE))

    def _allowed(self, name: str, args: list[int], caller: int) -> bool:
        signed = [a - (1 << 32) if a & 0x80000000 else a for a in args]
        if name in ("kill", "rt_sigqueueinfo"):
            target = signed[0]
            if target == -1:
                return False                          # every process the user may signal
            return self._group(-target) if target <= 0 else self._process(target)
        if name in ("tkill", "tgkill", "rt_tgsigqueueinfo", "prlimit64", "sched_setaffinity",
                    "sched_setscheduler", "sched_setparam", "sched_setattr"):
            return signed[0] == 0 or self._process(signed[0])
        if name == "setpriority":
            which, who = signed[0], signed[1]
            return (which == _PRIO_PROCESS and (who == 0 or self._process(who))) or \
                (which == _PRIO_PGRP and self._group(who))
        if name == "ioprio_set":
            which, who = signed[0], signed[1]
            return (which == _IOPRIO_WHO_PROCESS and (who == 0 or self._process(who))) or \
                (which == _IOPRIO_WHO_PGRP and self._group(who))
        if name == "pidfd_send_signal":
            return self._process(_pidfd_target(caller, signed[0]))
        return False

    def _members(self) -> set[int]:
        return descendants(self.root)

    def _process(self, pid: int) -> bool:
        """``pid`` (a process or a thread) belongs to the subject."""
        if pid <= 0:
            return False
        return _thread_group(pid) in self._members()

    def _group(self, pgid: int) -> bool:
        """Process group ``pgid`` (0: the caller's own) holds only the subject's processes: it is
        the group of one of them (a group lives in one session, and the subject's first process
        starts a session of its own, which no other process can join)."""
        if pgid == 0:
            return True
        return any(_process_group(pid) == pgid for pid in self._members())


def _thread_group(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("Tgid:"):
                return int(line.split()[1])
    return -1


def _process_group(pid: int) -> int:
    fields = procfs.process_stat(pid)
    return -1 if fields is None else int(fields[procfs.PROCESS_GROUP])


def _pidfd_target(caller: int, fd: int) -> int:
    """The process a pidfd of ``caller`` refers to (its fdinfo's Pid line), or -1."""
    try:
        with open(f"/proc/{caller}/fdinfo/{fd}") as fh:
            for line in fh:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return -1
