"""Temporary folders that outlive a killed grading process by one run at most.

A grading process (``make grade``, a Ray worker) keeps its temporary folders (its judges'
compiler files, the subjects' folders, each submission's grading copy) in a folder of its own,
``ROOT/PID-STARTTIME/``. It removes them itself when it ends normally; one killed with SIGKILL
(Ray ends its workers so; an instructor's ``kill -9``, the kernel's OOM killer) cannot, so the
next process that makes its own folder under the same ``ROOT`` first removes the folders of
processes that have ended. The pid with its start time names one process even after the pid is
reused; a zombie counts as ended.
"""
from __future__ import annotations

import os
import time

from grader.isolation.sandbox import procfs
from grader.isolation.sandbox.usage import remove_tree


def start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks after boot), or None when it has ended (or
    is a zombie)."""
    fields = procfs.process_stat(pid)
    if fields is None or len(fields) <= procfs.START_TIME \
            or fields[procfs.STATE] in procfs.ENDED_STATES:
        return None
    return fields[procfs.START_TIME].decode()


def own_folder(root: str, mode: int = 0o700) -> str:
    """This process's folder under ``root`` (made on first use, with ``mode``, after removing
    those of processes that have ended). ``root`` itself is shared by the machine's users (sticky:
    each removes only its own)."""
    own = os.path.join(root, f"{os.getpid()}-{start_time(os.getpid())}")
    if not os.path.isdir(own):
        sweep(root)
        os.makedirs(root, exist_ok=True)
        try:
            os.chmod(root, 0o1777)
        except OSError:
            pass
        os.makedirs(own, mode=mode, exist_ok=True)
        os.chmod(own, mode)
    return own


def sweep(root: str, wait_s: float = 0.0) -> list[str]:
    """Remove the folders under ``root`` of processes that have ended, after waiting up to
    ``wait_s`` seconds for those still running to end. Returns the folders removed; one that
    could not be (another user's) is left as it is."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    deadline = time.monotonic() + wait_s
    removed = []
    for name in names:
        pid, _, start = name.partition("-")
        if not pid.isdigit():
            continue
        while start_time(int(pid)) == start and time.monotonic() < deadline:
            time.sleep(0.1)
        if start_time(int(pid)) != start:
            path = os.path.join(root, name)
            try:    # without recursion: a subject's folder may hold a chain of any depth
                remove_tree(path)
            except OSError:
                continue
            removed.append(path)
    return removed
