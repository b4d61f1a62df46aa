"""The kernel's layers as this package calls them (grader/isolation/sandbox/confine.py) and the
Python a user id of its own runs (grader/isolation/sandbox/learner_python.py). What confined code
can and cannot reach is tested where the judge starts it: tests/test_sandbox.py,
tests/test_attacks_escape.py.
"""
from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import sysconfig
import time

import pytest

from grader.isolation.sandbox import confine, learner_python, process

HEADERS = {"x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
           "aarch64": "/usr/include/asm-generic/unistd.h"}


def _run_filter(program, arch: str, nr: int, args=(0,) * 6) -> int:
    """What the kernel's classic-BPF interpreter returns for one call (the instructions this
    module emits: loads of seccomp_data words, JEQ/JGE/JSET jumps, returns)."""
    import struct

    args = [*args, *[0] * (6 - len(args))]
    data = struct.pack("=iIQ6Q", nr, confine._AUDIT_ARCH[arch], 0,
                       *[a & 0xFFFFFFFFFFFFFFFF for a in args])
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        if code == confine._LD_W_ABS:
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == confine._RET:
            return k
        else:
            taken = {confine._JEQ: acc == k, confine._JGE: acc >= k,
                     confine._JSET: bool(acc & k)}[code]
            pc += jt if taken else jf
        pc += 1


ALLOW, NOTIFY = confine._RET_ALLOW, confine._RET_USER_NOTIF


def _errno(value: int) -> int:
    return value & 0xFFFF if value & 0xFFFF0000 == confine._RET_ERRNO else -1


@pytest.mark.parametrize("arch", sorted(HEADERS))
def test_the_seccomp_filter_refuses_the_system_calls_it_names(arch):
    # The numbers are typed into confine.py: each is checked against the kernel headers installed
    # here (calls newer than these headers are checked by name only).
    if not os.path.exists(HEADERS[arch]):
        pytest.skip(f"no {HEADERS[arch]} here")
    header = open(HEADERS[arch]).read()
    numbers = {name: int(nr) for name, nr in
               re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header)}
    table = {**{"x86_64": confine._X86_64, "aarch64": confine._AARCH64}[arch], **confine._COMMON,
             **confine.targeted_calls(arch), **confine._OWNER_CALLS[arch],
             "prctl": confine._PRCTL[arch], "seccomp": confine._SECCOMP[arch],
             "clone": confine.CLONE[arch], "clone3": confine.CLONE3}
    wrong = {name: (nr, numbers[name]) for name, nr in table.items()
             if name in numbers and numbers[name] != nr}
    assert wrong == {}, wrong
    strict = confine.seccomp_program(arch, confine.Policy(shares_uid=True, refuse_memfd=True,
                                                          refuse_fallocate=True))
    lenient = confine.seccomp_program(arch, confine.Policy())
    base = {**{"x86_64": confine._X86_64, "aarch64": confine._AARCH64}[arch], **confine._COMMON}
    for name, nr in base.items():
        assert _errno(_run_filter(strict, arch, nr)) > 0, name
        assert (_run_filter(lenient, arch, nr) == ALLOW) == (name in confine._CONDITIONAL), name
    assert _errno(_run_filter(strict, arch, base["socket"])) == errno.EACCES
    assert _errno(_run_filter(strict, arch, base["fallocate"])) == errno.EOPNOTSUPP
    assert _run_filter(strict, arch, numbers.get("read", 0 if arch == "x86_64" else 63)) == ALLOW


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_where_learner_code_shares_the_graders_user_id_calls_naming_a_process_are_supervised(arch):
    program = confine.seccomp_program(arch, confine.Policy(shares_uid=True))
    calls = confine.targeted_calls(arch)
    # Aimed at the caller itself (id 0): allowed as they are; at any other: the launcher decides.
    for name in ("kill", "prlimit64", "sched_setaffinity", "sched_setscheduler"):
        assert _run_filter(program, arch, calls[name], (0, 0)) == ALLOW, name
        assert _run_filter(program, arch, calls[name], (1234, 0)) == NOTIFY, name
    for name in ("tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal"):
        assert _run_filter(program, arch, calls[name], (1234, 1234, 9)) == NOTIFY, name
    assert _run_filter(program, arch, calls["setpriority"], (0, 0, 19)) == ALLOW
    for which, who in ((0, 1234), (1, 0), (2, 1000)):          # a process, a group, a user
        assert _run_filter(program, arch, calls["setpriority"], (which, who, 19)) == NOTIFY
    assert _run_filter(program, arch, calls["ioprio_set"], (1, 0, 0)) == ALLOW
    assert _run_filter(program, arch, calls["ioprio_set"], (3, 1000, 0)) == NOTIFY
    owner = confine._OWNER_CALLS[arch]
    assert _errno(_run_filter(program, arch, owner["fcntl"], (3, confine._F_SETOWN, 1))) == errno.EPERM
    assert _run_filter(program, arch, owner["fcntl"], (3, 1, 0)) == ALLOW       # F_GETFD
    assert _errno(_run_filter(program, arch, owner["ioctl"], (3, confine._FIOSETOWN))) == errno.EPERM
    assert _run_filter(program, arch, owner["ioctl"], (3, 0x5401)) == ALLOW      # TCGETS
    assert _errno(_run_filter(program, arch, confine._PRCTL[arch], (4, 0))) == errno.EPERM
    assert _run_filter(program, arch, confine._PRCTL[arch], (15, 0)) == ALLOW    # PR_SET_NAME
    # A grader running as root gives learner code a user id of its own: the kernel decides.
    own = confine.seccomp_program(arch, confine.Policy())
    assert _run_filter(own, arch, calls["kill"], (1234, 9)) == ALLOW


