"""Attacker code run *unscreened* under kernel confinement, each in a subject of its own started as
the judge starts one (:func:`grader.isolation.sandbox.process.start`), on whatever platform the
calling test built (tests/fresh_machine.py: root or an ordinary user, a capped Landlock ABI, no
cgroups, a pod's /proc, Docker's seccomp profile).

``python tests/confined_attacks.py NAME...`` prints one JSON object: per attack, what the
attacker printed and how its subject ended (``exceeded``, ``why``, the exit status), what the
launcher refused, and whether its folder was gone afterwards. The limits are small so that each
attack is quick: 1 GiB of memory, 256 MiB of disk (and 1 GiB per file), 64 processes and
threads.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from grader.isolation.sandbox import cgroups, confine, process, usage  # noqa: E402

MIB = 2 ** 20
LIMITS = dict(memory_bytes=1024 * MIB, disk_bytes=256 * MIB, file_bytes=1024 * MIB, processes=64)

# Each prints what it reached: "REACHED ..." for what a confined process must not reach.
ATTACKS = {
    # Shared memory no address space sees: memfd pages (in a cgroup: counted; else refused).
    "memfd": r'''
import os
fds = []
try:
    for i in range(8):
        fds.append(os.memfd_create("x"))
        for _ in range(3):
            os.write(fds[-1], b"x" * (64 * 2**20))
    print("REACHED 1.5 GiB of memfd")
except OSError as e:
    print("memfd refused", e.errno)
''',
    "shm": r'''
for path in ("/dev/shm/x", "/run/shm/x"):
    try:
        open(path, "wb").write(b"x" * 2**20)
        print("REACHED", path)
    except OSError as e:
        print("shm refused", path, e.errno)
''',
    # fallocate: the raw call is refused; the C library's posix_fallocate then writes, and the
    # disk it writes is measured.
    "fallocate": r'''
import ctypes, os, platform
fd = os.open(os.path.join(os.environ["HOME"], "big"), os.O_WRONLY | os.O_CREAT)
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": 285, "aarch64": 47}[platform.machine()]
got = libc.syscall(ctypes.c_long(nr), ctypes.c_long(fd), ctypes.c_long(0), ctypes.c_long(0),
                   ctypes.c_long(2**30))
print("raw fallocate", got, ctypes.get_errno(), flush=True)
os.posix_fallocate(fd, 0, 2**30)
print("REACHED 1 GiB allocated")
''',
    # A folder chain longer than PATH_MAX (4,096 bytes) holding more than the limit.
    "long_path": r'''
import os, time
fd = os.open(os.environ["HOME"], os.O_RDONLY)
for i in range(25):
    os.mkdir("d" * 200, dir_fd=fd)
    n = os.open("d" * 200, os.O_RDONLY, dir_fd=fd); os.close(fd); fd = n
for i in range(5):
    f = os.open(f"f{i}", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
    os.write(f, b"x" * (64 * 2**20)); os.close(f)
print("REACHED 320 MiB past PATH_MAX", flush=True)
time.sleep(5)
''',
    # 1,200 levels of folders holding more than the limit at the bottom: counted, stopped, and
    # removed afterwards.
    "deep": r'''
import os, time
fd = os.open(os.environ["HOME"], os.O_RDONLY)
for i in range(1200):
    os.mkdir("d", dir_fd=fd)
    n = os.open("d", os.O_RDONLY, dir_fd=fd); os.close(fd); fd = n
for i in range(5):
    f = os.open(f"f{i}", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
    os.write(f, b"x" * (64 * 2**20)); os.close(f)
print("REACHED 320 MiB 1,200 levels down", flush=True)
time.sleep(5)
''',
    "unlinked": r'''
import os, time
h, fds = os.environ["HOME"], []
for i in range(5):
    fd = os.open(f"{h}/u{i}", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"x" * (64 * 2**20)); os.unlink(f"{h}/u{i}"); fds.append(fd)
print("REACHED 320 MiB held open after unlink", flush=True)
time.sleep(5)
''',
    "mapped": r'''
import mmap, os, time
h, maps = os.environ["HOME"], []
for i in range(5):
    fd = os.open(f"{h}/m{i}", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"x" * (64 * 2**20))
    maps.append(mmap.mmap(fd, 4096)); os.unlink(f"{h}/m{i}"); os.close(fd)
print("REACHED 320 MiB held mapped after unlink", flush=True)
time.sleep(5)
''',
    # Deleted files held by a thread after the process's first thread exited: the process then
    # shows no table of descriptors of its own (/proc/PID/fd), only its threads do.
    "leader_gone": r'''
import ctypes, os, threading, time
h = os.environ["HOME"]
def hold():
    fds = []
    for i in range(5):
        fd = os.open(f"{h}/g{i}", os.O_RDWR | os.O_CREAT)
        os.write(fd, b"x" * (64 * 2**20)); os.unlink(f"{h}/g{i}"); fds.append(fd)
        time.sleep(0.2)
    print("REACHED 320 MiB held by a thread after the first one exited", flush=True)
    time.sleep(5)
threading.Thread(target=hold).start()
time.sleep(0.1)
ctypes.CDLL(None).pthread_exit(None)
''',
    # A file moved, as the measurement reads its folders (inotify tells when), from the folder
    # read last into the one read first, and back: without the subject stopped while it is
    # measured, every walk misses it.
    "racer": r'''
import ctypes, os, struct, threading, time
h = os.environ["HOME"]
libc = ctypes.CDLL(None, use_errno=True)
for d in ("a", "m", "z"):
    os.mkdir(f"{h}/{d}")
order = [e.name for e in os.scandir(h) if e.name in ("a", "m", "z")]
first, pad, last = order
for i in range(20000):
    os.close(os.open(f"{h}/{pad}/p{i}", os.O_CREAT | os.O_WRONLY))
def write(path, mib):
    with open(path, "wb") as f:
        for _ in range(mib // 16):
            f.write(b"x" * (16 * 2**20))
fd = libc.inotify_init1(0)
watched = {libc.inotify_add_watch(fd, f"{h}/{d}".encode(), 0x10): d for d in (first, last)}
write(f"{h}/{last}/big", 160)
def more():
    time.sleep(1)
    write(f"{h}/{first}/more", 112)
    print("REACHED 272 MiB, hidden from the walk", flush=True)
threading.Thread(target=more, daemon=True).start()
place, end = last, time.time() + 12
while time.time() < end:
    data, off = os.read(fd, 4096), 0
    while off < len(data):
        w, mask, _, length = struct.unpack_from("iIII", data, off)
        off += 16 + length
        d = watched.get(w)
        if d == first and place == last:
            os.rename(f"{h}/{last}/big", f"{h}/{first}/big"); place = first
        elif d == last and place == first:
            os.rename(f"{h}/{first}/big", f"{h}/{last}/big"); place = last
print("REACHED the end, over the limit")
''',
    "socketpair": r'''
import socket
try:
    socket.socketpair()
    print("REACHED a socket pair")
except OSError as e:
    print("socketpair refused", e.errno)
''',
    # Other processes in /proc: the judge's command line, status, clock, limits; anyone's.
    "proc": r'''
import glob, os
others = [p for p in glob.glob("/proc/[0-9]*") if os.path.basename(p) != str(os.getpid())]
readable = []
for p in others:
    try:
        open(p + "/cmdline").read(); readable.append(p)
    except OSError:
        pass
print(("REACHED" if readable else "none of") , len(readable), "command lines of", len(others))
victim = os.environ["VICTIM"]
for name in ("cmdline", "status", "stat", "sched", "limits", "mountinfo", "environ"):
    for pid in (victim, str(os.getppid())):
        try:
            open(f"/proc/{pid}/{name}").read(); print("REACHED", pid, name)
        except OSError as e:
            print("proc refused", name, e.errno)
print("own status", len(open("/proc/self/status").read()) > 0)
''',
    # Calls that act on another process by its id: a process outside the subject (VICTIM, of
    # the grader's user), the launcher, and everyone of the user id.
    "signals": r'''
import os, resource, signal
victim, launcher = int(os.environ["VICTIM"]), os.getppid()
tries = {
    "kill": lambda: os.kill(victim, signal.SIGSTOP),
    "stop the launcher": lambda: os.kill(launcher, signal.SIGSTOP),
    "kill -1": lambda: os.kill(-1, signal.SIGSTOP),
    "prlimit": lambda: resource.prlimit(victim, resource.RLIMIT_NOFILE, (8, 8)),
    "setpriority": lambda: os.setpriority(os.PRIO_PROCESS, victim, 19),
    "setpriority user": lambda: os.setpriority(os.PRIO_USER, os.getuid(), 19),
    "affinity": lambda: os.sched_setaffinity(victim, {0}),
    "pidfd": lambda: signal.pidfd_send_signal(os.pidfd_open(victim), signal.SIGSTOP),
}
for name, attempt in tries.items():
    try:
        attempt(); print("REACHED", name) if os.getuid() == int(os.environ["GRADER_UID"]) \
            else print("own user only:", name)
    except OSError as e:
        print("refused", name, e.errno)
pid = os.fork()
if pid == 0:
    import time; time.sleep(30); os._exit(0)
os.kill(pid, signal.SIGKILL)
os.setpriority(os.PRIO_PROCESS, 0, 19)
resource.prlimit(os.getpid(), resource.RLIMIT_CORE, (0, 0))
print("own processes:", os.waitpid(pid, 0)[1] == signal.SIGKILL)
''',
    "forks": r'''
import os, time
n = 0
try:
    for _ in range(200):
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        n += 1
    print("REACHED 200 processes")
except OSError as e:
    print("processes stopped at", n, e.errno)
time.sleep(3)
''',
}


# Not an attack: where the subject's tasks are counted with its user's (a pod), the process limit
# is its program's alone; run() reads the launcher's as the program runs (launcher_nproc).
ATTACKS["process_limits"] = r'''
import resource, time
print("program nproc", resource.getrlimit(resource.RLIMIT_NPROC)[0])
time.sleep(1)
'''


def _launcher_nproc(launcher: int) -> int | None:
    """The soft process limit of ``launcher`` once it has started its program (its limits are
    final then); None if it never did within 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{launcher}/task/{launcher}/children") as fh:
                started = bool(fh.read().split())
            if started:
                with open(f"/proc/{launcher}/limits") as fh:
                    line = next(x for x in fh if x.startswith("Max processes"))
                soft = line.split()[2]
                return -1 if soft == "unlimited" else int(soft)   # as resource says it
        except (OSError, ValueError, StopIteration):
            return None
        time.sleep(0.01)
    return None


