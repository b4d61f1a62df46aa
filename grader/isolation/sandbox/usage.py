"""What a subject holds on disk and in processes where no filesystem or cgroup of its own bounds it
(kernel confinement: :mod:`grader.isolation.sandbox.launcher` measures it every :data:`POLL_S`), and
how its folder is removed afterwards, whatever learner code made there.

Every measurement is made by file descriptor, never by path: a folder chain longer than PATH_MAX
(4,096 bytes), deeper than Python's recursion or than the open-file limit is measured like any
other (:func:`folder_usage`),
and so is what no folder shows: files deleted while a process still holds them open or mapped,
memfd and ``O_TMPFILE`` files (:func:`held_usage`). Each measurement is made with the subject's
processes stopped (:func:`stopped`): a file moved from a folder not yet read to one already read
would otherwise be missed by that walk, and by every walk it raced. :func:`remove_tree` removes
a folder the same way, without recursion.

Why one module: the folder walk, the files held out of any folder's sight and the stop that makes
both exact are one measurement, of one limit (the disk), and the removal walks folders as the
measurement does; split, each part would hold half of one argument.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import stat
import time

from grader.isolation.sandbox import procfs

POLL_S = 0.1          # how often the launcher measures (the disk between two measurements)
MAPS_EVERY = 5        # mapped files are read every MAPS_EVERY-th measurement (their text is long)
MAX_ENTRIES = 100_000  # files and folders a subject's folder may hold


@dataclasses.dataclass
class Over:
    """A limit passed: ``what`` ('disk' or 'processes') and why, in the learner's words."""

    what: str
    why: str


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def folder_usage(folder: str, limit: int, *, seen: dict | None = None,
                 max_entries: int = MAX_ENTRIES) -> Over | int:
    """The bytes the files below ``folder`` take on disk (each inode once), walked by file
    descriptor with one folder open at a time (the way back up is ``..``, checked to lead to the
    folder the walk came from), so a chain of any depth is measured like any other; an
    :class:`Over` as soon as they pass ``limit``, or the folder holds more than ``max_entries``
    entries, or a folder the measuring process cannot read (``seen``: inode -> bytes, updated
    with every file met, so that a file later deleted while still held is known by its size).
    A walk whose way back up no longer leads where it came from (a folder moved while it was
    read: the subject is stopped while it is measured, so only in the instant it takes to stop)
    is made again, at most :data:`WALK_TRIES` times."""
    seen = {} if seen is None else seen
    for _ in range(WALK_TRIES):
        used = _walk(folder, limit, seen, max_entries)
        if used is not None:
            return used
    return Over("disk", "its folder kept changing while the grader measured it")


WALK_TRIES = 3


def _walk(folder: str, limit: int, seen: dict, max_entries: int) -> Over | int | None:
    """One walk of :func:`folder_usage`; None where the way back up led elsewhere."""
    counted: set[tuple[int, int]] = set()
    used = entries = 0
    try:
        cur = os.open(folder, _DIR_FLAGS)
    except OSError:
        return 0
    try:
        # One frame per folder on the way down from ``folder``: its (device, inode) and the
        # names in it not yet measured. Only ``cur`` (the last frame's folder) is open.
        top = os.fstat(cur)
        frames = [((top.st_dev, top.st_ino), _names(cur, max_entries + 1))]
        while frames:
            names = frames[-1][1]
            if not names:
                frames.pop()
                if not frames:
                    break
                up = os.open("..", _DIR_FLAGS, dir_fd=cur)
                os.close(cur)
                cur = up
                here = os.fstat(cur)
                if (here.st_dev, here.st_ino) != frames[-1][0]:
                    return None
                continue
            name = names.pop()
            entries += 1
            if entries > max_entries:
                return Over("disk", f"more than {max_entries:,} files and folders in its folder")
            try:
                st = os.stat(name, dir_fd=cur, follow_symlinks=False)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM):     # a folder read but not searched
                    return Over("disk", "a folder in its folder that the grader may not read")
                continue            # removed meanwhile
            key = (st.st_dev, st.st_ino)
            if key not in counted:
                counted.add(key)
                used += st.st_blocks * 512
                if stat.S_ISREG(st.st_mode):
                    seen[key] = st.st_blocks * 512
            if used > limit:
                return Over("disk", "")
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(name, _DIR_FLAGS, dir_fd=cur)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    if exc.errno in (errno.EACCES, errno.EPERM):
                        return Over("disk", "a folder in its folder that the grader may not read")
                    continue
                os.close(cur)
                cur = sub
                frames.append((key, _names(cur, max_entries + 1 - entries)))
        return used
    finally:
        os.close(cur)


def _names(fd: int, most: int) -> list[str]:
    """At most ``most`` names in the open folder ``fd`` (none where it cannot be listed)."""
    names = []
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                names.append(entry.name)
                if len(names) >= most:
                    break
    except OSError:
        pass
    return names


