"""The kernel's layers as this package calls them (grader/isolation/confine.py) and the Python a
user id of its own runs (grader/isolation/learner_python.py). What confined code can and cannot
reach is tested where the judge starts it: tests/test_sandbox.py, tests/test_attacks_escape.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig

import pytest

from grader.isolation import confine, learner_python, sandbox

HEADERS = {"x86_64": "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
           "aarch64": "/usr/include/asm-generic/unistd.h"}


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
             "clone": confine.CLONE[arch], "clone3": confine.CLONE3}
    wrong = {name: (nr, numbers[name]) for name, nr in table.items()
             if name in numbers and numbers[name] != nr}
    assert wrong == {}, wrong
    program = confine.seccomp_program(arch, block_metadata=True)
    refused = {insn[3] for insn in program if insn[0] == confine._JEQ}
    assert set(table.values()) <= refused
    assert program[-1] == (confine._RET, 0, 0, confine._RET_ALLOW)
    # Metadata calls are refused only where learner code shares the grader's user id.
    lenient = {insn[3] for insn in confine.seccomp_program(arch, block_metadata=False)
               if insn[0] == confine._JEQ}
    assert table.get("fchmodat") not in lenient and table["socket"] in lenient


def test_the_subreaper_finds_a_double_forked_child_in_a_new_session():
    # A launcher's view: the grandchild below a subreaper stays its descendant after its parent
    # is gone, whatever its session.
    code = ("import os, time, sys\n"
            "from grader.isolation import confine\n"
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
    out = subprocess.run([sandbox.python_executable(), "-c", code], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "1", out.stdout + out.stderr


def test_a_python_other_users_can_run_is_refused_plainly_where_the_packages_are_closed(
        monkeypatch):
    learner_python.for_other_users.cache_clear()
    monkeypatch.setattr(learner_python, "others_can_reach", lambda path, **k: False)
    try:
        with pytest.raises(learner_python.Unavailable, match="other users cannot read"):
            learner_python.for_other_users(sandbox.grader_package_dir())
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
    python, env = learner_python.for_other_users(sandbox.grader_package_dir())
    out = subprocess.run(["setpriv", f"--reuid={sandbox.KERNEL_UID_BASE}",
                          f"--regid={sandbox.KERNEL_UID_BASE}", "--clear-groups", python, "-c",
                          "import os, torch; print(os.getuid(), torch.__version__)"],
                         capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", **env}, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    import torch

    assert out.stdout.split() == [str(sandbox.KERNEL_UID_BASE), torch.__version__]
