"""The sandbox learner code runs in: what it can see, write, start and reach; and what grading
does when the sandbox cannot run on a machine."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

import fresh_machine
from grader.isolation.sandbox import process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _finished(argv: list[str], limits: process.Limits, env: dict | None = None) -> process.Finished:
    """``argv`` run in bubblewrap as grading starts a subject (:func:`process.start`, below its
    launcher), to its end or ``limits.timeout_s``; then it and everything it started are ended."""
    running = process.start(argv, isolation=process.probe("bwrap"), limits=limits, env=env,
                            reply=False)
    try:
        running.proc.wait(timeout=limits.timeout_s)
    except subprocess.TimeoutExpired:
        pass
    return running.finish(grace_s=0)


def _python(code: str, **limits) -> process.Finished:
    return _finished([process.python_executable(), "-c", code],
                     process.Limits(timeout_s=60, **limits),
                     env=process.environment({"PYTHONPATH": ""}))


def test_the_sandbox_runs_here():
    # `make setup` installs bubblewrap; grading relies on it, so the suite does too.
    assert process.probe("auto").sandboxed, process.probe("auto").reason


SECRET_PATHS = [os.path.join(ROOT, "source"), os.path.join(ROOT, "README.md"),
                os.path.join(ROOT, ".git"), "/etc/shadow",
                os.path.expanduser("~/.bash_history"), os.path.expanduser("~/.ssh")]


def test_learner_code_sees_no_course_no_secrets_and_no_instructor_environment(monkeypatch):
    monkeypatch.setenv("COURSE_SECRET_TEST", "instructor-secret")
    out = _python(
        "import os, json\n"
        f"paths = {SECRET_PATHS!r}\n"
        "print(json.dumps({'seen': [p for p in paths if os.path.exists(p)], 'env': dict(os.environ),"
        " 'uid': os.getuid()}))\n")
    assert out.returncode == 0, out.output
    seen = json.loads(out.output.decode().strip().splitlines()[-1])
    assert seen["seen"] == [], seen["seen"]
    assert "COURSE_SECRET_TEST" not in seen["env"]
    assert not any(k.startswith(("JPY_", "SSH_", "GIT_")) for k in seen["env"])
    if os.geteuid() == 0:
        assert seen["uid"] != 0


def test_the_grader_package_is_readable_and_nothing_outside_tmp_is_writable():
    out = _python(
        "import grader.isolation.sandbox.process, os\n"
        "package = os.path.dirname(grader.isolation.sandbox.process.__file__)\n"
        "for path in ['/usr/x', package + '/x', '/x']:\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print('WROTE', path)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('/tmp/ok', 'w').write('fine')\n"
        "print('done')\n")
    assert b"done" in out.output and b"WROTE" not in out.output, out.output


def test_no_network():
    # Under the launcher the socket itself may be refused (seccomp), not only the connection.
    out = _python("import socket\n"
                  "try:\n"
                  "    s = socket.socket()\n"
                  "    s.settimeout(3)\n"
                  "    s.connect(('127.0.0.1', 22))\n"
                  "    print('CONNECTED')\n"
                  "except OSError as exc:\n"
                  "    print('refused', exc)\n")
    assert b"refused" in out.output and b"CONNECTED" not in out.output


def test_disk_written_is_limited():
    out = _python("try:\n"
                  "    open('/tmp/big', 'wb').write(b'x' * (64 * 1024 * 1024))\n"
                  "    print('WROTE')\n"
                  "except OSError as exc:\n"
                  "    print('stopped', exc)\n", disk_bytes=16 * 1024 * 1024)
    assert b"stopped" in out.output, out.output


def test_without_bubblewrap_the_disk_written_is_limited_too(folder):
    # No size-limited /tmp there: the launcher measures the process's own folder, and stops
    # everything once it holds more than the limit.
    isolation = process.probe("kernel")
    running = process.start(
        [process.python_executable(), "-c",
         "import os, time\n"
         "for n in range(64):\n"
         "    open(os.path.join(os.environ['HOME'], f'part{n}'), 'wb').write(b'x' * 2 ** 20)\n"
         "time.sleep(60)\n"],
        isolation=isolation, limits=process.Limits(timeout_s=60, disk_bytes=16 * 2 ** 20),
        env=process.environment(home=folder), home=folder, reply=False)
    running.proc.wait(timeout=30)
    finished = running.finish(grace_s=0)
    assert running.exceeded == "disk", finished.output
    assert finished.seconds < 30


FORK_BOMB = ("import os, time\n"
             "n = 0\n"
             "try:\n"
             "    for _ in range(400):\n"
             "        if os.fork() == 0:\n"
             "            time.sleep(5)\n"
             "            os._exit(0)\n"
             "        n += 1\n"
             "except OSError:\n"
             "    print('stopped after', n)\n")


def test_a_fork_bomb_is_stopped_by_the_process_limit():
    out = _python(FORK_BOMB, processes=50)
    assert b"stopped after" in out.output, out.output


def test_without_bubblewrap_a_fork_bomb_is_stopped_by_the_process_limit_too(folder):
    isolation = process.probe("kernel")
    running = process.start(
        [process.python_executable(), "-c", FORK_BOMB], isolation=isolation,
        limits=process.Limits(timeout_s=60, processes=50), env=process.environment(home=folder),
        home=folder, reply=False)
    running.proc.wait(timeout=60)
    finished = running.finish(grace_s=0)
    assert b"stopped after" in finished.output, finished.output
    assert running.survivors == []


def test_a_users_tasks_are_its_processes_threads_and_the_shared_limit_is_on_top_of_them():
    """What RLIMIT_NPROC counts: each thread is a task. The limit a subject gets where its tasks
    are counted with its user's (a pod) is what the user runs plus the allowance."""
    import threading

    from grader.isolation.sandbox import procfs

    before = procfs.processes_of_user(os.getuid())[os.getpid()]
    release = threading.Event()
    threads = [threading.Thread(target=release.wait) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        assert procfs.processes_of_user(os.getuid())[os.getpid()] == before + 3
        assert procfs.shared_task_limit(7) >= before + 3 + 7
    finally:
        release.set()
        for t in threads:
            t.join()


def test_a_timeout_kills_the_whole_sandbox():
    out = _finished([process.python_executable(), "-c", "import time\ntime.sleep(30)\n"],
                    process.Limits(timeout_s=2))
    assert out.timed_out and out.seconds < 20


def test_when_nothing_can_confine_learner_code_real_submissions_are_not_graded(tmp_path,
                                                                               monkeypatch):
    from grader.cohort.grade import Run, choose_isolation
    from grader.cohort.settings import GradeSettings

    monkeypatch.setattr(process.shutil, "which",
                        lambda name, *a, **k: None if name == "bwrap" else "/usr/bin/" + name)
    monkeypatch.setattr(process, "_probe_kernel", lambda: "Landlock is not available (test)")
    process._probe_bwrap.cache_clear()
    try:
        isolation = process.probe("auto")
        assert isolation.mode == "none"
        assert "not installed" in isolation.reason and "Landlock is not available" in isolation.reason
        run = Run(course=str(tmp_path), assignments=["ps2"])
        with pytest.raises(SystemExit) as stop:
            choose_isolation(run)
        assert "stopped before grading anyone" in str(stop.value)
        assert "SANDBOX=off" in str(stop.value)
        # The made-up demo cohort runs without it, and says so; so does --sandbox off.
        demo_run = Run(course=str(tmp_path), assignments=["ps2"], demo=True)
        choose_isolation(demo_run)
        assert demo_run.isolation.mode == "none"
        off = Run(course=str(tmp_path), assignments=["ps2"],
                  settings=GradeSettings(sandbox="off"))
        choose_isolation(off)
        assert off.isolation.mode == "none" and "turned off" in off.isolation.describe()
        assert "it can read" in off.isolation.warning()
    finally:
        process._probe_bwrap.cache_clear()


def test_without_bubblewrap_kernel_confinement_is_the_next_choice(tmp_path, monkeypatch):
    from grader.cohort.grade import Run, choose_isolation

    monkeypatch.setattr(process.shutil, "which",
                        lambda name, *a, **k: None if name == "bwrap" else "/usr/bin/" + name)
    process._probe_bwrap.cache_clear()
    try:
        isolation = process.probe("auto")
        assert isolation.mode == "kernel", isolation.reason
        assert "bubblewrap is not installed" in isolation.describe()
        assert "Landlock ABI" in isolation.describe() and "seccomp" in isolation.describe()
        assert process.probe("off").mode == "kernel"     # off: no bubblewrap, not no confinement
        # Real submissions are graded with kernel confinement: learner code runs only in the
        # judge's subject (nbgrader's feedback runs no cell), which it confines.
        run = Run(course=str(tmp_path), assignments=["ps2"])
        choose_isolation(run)
        assert run.isolation.mode == "kernel"
        demo_run = Run(course=str(tmp_path), assignments=["ps2"], demo=True)
        choose_isolation(demo_run)
        assert demo_run.isolation.mode == "kernel"
        warning = demo_run.isolation.warning()
        assert "cannot read source/, the gradebook or other submissions" in warning
    finally:
        process._probe_bwrap.cache_clear()


def test_kernel_confinement_is_tried_for_real_not_assumed(monkeypatch):
    # A container whose seccomp profile refuses Landlock's calls reports ABI 0: said, not used.
    process._probe_kernel.cache_clear()
    try:
        with monkeypatch.context() as patch:
            patch.setattr(process.confine, "landlock_abi", lambda: 0)
            with pytest.raises(process.SandboxUnavailable, match="Landlock is not available"):
                process.probe("kernel")
    finally:
        process._probe_kernel.cache_clear()
    assert process.probe("kernel").mode == "kernel"


# ---------------------------------------------------------------------------------------------
# Confined learner code, with bubblewrap and without (kernel confinement), started as the judge
# starts its subject (process.start, below the launcher).

CONFINED = ["bwrap", "kernel"]


@pytest.fixture
def folder():
    """A folder an unprivileged user id can reach (pytest's tmp_path lies below one only root may
    enter), removed afterwards."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="confined-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start(mode: str, code: str, *args: str, home: str) -> process.Running:
    isolation = process.probe(mode) if mode != "none" else process.Isolation("none", "a control")
    assert isolation.mode == mode, isolation.reason
    return process.start([process.python_executable(), "-c", code, *args], isolation=isolation,
                         limits=process.Limits(timeout_s=60),
                         env=process.environment(home="/tmp" if mode == "bwrap" else home),
                         home=home, reply=False)


def _left_running(tag: str) -> str:
    import subprocess

    return subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout.strip()


# A process that leaves a grandchild behind the way an attacker would: a new session, an empty
# environment (no token to find it by), a double fork; then ends, or is stopped while it runs.
ESCAPE = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sleep", ["sleep", sys.argv[1]], {})
    os._exit(0)
os.wait()
print("escaped", flush=True)
if sys.argv[2] == "stays":
    time.sleep(300)
"""


@pytest.mark.parametrize("ending", ["ends", "stays"])
@pytest.mark.parametrize("mode", CONFINED)
def test_an_escaped_child_is_killed_and_counted(folder, mode, ending):
    import random

    tag = f"{random.randint(10 ** 6, 10 ** 7)}.25"
    running = _start(mode, ESCAPE, tag, ending, home=folder)
    if ending == "stays":     # (one that ends is swept at once: only the count can show it)
        import time

        while b"escaped" not in bytes(running._output) and running.alive():
            time.sleep(0.05)
        assert _left_running(f"sleep {tag}"), "the escaped child did not start"
    finished = running.finish(grace_s=10 if ending == "ends" else 0)
    assert finished.timed_out == (ending == "stays"), finished.output
    assert len(running.leftovers) == 1, (running.leftovers, finished.output)
    assert running.survivors == []
    assert _left_running(f"sleep {tag}") == "", "the escaped child outlived its subject"


# Learner code reaching for what is not its own; prints what it reached.
REACH = r"""
import ctypes, json, os, signal, socket, sys, threading, subprocess
course, victim, judge = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
libc = ctypes.CDLL(None, use_errno=True)
def io_uring():
    if libc.syscall(425, 8, ctypes.create_string_buffer(120)) < 0:
        raise OSError(ctypes.get_errno(), "io_uring_setup")
def user_namespace():
    if libc.unshare(0x10000000) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
attempts = {
    "read source/": lambda: open(os.path.join(course, "source", "ps", "ps.ipynb")).read(),
    "write the gradebook": lambda: open(os.path.join(course, "gradebook.db"), "r+b").write(b"X"),
    "create a course file": lambda: open(os.path.join(course, "planted.txt"), "w").write("x"),
    "chmod the gradebook": lambda: os.chmod(os.path.join(course, "gradebook.db"), 0o600),
    "kill another submission": lambda: os.kill(victim, signal.SIGKILL),
    "kill the judge": lambda: os.kill(judge, 0),    # (the permission check of any signal)
    "read the judge's environ": lambda: open(f"/proc/{judge}/environ", "rb").read(),
    "read the judge's maps": lambda: open(f"/proc/{judge}/maps", "rb").read(),
    "read the judge's io": lambda: open(f"/proc/{judge}/io", "rb").read(),
    "open the judge's mem": lambda: open(f"/proc/{judge}/mem", "rb").read(1),
    "open a socket": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
    "open a Unix socket": lambda: socket.socket(socket.AF_UNIX),
    "make a user namespace": user_namespace,
    "set up io_uring": io_uring,
}
reached = {}
for name, attempt in attempts.items():
    try:
        attempt()
        reached[name] = "REACHED"
    except OSError as exc:
        reached[name] = type(exc).__name__
# What honest code needs still works: its own folder, a thread, a subprocess.
open(os.path.join(os.environ["HOME"], "mine"), "w").write("ok")
t = threading.Thread(target=lambda: None)
t.start()
t.join()
subprocess.run(["/bin/true"], check=True)
print(json.dumps(reached), flush=True)
"""


def reach_attempts(mode: str, folder: str) -> dict:
    """Start a confined victim and a confined attacker as the judge starts subjects (this process
    plays the judge) beside a course folder whose files every user may write; return what the
    attacker reached, and whether the victim and the course came through."""
    import json
    import time

    course = os.path.join(folder, "course")
    os.makedirs(os.path.join(course, "source", "ps"))
    for path, text in (("source/ps/ps.ipynb", "THE REFERENCE"), ("gradebook.db", "SCORES")):
        with open(os.path.join(course, path), "w") as fh:
            fh.write(text)
    for root, dirs, files in os.walk(folder):   # open to every user: only the confinement stops
        os.chmod(root, 0o777)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666)
    homes = [os.path.join(folder, name) for name in ("victim", "attacker")]
    for home in homes:
        os.mkdir(home)
    victim = _start(mode, "import time\nprint('up', flush=True)\ntime.sleep(120)\n", home=homes[0])
    try:
        while b"up" not in bytes(victim._output):
            time.sleep(0.05)
        from grader.isolation.sandbox import confine

        victim_pid = max(confine.descendants(victim.proc.pid))
        attacker = _start(mode, REACH, course, str(victim_pid), str(os.getpid()), home=homes[1])
        finished = attacker.finish(grace_s=60)
        lines = finished.output.decode(errors="replace").strip().splitlines()
        reached = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {
            "no answer": finished.output.decode(errors="replace")[-2000:]}
        reached["(victim alive)"] = victim.alive() and victim_pid in confine.descendants(
            victim.proc.pid)
    finally:
        victim.finish(grace_s=0)
    with open(os.path.join(course, "gradebook.db")) as fh:
        reached["(gradebook)"] = fh.read()
    reached["(planted)"] = os.path.exists(os.path.join(course, "planted.txt"))
    return reached