def held_usage(pids, *, owner: int, devices: set[int], seen: dict,
               with_maps: bool, file_bytes: int) -> Over | int:
    """The bytes of files no folder shows that ``pids`` keep alive on ``devices`` (the
    filesystems of the subject's folder): deleted (or never named: ``O_TMPFILE``) regular files
    owned by ``owner`` that one of them holds open, and, when ``with_maps``, such files deleted
    while mapped. (A memfd is memory, on a filesystem of its own: its cgroup counts it, or it is
    refused.) Each is measured through ``/proc/PID/task/TID/fd`` (the file itself), every thread
    of each process: a thread may hold a table of its own (``unshare(CLONE_FILES)``), and a
    process whose first thread has exited while others still run shows no table of its own.
    A mapped one through ``/proc/PID/map_files`` where this process may follow those links
    (CAP_SYS_ADMIN), else by the size a walk saw it at (``seen``), else as the largest file a
    subject may write (``file_bytes``). A thread whose files cannot be read at all, and which is
    not on its way out, is :class:`Over`."""
    counted: set[tuple[int, int]] = set()
    used = 0
    for pid in pids:
        threads = _threads(pid)
        tables = _fd_tables(pid, threads)
        if tables is None:
            return Over("disk", "a process whose open files the grader could not count")
        for folder, names in tables:
            for name in names:
                try:
                    st = os.stat(os.path.join(folder, name))
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and st.st_uid == owner \
                        and st.st_dev in devices and key not in counted:
                    counted.add(key)
                    seen[key] = st.st_blocks * 512
                    used += st.st_blocks * 512
        if with_maps:
            used += _mapped_deleted(pid, threads, devices, seen, counted, file_bytes)
    return used


def _threads(pid: int) -> list[str]:
    """The thread ids of ``pid`` (none once it is gone; the process's own id where its list of
    threads cannot be read)."""
    try:
        return os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    except OSError:
        return [str(pid)]


def _fd_tables(pid: int, threads: list[str]) -> list[tuple[str, list[str]]] | None:
    """``(folder, names)`` of the open descriptors of each of ``threads`` of ``pid`` (threads
    mostly share one table: it is then listed once per thread); None where a thread's cannot be
    read."""
    tables = []
    for tid in threads:
        folder = f"/proc/{pid}/task/{tid}/fd"
        names = _fd_names(folder, pid, int(tid))
        if names is None:
            return None
        tables.append((folder, names))
    return tables


def _fd_names(folder: str, pid: int, tid: int) -> list[str] | None:
    """The open descriptors of thread ``tid`` of ``pid`` (none when it ended); None where they
    cannot be read: a process its own user may not inspect. A thread on its way out is no
    longer inspectable by its own user (its memory is released first) but opens and writes
    nothing more, and its files are closed next: it holds none here (with hundreds of large
    processes exiting at once, one stays so for longer than 0.2 s). A process in the middle of
    ``execve`` is briefly not inspectable either (its new memory is not yet marked so), so it is
    asked again first."""
    for attempt in range(20):
        try:
            return os.listdir(folder)
        except FileNotFoundError:
            return []
        except OSError:
            if _ended(pid, tid):
                return []       # a zombie or an exiting thread: no file it can add to
            time.sleep(0.001 * (attempt + 1))
    return None


def _mapped_deleted(pid: int, threads: list[str], devices: set[int], seen: dict,
                    counted: set, file_bytes: int) -> int:
    text = _maps(pid, threads)
    if b"(deleted)" not in text:
        return 0
    used = 0
    for line in text.splitlines():
        if not line.endswith(b"(deleted)"):
            continue
        fields = line.split()
        try:
            major, minor = (int(x, 16) for x in fields[3].split(b":"))
            inode = int(fields[4])
        except (IndexError, ValueError):
            continue
        dev = os.makedev(major, minor)
        key = (dev, inode)
        if dev not in devices or inode == 0 or key in counted:
            continue
        counted.add(key)
        try:
            size = os.stat(f"/proc/{pid}/map_files/{fields[0].decode()}").st_blocks * 512
        except OSError:
            size = seen.get(key, file_bytes)
        used += size
    return used


def _maps(pid: int, threads: list[str]) -> bytes:
    """The memory map of ``pid``: its ``threads`` share one, which a thread still running shows
    (a process whose first thread has exited shows none of its own)."""
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/maps", "rb") as fh:
                text = fh.read()
        except OSError:
            continue
        if text:
            return text
    return b""


# The kernel's flag of a task past the point of no return in exit() (include/linux/sched.h).
PF_EXITING = 0x4


def _ended(pid: int, tid: int | None = None) -> bool:
    """Has thread ``tid`` of ``pid`` (default: the process itself) ended, or is it ending (a
    zombie, dead, or past the point of no return in exit: ``PF_EXITING``)?"""
    task = "" if tid is None else f"/task/{tid}"
    fields = procfs.stat_fields(f"/proc/{pid}{task}/stat")
    if fields is None:
        return True
    try:
        return fields[procfs.STATE] in procfs.ENDED_STATES \
            or bool(int(fields[procfs.FLAGS]) & PF_EXITING)
    except (IndexError, ValueError):
        return False


