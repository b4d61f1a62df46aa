"""The attack corpus: submissions written the way a determined student would, each graded by the
real run (`grade()`, what `make grade` runs), none scoring above what the same code earns
honestly; code outside the solution cells never runs, and outputs saved in the notebook earn
nothing; nothing secret reaches any feedback; nothing a submission started outlives it; and a
grader's manual scores survive a regrade, with timestamps and late penalties applied as nbgrader
applies them.

Problem set 2 is the cheapest to grade (tests/ps2_submissions.py: its honest reference points).
An escaped child and its victim, and graphs made to hold the judge (tests/test_attacks_escape.py),
are graded here with bubblewrap.
"""
from __future__ import annotations

import csv
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
import test_attacks_escape as escape
from ps2_submissions import (FORGED, HONEST_POINTS, PASS_CLASS, PS, ROOT, _notebook, _scores,
                             _scores_once_decided, _write)
from test_attacks_unscreened import ATTACK, SPIN_TAG

SECRET = "instructor-secret-7f3a91"
# Unique to this run: several checkouts' suites may run at once on one machine.
LEFTOVER_TAG = f"{random.randint(10 ** 6, 10 ** 7)}.3"
BLANK = None  # the release notebook's stub, untouched
# A line of the reference solution that no other notebook of ps2 contains.
REFERENCE_LINE = "xs = x.view(rows, self.groups, d // self.groups)"

# Attacks inside the solution cell: the judged scoring reads these cells, so the screen meets them.
SOLUTION_ATTACKS = {
    "patch_evaluation": PASS_CLASS + "from grader.isolation.check import Evaluation\n"
                                     "Evaluation.require = lambda self, name: None\n"
                                     "Evaluation.points = lambda self, name, p, c=1.0: float(p)\n",
    "forge_a_result": PASS_CLASS + (
        "import os\n"
        "for fd in range(3, 1024):\n"
        "    try:\n"
        "        os.write(fd, b'{\"status\": \"ok\", \"checks\": {}}')\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"),
    "patch_json_dump": PASS_CLASS + "import json\n_dump = json.dumps\n"
                                    "json.dumps = lambda o, **k: _dump({**o, 'status': 'ok'}, **k)\n",
    "patch_grader_class": PASS_CLASS + "import grader.checks.targets\n"
                                       "grader.checks.targets.SpeedTarget.fraction_of_reference = 0.0\n",
    "flip_dynamo_config": PASS_CLASS + "torch._dynamo.config.suppress_errors = True\n",
    "read_files_in_the_subject": "class FusedGroupNormGELU(GroupNormGELU):\n"
                                 "    def forward(self, x):\n"
                                 "        raise ValueError(open('/etc/hostname').read())\n",
}
# Attacks in an extra cell the student added, which once ran in the notebook's kernel nbgrader
# started for the feedback: make grade runs no cell of the notebook now, so they never run.
KERNEL_ATTACKS = {
    "rebind_run_test": (BLANK, "FusedGroupNormGELU = object\n"
                               "def run_test(grade_id, *objects):\n"
                               "    print('[PASS] everything')\n"
                               "    return 3.0 if grade_id.endswith('speed') else None\n"),
    "patch_cell_scores": (PASS_CLASS, (
        "import grader.isolation.cell_scores as gc\n"
        "gc.CellScore.from_dict = classmethod(lambda cls, d: cls(d['grade_id'], d['max_points'], "
        "d['max_points'], d['partial'], '[PASS] all good'))\n")),
    "snoop": (BLANK, None),      # filled in below: it needs the course's paths
    "leftover_process": (BLANK, "import subprocess\n"
                                f"subprocess.Popen(['sh', '-c', 'sleep {LEFTOVER_TAG} & "
                                f"sleep {LEFTOVER_TAG} & wait'], start_new_session=True)\n"),
}
HONEST = {"honest_pass": (PASS_CLASS, None)}   # and ada_full, the demo's full solution
# Past the screen (graded with it off, as only the grader's own tests can): the unscreened attack
# of tests/test_attacks_unscreened.py in front of the honest model (PASS_CLASS), through make grade.
UNSCREENED = {"unscreened_forger": ATTACK + PASS_CLASS}
# The forger earns nothing: the graph it ships carries a refused operator, so no kernel count, and
# the correctness cell needs ps2's lesson (the fused kernels) too; its spinning thread may also
# hold the subject past its deadline. Either way 0, below the honest model's points.
EXPECTED = {"honest_pass": HONEST_POINTS, "ada_full": 10, "unscreened_forger": 0,
            "patch_cell_scores": HONEST_POINTS, "rebind_run_test": 0,
            "snoop": 0, "leftover_process": 0, **{name: 0 for name in SOLUTION_ATTACKS},
            **escape.EXPECTED}


