"""The first process of every subject: it confines the process that will run learner code, starts
it, and when it ends finds, kills and counts everything it left behind.

``python -m grader.isolation.launcher SPEC -- PROGRAM...`` (built by
:func:`grader.isolation.sandbox.start`; SPEC is JSON). The launcher is trusted code and runs no
learner code: it

1. becomes a *child subreaper* (:func:`grader.isolation.confine.become_subreaper`), so that every
   process below it that loses its parent (double-forked, ``setsid``, an empty environment: it
   does not matter) becomes its child, never init's;
2. forks the child that will run PROGRAM, which, before ``exec``, closes every descriptor but its
   standard ones and the reply channel, and puts on the layers the spec asks for: Landlock,
   another user id (root only), the parent-death signal, seccomp (:mod:`grader.isolation.confine`;
   under bubblewrap they are a second wall, where they work; without it they are required);
3. waits until that child ends, or the caller closes the control pipe (its time is up), or
   SIGTERM; then kills every process still below it (and, with a user id of its own, every process
   of that user id, with ``kill(-1)`` as that user: one call the kernel makes atomic with respect
   to ``fork``), reaps them, and counts them;
4. writes one JSON line to the report pipe: the child's wait status, the processes it left
   running (``leftovers``: killed), what could not be killed (``survivors``), a limit it stopped
   the child for (``exceeded``: without bubblewrap it measures the folder the child may write,
   which has no size-limited filesystem of its own), and a setup error if the child never
   reached ``exec``; then exits as the child did (its code, or its signal).

Nothing learner code can reach holds the report or the control pipe: both are closed in the
child before it is confined.
"""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import time

from grader.isolation import confine

SWEEP_S = 10.0        # how long the launcher keeps killing what is below it
DISK_POLL_S = 0.5     # how often it measures the folder learner code may write (no bubblewrap)
DISK_MAX_ENTRIES = 100_000    # files and folders there before it counts as full


def _child(spec: dict, uid: int | None, program: list[str], error_w: int) -> None:
    """In the forked child: confine, then exec PROGRAM; never returns."""
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        keep = {0, 1, 2, error_w, *spec.get("keep_fds", ())}
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        layers = spec.get("layers", "none")
        if layers != "none":
            _confine(spec, uid, required=layers == "required")
        elif uid is not None:
            confine.drop_to(uid)
        env = dict(os.environ)
        env.update(spec.get("env") or {})
        os.execve(program[0], program, env)
    except BaseException as exc:   # noqa: BLE001 (anything at all: said to the parent)
        try:
            os.write(error_w, f"{type(exc).__name__}: {exc}".encode()[:4000])
        finally:
            os._exit(126)


def _confine(spec: dict, uid: int | None, *, required: bool) -> None:
    """The layers, in the order they need: no_new_privs, Landlock (as root still, so that every
    allowed path can be opened), the user id, the parent-death signal, seccomp last."""
    def attempt(layer, *args, **kwargs):
        try:
            layer(*args, **kwargs)
        except confine.Unavailable:
            if required:
                raise

    confine.set_no_new_privs()
    attempt(confine.landlock, spec.get("read", ()), spec.get("write", ()), spec.get("devices", ()))
    if uid is not None:
        confine.drop_to(uid)
    confine.die_with_parent()
    attempt(confine.install_seccomp, block_metadata=bool(spec.get("block_metadata")))


def _reap(child: int) -> int | None:
    """Reap every ended process below; the wait status of ``child`` if it was among them."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = st


def _kill_user(uid: int) -> None:
    """Every process of ``uid``, killed by one ``kill(-1)`` made as that user."""
    pid = os.fork()
    if pid == 0:
        try:
            confine.drop_to(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def sweep(child: int, uid: int | None) -> tuple[set[int], set[int], int | None]:
    """Kill everything below this process until nothing is left (or :data:`SWEEP_S` passed).
    Returns (what was killed other than ``child``, what is still there, ``child``'s status if it
    ended meanwhile)."""
    killed: set[int] = set()
    status = None
    deadline = time.monotonic() + SWEEP_S
    me = os.getpid()
    while True:
        below = confine.descendants(me)
        if uid is not None:
            _kill_user(uid)
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        killed |= below - {child}
        time.sleep(0.005 if below else 0)
        reaped = _reap(child)
        status = reaped if reaped is not None else status
        if not below or time.monotonic() > deadline:
            break
    return killed, confine.descendants(me), status


def disk_used(folder: str, limit: int) -> int:
    """Bytes written below ``folder`` (``limit + 1`` as soon as that is passed, or when it holds
    more than :data:`DISK_MAX_ENTRIES` entries: the count stays cheap)."""
    used, entries, todo = 0, 0, [folder]
    while todo:
        try:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    entries += 1
                    st = entry.stat(follow_symlinks=False)
                    used += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
                    if used > limit or entries > DISK_MAX_ENTRIES:
                        return limit + 1
        except OSError:
            continue
    return used


def _report(fd: int, report: dict) -> None:
    try:
        os.write(fd, (json.dumps(report) + "\n").encode())
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec, program = json.loads(argv[0]), argv[2:]
    report_fd, control_fd = spec["report_fd"], spec["control_fd"]
    uid = spec.get("uid")
    if spec.get("uid_base") is not None:   # unique while this launcher lives: its own pid
        uid = int(spec["uid_base"]) + os.getpid()
    try:
        confine.become_subreaper()
        for folder in spec.get("own", ()):
            os.chown(folder, uid, uid)
    except OSError as exc:      # the grader's failure, said as such: nothing was started
        _report(report_fd, {"status": None, "leftovers": [], "survivors": [], "uid": uid,
                            "error": f"{type(exc).__name__}: {exc}", "stopped": False})
        return 126
    stop = {"asked": False}
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.update(asked=True))
    error_r, error_w = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        os.close(error_r)
        _child(spec, uid, program, error_w)
    os.close(error_w)
    # The launcher keeps only its stderr: the child alone holds the caller's stdin and channel,
    # so the caller sees them end when the child (and what it started) ends.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    for fd in (null, *spec.get("keep_fds", ())):
        os.close(fd)
    error = b""
    while chunk := os.read(error_r, 4096):
        error += chunk
    os.close(error_r)

    # Without bubblewrap there is no size-limited /tmp: the folder learner code may write is
    # measured instead, and everything is stopped once it holds more than the limit.
    disk = spec.get("disk") or {}
    exceeded = ""
    status = None
    while status is None and not stop["asked"]:
        ready = select.select([wake_r, control_fd], [], [], DISK_POLL_S if disk else 5.0)[0]
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        if control_fd in ready:
            stop["asked"] = True
        status = _reap(child)
        if status is None and disk and disk_used(disk["folder"], disk["bytes"]) > disk["bytes"]:
            exceeded = "disk"
            break
    killed, survivors, ended = sweep(child, uid)
    status = status if status is not None else ended
    if status is None:   # killed in the sweep but not yet reaped
        status = os.waitpid(child, 0)[1]
    _report(report_fd, {"status": status, "leftovers": sorted(killed),
                        "survivors": sorted(survivors), "uid": uid,
                        "error": error.decode(errors="replace"), "stopped": stop["asked"],
                        "exceeded": exceeded})
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.set_wakeup_fd(-1)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):    # (those two cannot be caught)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1


if __name__ == "__main__":
    sys.exit(main())
