"""The judge's child for its checks of a learner's graph (grader.isolation.judge.graph_child): each
way it can end, told apart: an answer, an allocation past its own address-space limit, no answer in
time (killed, with whatever it started), and the grader's own failure (an exception, a signal).
Plain Python work here, no torch (the zygote, a process of its own, imports it): the judge's use
of it is driven by tests/test_isolation.py (a forked child) and tests/test_training.py (a child of
the zygote)."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import time

from grader.isolation.judge import graph_child, timing_gate


def test_an_answer_comes_back_as_data():
    got = graph_child.run_bounded(lambda: {"checks": {"a": [1, 2]}}, seconds=30,
                                  memory_bytes=256 * 1024 ** 2)
    assert got.kind == "done" and got.value == {"checks": {"a": [1, 2]}}, got


def test_the_child_has_its_own_memory_limit_and_the_parent_keeps_none():
    before = resource.getrlimit(resource.RLIMIT_AS)
    got = graph_child.run_bounded(lambda: len(bytearray(3 * 1024 ** 3)), seconds=30,
                                  memory_bytes=512 * 1024 ** 2)
    assert got.kind == "memory", got
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    told = graph_child.run_bounded(lambda: resource.getrlimit(resource.RLIMIT_AS)[0], seconds=30,
                                   memory_bytes=512 * 1024 ** 2)
    assert told.kind == "done"
    assert told.value <= graph_child.address_space_bytes() + 512 * 1024 ** 2 + 64 * 1024 ** 2


def test_no_answer_in_time_is_killed_with_what_it_started(tmp_path):
    tag = f"{os.getpid()}.{time.monotonic_ns() % 10 ** 6}"

    def spin():
        subprocess.Popen(["sleep", tag])
        while True:
            pass

    started = time.monotonic()
    got = graph_child.run_bounded(spin, seconds=1.5, memory_bytes=256 * 1024 ** 2)
    assert got.kind == "time" and "ran past 2 s" in got.why, got
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "what the child started outlived it"


def test_the_graders_own_failure_is_told_apart_from_the_graphs():
    def raises():
        raise KeyError("a bug in the grader")

    got = graph_child.run_bounded(raises, seconds=30, memory_bytes=256 * 1024 ** 2)
    assert got.kind == "failed" and "KeyError" in got.why and "a bug" in got.traceback, got
    killed = graph_child.run_bounded(lambda: os.kill(os.getpid(), signal.SIGKILL), seconds=30,
                                     memory_bytes=256 * 1024 ** 2)
    assert killed.kind == "failed" and "SIGKILL" in killed.why, killed


def test_the_child_keeps_only_the_environment_a_compile_needs(monkeypatch):
    monkeypatch.setenv("COURSE_SECRET_TEST", "instructor-secret")
    got = graph_child.run_bounded(lambda: dict(os.environ), seconds=30,
                                  memory_bytes=256 * 1024 ** 2)
    assert got.kind == "done" and "COURSE_SECRET_TEST" not in got.value
    assert got.value.get("PATH") == os.environ.get("PATH")


# What the zygote's children call in the tests below (imported by name in the zygote).
def echo_worker(request: dict, blob: bytes):
    """Runs before the child's memory limit: returns the work to run under it."""
    if request.get("allocate"):
        return lambda: len(bytearray(request["allocate"]))
    import sys

    return lambda: {"request": request, "blob": blob.decode(), "pid": os.getpid(),
                    "parent": os.getppid(),
                    "compiler": "torch._inductor.compile_fx" in sys.modules}


def test_the_zygote_forks_a_bounded_child_per_request_and_is_reused():
    """A fresh Python that forks each request's child (the judge's way for a training problem,
    whose checks a child forked from the judge could not run): the answer comes back as data, a
    child past its own memory limit ends 'memory', and the same zygote serves the next request
    (a dead one is started again). Its preload (the compiler's imports) is there in each child."""
    zygote = graph_child.Zygote(f"{__name__}:echo_worker",
                                preload="grader.checks._torch_internals:preload_compiler")
    try:
        got = zygote.run({"a": 1}, b"blob", seconds=60, memory_bytes=256 * 1024 ** 2)
        assert got.kind == "done" and got.value["request"] == {"a": 1}, got
        assert got.value["blob"] == "blob" and got.value["parent"] == zygote.proc.pid
        assert got.value["compiler"], "the zygote's preload is not in its child"
        first = zygote.proc.pid
        heavy = zygote.run({"allocate": 3 * 1024 ** 3}, b"", seconds=60,
                           memory_bytes=512 * 1024 ** 2)
        assert heavy.kind == "memory", heavy
        again = zygote.run({"b": 2}, b"", seconds=60, memory_bytes=256 * 1024 ** 2)
        assert again.kind == "done" and zygote.proc.pid == first
        os.kill(first, signal.SIGKILL)
        zygote.proc.wait()
        restarted = zygote.run({"c": 3}, b"", seconds=60, memory_bytes=256 * 1024 ** 2)
        assert restarted.kind == "done" and zygote.proc.pid != first, restarted
    finally:
        zygote.close()