# How long a measurement waits for the subject's threads to stop once told to. A thread running
# its own code stops within microseconds; one inside a system call stops when it returns, before
# it runs any more of its own code: a rename or link in flight lands within this wait, and a long
# write in flight only adds bytes, which the next measurement counts.
STOP_WAIT_S = 0.002


class stopped:
    """Stop every process below ``root`` (SIGSTOP, again for any started meanwhile, until none
    is left running or :data:`STOP_WAIT_S` passed), and continue them on leaving (SIGCONT).
    ``found``: the processes below ``root`` as the caller just listed them (the first look).
    ``pids`` is every process below ``root`` then; ``still`` whether all of them stopped (one
    inside an uninterruptible system call is waited for, see :func:`_all_stopped`); where they did
    not within the wait, the measurement is made all the same."""

    def __init__(self, root: int, below, found: set[int] | None = None):
        self.root, self.list_below = root, below
        self.pids: set[int] = set()
        self.still = False
        self.first = found      # the processes below ``root`` just listed, if the caller has them

    def __enter__(self) -> "stopped":
        import signal

        deadline = time.monotonic() + STOP_WAIT_S
        while True:
            found, self.first = (self.first if self.first is not None
                                 else self.list_below(self.root)), None
            new = found - self.pids
            for pid in new:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except (ProcessLookupError, PermissionError):
                    pass
            self.pids |= found
            # Still only when a listing made after every process was told to stop finds none
            # new: one forked between a listing and its parent's stop is found by the next.
            if not new and not any(not _all_stopped(pid) for pid in self.pids):
                self.still = True
                return self
            if time.monotonic() > deadline:
                return self
            time.sleep(0.0005)

    def __exit__(self, *exc) -> None:
        import signal

        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass


def _all_stopped(pid: int) -> bool:
    """Every thread of ``pid`` stopped or ended. One inside an uninterruptible system call (D:
    waiting on the disk, or for memory in the middle of a fork) is not: the call still lands
    (a fork made so starts a process that no stop reached), so it is waited for."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        fields = procfs.stat_fields(f"/proc/{pid}/task/{tid}/stat")
        if fields is None:
            continue
        if (fields[procfs.STATE][:1] if fields else b"") \
                not in (b"T", b"t", *procfs.ENDED_STATES):
            return False
    return True


def task_count(pids) -> int:
    """Processes and threads among ``pids``."""
    total = 0
    for pid in pids:
        try:
            total += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return total


def children_tree(root: int) -> set[int] | None:
    """Every process below ``root`` by the kernel's ``/proc/PID/task/TID/children`` lists (a few
    small files, not a scan of every process), or None where the kernel has no such lists."""
    found: set[int] = set()
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except FileNotFoundError:
                if pid == root:
                    return None
                continue
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything below it, by file descriptor and without recursion: no
    folder chain (longer than PATH_MAX, deeper than the interpreter's stack or the open-file
    limit: at most two folders are open at once, the way back up is ``..``) and no mode learner
    code left on a folder (no read or search right: given back first, where this user owns it)
    stops it. Raises ``OSError`` only when something could not be removed."""
    parent, name = os.path.split(os.path.abspath(path.rstrip("/") or "/"))
    try:
        cur = os.open(parent, _DIR_FLAGS)
    except FileNotFoundError:
        return
    names: list[str] = []     # the way down from ``parent``: the folder ``cur`` is, by name
    try:
        try:
            st = os.stat(name, dir_fd=cur, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=cur)
            return
        cur = _enter(cur, name, st)
        names.append(name)
        while names:
            folder = None
            for child in os.listdir(cur):
                try:
                    st = os.stat(child, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    folder = (child, st)
                    break
                os.unlink(child, dir_fd=cur)
            if folder is not None:
                cur = _enter(cur, *folder)
                names.append(folder[0])
                continue
            up = os.open("..", _DIR_FLAGS, dir_fd=cur)
            os.close(cur)
            cur = up
            os.rmdir(names.pop(), dir_fd=cur)
    finally:
        os.close(cur)


def _enter(fd: int, name: str, st) -> int:
    """Open folder ``name`` in ``fd`` (giving its owner's rights back to it if it had taken them
    away), and close ``fd``."""
    try:
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    except PermissionError:
        if st.st_uid != os.geteuid():
            raise
        os.chmod(name, 0o700, dir_fd=fd, follow_symlinks=False)
        sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
    if not os.access(".", os.R_OK | os.X_OK, dir_fd=sub) and st.st_uid == os.geteuid():
        os.chmod(sub, 0o700)
    os.close(fd)
    return sub
