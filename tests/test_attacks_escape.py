"""An escaped child, through the real run (`grade()`, what `make grade` runs): without bubblewrap
here (`SANDBOX=off`, which gives kernel confinement), with it in tests/test_attacks.py's run.
Learner code in the judge's subject starts a process the way an attacker would (a new session,
an empty environment, a double fork: no token to find it by, no process group to kill), which
then, for as long as it lives, tries to rewrite the gradebook, plant a file in the course, read
the judge's environment, maps and memory, kill the judge, and kill the subject of the submission
graded beside it.

It reaches none of it; it is killed when its subject ends and counted (`subject_leftovers`); the
submission graded beside it keeps its exact score. In the same cohort, two subjects ship graphs
made to hold the judge (20,000 operators; 4 GiB alive at once): each scores 0 in seconds, the
reason in its feedback, and the submissions after them keep their exact scores. The attacker code runs unscreened (the tests'
switch), in the subject only: nbgrader's notebook kernel, which re-runs the notebook for the
feedback, is confined only by bubblewrap until it stops running learner code (docs/trust.md), and
that is not what this tests.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess

import nbformat
import pytest

from conftest import COHORT_SUBJECT_TIMEOUT_S
from grader.cohort import demo
from grader.cohort.attempt import UNSCREENED_FOR_TESTS_ENV
from grader.cohort.grade import grade
from ps2_submissions import (HONEST_POINTS, PASS_CLASS, PS, ROOT, _notebook,
                             _scores_once_decided, _write)

TAG = f"escapee-{random.randint(10 ** 6, 10 ** 7)}"
VICTIM = f"victim-{random.randint(10 ** 5, 10 ** 6)}"   # a process name (at most 15 characters)

# The escaped process: a shell, started with an empty environment. Each attempt's outcome is
# printed once (its stdout is the subject's, which the judge keeps in grader-results.json). The
# subjects it tries to kill are this test's victims only (they name themselves VICTIM): were the
# confinement broken, it would not kill other runs' subjects on a shared machine.
REACHER = r"""
judge=$1 course=$2 victim=$3
try() { name=$1; shift; if "$@" 2>/dev/null; then echo "ESCAPEE $name: REACHED"; else echo "ESCAPEE $name: refused"; fi; }
try "write the gradebook" sh -c "echo X >> '$course/gradebook.db'"
try "create a course file" sh -c "echo x > '$course/planted.txt'"
try "read the judge's environ" cat "/proc/$judge/environ"
try "read the judge's maps" cat "/proc/$judge/maps"
try "open the judge's mem" sh -c "exec 3< /proc/$judge/mem"
try "kill the judge" kill -9 "$judge"
seen=""
end=$(( $(date +%s) + 90 ))
while [ "$(date +%s)" -lt "$end" ]; do
  for p in /proc/[0-9]*; do
    if [ "$(cat "$p/comm" 2>/dev/null)" = "$victim" ]; then
      case " $seen " in *" ${p#/proc/} "*) ;; *)
        seen="$seen ${p#/proc/}"
        try "kill another submission's subject" kill -9 "${p#/proc/}";;
      esac
    fi
  done
  sleep 0.2
done
"""

# An honest submission (tests/ps2_submissions.PASS_CLASS) whose subject names itself VICTIM.
VICTIM_CELL = f"import ctypes\nctypes.CDLL(None).prctl(15, {VICTIM.encode()!r}, 0, 0, 0)\n" + PASS_CLASS


def _escape_cell(course: str) -> str:
    """Learner code for the solution cell: the escape (in the subject only), then the honest
    model of tests/ps2_submissions.py."""
    return f"""import os, time
import __main__
if getattr(getattr(__main__, "__spec__", None), "name", "") == "grader.isolation.sandbox.subject":
    launcher = os.getppid()
    try:
        judge = open(f"/proc/{{launcher}}/stat").read().rsplit(")", 1)[1].split()[1]
    except OSError:
        judge = "none"
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sh", ["sh", "-c", {REACHER!r}, {TAG!r}, judge, {course!r}, {VICTIM!r}],
                      {{}})
        os._exit(0)
    os.wait()
    time.sleep(6)    # while the other worker's subjects run beside it