def test_the_landlock_abi_can_be_capped_as_an_older_kernel_would_have_it(monkeypatch):
    real = confine.kernel_landlock_abi()
    monkeypatch.setenv("COURSE_LANDLOCK_ABI", "3")
    assert confine.landlock_abi() == min(3, real)
    monkeypatch.setenv("COURSE_LANDLOCK_ABI", "0")
    assert confine.landlock_abi() == 0
    with pytest.raises(confine.Unavailable):
        confine.landlock(["/usr"], [], [])


def test_the_subreaper_finds_a_double_forked_child_in_a_new_session():
    # A launcher's view: the grandchild below a subreaper stays its descendant after its parent
    # is gone, whatever its session.
    code = ("import os, time, sys\n"
            "from grader.isolation.sandbox import confine\n"
            "confine.become_subreaper()\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        os.execve('/bin/sleep', ['sleep', '60'], {})\n"
            "    os._exit(0)\n"
            "os.wait()\n"
            "time.sleep(0.2)\n"
            "below = confine.descendants(os.getpid())\n"
            "print(len(below), flush=True)\n"
            "for pid in below:\n"
            "    os.kill(pid, 9)\n")
    out = subprocess.run([process.python_executable(), "-c", code], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "1", out.stdout + out.stderr


def test_a_python_other_users_can_run_is_refused_plainly_where_the_packages_are_closed(
        monkeypatch):
    learner_python.for_other_users.cache_clear()
    monkeypatch.setattr(learner_python, "others_can_reach", lambda path, **k: False)
    try:
        with pytest.raises(learner_python.Unavailable, match="other users cannot read"):
            learner_python.for_other_users(process.grader_package_dir())
    finally:
        learner_python.for_other_users.cache_clear()


def test_the_copy_for_other_users_is_made_again_when_the_venv_has_moved(tmp_path, monkeypatch):
    """A copy whose site-packages link names another venv's packages (the venv was copied or
    moved) is not reused: it would run the learner on the other venv's grader."""
    home = str(tmp_path / learner_python.COPY_DIR)
    learner_python._ensure_copy(home)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    link = os.path.join(home, "lib", version, "site-packages")
    assert os.readlink(link) == sysconfig.get_paths()["purelib"]
    moved = str(tmp_path / "elsewhere" / "site-packages")
    monkeypatch.setattr(learner_python.sysconfig, "get_paths",
                        lambda real=sysconfig.get_paths: {**real(), "purelib": moved})
    learner_python._ensure_copy(home)
    assert os.readlink(link) == moved


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user id needs root")
def test_the_python_for_other_users_runs_as_another_user_and_imports_torch():
    python, env = learner_python.for_other_users(process.grader_package_dir())
    out = subprocess.run(["setpriv", f"--reuid={process.KERNEL_UID_BASE}",
                          f"--regid={process.KERNEL_UID_BASE}", "--clear-groups", python, "-c",
                          "import os, torch; print(os.getuid(), torch.__version__)"],
                         capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", **env}, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    import torch

    assert out.stdout.split() == [str(process.KERNEL_UID_BASE), torch.__version__]


def test_every_reader_of_a_processs_stat_line_reads_past_a_name_with_parentheses(tmp_path):
    """A learner can name its process anything, ``) R 1`` included: the process table, the
    supervisor's process group, a grading process's start time and a tree's memory all read the
    fields after the name's last ')' (grader/isolation/sandbox/procfs.py), never a field of the
    name."""
    from grader.cohort import process_folders
    from grader.isolation.sandbox import procfs, supervise, usage
    from grader.tools import bench_gradescope

    named = tmp_path / "x) Z 1 1 (y"
    os.symlink("/bin/sleep", named)
    child = subprocess.Popen([str(named), "30"], start_new_session=True)
    try:
        with open(f"/proc/{child.pid}/stat", "rb") as fh:
            assert b") Z 1 1 (" in fh.read()    # the name as the kernel writes it
        parent, state = confine.process_table()[child.pid]
        assert parent == os.getpid() and state in ("R", "S"), (parent, state)  # not "Z"
        assert child.pid in confine.descendants(os.getpid())
        assert supervise._process_group(child.pid) == child.pid     # its own session
        start = process_folders.start_time(child.pid)
        assert start is not None and start.isdigit() and int(start) > 0
        assert not usage._ended(child.pid)
        assert bench_gradescope.tree_rss(child.pid) > 0
    finally:
        child.kill()
        child.wait()
    assert procfs.process_stat(child.pid) is None and usage._ended(child.pid)
    assert process_folders.start_time(child.pid) is None
    assert supervise._process_group(child.pid) == -1


def test_a_launcher_that_may_start_no_process_says_so_as_the_graders_failure():
    """Where its user may start no more processes (``RLIMIT_NPROC`` reached: other subjects of a
    pod's one user grew), the launcher tries again for a while, then reports why as a setup
    error, which the judge files as the grader's failure; before, it died with a traceback that
    read as the learner's crash."""
    report_r, report_w = os.pipe()
    control_r, control_w = os.pipe()
    spec = {"report_fd": report_w, "control_fd": control_r, "layers": "none"}
    python, env, who, uid = process.python_executable(), dict(os.environ), [], None
    if os.geteuid() == 0:       # root's processes are exempt from RLIMIT_NPROC
        python, extra = learner_python.for_other_users(process.grader_package_dir())
        uid = process.take_uid()
        env = {"PATH": "/usr/bin:/bin", **extra}
        who = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    env["PYTHONPATH"] = os.path.dirname(process.grader_package_dir())
    try:
        try:
            proc = subprocess.Popen(
                [*who, "prlimit", "--nproc=1", "--", python, "-m",
                 "grader.isolation.sandbox.launcher", json.dumps(spec), "--", "/bin/true"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(report_w, control_r), env=env, cwd="/")
        finally:    # the launcher's ends: this process keeps the others
            os.close(report_w)
            os.close(control_r)
        running = process.Running(proc, token="", uid=None, uid_base=None, reply_fd=None,
                                  report_fd=report_r, control_fd=control_w,
                                  started=time.monotonic())
        assert proc.wait(timeout=60) == 126, bytes(running._output).decode(errors="replace")
        assert running.setup_error.startswith(
            "the launcher could not start the program: BlockingIOError"), running.setup_error
    finally:
        os.close(report_r)
        os.close(control_w)
        process.give_back_uid(uid)