# The same as "forks", started while 80 other processes of the grader's user run (another
# submission's, say), which end a second later: where the process limit comes on top of what the
# user runs when the subject starts, it would then hold 80 more than its own count; the
# launcher's count stops it.
ATTACKS["forks_beside_others"] = "import time\ntime.sleep(2)\n" + ATTACKS["forks"]


def _sleepers(n: int) -> list[int]:
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            time.sleep(1)
            os._exit(0)
        pids.append(pid)
    return pids


def run(name: str, folder: str) -> dict:
    home = tempfile.mkdtemp(prefix=f"{name}-", dir=folder)
    os.chmod(home, 0o755)
    victim = os.fork()
    if victim == 0:
        time.sleep(120)
        os._exit(0)
    others = _sleepers(80 if name == "forks_beside_others" else 0)
    env = process.environment({"VICTIM": str(victim), "TMPDIR": home,
                               "GRADER_UID": str(os.getuid())}, home=home)
    started = time.monotonic()
    running = process.start([process.python_executable(), "-c", ATTACKS[name]],
                            isolation=process.probe("kernel"),
                            limits=process.Limits(timeout_s=60, **LIMITS), env=env, home=home,
                            reply=False)
    launcher_nproc = _launcher_nproc(running.proc.pid) if name == "process_limits" else None
    import threading

    reaper = threading.Thread(target=lambda: [os.waitpid(pid, 0) for pid in others])
    reaper.start()          # the others end a second in, and are gone once reaped
    try:
        running.proc.wait(timeout=60)
    except Exception:  # noqa: BLE001 (its time is up: finish ends it)
        pass
    reaper.join()
    finished = running.finish(grace_s=0)
    state = open(f"/proc/{victim}/stat").read().rsplit(")", 1)[1].split()[0]
    os.kill(victim, 9)
    os.waitpid(victim, 0)
    usage.remove_tree(home)       # what SubjectSession does: it must not fail on what was made
    report = running.report()
    return {"output": finished.output.decode(errors="replace")[-3000:],
            "returncode": finished.returncode, "exceeded": running.exceeded,
            "why": running.exceeded_why, "refused_calls": report.get("refused_calls", 0),
            "seconds": round(time.monotonic() - started, 1), "victim_state": state,
            "home_left": os.path.exists(home), "launcher_nproc": launcher_nproc}


def main() -> None:
    folder = tempfile.mkdtemp(prefix="confined-attacks-", dir=os.environ.get("ATTACK_DIR"))
    os.chmod(folder, 0o755)
    try:
        out = {"platform": {"uid": os.getuid(), "landlock_abi": confine.landlock_abi(),
                            "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0],
                            "cgroup": cgroups.available() is not None,
                            "isolation": process.probe("kernel").describe()},
               "attacks": {name: run(name, folder) for name in sys.argv[1:]}}
    finally:
        usage.remove_tree(folder)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