""" + PASS_CLASS


# Graphs made to hold the judge (tests/test_attacks_unscreened.SWOLLEN_GRAPH, shipped by the
# subject in front of the honest model): 19,950 extra operators, or eight 512 MiB tensors alive
# at once. Each is refused with the reason (so no kernel count, and ps2's correctness cell needs
# the fused kernels: 0), in seconds; the submissions graded beside and after them keep theirs.
SWOLLEN = {"swollen_nodes": ("nodes", "operators, more than"),
           "swollen_memory": ("memory", "MiB at once, more than")}
SWOLLEN_SECONDS = 60

# The escapee and its victim score what the honest model earns; a swollen graph nothing.
EXPECTED = {"escapee": HONEST_POINTS, "victim": HONEST_POINTS, **{s: 0 for s in SWOLLEN}}
UNSCREENED = ("escapee", "victim", *SWOLLEN)


def write_cohort(course: str, release_nb) -> None:
    """The escapee, its victim and the swollen graphs, as submissions of ``course``."""
    from test_attacks_unscreened import SWOLLEN_GRAPH

    _write(course, "escapee", _notebook(release_nb, _escape_cell(course), None))
    _write(course, "victim", _notebook(release_nb, VICTIM_CELL, None))
    for student, (how, _) in SWOLLEN.items():
        _write(course, student, _notebook(release_nb, SWOLLEN_GRAPH.format(how=how) + PASS_CLASS,
                                          None))


# The phases of a judged result that are the judge's own work after the subject is gone.
JUDGE_PHASES = ("graph checks", "graph child", "check compiled", "check fusion", "check speed")


def assert_swollen_graphs_refused_in_seconds(run) -> None:
    """Each swollen graph scored 0, the judge's own work on it done within
    :data:`SWOLLEN_SECONDS` (the whole submission's seconds, the subject's included, are printed:
    on an idle 2-core machine a ps2 submission takes 10-30 s), its reason in the judged result and
    in the feedback; ``_scores`` (checked beside this) holds everyone else's."""
    seconds = {o.submission.student: o.seconds for o in run.outcomes}
    for student, (_, reason) in SWOLLEN.items():
        result = judged(run.course, student)
        phases = result.get("phases") or {}
        judge_s = sum(phases.get(name, 0.0) for name in JUDGE_PHASES)
        print(f"{student}: the judge's checks {judge_s:.1f} s, the submission {seconds[student]:.1f} s")
        assert judge_s < SWOLLEN_SECONDS, (student, phases)
        checks = result["checks"]
        said = checks["fullgraph"]["message"]
        assert not checks["fullgraph"]["ok"] and "will not compile or run it" in said, said
        assert reason in said, said
        folder = os.path.join(run.course, "feedback", student, PS)
        feedback = "".join(open(os.path.join(folder, f)).read() for f in os.listdir(folder)
                           if f.endswith(".html"))
        assert "will not compile or run it" in feedback and reason in feedback, student


@pytest.fixture(scope="module")
def escaped():
    # Without bubblewrap, as an instructor asks for it (SANDBOX=off): kernel confinement.
    # (With bubblewrap: the same cohort in tests/test_attacks.py's run.)
    course = os.path.join(ROOT, "build", "test-escape-course")
    shutil.rmtree(course, ignore_errors=True)
    demo.build_demo_course(ROOT, [PS], folder=course, cohort={})
    write_cohort(course, nbformat.read(os.path.join(course, "release", PS, f"{PS}.ipynb"),
                                       as_version=4))
    os.environ[UNSCREENED_FOR_TESTS_ENV] = ",".join(UNSCREENED)
    try:
        run = grade(course, [PS], workers=2, sandbox="off",
                    subject_timeout_s=COHORT_SUBJECT_TIMEOUT_S)
    finally:
        os.environ.pop(UNSCREENED_FOR_TESTS_ENV, None)
    assert run.isolation.mode == "kernel", run.isolation.describe()
    return run


def judged(course: str, student: str) -> dict:
    """What the judge kept of ``student``'s ps2.q1 (grader-results.json)."""
    path = os.path.join(course, "autograded", student, PS, "grader-results.json")
    with open(path) as fh:
        return json.load(fh)["problems"]["ps2.q1"]


def assert_killed_and_counted(course: str) -> None:
    result = judged(course, "escapee")
    assert result["subject_leftovers"] >= 1, result
    left = subprocess.run(["pgrep", "-f", TAG], capture_output=True, text=True).stdout.strip()
    assert left == "", "the escaped process outlived its subject"


def assert_reached_nothing(course: str) -> None:
    tail = judged(course, "escapee")["output_tail"]
    outcomes = [line for line in tail.splitlines() if line.startswith("ESCAPEE ")]
    assert len([line for line in outcomes if line.endswith("refused")]) >= 6, tail
    assert [line for line in outcomes if "REACHED" in line] == [], tail
    assert not os.path.exists(os.path.join(course, "planted.txt"))
    for student in EXPECTED:
        assert judged(course, student)["status"] == "ok", student


def test_the_escaped_child_is_killed_and_counted(escaped):
    assert_killed_and_counted(escaped.course)


def test_the_escaped_child_reached_nothing(escaped):
    assert_reached_nothing(escaped.course)


def test_a_graph_made_to_hold_the_judge_scores_0_in_seconds(escaped):
    assert_swollen_graphs_refused_in_seconds(escaped)


def test_the_submission_beside_it_keeps_its_exact_score(escaped):
    assert _scores_once_decided(escaped.course) == pytest.approx(EXPECTED)
    assert {o.status for o in escaped.outcomes} == {"graded"}, \
        {o.submission.student: o.reason for o in escaped.outcomes}
