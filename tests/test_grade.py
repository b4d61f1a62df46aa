"""`make grade` end to end: the demo cohort grades to its written-down scores, a killed run
resumes without loss or double counting, and the report, CSV and feedback are written.

Problem set 2 is the cheapest to grade, so the cohort tests use it; the other sets' demo scores
are checked by `make grade` itself (its exit status compares them with demo_expected.json).
"""
import contextlib
import csv
import glob
import html
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import COHORT_SUBJECT_TIMEOUT_S
from grader.cohort import assign, demo
from grader._files import MARKER
from grader.cohort.grade import grade, exit_status

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSIGNMENT = "ps2"


def _full_marks(course: str, outcome) -> None:
    """``outcome`` (the full solution) scored every point, but for speed cells this machine's
    noise left undecided: those are held for a person, as the demo check allows (a loaded
    machine's timing is no grader error and no wrong answer). Every other cell scored in full."""
    if outcome.score == outcome.max_score:
        return
    from grader import _files as files
    from grader.cohort.scoring import JudgedScores

    sub = outcome.submission
    judged = JudgedScores.load(os.path.join(files.autograded_dir(course, sub.student,
                                                                 sub.assignment),
                                            files.RESULTS_FILE))
    short = {g: c for g, c in judged.cell_scores().items() if c.points < c.max_points}
    assert short and all(g.endswith("-speed") and c.review for g, c in short.items()), \
        (sub.name, outcome.score, outcome.max_score, short)


def _gradebook_rows(course: str) -> list[tuple]:
    from nbgrader.api import Gradebook

    url = "sqlite:///" + os.path.join(course, "gradebook.db")
    with Gradebook(url) as gb:
        return sorted((s.student_id, s.assignment.name, float(s.score))
                      for a in gb.assignments for s in a.submissions)


@pytest.fixture(scope="module")
def demo_run(graded_demo):
    return graded_demo   # tests/conftest.py: graded once per session, shared with the browser test


def test_demo_cohort_has_every_persona_and_written_down_scores():
    expected = demo.expected_scores()
    for assignment in assign.assignments(ROOT):
        assert set(expected.get(assignment, {})) == set(demo.PERSONAS), assignment


def test_demo_cohort_grades_to_the_written_down_scores(demo_run):
    assert len(demo_run.outcomes) == len(demo.PERSONAS)
    assert demo.check_expected(demo_run) == []


def test_unreadable_submissions_score_zero_with_a_reason_and_nobody_else_is_affected(demo_run):
    by_student = {o.submission.student: o for o in demo_run.outcomes}
    corrupt = by_student["hal_corrupt"]
    assert corrupt.status == "failed" and "not a readable notebook" in corrupt.reason
    page = os.path.join(demo_run.course, "feedback", "hal_corrupt", ASSIGNMENT, "NOT_GRADED.html")
    assert "not a readable notebook" in open(page).read()
    # The crash (os._exit, refused before it runs) and the endless loop (stopped at the subject's
    # deadline) are graded, zero for what they broke, with the reason under their solution cell
    # in the feedback; the full solution next to them keeps full marks.
    for student, reason in (("fay_crash", "your solution was not run"),
                            ("gus_loop", "did not finish in time (an endless loop, or far too "
                                         "slow); it was stopped after "
                                         f"{COHORT_SUBJECT_TIMEOUT_S} s")):
        assert by_student[student].status == "graded"
        solution = next(c for c in _graded_notebook(demo_run.course, student).cells
                        if c.metadata.get("nbgrader", {}).get("grade_id") == "ps2-q1-solution")
        shown = [o for o in solution.outputs if o.output_type == "error"]
        assert len(shown) == 1 and reason in shown[0].evalue, (student, solution.outputs)
        fb = os.path.join(demo_run.course, "feedback", student, ASSIGNMENT, f"{ASSIGNMENT}.html")
        assert reason in html.unescape(open(fb).read()), student
    _full_marks(demo_run.course, by_student["ada_full"])
    # Real submissions (not the demo) with an ungradable one exit with status 2.
    demo_run.demo = False
    assert exit_status(demo_run) == 2


def _graded_notebook(course: str, student: str):
    import nbformat

    return nbformat.read(os.path.join(course, "autograded", student, ASSIGNMENT,
                                      f"{ASSIGNMENT}.ipynb"), as_version=4)