def _assert_reached_nothing(reached: dict) -> None:
    assert reached.pop("(victim alive)") is True, reached
    assert reached.pop("(gradebook)") == "SCORES", reached
    assert reached.pop("(planted)") is False, reached
    assert "no answer" not in reached, reached["no answer"]
    assert [name for name, got in reached.items() if got == "REACHED"] == [], reached


@pytest.mark.parametrize("mode", CONFINED)
def test_confined_code_reaches_no_course_file_no_judge_and_no_other_submission(folder, mode):
    _assert_reached_nothing(reach_attempts(mode, folder))


@pytest.mark.skipif(bool(fresh_machine.available()), reason=fresh_machine.available())
def test_as_an_ordinary_user_kernel_confinement_alone_keeps_learner_code_out(folder):
    # The grader as an ordinary user, learner code under the same user id: no user id check of
    # the kernel's stands between them, only Landlock and seccomp. The same attempts, run for
    # real as that user (tests/fresh_machine.py: bubblewrap hidden), confined and, as a control,
    # not.
    import json
    import subprocess

    code = ("import json, os, sys; sys.path.insert(0, sys.argv[1]); import test_sandbox; "
            "print('RESULT', json.dumps({mode: test_sandbox.reach_attempts(mode, "
            "os.path.join(sys.argv[2], mode)) for mode in ('kernel', 'none')}))")
    for mode in ("kernel", "none"):
        os.mkdir(os.path.join(folder, mode))
    fresh_machine.give_to(folder, fresh_machine.NOBODY)
    proc = subprocess.run(
        fresh_machine.command([process.python_executable(), "-c", code,
                               os.path.dirname(os.path.abspath(__file__)), folder],
                              user=fresh_machine.NOBODY),
        capture_output=True, text=True, timeout=300, cwd=folder,
        env={"PATH": "/usr/bin:/bin", "HOME": folder, "PYTHONPATH": ROOT})
    results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert results, proc.stdout[-3000:] + proc.stderr[-3000:]
    reached = json.loads(results[-1][len("RESULT "):])
    _assert_reached_nothing(reached["kernel"])
    # The control: the same attempts, unconfined, reach what the test says they reach.
    unconfined = reached["none"]
    assert unconfined["(victim alive)"] is False and unconfined["(planted)"] is True
    assert {name for name, got in unconfined.items() if got == "REACHED"} >= {
        "read source/", "write the gradebook", "chmod the gradebook", "kill the judge",
        "read the judge's environ", "read the judge's maps", "open a socket"}, unconfined


