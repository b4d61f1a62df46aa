"""Every limit docs/trust.md states for learner code without bubblewrap holds at every instant, on
every platform the suite can make of this machine (tests/fresh_machine.py): as root and as an
ordinary user; Landlock ABI 7 and capped to 1, 3, 4 and 6 as older kernels have it; with a
cgroup of its own and without; in a pod (/proc masked, Docker's seccomp profile, no user
namespace). The attacker code (tests/confined_attacks.py) runs unscreened in a subject started
as the judge starts one; what it reached, and how its subject ended, is compared here.

What each attack is for: memory no address space sees (memfd, /dev/shm); disk written between
two measurements (fallocate), past PATH_MAX, 1,200 folders deep (and removed afterwards), held
by deleted files kept open or mapped (or kept open by a thread after the process's first thread
exited), or moved out of the measurement's way as it reads (a racer told by inotify); a socket
pair (which could hold files out of sight); other processes in /proc; signals, limits,
priorities and CPU sets aimed at a process outside; more processes than allowed.
The same attacks go through the real `make grade` in tests/test_platforms.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

import confined_attacks
import fresh_machine
from conftest import at_once

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
why_not = fresh_machine.available()
needs_root = pytest.mark.skipif(bool(why_not), reason=why_not)

EVERY = ["memfd", "shm", "fallocate", "long_path", "deep", "unlinked", "mapped", "leader_gone",
         "racer", "socketpair", "proc", "signals", "forks"]
QUICK = ["memfd", "shm", "socketpair", "proc", "signals", "forks"]
NOBODY = fresh_machine.NOBODY
# name -> (how tests/fresh_machine.py builds it, extra environment, attacks)
PLATFORMS = {
    "root": (dict(), {}, EVERY),
    "root-abi1-no-cgroup": (dict(), {"COURSE_LANDLOCK_ABI": "1", "COURSE_CGROUPS": "off"},
                            EVERY),
    "nobody": (dict(user=NOBODY), {}, EVERY),
    "nobody-abi1": (dict(user=NOBODY), {"COURSE_LANDLOCK_ABI": "1"}, QUICK),
    "nobody-abi3": (dict(user=NOBODY), {"COURSE_LANDLOCK_ABI": "3"}, QUICK),
    "nobody-abi4": (dict(user=NOBODY), {"COURSE_LANDLOCK_ABI": "4"}, QUICK),
    "nobody-abi6": (dict(user=NOBODY), {"COURSE_LANDLOCK_ABI": "6"}, QUICK),
    "pod": (dict(user=NOBODY, mask_proc=True, seccomp="docker", hide_bwrap=False), {},
            [*EVERY, "forks_beside_others", "process_limits"]),
}


def _attack(platform: str) -> dict:
    how, extra, attacks = PLATFORMS[platform]
    folder = tempfile.mkdtemp(prefix=f"limits-{platform}-", dir="/tmp")
    os.chmod(folder, 0o777)
    env = {"PATH": "/usr/bin:/bin", "HOME": folder, "ATTACK_DIR": folder, **extra}
    try:
        proc = subprocess.run(fresh_machine.command(
            [sys.executable, os.path.join(HERE, "confined_attacks.py"), *attacks], **how),
            capture_output=True, text=True, timeout=900, env=env, cwd=folder)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def attacked(request):
    wanted = sorted({item.callspec.params["platform"] for item in request.session.items
                     if "platform" in getattr(item, "callspec", type("", (), {"params": {}}))
                     .params and item.module.__name__ == __name__})
    return dict(zip(wanted, at_once(_attack, wanted)))


def _lines(result: dict) -> list[str]:
    return [line for line in result["output"].splitlines() if not line.startswith("W1")]


@needs_root
@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_the_platform_confines_as_docs_trust_md_says(attacked, platform):
    info = attacked[platform]["platform"]
    how, extra, _ = PLATFORMS[platform]
    assert info["uid"] == (how.get("user") or 0)
    assert info["landlock_abi"] == int(extra.get("COURSE_LANDLOCK_ABI", 7))
    # A cgroup only where the grader is root here (this machine's cgroup v1 folders are root's).
    assert info["cgroup"] == (how.get("user") is None and "COURSE_CGROUPS" not in extra)
    assert info["isolation"].startswith("kernel confinement without bubblewrap")


@needs_root
@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_no_attack_reaches_anything(attacked, platform):
    results = attacked[platform]["attacks"]
    for name, result in results.items():
        reached = [line for line in _lines(result) if line.startswith("REACHED")]
        if name in ("racer", "long_path", "deep", "unlinked", "mapped", "leader_gone"):
            # Each prints once it holds too much: stopped for it within one measurement.
            assert result["exceeded"] == "disk", (name, result)
            assert not any("end" in line for line in reached), (name, reached)
        else:
            assert reached == [], (name, result)
        assert not result["home_left"], (name, "its folder was not removed")


@needs_root
@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_memory_no_address_space_sees_is_counted_or_refused(attacked, platform):
    results, cgroup = attacked[platform]["attacks"], attacked[platform]["platform"]["cgroup"]
    memfd = results["memfd"]
    if cgroup:     # counted with the subject's memory: the kernel stopped it at its limit
        assert memfd["exceeded"] == "memory", memfd
    else:
        assert "memfd refused 1" in _lines(memfd), memfd
    if "shm" in results:
        assert _lines(results["shm"]).count("shm refused /dev/shm/x 13") == 1, results["shm"]


@needs_root
@pytest.mark.parametrize("platform", [p for p in sorted(PLATFORMS) if "fallocate" in PLATFORMS[p][2]])
def test_disk_is_bounded_whatever_holds_it(attacked, platform):
    results = attacked[platform]["attacks"]
    assert "raw fallocate -1 95" in _lines(results["fallocate"])       # EOPNOTSUPP
    assert results["fallocate"]["exceeded"] == "disk"   # what posix_fallocate wrote instead
    assert results["deep"]["why"] == "", results["deep"]   # its bytes, counted 1,200 levels down
    assert "deleted but kept" in results["unlinked"]["why"]
    assert "deleted but kept" in results["mapped"]["why"]
    assert "deleted but kept" in results["leader_gone"]["why"]   # held by a thread, not the first


@needs_root
@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_no_call_reaches_a_process_outside(attacked, platform):
    signals = attacked[platform]["attacks"]["signals"]
    lines = _lines(signals)
    assert "own processes: True" in lines, signals
    assert signals["victim_state"] != "T", "a process outside the subject was stopped"
    shares = PLATFORMS[platform][0].get("user") is not None
    # Under the grader's user id the launcher decides each call (8 refused); under a user id of
    # its own the kernel refuses what names another user's process.
    assert (signals["refused_calls"] >= 7) == shares, signals
    proc = _lines(attacked[platform]["attacks"]["proc"])
    assert proc[0].startswith("none of 0 command lines"), proc


@needs_root
@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_processes_are_counted_on_their_own_or_stopped(attacked, platform):
    forks = attacked[platform]["attacks"]["forks"]
    stopped = [line for line in _lines(forks) if line.startswith("processes stopped at")]
    if platform == "pod":
        # No cgroup, no user namespace, the grader's own user id: the limit comes on top of what
        # the user runs when the subject starts, and the launcher stops it past its own count.
        assert forks["exceeded"] == "processes" or stopped and int(stopped[0].split()[3]) <= 64, \
            forks
        # Started beside 80 other processes of the user, its limit was 80 higher: its launcher
        # stopped it past its own 64.
        beside = attacked[platform]["attacks"]["forks_beside_others"]
        assert beside["exceeded"] == "processes", beside
    else:
        # Its own count (a user id, a cgroup, a user namespace): stopped at the limit exactly.
        assert stopped and int(stopped[0].split()[3]) == 63, forks


# ---------------------------------------------------------------------------------------------
# The measurement and the removal themselves, on folders made here (any user)

def _chain(top: str, levels: int, name: str = "d" * 200, data: int = 0,
           closed: bool = True) -> None:
    """``levels`` folders inside one another below ``top``, made by file descriptor (their path
    passes PATH_MAX soon), ``data`` bytes in a file at the bottom, and (``closed``) a folder
    there whose owner took away its own right to read it."""
    fd = os.open(top, os.O_RDONLY)
    for _ in range(levels):
        os.mkdir(name, dir_fd=fd)
        deeper = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    if data:
        f = os.open("data", os.O_WRONLY | os.O_CREAT, dir_fd=fd)
        os.write(f, b"x" * data)
        os.close(f)
    if closed:
        os.mkdir("no-read-right", 0o300, dir_fd=fd)
    os.close(fd)


def test_a_folder_chain_past_path_max_is_counted_and_removed(tmp_path):
    from grader.isolation.sandbox import usage

    top = str(tmp_path / "home")
    os.mkdir(top)
    _chain(top, 30, data=3 * 2 ** 20, closed=False)    # 6,000 characters of path
    with pytest.raises(OSError):                   # what a walk by path meets
        os.stat(os.path.join(top, *["d" * 200] * 30))
    used = usage.folder_usage(top, 10 * 2 ** 20)
    assert isinstance(used, int) and used >= 3 * 2 ** 20
    over = usage.folder_usage(top, 2 ** 20)
    assert isinstance(over, usage.Over) and over.what == "disk"
    # A folder its owner closed to itself: root reads it all the same; another measurer counts
    # it as over the limit (what it cannot read, it cannot count).
    os.mkdir(os.path.join(top, "closed"), 0o300)
    read = usage.folder_usage(top, 10 * 2 ** 20)
    assert isinstance(read, int) if os.geteuid() == 0 else "may not read" in read.why
    usage.remove_tree(top)
    assert not os.path.exists(top)


def test_a_chain_deeper_than_the_open_file_limit_is_measured_and_removed(tmp_path):
    """5,000 levels, 3 MiB at the bottom: measured with one folder open at a time (under an
    open-file limit of 64) and removed without recursion."""
    top = str(tmp_path / "home")
    os.mkdir(top)
    _chain(top, 5000, name="d", data=3 * 2 ** 20, closed=False)
    code = ("import resource, sys\n"
            "from grader.isolation.sandbox import usage\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))\n"
            "print(usage.folder_usage(sys.argv[1], 2 ** 30), usage.folder_usage(sys.argv[1], 2 ** 20))")
    proc = subprocess.run([sys.executable, "-c", code, top], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    used, over = proc.stdout.split(" ", 1)
    assert int(used) >= 3 * 2 ** 20 + 5000 * 512, proc.stdout       # the file and every folder
    assert over.startswith("Over(what='disk'"), proc.stdout
    from grader.isolation.sandbox import usage

    usage.remove_tree(top)      # (Python 3.11's shutil.rmtree recurses per level: RecursionError)
    assert not os.path.exists(top)


def test_a_walk_whose_way_up_leads_elsewhere_is_made_again(tmp_path, monkeypatch):
    """A folder moved while it is read (in the instant before the subject stops): the walk is
    made again, not trusted; one that never holds still is over the limit, not unmeasured."""
    from grader.isolation.sandbox import usage

    top = str(tmp_path / "home")
    os.mkdir(top)
    _chain(top, 3, name="d", data=2 ** 20, closed=False)
    real_fstat, calls = os.fstat, {"n": 0}

    def moved_once(fd):             # the first walk's way back up meets another folder
        st = real_fstat(fd)
        calls["n"] += 1
        if calls["n"] == 3:
            return os.stat_result((st.st_mode, st.st_ino + 1, *tuple(st)[2:10]))
        return st

    monkeypatch.setattr(usage.os, "fstat", moved_once)
    assert usage.folder_usage(top, 2 ** 30) >= 2 ** 20
    monkeypatch.setattr(usage.os, "fstat", lambda fd: os.stat_result(
        (real_fstat(fd).st_mode, calls.update(n=calls["n"] + 1) or calls["n"],
         *tuple(real_fstat(fd))[2:10])))
    over = usage.folder_usage(top, 2 ** 30)
    assert isinstance(over, usage.Over) and "kept changing" in over.why


def test_a_measurement_stops_the_processes_forked_while_it_stops_their_parents(monkeypatch):
    """A tree that forks all the time (a child every millisecond, each forking on): when a
    measurement holds it still, every process below is stopped, the ones forked between a
    listing and their parent's stop included; leaving continues them all. (The wait for them
    to stop is lengthened: what is tested is what "still" means, not how soon this loaded
    machine gets there.)"""
    from grader.isolation.sandbox import usage

    monkeypatch.setattr(usage, "STOP_WAIT_S", 1.0)
    forker = subprocess.Popen([sys.executable, "-c", (
        "import os, time\n"
        "for _ in range(200):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(0.001)\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(30); os._exit(0)\n"
        "        time.sleep(30); os._exit(0)\n"
        "    time.sleep(0.001)\n"
        "time.sleep(30)\n")])
    me = os.getpid()

    def below(root):
        return {pid for pid in usage.children_tree(root) or set()
                if _descends_from(pid, forker.pid)}

    try:
        time.sleep(0.05)
        held = 0
        for _ in range(20):
            with usage.stopped(me, below) as frozen:
                if frozen.still:
                    held += 1
                    now = below(me)
                    assert now <= frozen.pids, now - frozen.pids
                    assert all(usage._all_stopped(pid) for pid in now)
            time.sleep(0.005)
        assert held >= 10, held
        assert not all(usage._all_stopped(pid) for pid in below(me))   # continued
    finally:
        for pid in below(me):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        forker.wait()


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open(f"/proc/{pid}/stat") as fh:
                line = fh.read()
        except OSError:
            return False
        pid = int(line[line.rfind(")") + 2:].split()[1])
    return False


# A process holding an 8 MiB file it deleted, out of sight of a reader of its first thread's
# files: its first thread exits while another still holds the file (``leader_gone``), or the
# thread that holds it has a table of descriptors of its own (``own_table``).
HIDDEN_HOLDERS = {
    "leader_gone": """