def test_the_graded_notebook_is_the_submission_with_the_judges_verdicts(demo_run):
    """Nothing of a submission runs outside the subject: its graded notebook is the notebook as
    submitted (the demo's have no saved outputs), its autograded test cells showing the judge's
    verdicts."""
    import nbformat

    for student in ("ada_full", "ben_partial", "eve_wrong"):
        graded = _graded_notebook(demo_run.course, student)
        submitted = nbformat.read(os.path.join(demo_run.course, "submitted", student, ASSIGNMENT,
                                               f"{ASSIGNMENT}.ipynb"), as_version=4)
        judged = json.load(open(os.path.join(demo_run.course, "autograded", student, ASSIGNMENT,
                                             "grader-results.json")))
        assert len(graded.cells) == len(submitted.cells)
        for mine, theirs in zip(graded.cells, submitted.cells):
            meta = mine.metadata.get("nbgrader", {})
            if mine.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
                assert mine.outputs[0].text.strip() == judged["cells"][meta["grade_id"]]["text"]
            else:
                assert mine.source == theirs.source and mine.get("outputs") == theirs.get("outputs")


def test_gradebook_csv_and_report_agree(demo_run):
    rows = _gradebook_rows(demo_run.course)
    assert len(rows) == len(demo.PERSONAS)  # one submission each, nothing counted twice
    with open(demo_run.csv_path) as fh:
        csv_scores = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(fh)
                      if r["assignment"] == ASSIGNMENT}
    assert csv_scores == {student: score for student, _, score in rows}
    report = open(demo_run.report_path).read()
    assert ASSIGNMENT in report and "<img" in report


def test_the_judges_precompiled_header_is_kept_in_their_compiler_cache(demo_run):
    """Inductor's precompiled C++ header (seconds of g++) is made in the judges' compiler cache,
    which the next run reads, not in the run's temporary folder, which the run removes: so the
    next run neither builds it again nor, as its path is part of each kernel's build line,
    rebuilds every kernel."""
    import glob

    from grader.cohort.judge_cache import JudgeCache

    inductor = os.path.join(JudgeCache.of(demo_run.course).folder, "inductor")
    assert glob.glob(os.path.join(inductor, "precompiled_headers", "*.gch"))
    assert not os.path.exists(demo_run.subjects_dir)


