"""The first process of every subject: it confines the process that will run learner code, starts
it, and when it ends finds, kills and counts everything it left behind.

``python -m grader.isolation.sandbox.launcher SPEC -- PROGRAM...`` (built by
:func:`grader.isolation.sandbox.process.start`; SPEC is JSON). The launcher is trusted code and runs
no learner code: it

1. becomes a *child subreaper* (:func:`grader.isolation.sandbox.confine.become_subreaper`), so that
   every process below it that loses its parent (double-forked, ``setsid``, an empty environment: it
   does not matter) becomes its child, never init's;
2. forks the child that will run PROGRAM, which, before ``exec``, closes every descriptor but its
   standard ones and the reply channel, starts a session of its own, asks the kernel to kill it
   first when memory runs out (``oom_score_adj`` 1000), and puts on the layers the spec asks for:
   a user namespace of its own (an ordinary user's learner code: its own process count),
   Landlock, another user id (root only), the parent-death signal, seccomp
   (:mod:`grader.isolation.sandbox.confine`; under bubblewrap they are a second wall, where they
   work; without it they are required). Where learner code shares the grader's user id, seccomp
   hands the launcher a listener: every call of the child's that names another process waits for the
   launcher's decision (:class:`grader.isolation.sandbox.supervise.Supervisor`);
3. waits until that child ends, or the caller closes the control pipe (its time is up), or
   SIGTERM, answering those calls meanwhile, and every :data:`grader.isolation.sandbox.usage.POLL_S`
   measures what it holds where nothing else bounds it (without bubblewrap: its folder and the
   deleted files its processes keep, by file descriptor; without a process count of its own: its
   processes and threads); past a limit it stops;
4. kills every process still below it (and, with a user id of its own, every process of that user
   id, with ``kill(-1)`` as that user: one call the kernel makes atomic with respect to ``fork``),
   reaps them, and counts them;
5. writes one JSON line to the report pipe: the child's wait status, the processes it left
   running (``leftovers``: killed), what could not be killed (``survivors``), a limit it stopped
   the child for (``exceeded``, and ``why``), the calls it refused (``refused_calls``), and a
   setup error if the child never reached ``exec``; then exits as the child did (its code, or its
   signal).

Nothing learner code can reach holds the report or the control pipe: both are closed in the
child before it is confined.
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time

from grader.isolation.sandbox import confine, procfs, supervise, usage

SWEEP_S = 10.0        # how long the launcher keeps killing what is below it
OOM_SCORE_ADJ = 1000  # the child first in line when the machine runs out of memory


def _child(spec: dict, uid: int | None, program: list[str], error_w: int,
           listener_w: socket.socket) -> None:
    """In the forked child: confine, then exec PROGRAM; never returns."""
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        keep = {0, 1, 2, error_w, listener_w.fileno(), *spec.get("keep_fds", ())}
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        # A session of its own: no signal to its process group reaches the launcher.
        os.setsid()
        if spec.get("shared_nproc"):
            _share_process_limit(int(spec["shared_nproc"]))
        try:    # first in line when memory runs out (raising one's own score needs no right)
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write(str(OOM_SCORE_ADJ))
        except OSError:
            pass
        layers = spec.get("layers", "none")
        if layers != "none":
            listener = _confine(spec, uid, required=layers == "required")
            if listener is not None:
                socket.send_fds(listener_w, [b"L"], [listener])
                os.close(listener)
        elif uid is not None:
            confine.drop_to(uid)
        listener_w.close()
        env = dict(os.environ)
        env.update(spec.get("env") or {})
        os.execve(program[0], program, env)
    except BaseException as exc:   # noqa: BLE001 (anything at all: said to the parent)
        try:
            os.write(error_w, f"{type(exc).__name__}: {exc}".encode()[:4000])
        finally:
            os._exit(126)


def _share_process_limit(allowed: int) -> None:
    """RLIMIT_NPROC where the subject's tasks are counted with the rest of its user's
    (``task_accounting`` 'shared'): what the user runs as the program starts plus ``allowed``,
    at most the hard limit this process has. The launcher's count holds the subject to
    ``allowed`` itself (:class:`Watch`); this bounds a burst between two of its counts."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    wanted = procfs.shared_task_limit(allowed)
    value = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NPROC, (value, value))


def _confine(spec: dict, uid: int | None, *, required: bool) -> int | None:
    """The layers, in the order they need: no_new_privs, the user namespace (its maps are written
    in /proc, which Landlock then closes), Landlock (as root still, so that every allowed path
    can be opened), the user id, the parent-death signal, seccomp last. Returns seccomp's
    listener where calls are to be supervised."""
    def attempt(layer, *args, **kwargs):
        try:
            return layer(*args, **kwargs)
        except confine.Unavailable:
            if required:
                raise
        return None

    confine.set_no_new_privs()
    if spec.get("nproc"):       # inside bubblewrap's user namespace: counted there
        import resource

        resource.setrlimit(resource.RLIMIT_NPROC, (int(spec["nproc"]),) * 2)
    if spec.get("userns_tasks"):
        confine.own_user_namespace(int(spec["userns_tasks"]))
    attempt(confine.landlock, spec.get("read", ()), spec.get("write", ()), spec.get("devices", ()))
    if uid is not None:
        confine.drop_to(uid)
    confine.die_with_parent()
    return attempt(confine.install_seccomp, confine.Policy(**spec.get("policy", {})))


