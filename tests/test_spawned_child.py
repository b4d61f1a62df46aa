"""The judge's checks of a learner's graph on a GPU, in a spawned child with its own memory bound
(grader.isolation.judge.spawned_child), driven on a CPU: the spawn (a fresh Python, not a fork), the
request and its answer, each ending (done, memory, time, failed), and the CUDA bound's protocol
and refusals with the device's memory faked (:class:`FakeCudaMemory` stands where torch's CUDA
allocator stands on a GPU: what a real GPU must still confirm is said in docs/trust.md). Last,
through the judge: a problem's graph checked in a spawned child (its reference side built again
there, the evidence sent as data), and refused when its device memory passes the bound."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from grader.isolation.judge import spawned_child

MIB = 1024 ** 2
FAKE = f"{__name__}:FakeCudaMemory"
TOTAL = 16 * 1024 * MIB


class FakeCudaMemory:
    """torch's CUDA caching allocator as the spawned child uses it, on a CPU: a total, what is
    held, a bound set as a fraction of the total, allocations past it refused with torch's
    message, and the peak since the bound."""

    current = None
    stops = True   # the allocator refuses past the bound (False: memory it does not see)

    def __init__(self, device: str):
        self.held_bytes, self.limit, self.high = 100 * MIB, None, 0
        FakeCudaMemory.current = self

    def total(self) -> int:
        return TOTAL

    def held(self) -> int:
        return self.held_bytes

    def bound(self, limit_bytes: int) -> float:
        fraction = limit_bytes / TOTAL
        self.limit, self.high = int(fraction * TOTAL), self.held_bytes
        return fraction

    def allocate(self, n: int) -> None:
        if self.stops and self.limit is not None and self.held_bytes + n > self.limit:
            raise RuntimeError(f"CUDA out of memory. Tried to allocate {n // MIB} MiB. GPU 0 has "
                               f"a total capacity of 16.00 GiB")
        self.held_bytes += n
        self.high = max(self.high, self.held_bytes)

    def peak(self) -> int:
        return self.high


class UnseenCudaMemory(FakeCudaMemory):
    """Memory the allocator's bound did not stop (the child's own check after the work)."""
    stops = False


def worker(request: dict, blob: bytes):
    """What the spawned child calls before its bound is set: returns the work to run under it."""
    if request.get("raise_in_setup"):
        raise KeyError("a bug in the grader's setup")
    if request.get("spin"):
        def spin():
            subprocess.Popen(["sleep", request["spin"]])
            while True:
                pass
        return spin
    if request.get("die"):
        return lambda: os.kill(os.getpid(), 9)
    if request.get("device_bytes"):
        def allocate():
            FakeCudaMemory.current.allocate(request["device_bytes"])
            return "allocated"
        return allocate
    if request.get("host_bytes"):
        return lambda: len(bytearray(request["host_bytes"]))
    return lambda: {"request": request, "blob": blob.decode(), "parent": os.getppid(),
                    "fresh": "_pytest" not in sys.modules}


def _run(request, *, device="cpu", memory=None, seconds=60, allowance=512 * MIB, blob=b""):
    return spawned_child.run(f"{__name__}:worker", request, blob, seconds=seconds,
                             memory_bytes=allowance, device=device, memory=memory)


def test_a_fresh_python_answers_the_request_as_data():
    got = _run({"a": 1}, blob=b"the graph")
    assert got.kind == "done", got
    assert got.value["request"] == {"a": 1} and got.value["blob"] == "the graph"
    assert got.value["parent"] == os.getpid()
    assert got.value["fresh"], "the child is a fork of the test process, not a fresh Python"


def test_on_a_cpu_the_child_has_an_address_space_limit():
    got = _run({"host_bytes": 3 * 1024 ** 3}, allowance=512 * MIB)
    assert got.kind == "memory" and "allocation failed" in got.why, got
    assert got.device_memory == {}


def test_the_device_bound_is_what_the_child_holds_plus_the_allowance():
    got = _run({"device_bytes": 200 * MIB}, device="cuda", memory=FAKE, allowance=256 * MIB)
    assert got.kind == "done" and got.value == "allocated", got
    told = got.device_memory
    assert told["held_before_bytes"] == 100 * MIB and told["total_bytes"] == TOTAL
    assert told["bound_bytes"] == 356 * MIB
    assert told["fraction"] == round(356 * MIB / TOTAL, 6)
    assert told["peak_bytes"] == 300 * MIB


def test_past_the_device_bound_the_allocation_is_refused_with_the_reason():
    got = _run({"device_bytes": 300 * MIB}, device="cuda", memory=FAKE, allowance=256 * MIB)
    assert got.kind == "memory", got
    assert "CUDA out of memory" in got.why and "Tried to allocate 300 MiB" in got.why
    assert got.device_memory["bound_bytes"] == 356 * MIB


def test_a_peak_past_the_bound_that_the_allocator_missed_is_refused_too():
    got = _run({"device_bytes": 300 * MIB}, device="cuda", memory=f"{__name__}:UnseenCudaMemory",
               allowance=256 * MIB)
    assert got.kind == "memory", got
    assert "0.39 GiB of cuda memory at its peak, past its bound of 0.35 GiB" in got.why, got.why
    assert got.device_memory["peak_bytes"] == 400 * MIB


def test_no_answer_in_time_is_killed_with_what_it_started():
    tag = f"{os.getpid()}.{time.monotonic_ns() % 10 ** 6}"
    old = spawned_child.START_MARGIN_S
    spawned_child.START_MARGIN_S = 20.0
    try:
        got = _run({"spin": tag}, seconds=1)
    finally:
        spawned_child.START_MARGIN_S = old
    assert got.kind == "time" and "ran past" in got.why, got
    time.sleep(0.2)
    left = subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "what the child started outlived it"


def test_the_graders_own_failure_is_told_apart():
    setup = _run({"raise_in_setup": True})
    assert setup.kind == "failed" and "while setting up: KeyError" in setup.why, setup
    assert "a bug in the grader's setup" in setup.traceback
    died = _run({"die": True})
    assert died.kind == "failed" and "killed by signal 9" in died.why, died


# -- through the judge -----------------------------------------------------------------------

def _spawned_judge_result(monkeypatch, meter: str) -> dict:
    """fx.q1's honest graph judged with the checks of its graph in a spawned child whose device
    memory ``meter`` bounds (the judge's GPU path, on a CPU)."""
    from grader.isolation.judge.judging import job_for
    from grader.isolation.judge.steps import Judge
    from grader.isolation.cells.source import Cell
    from test_isolation import GOOD, TESTS_DIR

    monkeypatch.setattr(spawned_child, "spawns", lambda device: True)
    monkeypatch.setattr(spawned_child, "meter_for", lambda device: meter)
    job = job_for(["fx.q1"], [Cell("cell 5", textwrap.dedent(GOOD))],
                  problem_module="fixture_problems", course_root=TESTS_DIR, timeout_s=120,
                  checks={"fx.q1": ["correctness", "fullgraph"]}, screen=False)
    return Judge().grade(job).to_dict()["results"]["fx.q1"]


def test_the_judge_checks_a_graph_in_a_spawned_child_with_a_device_bound(monkeypatch):
    result = _spawned_judge_result(monkeypatch, FAKE)
    assert result["checks"]["correctness"]["ok"] and result["checks"]["fullgraph"]["ok"], result
    child = result["graph_child"]
    assert child["ended"] == "done" and child["forked_from"] == "spawned", child
    assert child["device_memory"]["bound_bytes"] == min(TOTAL, 100 * MIB + child["memory_bytes"])
    assert child["device_memory"]["peak_bytes"] <= child["device_memory"]["bound_bytes"]


class SwollenCudaMemory(FakeCudaMemory):
    """A device whose peak, read after the checks, is past any bound."""

    def peak(self) -> int:
        return TOTAL + 1


def test_the_judge_refuses_a_graph_past_its_device_bound_and_keeps_correctness(monkeypatch):
    result = _spawned_judge_result(monkeypatch, f"{__name__}:SwollenCudaMemory")
    assert result["status"] == "ok", result
    assert result["checks"]["correctness"]["ok"]
    message = result["checks"]["fullgraph"]["message"]
    assert not result["checks"]["fullgraph"]["ok"]
    assert "GiB of GPU memory this problem allows" in message, message
    assert result["graph_child"]["ended"] == "memory"