def test_killed_run_resumes_without_loss_and_rerun_is_idempotent(tmp_path, capsys):
    folder = str(tmp_path / "course")
    cohort = {"a_blank": "cy_blank", "b_crash": "fay_crash", "c_corrupt": "hal_corrupt",
              "d_full": "ada_full"}
    demo.build_demo_course(ROOT, [ASSIGNMENT], folder=folder, cohort=cohort)
    proc = subprocess.Popen([sys.executable, "-m", "grader.cohort.grade", "--course", folder,
                             "--assignment", ASSIGNMENT, "--workers", "1"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    markers = [os.path.join(folder, "autograded", s, ASSIGNMENT, MARKER) for s in cohort]
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and sum(map(os.path.exists, markers)) < 2:
        time.sleep(0.5)
    from grader.cohort.grade import run_folders_root

    left = glob.glob(os.path.join(run_folders_root(), f"{proc.pid}-*"))
    assert len(left) == 1 and os.listdir(left[0]), "the run keeps its folders in one of its own"
    os.killpg(proc.pid, signal.SIGKILL)  # like a power cut: no clean-up code runs
    proc.wait()
    finished = [m for m in markers if os.path.exists(m)]
    assert 2 <= len(finished) < len(cohort), "the kill should land mid-run"
    saved = {os.path.basename(os.path.dirname(os.path.dirname(m))): json.load(open(m))["score"]
             for m in finished}

    run = grade(folder, [ASSIGNMENT], workers=2)   # what the kill left, two at a time
    # The killed run's judges, subjects and grading copies were removed by this one.
    assert not os.path.exists(left[0]), os.listdir(left[0])
    assert not glob.glob(os.path.join(run_folders_root(), f"{os.getpid()}-*"))
    # No more judges than submissions left (each builds the references before grading one).
    assert len(run.judges) == min(2, len(cohort) - len(finished))
    by_student = {o.submission.student: o for o in run.outcomes}
    for student, score in saved.items():
        assert by_student[student].status == "skipped" and by_student[student].score == score
    assert {o.status for s, o in by_student.items() if s not in saved} <= {"graded", "failed"}
    rows = _gradebook_rows(folder)
    assert [r[0] for r in rows] == sorted(cohort)  # each student exactly once
    _full_marks(folder, by_student["d_full"])

    # Nothing new: nothing is graded, generated or drawn again, and no nbgrader process is started
    # (nbgrader's own start is ~2 s a call; a regrade with nothing to do once took a minute for
    # the eight sets).
    from grader.cohort import assign

    calls = []
    real = assign.nbgrader
    assign.nbgrader = lambda *args, **kw: calls.append(args[0]) or real(*args, **kw)
    capsys.readouterr()
    try:
        again = grade(folder, [ASSIGNMENT], workers=1)
    finally:
        assign.nbgrader = real
    assert {o.status for o in again.outcomes} == {"skipped"}
    assert _gradebook_rows(folder) == rows
    assert calls == [], calls
    said = capsys.readouterr().out
    assert "graded 0 of 4 submissions" in said and "3 graded before and unchanged since" in said, \
        said
    # The grades CSV is written again, in this process, from the gradebook as it is.
    csv_path = os.path.join(folder, "reports", "grades.csv")
    os.remove(csv_path)
    again = grade(folder, [ASSIGNMENT], workers=1)
    with open(csv_path) as fh:
        assert sorted(r["student_id"] for r in csv.DictReader(fh)) == sorted(cohort)


def test_a_gradebook_started_by_the_grader_is_the_one_nbgrader_makes_without_its_subprocess(
        tmp_path, monkeypatch):
    """nbgrader makes a new gradebook by running ``alembic heads`` in a process of its own (2.6 s
    here); the grader starts a course's gradebook with the revision read in its own process, and
    nbgrader then opens it without that process: the same tables, the same revision."""
    import sqlite3

    import nbgrader.api
    from nbgrader.api import Gradebook

    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    theirs.mkdir()
    Gradebook(f"sqlite:///{theirs / 'gradebook.db'}").close()     # nbgrader's own, with alembic
    assign.new_gradebook(str(ours))
    monkeypatch.setattr(nbgrader.api, "get_alembic_version",
                        lambda: pytest.fail("nbgrader ran alembic for a gradebook already started"))
    with Gradebook(f"sqlite:///{ours / 'gradebook.db'}") as gb:
        gb.update_or_create_student("ada")

    def schema(folder):
        with contextlib.closing(sqlite3.connect(folder / "gradebook.db")) as db:
            return (db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall(),
                    db.execute("SELECT version_num FROM alembic_version").fetchall())

    assert schema(ours) == schema(theirs)
    assign.new_gradebook(str(ours))             # one there already: left as it is
    with monkeypatch.context() as patch:        # ... and one made between its look and its write
        patch.setattr(assign.os.path, "exists", lambda path: False)
        assign.new_gradebook(str(ours))
    assert sorted(os.listdir(ours)) == ["gradebook.db"]
    with Gradebook(f"sqlite:///{ours / 'gradebook.db'}") as gb:
        assert [s.id for s in gb.students] == ["ada"]


def test_generate_assignment_in_this_process_makes_what_nbgrader_s_command_makes(tmp_path):
    """generate_once runs nbgrader's GenerateAssignment converter in this process (nbgrader's
    own command spends seconds starting): the same release notebook and the same cells in the
    gradebook as ``nbgrader generate_assignment ps1 --force``; the working folder is left as it
    was; a notebook nbgrader cannot read fails with nbgrader's reason, naming the set."""
    import sqlite3

    courses = {}
    for how in ("command", "in-process"):
        course = tmp_path / how
        shutil.copytree(os.path.join(assign.COURSE_ROOT, "source", "ps1"), course / "source" / "ps1")
        shutil.copy(os.path.join(assign.COURSE_ROOT, "nbgrader_config.py"), course)
        assign.new_gradebook(str(course))
        courses[how] = course
    assign.nbgrader("generate_assignment", "ps1", "--force", cwd=str(courses["command"]))
    here = os.getcwd()
    assert assign.generate_once("ps1", str(courses["in-process"]))
    assert os.getcwd() == here
    assert not assign.generate_once("ps1", str(courses["in-process"]))   # unchanged: not again

    def made(course):
        with open(course / "release" / "ps1" / "ps1.ipynb") as fh:
            release = fh.read()
        with contextlib.closing(sqlite3.connect(course / "gradebook.db")) as db:
            cells = sorted(db.execute(
                "SELECT b.name, g.max_score, g.cell_type FROM grade_cells g "
                "JOIN base_cell b ON b.id = g.id").fetchall())
            sources = sorted(db.execute("SELECT name, cell_type, locked, source, checksum "
                                        "FROM source_cell").fetchall())
        return release, cells, sources

    assert made(courses["in-process"]) == made(courses["command"])
    assert made(courses["command"])[1], "no graded cell in the gradebook"

    broken = courses["in-process"] / "source" / "ps1" / "ps1.ipynb"
    broken.write_text('{"cells": [')
    with pytest.raises(RuntimeError, match="generate_assignment ps1"):
        assign.generate_once("ps1", str(courses["in-process"]))
    assert os.getcwd() == here


def test_real_submissions_held_for_a_person_exit_2_and_the_summary_lists_them(monkeypatch):
    """A graded submission with cells held for a person (a grader error, an undecided verdict)
    is not a finished grade: `make grade` exits 2, as the README says, and names each."""
    import dataclasses

    from grader.cohort import grade as grade_module
    from grader.cohort.merge import Graded

    @dataclasses.dataclass
    class Sub:
        student: str
        assignment: str = "ps8"

        @property
        def name(self):
            return f"{self.student}/{self.assignment}"

    @dataclasses.dataclass
    class Out:
        submission: Sub
        status: str = Graded.GRADED
        reason: str = ""

    held = {"eve": ["ps8-q1-correctness"]}
    monkeypatch.setattr("grader.cohort.scoring.held_for_review",
                        lambda course, sub: held.get(sub.student, []))
    run = grade_module.Run(course="/nowhere", assignments=["ps8"])
    run.outcomes = [Out(Sub("ada")), Out(Sub("eve"))]
    assert grade_module.exit_status(run) == 2
    assert [(o.submission.student, cells) for o, cells in grade_module.held_this_run(run)] == \
        [("eve", ["ps8-q1-correctness"])]
    held.clear()
    assert grade_module.exit_status(run) == 0


def test_the_judges_compiler_cache_is_kept_closed_and_deadlines_follow_its_cold_build(
        tmp_path, monkeypatch):
    """A second make grade compiles the references from the first one's cache (a new submission
    costs itself, not the references' cold compile), in a folder only the grading user reads;
    its deadlines stay those of the cold build; another grader's cache is removed."""
    from grader import _files as files
    from grader.cohort.judge_cache import JudgeCache
    from grader.cohort.scoring import BuiltReferences

    monkeypatch.delenv("COURSE_JUDGE_CACHE", raising=False)
    course = str(tmp_path)
    stale = tmp_path / files.CACHE / "0123456789abcdef"
    stale.mkdir(parents=True)
    cache = JudgeCache.of(course)
    assert os.path.dirname(cache.folder) == os.path.join(course, files.CACHE)
    assert not stale.exists()                                   # another grader's: removed
    assert os.stat(os.path.join(course, files.CACHE)).st_mode & 0o077 == 0
    assert JudgeCache.of(course).folder == cache.folder          # same grader, torch, machine
    cold = BuiltReferences({"ps1.q1": 38.0})
    warm = BuiltReferences({"ps1.q1": 5.0})
    assert cache.cold_reference_s("ps1", cold) == 38.0
    assert cache.cold_reference_s("ps1", warm) == 38.0          # the cold figure sets deadlines
    assert cache.cold_reference_s("ps2", BuiltReferences(error="died")) is None
    assert JudgeCache(cache.folder).cold_reference_s("ps2", warm) == 5.0


def test_a_shared_judge_cache_is_used_only_where_it_is_the_grading_users(tmp_path, monkeypatch):
    from grader import _files as files
    from grader.cohort.judge_cache import JudgeCache

    shared = tmp_path / "shared"
    monkeypatch.setenv("COURSE_JUDGE_CACHE", str(shared))
    course = tmp_path / "course"
    course.mkdir()
    assert os.path.dirname(JudgeCache.of(str(course)).folder) == str(shared)
    if os.geteuid() == 0:   # someone else's folder (another user's, a planted one): not used
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        monkeypatch.setenv("COURSE_JUDGE_CACHE", str(theirs))
        assert os.path.dirname(JudgeCache.of(str(course)).folder) == \
            os.path.join(str(course), files.CACHE)


def test_two_writers_of_one_json_file_never_fail_or_leave_half_a_file(tmp_path):
    """The shared cache's cold.json (and every file the grader replaces whole) may be written by
    two processes at once: each write succeeds, and a reader sees one writer's whole file."""
    import json
    import threading

    from grader import _files as files

    path = str(tmp_path / "cold.json")
    errors = []

    def write(value):
        try:
            for _ in range(200):
                files.write_json_atomic(path, {"ps1": value, "pad": "x" * 4000})
        except Exception as exc:   # pragma: no cover - the failure this test looks for
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(v,)) for v in (1, 2)]
    for t in threads:
        t.start()
    for _ in range(200):
        if os.path.exists(path):
            assert json.load(open(path))["ps1"] in (1, 2)
    for t in threads:
        t.join()
    assert not errors, errors
    assert os.listdir(tmp_path) == ["cold.json"]       # no temporary file left behind