def _fork(wait_s: float = 5.0) -> int:
    """``os.fork``, tried again for up to ``wait_s`` where the kernel says to (EAGAIN: this
    user's or this machine's processes at their limit, which others may soon leave)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


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


class Watch:
    """What the launcher measures of the processes below it, where nothing else bounds it: the
    disk they hold (``disk``: the folder they may write, and the deleted files they keep open or
    mapped) and their processes and threads (``tasks``)."""

    def __init__(self, spec: dict, owner: int):
        self.disk = spec.get("disk") or {}
        self.tasks = spec.get("tasks")
        self.owner = owner
        self.seen: dict = {}
        self.rounds = 0
        self.stopped_s = 0.0        # how long its measurements kept the subject stopped
        self.devices: set[int] = set()
        if self.disk:
            try:
                self.devices.add(os.stat(self.disk["folder"]).st_dev)
            except OSError:
                pass

    @property
    def active(self) -> bool:
        return bool(self.disk or self.tasks)

    def measure(self, me: int) -> usage.Over | None:
        self.rounds += 1
        below = _below(me)      # listed once per round: the stop below starts from it
        if self.tasks and usage.task_count(below) > self.tasks:
            return usage.Over("processes", f"more than {self.tasks} processes and threads")
        if not self.disk:
            return None
        started = time.monotonic()
        try:
            with usage.stopped(me, _below, found=below) as frozen:
                return self._disk(frozen.pids)
        finally:
            self.stopped_s += time.monotonic() - started

    def _disk(self, below: set[int]) -> usage.Over | None:
        limit = int(self.disk["bytes"])
        used = usage.folder_usage(self.disk["folder"], limit, seen=self.seen)
        if isinstance(used, usage.Over):
            return used
        held = usage.held_usage(below, owner=self.owner, devices=self.devices, seen=self.seen,
                                with_maps=self.rounds % usage.MAPS_EVERY == 1,
                                file_bytes=int(self.disk.get("file_bytes") or limit))
        if isinstance(held, usage.Over):
            return held
        if used + held > limit:
            return usage.Over("disk", "" if not held else "counting files it deleted but kept")
        return None


def _below(me: int) -> set[int]:
    found = usage.children_tree(me)
    return confine.descendants(me) if found is None else found


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
    listener_r, listener_w = socket.socketpair()
    try:
        child = _fork()
    except OSError as exc:      # the grader's failure too: the user may start no more processes
        _report(report_fd, {"status": None, "leftovers": [], "survivors": [], "uid": uid,
                            "error": f"the launcher could not start the program: "
                                     f"{type(exc).__name__}: {exc}", "stopped": False})
        return 126
    if child == 0:
        os.close(error_r)
        listener_r.close()
        _child(spec, uid, program, error_w, listener_w)
    os.close(error_w)
    listener_w.close()
    supervisor = None
    try:
        _, fds, _, _ = socket.recv_fds(listener_r, 1, 1)
    except OSError:
        fds = []
    listener_r.close()
    if fds:
        supervisor = supervise.Supervisor(fds[0], os.getpid())
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

    # Without bubblewrap there is no size-limited /tmp: what learner code holds on disk is
    # measured instead, and everything is stopped once it holds more than the limit; so are its
    # processes where no process count of its own bounds them.
    watch = Watch(spec, uid if uid is not None else os.geteuid())
    over = None
    status = None
    waiting = [wake_r, control_fd] + ([supervisor.listener] if supervisor else [])
    next_measure = time.monotonic()
    while status is None and not stop["asked"]:
        timeout = max(0.0, next_measure - time.monotonic()) if watch.active else 5.0
        ready = select.select(waiting, [], [], timeout)[0]
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        if control_fd in ready:
            stop["asked"] = True
        if supervisor and supervisor.listener in ready:
            supervisor.serve()
        status = _reap(child)
        # Measured on time however many calls wait to be decided.
        if status is None and watch.active and time.monotonic() >= next_measure:
            over = watch.measure(os.getpid())
            next_measure = time.monotonic() + usage.POLL_S
            if over is not None:
                break
    killed, survivors, ended = sweep(child, uid)
    status = status if status is not None else ended
    if status is None:   # killed in the sweep but not yet reaped
        status = os.waitpid(child, 0)[1]
    _report(report_fd, {"status": status, "leftovers": sorted(killed),
                        "survivors": sorted(survivors), "uid": uid,
                        "error": error.decode(errors="replace"), "stopped": stop["asked"],
                        "exceeded": over.what if over else "", "why": over.why if over else "",
                        "refused_calls": supervisor.refused if supervisor else 0,
                        "measured": {"rounds": watch.rounds,
                                     "stopped_s": round(watch.stopped_s, 4)}})
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