import ctypes, os, sys, threading, time
def hold():
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); os.write(fd, b"x" * 8 * 2**20)
    os.unlink(sys.argv[1]); print("held", flush=True); time.sleep(60)
threading.Thread(target=hold).start()
time.sleep(0.5)
ctypes.CDLL(None).pthread_exit(None)
""",
    "own_table": """
import ctypes, os, sys, threading, time
def hold():
    assert ctypes.CDLL(None, use_errno=True).unshare(0x400) == 0     # CLONE_FILES
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); os.write(fd, b"x" * 8 * 2**20)
    os.unlink(sys.argv[1]); print("held", flush=True); time.sleep(60)
threading.Thread(target=hold).start()
time.sleep(60)
""",
}


@pytest.mark.parametrize("how", sorted(HIDDEN_HOLDERS))
def test_a_deleted_file_is_counted_whichever_thread_holds_it(tmp_path, how):
    from grader.isolation.sandbox import usage

    proc = subprocess.Popen([sys.executable, "-c", HIDDEN_HOLDERS[how], str(tmp_path / "f")],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        time.sleep(1)
        if how == "leader_gone":    # what it is made for: the first thread is gone, not the rest
            assert usage._ended(proc.pid) and len(os.listdir(f"/proc/{proc.pid}/task")) == 2
        held = usage.held_usage({proc.pid}, owner=os.getuid(),
                                devices={os.stat(tmp_path).st_dev}, seen={}, with_maps=False,
                                file_bytes=2 ** 30)
        assert held == 8 * 2 ** 20, held
    finally:
        proc.kill()
        proc.wait()


def test_a_thread_on_its_way_out_holds_nothing_and_one_that_hides_its_files_is_over(
        tmp_path, monkeypatch):
    """A thread past the point of no return in exit() cannot be inspected by its own user (the
    kernel releases its memory first: hundreds of large processes exiting at once keep one so
    for longer than the grader asks again) but writes nothing more: it holds nothing. A thread
    that is not exiting and whose files cannot be read is over the limit."""
    from grader.isolation.sandbox import procfs, usage

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    real_listdir, real_open = os.listdir, open
    flags = {"value": 0}

    def closed(path):
        if str(path).endswith("/fd"):
            raise PermissionError(13, "Permission denied", path)
        return real_listdir(path)

    def stat_says(path, *args, **kwargs):
        if str(path).startswith(f"/proc/{proc.pid}/task/") and str(path).endswith("/stat"):
            import io

            return io.BytesIO(f"{proc.pid} (python) R 1 1 1 0 -1 {flags['value']} 0 0".encode())
        return real_open(path, *args, **kwargs)

    try:
        monkeypatch.setattr(usage.os, "listdir", closed)
        monkeypatch.setattr(procfs, "open", stat_says, raising=False)
        monkeypatch.setattr(usage.time, "sleep", lambda s: None)
        flags["value"] = 0x400040 | usage.PF_EXITING
        assert usage.held_usage({proc.pid}, owner=os.getuid(), devices=set(), seen={},
                                with_maps=False, file_bytes=2 ** 30) == 0
        flags["value"] = 0x400040
        over = usage.held_usage({proc.pid}, owner=os.getuid(), devices=set(), seen={},
                                with_maps=False, file_bytes=2 ** 30)
        assert isinstance(over, usage.Over) and "could not count" in over.why, over
    finally:
        proc.kill()
        proc.wait()


@needs_root
@pytest.mark.parametrize("platform", ["pod"])
def test_a_process_limit_shared_with_the_user_is_the_programs_not_its_launchers(attacked,
                                                                                platform):
    """In a pod a subject's tasks are counted with its user's: the limit on top of what the user
    runs is set in the launcher's child as the program starts. Put on the launcher itself, it
    stopped the launcher's own fork whenever other processes of the user grew in between (CI,
    2026-12-07: ``BlockingIOError`` in the launcher, reported as the learner's crash)."""
    info = attacked[platform]["platform"]
    result = attacked[platform]["attacks"]["process_limits"]
    program = int(next(line.split()[2] for line in _lines(result)
                       if line.startswith("program nproc")))
    assert result["launcher_nproc"] == info["nproc"], result       # -1: unlimited
    assert confined_attacks.LIMITS["processes"] < program, (program, info)
    assert info["nproc"] == -1 or program < info["nproc"], (program, info)