def test_the_demo_run_says_its_check_passed_or_names_each_score_that_differs(capsys):
    import types

    from grader.cohort import grade as grade_module
    from grader.cohort.demo import expected_scores

    expected = expected_scores()["ps2"]

    def outcome(student, score):
        sub = types.SimpleNamespace(student=student, assignment="ps2", name=f"{student}/ps2")
        return types.SimpleNamespace(submission=sub, score=score, status="graded", reason="")

    run = grade_module.Run(course="/nowhere", assignments=["ps2"])
    run.demo = True
    run.outcomes = [outcome(s, points) for s, points in sorted(expected.items())]
    assert grade_module.exit_status(run) == 0
    assert (f"demo check passed: all {len(expected)} demo scores are the ones written down"
            in capsys.readouterr().out)
    run.outcomes[0].score += 1
    assert grade_module.exit_status(run) == 1
    said = capsys.readouterr().out
    assert "demo check passed" not in said and "demo: unexpected score:" in said


def test_each_local_worker_has_cores_of_its_own():
    from grader.cohort.attempt import worker_cores

    allowed = os.sched_getaffinity(0)
    assert worker_cores(1) == [frozenset(allowed)]        # one worker: every core, its own
    assert worker_cores(1, idle=len(allowed)) == [frozenset(allowed)]
    if len(allowed) > 1:   # ... where they are idle: else none pinned, no subject ahead
        assert worker_cores(1, idle=len(allowed) - 1) == [None]
    assert worker_cores(len(allowed) + 1) == [None] * (len(allowed) + 1)
    groups = worker_cores(len(allowed))
    assert all(len(g) == 1 for g in groups) and set().union(*groups) == allowed


