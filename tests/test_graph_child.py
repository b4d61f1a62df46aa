"""The judge's child for its checks of a learner's graph (grader.isolation.graph_child): each way
it can end, told apart: an answer, an allocation past its own address-space limit, no answer in
time (killed, with whatever it started), and the grader's own failure (an exception, a signal).
Plain Python work here, no torch: tests/test_isolation.py drives the judge's use of it."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import time

from grader.isolation import graph_child


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
