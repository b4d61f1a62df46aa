"""Reading ``/proc``: a process's or a thread's ``stat`` line (the one parser of it), and the
tasks a user runs.

The command's name (field 2) is in parentheses and may itself hold spaces and parentheses, so the
fields are read after its *last* ')'. Standard library only: the launcher imports it before it
confines itself.
"""
from __future__ import annotations

import os

# Indexes into :func:`stat_fields`' list (proc(5)'s field number minus 3).
STATE = 0          # R, S, D, T, t, Z, X, ...
PARENT = 1         # ppid
PROCESS_GROUP = 2  # pgrp
FLAGS = 6          # the kernel's PF_* flags
START_TIME = 19    # clock ticks after boot: with the pid, it names one process even after reuse

ENDED_STATES = (b"Z", b"X")   # a zombie, or dead


def stat_fields(path: str) -> list[bytes] | None:
    """The fields of the ``/proc/.../stat`` file at ``path`` after the command's name (the state
    first, :data:`STATE`), or None where it cannot be read (the task has ended)."""
    try:
        with open(path, "rb") as fh:
            line = fh.read()
    except OSError:
        return None
    return line[line.rfind(b")") + 2:].split()


def process_stat(pid: int | str) -> list[bytes] | None:
    """:func:`stat_fields` of process ``pid``."""
    return stat_fields(f"/proc/{pid}/stat")


def process_pids() -> list[int]:
    """Every process id in ``/proc`` now."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def processes_of_user(uid: int) -> dict[int, int]:
    """Each process whose real user id is ``uid`` now, with how many threads it has (processes
    ``/proc`` hides are not seen)."""
    found = {}
    for pid in process_pids():
        try:
            with open(f"/proc/{pid}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if ":" in line)
            if int(fields["Uid"].split()[0]) == uid:
                found[pid] = int(fields.get("Threads", "1"))
        except (OSError, ValueError, KeyError):
            continue
    return found


def tasks_of_user(uid: int) -> int:
    """How many tasks (processes and threads) user ``uid`` runs now: what ``RLIMIT_NPROC`` is
    checked against when one of its processes forks."""
    return sum(processes_of_user(uid).values())


def shared_task_limit(allowed: int) -> int:
    """The RLIMIT_NPROC that lets a process of this user start ``allowed`` tasks more, where the
    kernel counts them with everything else the user runs (``task_accounting`` 'shared'): what
    the user runs now plus ``allowed``. The one place of that sum (the subject's limit, the
    grader's note on it, the launcher's child)."""
    return tasks_of_user(os.getuid()) + allowed
