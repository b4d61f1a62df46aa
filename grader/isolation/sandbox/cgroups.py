"""A cgroup of its own for each subject, where this machine lets the grader make one: its memory
counted as the kernel counts it (shared memory, memfd and tmpfs pages, page tables and kernel
memory included, which an address-space limit never sees), and a process count of its own (one
subject cannot use up another's), as isolate and go-judge do.

Where: cgroup v2 in a folder whose ``cgroup.subtree_control`` offers ``memory`` and ``pids`` and
which this user may write (the unified hierarchy's root as root on a host; a folder systemd
delegated to a user; or the folder ``COURSE_CGROUPS`` names), else cgroup v1's ``memory`` and
``pids`` hierarchies where they are writable (below this process's own group, else at their
root). Containers usually give neither: then :func:`available` says why, and the subject's limits
are the ones :mod:`grader.isolation.sandbox.process` sets without it (docs/trust.md says which
hold).

Nothing is assumed: :func:`available` makes a group, sets its limits, moves a process into it and
removes it again, once per process.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import secrets
import signal
import subprocess
import time

from grader import _environment as environment

MOUNT = "/sys/fs/cgroup"
PREFIX = "course-subject-"


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """Where subjects' groups are made: ``version`` 2 (one folder for both controllers) or 1
    (``memory`` and ``pids`` folders of their own hierarchies)."""

    version: int
    memory: str
    pids: str

    def folders(self) -> list[str]:
        return [self.memory] if self.version == 2 else [self.memory, self.pids]


def _own_groups() -> dict[str, str]:
    """This process's group per controller ('' for cgroup v2's unified hierarchy)."""
    out = {}
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for name in controllers.split(",") if controllers else [""]:
                    out[name] = path
    except OSError:
        pass
    return out


def _candidates() -> list[Hierarchy]:
    """The places to try, nearest to this process first."""
    chosen = os.environ.get(environment.CGROUPS, "").strip()
    if chosen and chosen != "off":
        return [Hierarchy(2, chosen, chosen)]
    own = _own_groups()
    out = []
    unified = MOUNT if os.path.exists(os.path.join(MOUNT, "cgroup.controllers")) else \
        os.path.join(MOUNT, "unified")
    if os.path.exists(os.path.join(unified, "cgroup.controllers")) and "" in own:
        path = own[""].strip("/")
        parts = path.split("/") if path else []
        # This process's own group holds processes (it cannot also enable controllers for
        # groups below it), so its ancestors, nearest first, then the root.
        for n in range(len(parts) - 1, -1, -1):
            folder = os.path.join(unified, *parts[:n])
            out.append(Hierarchy(2, folder, folder))
    memory = [os.path.join(MOUNT, "memory", own.get("memory", "/").strip("/")),
              os.path.join(MOUNT, "memory")]
    pids = [os.path.join(MOUNT, "pids", own.get("pids", "/").strip("/")),
            os.path.join(MOUNT, "pids")]
    for m in dict.fromkeys(os.path.normpath(x) for x in memory):
        for p in dict.fromkeys(os.path.normpath(x) for x in pids):
            # (a hierarchy's root has no limit files of its own: its groups do)
            if os.path.exists(os.path.join(m, "memory.usage_in_bytes")) and \
                    os.path.exists(os.path.join(p, "cgroup.procs")) and \
                    os.path.isdir(os.path.join(MOUNT, "pids")):
                out.append(Hierarchy(1, m, p))
    return out


def _usable(h: Hierarchy) -> str:
    """'' when a group made in ``h`` limits a process moved into it, else why not."""
    if h.version == 2:
        try:
            with open(os.path.join(h.memory, "cgroup.subtree_control")) as fh:
                enabled = fh.read().split()
        except OSError as exc:
            return f"{h.memory}: {exc.strerror}"
        if not {"memory", "pids"} <= set(enabled):
            return f"{h.memory} does not offer memory and pids to the groups below it"
    try:
        group = Group.make(h, PREFIX + "probe-" + secrets.token_hex(4), 256 * 2 ** 20, 16)
    except OSError as exc:
        return f"{h.memory}: {exc.strerror or exc}"
    try:
        proc = subprocess.run(group.entering(["true"]), capture_output=True, timeout=30)
        if proc.returncode != 0:
            return f"a process could not join {group.folders[0]} ({proc.stderr.decode()[-200:]})"
        return ""
    finally:
        group.remove()


@functools.lru_cache(maxsize=None)
def _found() -> tuple[Hierarchy | None, str]:
    if os.environ.get(environment.CGROUPS, "").strip() == "off":
        return None, f"turned off ({environment.CGROUPS}=off)"
    if not os.path.isdir(MOUNT):
        return None, f"no cgroup filesystem at {MOUNT}"
    reasons = []
    for h in _candidates():
        why = _usable(h)
        if not why:
            return h, ""
        reasons.append(why)
    return None, ("no cgroup folder with the memory and pids controllers that this user may "
                  "write" + (f" ({reasons[0]})" if reasons else ""))


def available() -> Hierarchy | None:
    """Where subjects' groups are made here, or None (:func:`why_not` says why)."""
    return _found()[0]