def test_a_submission_takes_a_free_judge_never_one_in_use(monkeypatch):
    """Local workers: each submission is judged by a worker's judge that is free; a slow
    submission does not hold up the ones after it behind its judge."""
    import threading

    from grader.cohort import attempt as attempt_module
    from grader.cohort.collect import Submission

    busy, used, lock = set(), [], threading.Lock()

    def fake_run_attempt(sub, course, settings, *, isolation, judge, device, folder_in=None):
        with lock:
            assert judge not in busy, f"{judge} judged two submissions at once"
            busy.add(judge)
            used.append((sub.student, judge))
        time.sleep(1.0 if sub.student == "slow" else 0.05)
        with lock:
            busy.discard(judge)
        return attempt_module.Attempt(None, None)

    monkeypatch.setattr(attempt_module, "run_attempt", fake_run_attempt)
    todo = [(Submission(s, "ps1", "/nowhere"), "d") for s in ["slow", "a", "b", "c", "d"]]
    done = [sub.student for sub, _, _ in attempt_module.local_attempts(
        todo, "/nowhere", None, isolation=None, judges=["judge-0", "judge-1"], workers=2)]
    assert sorted(done) == ["a", "b", "c", "d", "slow"]
    assert done[-1] == "slow"                  # the other four went through the free judge
    assert {j for s, j in used if s != "slow"} == {"judge-0", "judge-1"} - {dict(used)["slow"]}