# One grader process's sandbox, as a Ray worker or a second `make grade` starts one: prints its
# user id, runs ``code`` in bubblewrap (below its launcher) to its end, then ends it as grading
# does, which kills every process of that user id.
_GRADER_PROCESS = r'''
import json, subprocess, sys
from grader.isolation.sandbox import process
code, processes = sys.argv[1], int(sys.argv[2])
running = process.start([process.python_executable(), "-c", code],
                        isolation=process.probe("bwrap"),
                        limits=process.Limits(timeout_s=60, processes=processes),
                        env=process.environment({"PYTHONPATH": ""}), reply=False)
print(json.dumps({"uid": running.uid}), flush=True)
running.proc.wait(timeout=60)
print(running.finish(grace_s=0).output.decode(errors="replace"), flush=True)
'''

_FORK_30 = ("import os, time\n"
            "def hold(seconds):\n"
            "    for _ in range(30):\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(seconds); os._exit(0)\n")
_HOLDS = _FORK_30 + "hold(8); print('held 30', flush=True); time.sleep(8); print('still here after 8 s')\n"
_QUICK = _FORK_30 + ("try:\n"
                     "    hold(1); print('forked 30')\n"
                     "except OSError as e: print('refused', e)\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="user ids of their own are root's to give")
def test_sandboxes_of_two_grader_processes_neither_kill_nor_count_each_other():
    """Two grader processes at once (Ray workers on one node, two courses graded on one
    machine): each sandbox gets a user id no other running sandbox has (each process its own
    block of them), the one that ends first leaves the other's processes alone, and each holds
    its own process count (30 + 30 under a limit of 40 each)."""
    import json

    def start(code):
        return subprocess.Popen([process.python_executable(), "-c", _GRADER_PROCESS, code, "40"],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)

    holder = start(_HOLDS)
    first = json.loads(holder.stdout.readline())
    import time
    time.sleep(2)       # the holder's 30 are running
    quick = start(_QUICK)
    second = json.loads(quick.stdout.readline())
    quick_out = quick.communicate(timeout=120)[0]
    holder_out = holder.communicate(timeout=120)[0]
    assert first["uid"] != second["uid"], (first, second)
    assert "forked 30" in quick_out, quick_out           # not counted with the holder's
    assert "still here after 8 s" in holder_out, holder_out   # not killed by the other's end