def why_not() -> str:
    return _found()[1]


# The shell that puts itself into a group, then runs the command: the first process of a
# subject's command line, so that nothing of it starts outside the group. A join that fails
# says so and exits 125 before anything runs.
_JOIN = ('while [ "$1" != -- ]; do echo $$ > "$1" || { echo "' + "{marker}" + ': $1" >&2; '
         'exit 125; }; shift; done; shift; exec "$@"')
JOIN_FAILED = "course-cgroup-join-failed"


@dataclasses.dataclass
class Group:
    """One subject's group: made before it starts, removed after everything in it is gone."""

    hierarchy: Hierarchy
    folders: list[str]
    memory_bytes: int | None
    tasks: int

    @classmethod
    def make(cls, h: Hierarchy, name: str, memory_bytes: int | None, tasks: int) -> "Group":
        folders = [os.path.join(f, name) for f in h.folders()]
        made = []
        try:
            for folder in folders:
                os.mkdir(folder, 0o755)
                made.append(folder)
            group = cls(h, folders, memory_bytes, tasks)
            group._limit()
        except OSError:
            for folder in reversed(made):
                try:
                    os.rmdir(folder)
                except OSError:
                    pass
            raise
        return group

    def _write(self, folder: str, name: str, value) -> None:
        with open(os.path.join(folder, name), "w") as fh:
            fh.write(str(value))

    def _limit(self) -> None:
        memory, pids = self.folders[0], self.folders[-1]
        if self.hierarchy.version == 2:
            if self.memory_bytes:
                self._write(memory, "memory.max", self.memory_bytes)
                for name, value in (("memory.swap.max", 0), ("memory.oom.group", 1)):
                    if os.path.exists(os.path.join(memory, name)):
                        self._write(memory, name, value)
        elif self.memory_bytes:
            self._write(memory, "memory.limit_in_bytes", self.memory_bytes)
            if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
                self._write(memory, "memory.memsw.limit_in_bytes", self.memory_bytes)
        self._write(pids, "pids.max", self.tasks)

    def entering(self, argv: list[str]) -> list[str]:
        """``argv`` run from inside this group (every process it starts stays in it)."""
        return ["sh", "-c", _JOIN.replace("{marker}", JOIN_FAILED), "sh",
                *[os.path.join(f, "cgroup.procs") for f in self.folders], "--", *argv]

    def processes(self) -> set[int]:
        """Every process in the group now."""
        out: set[int] = set()
        for folder in self.folders:
            try:
                with open(os.path.join(folder, "cgroup.procs")) as fh:
                    out |= {int(line) for line in fh if line.strip()}
            except (OSError, ValueError):
                pass
        return out

    def events(self) -> dict[str, int]:
        """What the kernel refused the group: ``oom_kills`` (processes it killed for memory) and
        ``pids_refused`` (forks refused at the process limit)."""
        memory, pids = self.folders[0], self.folders[-1]
        counts = {}
        for folder, name in ((memory, "memory.events" if self.hierarchy.version == 2
                              else "memory.oom_control"), (pids, "pids.events")):
            try:
                with open(os.path.join(folder, name)) as fh:
                    for line in fh:
                        key, _, value = line.partition(" ")
                        if value.strip().isdigit():
                            counts[key] = int(value)
            except OSError:
                pass
        return {"oom_kills": counts.get("oom_kill", 0), "pids_refused": counts.get("max", 0)}

    def kill(self, seconds: float = 10.0, settle_s: float = 0.0) -> list[int]:
        """Kill everything in the group until it is empty (or ``seconds`` passed), after waiting
        up to ``settle_s`` for it to empty by itself (processes killed already, still ending);
        the ones killed here."""
        killed: set[int] = set()
        settled = time.monotonic() + settle_s
        while self.processes() and time.monotonic() < settled:
            time.sleep(0.01)
        deadline = time.monotonic() + seconds
        kill_file = os.path.join(self.folders[0], "cgroup.kill")
        while True:
            found = self.processes()
            if not found or time.monotonic() > deadline:
                return sorted(killed)
            if os.path.exists(kill_file):
                try:
                    self._write(self.folders[0], "cgroup.kill", 1)
                except OSError:
                    pass
            for pid in found:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            killed |= found
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left and remove the group (its memory charges go to the parent)."""
        self.kill()
        for folder in reversed(self.folders):
            for _ in range(100):
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError:       # busy while the last processes are reaped
                    time.sleep(0.02)


def make(name: str, memory_bytes: int | None, tasks: int) -> Group | None:
    """A group for one subject where :func:`available`, else None."""
    h = available()
    return None if h is None else Group.make(h, PREFIX + name, memory_bytes, tasks)