@pytest.fixture
def folders_of_its_own(tmp_path, monkeypatch):
    """start_judges makes the run's judges' and subjects' folders in the temporary folder, which
    grade() removes at its end: a test that calls start_judges alone (with fake judges) keeps
    them in its own folder instead of leaving them in /tmp."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def test_no_more_judges_start_than_submissions_left_to_grade(tmp_path, monkeypatch,
                                                              folders_of_its_own):
    """Each judge builds the references before its first submission: adding one submission to a
    graded course starts one judge, whatever WORKERS says, not pinned (there is no next
    submission to start a subject ahead for)."""
    import dataclasses

    from grader.cohort import grade as grade_module
    from grader.cohort import scoring
    from grader.cohort.collect import Submission
    from grader.cohort.settings import DEFAULTS
    from grader.cohort.scoring import BuiltReferences
    from grader.isolation.judge import judge_process

    started = []

    class FakeJudge:
        def __init__(self, *, env, cores, log_path):
            started.append(cores)

    monkeypatch.setattr(judge_process, "JudgeProcess", FakeJudge)
    monkeypatch.setattr(scoring, "build_references",
                        lambda *a, **k: BuiltReferences({"ps1.q1": 1.0}))
    monkeypatch.setattr(grade_module, "already_graded", lambda course, sub: sub.student != "new")
    monkeypatch.setenv("COURSE_JUDGE_CACHE", str(tmp_path / "cache"))
    subs = [Submission(s, "ps1", str(tmp_path / s)) for s in ("old1", "old2", "new")]
    run = grade_module.Run(course=str(tmp_path), assignments=["ps1"], submissions=subs,
                           settings=dataclasses.replace(DEFAULTS, workers=2))
    grade_module.start_judges(run)
    assert started == [None]
    assert len(run.judges) == 1
    # WORKERS left to choose (two idle cores, memory to spare): no more than one worker per
    # SUBMISSIONS_PER_WORKER to grade.
    from grader.cohort import attempt

    per = attempt.SUBMISSIONS_PER_WORKER
    monkeypatch.setattr(grade_module, "idle_cores", lambda: 2)
    monkeypatch.setattr(attempt, "available_memory_bytes", lambda: 1000 * 2 ** 30)
    monkeypatch.setattr(attempt, "gpu_count", lambda: 0)
    monkeypatch.setattr(grade_module, "already_graded", lambda course, sub: False)
    for pending, judges in ((2 * per - 1, 1), (2 * per, 2)):
        subs = [Submission(f"s{i}", "ps1", str(tmp_path / f"s{i}")) for i in range(pending)]
        run = grade_module.Run(course=str(tmp_path), assignments=["ps1"], submissions=subs,
                               settings=dataclasses.replace(DEFAULTS, workers=0))
        grade_module.start_judges(run)
        assert len(run.judges) == judges, (pending, run.judges)


@pytest.mark.parametrize("cores", ["own", "shared"])
def test_each_set_is_built_cold_once_the_cold_builds_at_once_and_a_planning_set_first(
        tmp_path, monkeypatch, cores, folders_of_its_own):
    """start_judges with two workers: each set is built once, cold, before the first
    submission; the cold builds of two sets run at the same time on the two judges; ps3, whose
    planning question is measured as it is built (on one core), is built first, by the first
    judge: beside the other sets' cold builds where each judge has cores of its own, alone where
    they share the cores. Then each worker's judge builds a set it did not build before its
    first submission of that set, from the cache with the figures the cold build measured, and
    never twice."""
    import dataclasses
    import threading

    from grader.cohort import grade as grade_module
    from grader.cohort import scoring
    from grader.cohort.collect import Submission
    from grader.cohort.judge_cache import JudgeCache
    from grader.cohort.scoring import BuiltReferences
    from grader.cohort.settings import DEFAULTS
    from grader.isolation.judge import judge_process

    class FakeJudge:
        def __init__(self, *, env, cores, log_path):
            self.name, self.cores = os.path.basename(log_path), cores

    lock, running, events, given = threading.Lock(), set(), [], {}
    both_cold = threading.Barrier(2, timeout=20)   # broken unless two cold builds meet

    def fake_build(assignment, course, judge, *, device=None, measured_jobs=None):
        cold = measured_jobs is None
        with lock:
            events.append((assignment, judge.name, cold, sorted(running)))
            given[(assignment, judge.name)] = measured_jobs
            running.add((assignment, judge.name))
        if cold and assignment == "ps3":    # measuring: long enough for a build beside it
            time.sleep(0.3)
        if cold and assignment in ("ps1", "ps2"):
            both_cold.wait()
        time.sleep(0.05)
        with lock:
            running.discard((assignment, judge.name))
        figures = {"ps3.q1": {"measured": True}} if assignment == "ps3" else {}
        return BuiltReferences({f"{assignment}.q1": 1.0}, figures)

    if cores == "shared":
        monkeypatch.setattr(grade_module, "worker_cores", lambda count, idle=None: [None] * count)
    monkeypatch.setattr(judge_process, "JudgeProcess", FakeJudge)
    monkeypatch.setattr(scoring, "build_references", fake_build)
    monkeypatch.setattr(scoring, "yardstick", lambda key, figures, kept=False: "")
    monkeypatch.setattr(grade_module, "already_graded", lambda course, sub: False)
    monkeypatch.setenv("COURSE_JUDGE_CACHE", str(tmp_path / "cache"))
    sets = ["ps1", "ps2", "ps3", "ps4"]
    subs = [Submission(f"s{i}", a, str(tmp_path / a)) for a in sets for i in range(2)]
    run = grade_module.Run(course=str(tmp_path), assignments=sets, submissions=subs,
                           settings=dataclasses.replace(DEFAULTS, workers=2))
    grade_module.start_judges(run)
    judges = {"judge-0.log", "judge-1.log"}
    assert sorted(a for a, _, cold, _ in events) == sets                  # each once, cold
    assert all(cold for _, _, cold, _ in events)
    assert sorted(a for built in run.built_by.values() for a in built) == sets
    assert run.measured_jobs["ps3"] == {"ps3.q1": {"measured": True}}
    ps3 = [e for e in events if e[0] == "ps3" and e[2]]
    assert [e[1] for e in ps3] == ["judge-0.log"]                  # measured by the first judge
    # The builds that ran while ps3 was built: those started during it, and those it started
    # during (either thread may reach its first build first).
    beside = {(a, j) for a, j, _, running_then in events if ("ps3", "judge-0.log") in running_then}
    beside |= set(ps3[0][3])
    if cores == "own":          # other sets' cold builds, on the other judge, while ps3 is built
        assert beside and {j for _, j in beside} == {"judge-1.log"}, events
    else:                       # first, and nothing beside it
        assert events[0] == ("ps3", "judge-0.log", True, []) and not beside, events
    assert set(run.reference_s) == set(sets)

    # Grading: a worker's first submission of a set its judge did not build is preceded by
    # that set's build, with the run's figures; every judge that grades a set builds it once.
    from grader.cohort import attempt
    from grader.cohort.attempt import Attempt, AttemptSettings

    graded = []

    def fake_attempt(sub, course, settings, *, isolation, judge, device, folder_in):
        with lock:
            graded.append((sub.assignment, judge.name))
            assert (sub.assignment, judge.name) in given, "graded before its references"
        time.sleep(0.05)
        return Attempt(None, None, 1.0, {})

    monkeypatch.setattr(attempt, "run_attempt", fake_attempt)
    settings = AttemptSettings(DEFAULTS, reference_s=dict(run.reference_s),
                               measured_jobs=dict(run.measured_jobs))
    list(attempt.local_attempts([(sub, "") for sub in subs], str(tmp_path), settings,
                                isolation=None, judges=run.judges, workers=2,
                                built_by=run.built_by))
    builds = [(a, j) for a, j, _, _ in events]
    assert len(builds) == len(set(builds))                                 # never twice
    assert set(builds) >= set(graded) and len(graded) == len(subs)
    assert [cold for a, _, cold, _ in events[len(sets):]] == [False] * (len(builds) - len(sets))
    if ("ps3", "judge-1.log") in given:
        assert given[("ps3", "judge-1.log")] == {"ps3.q1": {"measured": True}}  # its figures

    # The next run on this machine (the same cache) judges ps3 on the figures kept from this
    # one: nothing is measured again, so ps3 is built with the others.
    events.clear()
    given.clear()
    again = grade_module.Run(course=str(tmp_path), assignments=sets, submissions=subs,
                             settings=dataclasses.replace(DEFAULTS, workers=2))
    grade_module.start_judges(again)
    assert all(figures == {"ps3.q1": {"measured": True}}
               for (a, _), figures in given.items() if a == "ps3")
    # Figures unfit to judge on are not kept: the next run measures again.
    cache = JudgeCache.of(str(tmp_path))
    assert cache.kept_figures("ps3") == {"ps3.q1": {"measured": True}}
    cache.keep_figures("ps5", BuiltReferences({"ps5.q1": 1.0}, {"ps5.q1": {"unfit": "noisy"}}))
    assert cache.kept_figures("ps5") == {}
    assert sorted(a for a, _, _, _ in events) == sets


def test_every_grading_job_carries_the_run_s_planning_figures(tmp_path):
    """A judge can build a set's references inside a grading job: a fresh judge after a
    restart, or one whose separate build failed. Every job of a submission (and the build
    ``grade_notebook`` starts when it is given no deadline) therefore carries the run's
    figures for the set's planning questions, so that such a judge judges on them rather than
    measuring its own."""
    from grader.cohort.attempt import AttemptSettings, run_attempt
    from grader.cohort.collect import Submission
    from grader.cohort.settings import DEFAULTS
    from grader.isolation.judge.judge_job import JudgeReply

    class RecordingJudge:
        jobs = []

        def grade(self, job, timeout_s):
            self.jobs.append(job)
            return JudgeReply(error="recorded, not graded")

    folder = tmp_path / "submitted" / "s1" / "ps3"
    folder.mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "release", "ps3", "ps3.ipynb"), folder)
    figures = {"ps3.q1": {"break_even": 123.0}}
    for reference_s in ({"ps3": 20.0}, {}):       # deadline given; deadline from a build
        RecordingJudge.jobs = []
        settings = AttemptSettings(DEFAULTS.probed("off"), reference_s=reference_s,
                                   measured_jobs={"ps3": figures, "ps4": {"other": {}}})
        attempt = run_attempt(Submission("s1", "ps3", str(folder)), ROOT, settings,
                              isolation=None, judge=RecordingJudge(),
                              folder_in=str(tmp_path))
        assert attempt.failure is None, attempt.failure
        ops = [job.op for job in RecordingJudge.jobs]
        # q2's unwritten cell is refused before any job; q1 (the planning question) is judged.
        assert [job.problems for job in RecordingJudge.jobs if job.op == "grade"] == [("ps3.q1",)]
        assert ops.count("build references") == (not reference_s)
        assert all(job.measured_jobs == figures for job in RecordingJudge.jobs), ops
        shutil.rmtree(attempt.folder)


def test_workers_left_to_choose_are_one_per_idle_core_as_the_memory_holds(monkeypatch):
    """WORKERS unset: one per idle core, no more than the available memory holds at MEMORY_GB
    plus the worker's own share, and at least one."""
    from grader.cohort import attempt

    gib = 2 ** 30
    monkeypatch.setattr(attempt, "gpu_count", lambda: 0)
    monkeypatch.setattr(attempt, "available_memory_bytes", lambda: 1000 * gib)
    assert attempt.default_workers(6 * gib, 100, idle=2) == 2               # idle: every core
    assert attempt.default_workers(6 * gib, 100, idle=1) == 1               # one busy: one
    monkeypatch.setattr(attempt, "available_memory_bytes", lambda: 9 * gib)
    assert attempt.default_workers(6 * gib, 100, idle=2) == 1               # 6 + 2 GiB fits once
    monkeypatch.setattr(attempt, "available_memory_bytes", lambda: 1 * gib)
    assert attempt.default_workers(6 * gib, 100, idle=2) == 1               # never none


