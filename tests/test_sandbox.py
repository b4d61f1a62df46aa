"""The sandbox learner code runs in: what it can see, write, start and reach; and what grading
does when the sandbox cannot run on a machine."""
from __future__ import annotations

import json
import os

import pytest

from grader.isolation import sandbox

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str, **limits) -> sandbox.Finished:
    return sandbox.run([sandbox.python_executable(), "-c", code], isolation=sandbox.probe("bwrap"),
                       limits=sandbox.Limits(timeout_s=60, **limits),
                       env=sandbox.environment({"PYTHONPATH": ""}))


def test_the_sandbox_runs_here():
    # `make setup` installs bubblewrap; grading relies on it, so the suite does too.
    assert sandbox.probe("auto").sandboxed, sandbox.probe("auto").reason


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
        "import grader.isolation.sandbox, os\n"
        "for path in ['/usr/x', os.path.dirname(grader.isolation.sandbox.__file__) + '/x', '/x']:\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print('WROTE', path)\n"
        "    except OSError:\n"
        "        pass\n"
        "open('/tmp/ok', 'w').write('fine')\n"
        "print('done')\n")
    assert b"done" in out.output and b"WROTE" not in out.output, out.output


def test_no_network():
    out = _python("import socket\n"
                  "s = socket.socket()\n"
                  "s.settimeout(3)\n"
                  "try:\n"
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


def test_a_fork_bomb_is_stopped_by_the_process_limit():
    out = _python("import os, time\n"
                  "n = 0\n"
                  "try:\n"
                  "    for _ in range(400):\n"
                  "        if os.fork() == 0:\n"
                  "            time.sleep(5)\n"
                  "            os._exit(0)\n"
                  "        n += 1\n"
                  "except OSError:\n"
                  "    print('stopped after', n)\n", processes=50)
    assert b"stopped after" in out.output, out.output


def test_a_timeout_kills_the_whole_sandbox():
    out = sandbox.run(
        [sandbox.python_executable(), "-c", "import time\ntime.sleep(30)\n"],
        isolation=sandbox.probe("bwrap"), limits=sandbox.Limits(timeout_s=2))
    assert out.timed_out and out.seconds < 20


def test_when_the_sandbox_cannot_run_real_submissions_are_not_graded(tmp_path, monkeypatch):
    from grader.cohort import demo
    from grader.cohort.grade import Run, choose_isolation

    monkeypatch.setattr(sandbox.shutil, "which",
                        lambda name, *a, **k: None if name == "bwrap" else "/usr/bin/" + name)
    sandbox._probe_bwrap.cache_clear()
    try:
        assert not sandbox.probe("auto").sandboxed
        assert "not installed" in sandbox.probe("auto").reason
        run = Run(course=str(tmp_path), assignments=["ps2"])
        with pytest.raises(SystemExit) as stop:
            choose_isolation(run)
        assert "stopped before grading anyone" in str(stop.value)
        assert "SANDBOX=off" in str(stop.value)
        # The made-up demo cohort runs without it, and says so; so does --sandbox off.
        demo_run = Run(course=str(tmp_path), assignments=["ps2"], demo=True)
        choose_isolation(demo_run)
        assert demo_run.isolation.mode == "none"
        off = Run(course=str(tmp_path), assignments=["ps2"], sandbox="off")
        choose_isolation(off)
        assert off.isolation.mode == "none" and "turned off" in off.isolation.describe()
    finally:
        sandbox._probe_bwrap.cache_clear()
    assert demo.PERSONAS  # (imported for the demo run above)