def _snoop_code(course: str) -> str:
    """Print the reference solutions, the gradebook, the environment and what lies around."""
    targets = [os.path.join(course, "source"), os.path.join(course, "gradebook.db"),
               os.path.join(course, "submitted"), os.path.join(ROOT, "source"), "/root", "/tmp",
               os.path.expanduser("~")]
    return ("import glob, os\n"
            f"found = glob.glob({os.path.join(course, 'source', '*', '*.ipynb')!r})\n"
            "print('SOURCE-FILES:', len(found))\n"
            "for path in found:\n"
            "    try:\n"
            "        print(open(path).read())\n"
            "    except Exception as exc:\n"
            "        print('ERR', path, exc)\n"
            "print('ENV', dict(os.environ))\n"
            f"for top in {targets!r}:\n"
            "    for root, dirs, files in os.walk(top):\n"
            "        for name in files:\n"
            "            path = os.path.join(root, name)\n"
            "            print('FOUND', path)\n"
            "            try:\n"
            "                print(open(path, errors='replace').read()[:2000])\n"
            "            except Exception as exc:\n"
            "                print('ERR', path, exc)\n")


def _graded_notebook(course: str, student: str):
    return nbformat.read(os.path.join(course, "autograded", student, PS, f"{PS}.ipynb"), as_version=4)


def _test_cell_outputs(course: str, student: str) -> str:
    """What the graded notebook's test cells show (the feedback renders these)."""
    nb = _graded_notebook(course, student)
    return "".join(str(o.get("text", "")) + str(o.get("evalue", ""))
                   for c in nb.cells if (c.metadata.get("nbgrader") or {}).get("grade")
                   and not (c.metadata.get("nbgrader") or {}).get("solution")
                   for o in c.get("outputs", []))


def _feedback(course: str, student: str) -> str:
    folder = os.path.join(course, "feedback", student, PS)
    return "".join(open(os.path.join(folder, f)).read() for f in sorted(os.listdir(folder))
                   if f.endswith(".html"))


@pytest.fixture(scope="module")
def attacked():
    # Beside the checkout, like the real course (not under /tmp, which an older sandbox hid by
    # accident): the snooping cell knows exactly where source/ is.
    course = os.path.join(ROOT, "build", "test-attacks-course")
    shutil.rmtree(course, ignore_errors=True)
    demo.build_demo_course(ROOT, [PS], folder=course, cohort={"ada_full": "ada_full"})
    release_nb = nbformat.read(os.path.join(course, "release", PS, f"{PS}.ipynb"), as_version=4)
    for student, code in SOLUTION_ATTACKS.items():
        _write(course, student, _notebook(release_nb, code, None))
    for student, (solution, extra) in {**KERNEL_ATTACKS, **HONEST}.items():
        extra = _snoop_code(course) if student == "snoop" else extra
        _write(course, student, _notebook(release_nb, solution, extra,
                                          forged=student in KERNEL_ATTACKS))
    for student, code in UNSCREENED.items():
        _write(course, student, _notebook(release_nb, code, None))
    escape.write_cohort(course, release_nb)   # an escaped child, its victim, swollen graphs
    os.environ["COURSE_SECRET_TEST"] = SECRET  # an instructor's secret in the grading process
    os.environ[UNSCREENED_FOR_TESTS_ENV] = ",".join([*UNSCREENED, *escape.UNSCREENED])
    try:
        run = grade(course, [PS], workers=2, subject_timeout_s=COHORT_SUBJECT_TIMEOUT_S)
    finally:
        os.environ.pop("COURSE_SECRET_TEST", None)
        os.environ.pop(UNSCREENED_FOR_TESTS_ENV, None)
    return run


def test_no_attack_scores_above_the_same_code_graded_honestly(attacked):
    scores = _scores_once_decided(attacked.course)
    assert scores == pytest.approx(EXPECTED), (scores, _scores(attacked.course))
    by_student = {o.submission.student: o for o in attacked.outcomes}
    assert all(o.status == "graded" for o in by_student.values()), \
        {s: o.reason for s, o in by_student.items() if o.status != "graded"}


def test_solution_cell_attacks_are_refused_naming_the_line(attacked):
    for student in SOLUTION_ATTACKS:
        page = _feedback(attacked.course, student)
        assert "your solution was not run" in page and "cell 7, line " in page, student