def test_idle_cores_are_those_the_machine_does_not_keep_busy_now():
    """idle_cores watches the cores for half a second (/proc/stat), so a setup that has just
    finished, still in the one-minute load average, does not count: a program spinning on one
    of this process's cores keeps it busy, one core fewer is idle."""
    from grader.cohort import attempt

    allowed = sorted(os.sched_getaffinity(0))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           preexec_fn=lambda: os.sched_setaffinity(0, {allowed[0]}))
    try:
        time.sleep(0.5)
        busy = attempt.busy_cores()
        idle = attempt.idle_cores()
    finally:
        hog.kill()
        hog.wait()
    assert busy is not None and 0.8 <= busy <= len(allowed), busy
    assert idle <= max(1, len(allowed) - 1), idle


def test_one_worker_has_the_cores_to_itself_only_where_they_are_idle(tmp_path, monkeypatch,
                                                                    folders_of_its_own):
    """WORKERS=1 with submissions to grade: the judge is pinned to every core (and starts each
    next subject ahead) where all are idle; where another program keeps one busy, not pinned."""
    import dataclasses

    from grader.cohort import grade as grade_module
    from grader.cohort import scoring
    from grader.cohort.collect import Submission
    from grader.cohort.scoring import BuiltReferences
    from grader.cohort.settings import DEFAULTS
    from grader.isolation.judge import judge_process

    started = []

    class FakeJudge:
        def __init__(self, *, env, cores, log_path):
            started.append(cores)

    allowed = frozenset(os.sched_getaffinity(0))
    monkeypatch.setattr(judge_process, "JudgeProcess", FakeJudge)
    monkeypatch.setattr(scoring, "build_references",
                        lambda *a, **k: BuiltReferences({"ps1.q1": 1.0}))
    monkeypatch.setattr(grade_module, "already_graded", lambda course, sub: False)
    monkeypatch.setenv("COURSE_JUDGE_CACHE", str(tmp_path / "cache"))
    subs = [Submission(s, "ps1", str(tmp_path / s)) for s in ("a", "b", "c")]
    for idle, cores in ((len(allowed), allowed), (len(allowed) - 1, None)):
        monkeypatch.setattr(grade_module, "idle_cores", lambda idle=idle: idle)
        started.clear()
        run = grade_module.Run(course=str(tmp_path), assignments=["ps1"], submissions=subs,
                               settings=dataclasses.replace(DEFAULTS, workers=1))
        grade_module.start_judges(run)
        assert started == [cores], (idle, started)