def gated_worker(request: dict, blob: bytes):
    """Notes in ``request['log']`` when it comes to its gate and when it passes it."""
    def note(what: str) -> None:
        with open(request["log"], "a") as fh:
            fh.write(what + "\n")

    def work():
        note("child at the gate")
        wait = timing_gate.zygote_gate()
        if wait is not None:
            wait()
        note("child times")
        return wait is not None
    return work


def test_a_zygote_child_waits_at_its_gate_until_the_judge_has_done_meanwhile(tmp_path):
    """A training problem's child (the zygote's) checks while the judge waits for the next
    subject (``meanwhile``), and passes its gate to time only once the judge is done: the token
    the judge then sends opens it, each request's its own (one left over from an earlier
    request opens none). A request sent without ``meanwhile`` has no gate."""
    log = tmp_path / "order"
    zygote = graph_child.Zygote(f"{__name__}:gated_worker")

    def judge_waits():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
                log.exists() and "child at the gate" in log.read_text()):
            time.sleep(0.05)
        time.sleep(0.5)     # had the child not waited, it would have timed by now
        with open(log, "a") as fh:
            fh.write("judge done\n")

    try:
        zygote.start()
        timing_gate.send_token(zygote.gate_fd, 0)   # an earlier request's, left over: no opener
        for _ in range(2):      # the second request: its own token, not the first one's
            log.write_text("")
            got = zygote.run({"log": str(log)}, b"", seconds=60, memory_bytes=256 * 1024 ** 2,
                             meanwhile=judge_waits)
            assert got.kind == "done" and got.value is True, got
            assert log.read_text().splitlines() == ["child at the gate", "judge done",
                                                    "child times"]
        log.write_text("")
        plain = zygote.run({"log": str(log)}, b"", seconds=60, memory_bytes=256 * 1024 ** 2)
        assert plain.kind == "done" and plain.value is False, plain
    finally:
        zygote.close()


def test_a_kernel_half_written_by_a_killed_child_is_removed_from_inductors_cache(tmp_path,
                                                                                 monkeypatch):
    """A child killed while its compiler linked a kernel leaves a broken ``.so`` in the shared
    cache, which Inductor would load by name for every later submission ("file too short"):
    the judge removes what the child wrote that is not a whole library, and nothing else."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    (tmp_path / "ab").mkdir()
    older = tmp_path / "ab" / "older.main.so"
    older.write_bytes(b"")
    os.utime(older, (time.time() - 3600, time.time() - 3600))

    def half_written_then_stuck():
        (tmp_path / "ab" / "empty.main.so").write_bytes(b"")
        (tmp_path / "ab" / "cut.main.so").write_bytes(b"\x7fE")
        (tmp_path / "ab" / "whole.main.so").write_bytes(b"\x7fELF" + bytes(60))
        while True:
            pass

    got = graph_child.run_bounded(half_written_then_stuck, seconds=1.5,
                                  memory_bytes=256 * 1024 ** 2)
    assert got.kind == "time", got
    left = sorted(p.name for p in (tmp_path / "ab").iterdir())
    assert left == ["older.main.so", "whole.main.so"], left


def test_the_time_a_child_waits_at_its_gate_is_not_counted_in_its_limit_and_only_that():
    """A child that waits at its gate while the judge waits (``meanwhile``) is not charged for
    the wait; a child that works on meanwhile, never waiting, is charged for all of it (its
    limit is not stretched by the judge's wait)."""
    def opened_late():
        time.sleep(2.5)
        return True

    def waits_then_works():
        gate.in_the_child()
        gate.pass_through()
        time.sleep(0.5)
        return "done"

    gate = timing_gate.Gate(opened_late)
    try:    # 3 s in all, 2.5 of them held: within 2 s
        waited = graph_child.run_bounded(waits_then_works, seconds=2.0,
                                         memory_bytes=64 * 1024 ** 2,
                                         meanwhile=gate.open_for_child)
    finally:
        gate.close()
    assert waited.kind == "done" and waited.value == "done", waited

    gate = timing_gate.Gate(opened_late)
    try:    # 3.5 s of work, none held: past 2 s (the judge's 2.5 s of waiting not added)
        busy = graph_child.run_bounded(lambda: time.sleep(3.5), seconds=2.0,
                                       memory_bytes=64 * 1024 ** 2,
                                       meanwhile=gate.open_for_child)
    finally:
        gate.close()
    assert busy.kind == "time", busy