def test_no_cell_outside_the_solutions_runs_and_saved_outputs_earn_nothing(attacked):
    """The extra cells' code never ran (nothing printed, nothing left running, nothing read); each
    test cell shows the judge's verdicts instead of the full marks saved in the notebook."""
    for student in KERNEL_ATTACKS:
        cells = _graded_notebook(attacked.course, student).cells
        solution = next(i for i, c in enumerate(cells) if c.cell_type == "code"
                        and (c.metadata.get("nbgrader") or {}).get("solution"))
        extra = cells[solution + 1]                     # the cell the student added (_notebook)
        assert not (extra.metadata.get("nbgrader") or {}).get("grade_id"), student
        assert extra.outputs == [], (student, extra.outputs)
        shown = _test_cell_outputs(attacked.course, student)
        assert FORGED not in shown and "[PASS] all good" not in shown, student
        assert "ps2.q1" in shown, student
    assert "[FAIL] ps2.q1" in _test_cell_outputs(attacked.course, "rebind_run_test")


def test_nothing_secret_reaches_the_feedback(attacked):
    reference = open(os.path.join(ROOT, "source", PS, f"{PS}.ipynb")).read()
    assert REFERENCE_LINE in reference  # the line really is the reference's
    for student in list(SOLUTION_ATTACKS) + list(KERNEL_ATTACKS) + list(UNSCREENED):
        page = _feedback(attacked.course, student)
        assert REFERENCE_LINE not in page, student
        assert SECRET not in page, student
        assert "ada_full" not in page, student            # another student
        assert "BEGIN SOLUTION" not in page, student



def test_nothing_a_submission_started_is_left_running(attacked):
    for tag in (f"sleep {LEFTOVER_TAG}", f"sleep {SPIN_TAG}"):
        left = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True)
        assert left.stdout.strip() == "", tag


def test_an_escaped_child_is_killed_and_counted_and_reached_nothing(attacked):
    escape.assert_killed_and_counted(attacked.course)
    escape.assert_reached_nothing(attacked.course)


def test_a_graph_made_to_hold_the_judge_scores_0_in_seconds(attacked):
    escape.assert_swollen_graphs_refused_in_seconds(attacked)


def test_honest_submissions_keep_their_demo_scores(attacked):
    expected = demo.expected_scores()[PS]
    assert _scores_once_decided(attacked.course)["ada_full"] == expected["ada_full"]


# ---------------------------------------------------------------------------------------------
# Hand grading, timestamps and late penalties

def test_regrade_keeps_manual_grades_and_applies_timestamps_and_late_penalties(tmp_path):
    from nbgrader.api import Gradebook

    course = str(tmp_path / "course")
    demo.build_demo_course(ROOT, [PS], folder=course, cohort={})
    release_nb = nbformat.read(os.path.join(course, "release", PS, f"{PS}.ipynb"), as_version=4)
    _write(course, "on_time", _notebook(release_nb, None, None), "2026-11-20 09:30:00.000000 UTC")
    _write(course, "late", _notebook(release_nb, None, None), "2026-12-02 09:30:00.000000 UTC")
    with open(os.path.join(course, "nbgrader_config.py"), "a") as fh:
        fh.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    grade(course, [PS], workers=2)     # the two submissions at once (2 cores)
    url = "sqlite:///" + os.path.join(course, "gradebook.db")
    with Gradebook(url) as gb:
        gb.update_or_create_assignment(PS, duedate="2026-12-01 00:00:00 UTC")
        for student in ("on_time", "late"):
            g = gb.find_grade("ps2-q1-speed", PS, PS, student)
            g.manual_score = 2.0
            c = gb.find_comment("ps2-q1-solution", PS, PS, student)
            c.manual_comment = "good try"
        gb.db.commit()
    run = grade(course, [PS], workers=2, regrade=True)
    assert {o.status for o in run.outcomes} == {"graded"}
    with Gradebook(url) as gb:
        for student in ("on_time", "late"):
            sub = gb.find_submission(PS, student)
            assert gb.find_grade("ps2-q1-speed", PS, PS, student).manual_score == 2.0
            assert gb.find_comment("ps2-q1-solution", PS, PS, student).manual_comment == "good try"
            assert sub.timestamp is not None and sub.timestamp.day in (20, 2)
        late_nb = gb.find_submission_notebook(PS, PS, "late")
        on_time_nb = gb.find_submission_notebook(PS, PS, "on_time")
        assert late_nb.late_submission_penalty == 2.0       # "zero": the whole score
        assert not on_time_nb.late_submission_penalty
    with open(run.csv_path) as fh:
        rows = {r["student_id"]: r for r in csv.DictReader(fh) if r["assignment"] == PS}
    assert rows["on_time"]["timestamp"].startswith("2026-11-20")
    assert float(rows["on_time"]["score"]) == 2.0
    assert float(rows["late"]["score"]) == 0.0 and float(rows["late"]["late_submission_penalty"]) == 2.0
