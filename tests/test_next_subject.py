"""The next job's subject, started while this job's learner code runs (``NextSubject``): the next
job takes it ready (two wait for a set with two solution cells, the oldest taken first),
learner code of this job cannot reach it, and one that died waiting costs a start, never a
grade.

Each test runs real subjects through the judge (``Judge(start_ahead=True)``, as ``make grade``'s
judge runs where it has two cores or more), in the confinement named, with attacker code run
*unscreened* in the subject of the job before.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from grader.isolation.cells.source import Cell
from grader.isolation.judge.judging import job_for
from grader.isolation.judge.reference_cells import reference_cells
from grader.isolation.judge.steps import Judge
from grader.isolation.judge.timing_gate import Gate
from grader.isolation.judge.subject_session import NextSubject
from grader.isolation.sandbox import process
from grader.problems import get_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The instructor's solution, as a learner who solved it would submit it.
FULL = "\n".join(cell.source for cell in reference_cells(get_problem("ps1.q1"), ROOT))

# Learner code that goes for the subject started after its own: every process it may signal
# among the next few hundred process ids is sent SIGKILL and SIGSTOP, and every folder it can
# name beside its own home is written into (a module the next subject would import, a poisoned
# compiler cache).
ATTACK = '''
import os, signal, glob
mine = os.getpid()
own = {int(t) for t in os.listdir("/proc/self/task")}   # a thread's id signals its process
for pid in range(max(2, mine - 50), mine + 400):
    if pid in own:
        continue
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except OSError:
            pass
home = os.path.expanduser("~")
for folder in {os.path.dirname(home), "/tmp", os.environ.get("TMPDIR", "/tmp")}:
    for other in glob.glob(os.path.join(folder, "*")) + [folder]:
        for name in ("torch.py", "sitecustomize.py", "inductor/planted"):
            try:
                os.makedirs(os.path.dirname(os.path.join(other, name)), exist_ok=True)
                with open(os.path.join(other, name), "w") as fh:
                    fh.write("raise SystemExit(3)\\n")
            except OSError:
                pass
'''

SANDBOXES = [mode for mode in ("bwrap", "kernel") if process.probe(mode).mode == mode]


# What the subject answers decides these; speed is the judge's own timing, tested elsewhere.
CHECKS = ["correctness", "fullgraph", "breaks"]


def _job(source: str, sandbox: str, subjects_ahead: int = 1):
    return job_for(["ps1.q1"], [Cell("cell 7", source)], course_root=ROOT, timeout_s=240,
                   screen=False, sandbox=sandbox, checks={"ps1.q1": CHECKS},
                   subjects_ahead=subjects_ahead)


def _full_marks(result) -> bool:
    return result.status == "ok" and sorted(result.checks) == sorted(CHECKS) \
        and all(outcome.ok for outcome in result.checks.values())


def _watch_takes(judge: Judge) -> list:
    """Each subject the judge's jobs take from ``next_subject`` (``None``: none was ready)."""
    taken, take = [], judge.next_subject.take

    def watched(deadline, **kind):
        taken.append(take(deadline, **kind))
        return taken[-1]

    judge.next_subject.take = watched
    return taken


@pytest.fixture
def judge():
    judge = Judge(start_ahead=True)
    judge.sandbox = "auto"      # as make grade probes it
    yield judge
    judge.next_subject.stop()
    judge.zygote.close()


def test_the_next_job_takes_the_subject_started_during_this_one(judge):
    taken = _watch_takes(judge)
    first = judge.grade(_job(FULL, judge.sandbox)).results["ps1.q1"]
    ahead = judge.next_subject.session
    assert ahead is not None and ahead.running.alive()       # started during the first job
    assert _full_marks(first), first
    second = judge.grade(_job(FULL, judge.sandbox)).results["ps1.q1"]
    assert taken == [None, ahead]                            # the second job took it
    assert ahead.finished is not None                         # and stopped it when done
    assert _full_marks(second), second
    assert judge.next_subject.session is not ahead and judge.next_subject.session is not None


def test_a_set_with_two_cells_keeps_two_subjects_waiting_and_takes_the_oldest(judge):
    """A set with two solution cells has two jobs a submission, the first of which can be
    short (ps3's planning rule): two subjects wait, and each job takes the one started longest
    ago, so the second job does not wait for the imports of the one the first job started.
    A job that asks for one keeps those already waiting and starts none."""
    taken = _watch_takes(judge)
    two = dict(subjects_ahead=2)
    judge.grade(_job(FULL, judge.sandbox, **two))
    first, second = judge.next_subject.waiting
    assert first.running.alive() and second.running.alive()
    judge.grade(_job(FULL, judge.sandbox, **two))
    assert taken[-1] is first and first.finished is not None
    assert judge.next_subject.waiting[0] is second and len(judge.next_subject.waiting) == 2
    third = judge.next_subject.waiting[1]
    result = judge.grade(_job(FULL, judge.sandbox)).results["ps1.q1"]   # asks for one
    assert taken[-1] is second and judge.next_subject.waiting == [third]
    assert _full_marks(result), result