def test_submissions_are_graded_set_by_set_in_the_runs_order(tmp_path, monkeypatch):
    """Submissions come from the course student by student; the workers take them set by set
    (the run's sets in order, students in order within a set), so a student late in the
    alphabet is not the run's last work."""
    import dataclasses
    import types

    from grader.cohort import grade as grade_module
    from grader.cohort.collect import Submission
    from grader.cohort.settings import DEFAULTS

    taken = []

    def attempts(todo, *a, **k):
        taken.extend(sub.name for sub, _ in todo)
        yield from ()

    monkeypatch.setattr(grade_module, "local_attempts", attempts)
    monkeypatch.setattr(grade_module, "already_graded", lambda course, sub, digest=None: None)
    monkeypatch.setattr(grade_module, "unreadable_reason", lambda sub: "")
    subs = [Submission(s, a, str(tmp_path / s / a)) for s in ("ann", "bob", "gus")
            for a in ("ps2", "ps10", "ps1") if (s, a) != ("bob", "ps10")]
    for sub in subs:
        os.makedirs(sub.folder)
    run = grade_module.Run(course=str(tmp_path), assignments=["ps1", "ps2", "ps10"],
                           submissions=subs, settings=dataclasses.replace(DEFAULTS, workers=1))
    run.isolation = types.SimpleNamespace(setting=lambda: "off")
    grade_module.autograde_all(run)
    assert taken == ["ann/ps1", "bob/ps1", "gus/ps1", "ann/ps2", "bob/ps2", "gus/ps2",
                     "ann/ps10", "gus/ps10"], taken