@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_learner_code_cannot_reach_the_subjects_started_beside_it(judge, sandbox):
    """The attack runs in the first job's subject while the next two jobs' subjects are
    importing beside it (a set with two solution cells keeps two waiting): each of the next two
    jobs takes its subject unharmed and grades the full solution."""
    judge.sandbox = sandbox
    taken = _watch_takes(judge)
    two = dict(subjects_ahead=2)
    judge.grade(_job(ATTACK + FULL, judge.sandbox, **two))   # (its own launcher among what it hit)
    waiting = list(judge.next_subject.waiting)
    assert len(waiting) == 2, waiting
    for ahead in waiting:
        honest = judge.grade(_job(FULL, judge.sandbox, **two)).results["ps1.q1"]
        assert taken[-1] is ahead, "a subject started ahead did not survive the job before it"
        assert _full_marks(honest), honest


def test_a_subject_that_died_waiting_costs_a_start_not_a_grade(judge):
    taken = _watch_takes(judge)
    judge.grade(_job(FULL, judge.sandbox))
    ahead = judge.next_subject.session
    os.killpg(ahead.running.proc.pid, signal.SIGKILL)          # its launcher and all below it
    ahead.running.proc.wait(timeout=30)
    result = judge.grade(_job(FULL, judge.sandbox)).results["ps1.q1"]
    assert taken[-1] is None and ahead.finished is not None   # stopped, and a fresh one used
    assert _full_marks(result), result


def _below(pid: int) -> list[str]:
    """The command lines of every process below ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as fh:
                parent = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            with open(f"/proc/{child}/cmdline", "rb") as fh:
                found.append(fh.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
        todo += children.get(child, [])
    return found


def test_a_judge_process_starts_the_next_subject_only_with_two_cores_of_its_own():
    """``make grade``'s judge (one worker: every core, its own) keeps the next job's subject
    waiting after a job; one pinned to a single core (two workers on two cores, a Ray task)
    does not, so that the imports never share the core a learner's code runs on."""
    from grader.isolation.judge.judge_process import JudgeProcess

    allowed = sorted(os.sched_getaffinity(0))
    for cores in ([frozenset(allowed[:1])] + ([frozenset(allowed)] if len(allowed) > 1 else [])):
        judge = JudgeProcess(cores=cores)
        try:
            reply = judge.grade(_job(FULL, "auto"), timeout_s=300)
            assert _full_marks(reply.results["ps1.q1"]), reply
            waiting = [c for c in _below(judge.proc.pid)    # the subjects, not their launchers
                       if "--import-ahead" in c and "sandbox.launcher" not in c]
        finally:
            judge.close()
        assert len(waiting) == (1 if len(cores) > 1 else 0), (cores, waiting)


def _note(path, what: str) -> None:
    with open(path, "a") as fh:       # appended whole, from the judge or its forked child
        fh.write(what + "\n")


def test_the_judge_times_only_once_the_next_subject_has_imported_and_checks_meanwhile(
        judge, monkeypatch, tmp_path):
    """The next subject's imports and the judge's untimed checks of this job's graph run at
    once (the judge's child checks while the judge waits for that subject); what the child
    times starts only after the subject has answered. Here the judge's wait for the subject
    ends only once the child has come to its first timed check: before, the judge waited before
    it started the child, which then could not come there, and the order below could not hold."""
    order = tmp_path / "order"
    ready, gate = NextSubject.ready, Gate.pass_through

    def ready_once_the_child_waits(self):
        answered = ready(self)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
                order.exists() and "child at the gate" in order.read_text()):
            time.sleep(0.05)
        time.sleep(0.5)     # had the child not waited, it would have timed by now
        _note(order, "next subject ready")
        return answered

    def noted_gate(self):
        _note(order, "child at the gate")
        gate(self)
        _note(order, "child times")

    monkeypatch.setattr(NextSubject, "ready", ready_once_the_child_waits)
    monkeypatch.setattr(Gate, "pass_through", noted_gate)
    source = "\n".join(cell.source for cell in reference_cells(get_problem("ps2.q1"), ROOT))
    job = job_for(["ps2.q1"], [Cell("cell 5", source)], course_root=ROOT, timeout_s=240,
                  screen=False, sandbox=judge.sandbox)
    reply = judge.grade(job)
    result = reply.results["ps2.q1"]
    assert result.status == "ok" and "speed" in result.checks, result
    assert order.read_text().splitlines() == ["child at the gate", "next subject ready",
                                              "child times"]
    assert "next subject" in reply.phases
