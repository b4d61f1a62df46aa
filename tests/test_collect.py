"""Nothing an instructor put in submitted/ or downloads/ is passed over: a path that is not where
nbgrader's layout puts it, a folder named for no problem set, an ASSIGNMENT the course does not
have, or nothing handed in for the one asked for stops `make grade` before anyone is graded,
naming each path and the layout; the demo cohort runs only when both folders hold no file at
all. Every number option is checked, in one line. Nothing is graded here: each case stops (or is
decided) before the first grading step.
"""
import os
import subprocess
import sys

import pytest

from grader.cohort import collect
from grader.cohort.grade import Run, find_submissions, grade, main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _course(tmp_path, paths: list[str]) -> str:
    """A course folder with problem sets ps1 and ps2 in source/ and a file at each of ``paths``."""
    course = tmp_path / "course"
    for assignment in ("ps1", "ps2"):
        (course / "source" / assignment).mkdir(parents=True)
        (course / "source" / assignment / f"{assignment}.ipynb").write_text("{}")
    for path in paths:
        (course / path).parent.mkdir(parents=True, exist_ok=True)
        (course / path).write_text("{}")
    return str(course)


def _stopped(course: str, assignments=None) -> str:
    with pytest.raises(SystemExit) as stop:
        grade(course, assignments)
    return str(stop.value.code)


def test_each_misplaced_path_is_named_with_where_it_belongs_and_nothing_is_graded(tmp_path):
    course = _course(tmp_path, ["submitted/alice/ps1.ipynb",          # the ps1/ folder missing
                                "submitted/bob/ps99/ps99.ipynb",      # no such problem set
                                "submitted/notes.txt",                # outside any student
                                "submitted/carol/ps2/ps2.ipynb",      # right
                                "downloads/ps2/submissions.zip",      # beside archive/
                                "downloads/ps3/archive/x.zip",        # no such problem set
                                "downloads/canvas.zip"])              # outside any assignment
    message = _stopped(course)
    assert message.startswith("make grade: stopped before grading: 6 path(s)")
    for line in ["submitted/alice/ps1.ipynb: not in an assignment's folder; expected "
                 "submitted/alice/ps1/ps1.ipynb",
                 "submitted/bob/ps99/: ps99 is not a problem set of this course (source/ has ps1, ps2)",
                 "submitted/notes.txt: a file directly in submitted/; expected "
                 "submitted/STUDENT/ASSIGNMENT/notes.txt",
                 "downloads/ps2/submissions.zip: expected downloads/ps2/archive/submissions.zip",
                 "downloads/ps3/: ps3 is not a problem set of this course",
                 "downloads/canvas.zip: a file directly in downloads/; expected "
                 "downloads/ASSIGNMENT/archive/canvas.zip"]:
        assert line in message, (line, message)
    assert "carol" not in message
    assert "submitted/STUDENT/ASSIGNMENT/NOTEBOOK.ipynb" in message   # the layout, named
    assert not os.path.exists(os.path.join(course, "build"))          # no demo was built
    assert not os.path.exists(os.path.join(course, "gradebook.db"))   # nothing was graded


def test_the_demo_runs_only_when_both_folders_hold_no_file(tmp_path):
    course = _course(tmp_path, [])
    os.makedirs(os.path.join(course, "submitted", "alice", "ps1"))     # empty folders: no file
    os.makedirs(os.path.join(course, "downloads", "ps1", "archive"))
    open(os.path.join(course, "submitted", ".DS_Store"), "w").close()  # hidden: not a submission
    assert not collect.holds_files(course)
    open(os.path.join(course, "downloads", "ps1", "archive", "canvas.zip"), "w").close()
    assert collect.holds_files(course)


def test_nothing_handed_in_for_the_assignment_asked_for_stops_instead_of_the_demo(tmp_path):
    course = _course(tmp_path, ["submitted/carol/ps2/ps2.ipynb"])
    run = Run(course=course, assignments=["ps1"])
    with pytest.raises(SystemExit) as stop:
        find_submissions(run)
    assert "nothing to grade: no submission of ps1 in submitted/ (it holds ps2)" in str(stop.value)
    assert not run.demo


def test_an_unknown_assignment_stops_with_the_ones_there_are(tmp_path):
    course = _course(tmp_path, [])
    assert _stopped(course, ["ps99"]) == (
        "make grade: no problem set ps99 in this course: ASSIGNMENT takes one of ps1, ps2 (the "
        "folders of source/), or nothing to grade them all")
    assert "has no source/" in _stopped(str(tmp_path / "elsewhere"))


@pytest.mark.parametrize("argv, says", [
    (["--workers", "-2"], "WORKERS (--workers) must be at least 0, not -2"),
    (["--memory-gb", "0"], "MEMORY_GB (--memory-gb) must be at least 1, not 0"),
    (["--roster", "/nonexistent/export.csv"], "ROSTER (--roster): no such file: /nonexistent"),
    (["--ray-address", "head:6379"], "RAY_ADDRESS (--ray-address) is head:6379 but EXECUTOR"),
    (["--workers", "two"], "argument --workers: invalid int value: 'two'"),
    (["--executor", "slurm"], "argument --executor: invalid choice: 'slurm'"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_every_bad_option_is_refused_in_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as stop:
        code = main(argv)
        raise SystemExit(code)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("make grade: ") and says in err, err


def _make_grade(*variables) -> subprocess.CompletedProcess:
    """`make grade VARIABLE=...` as an instructor types it (the setup is taken as done)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "WORKERS", "ASSIGNMENT", "COURSE")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env["PATH"]
    return subprocess.run(["make", "--no-print-directory", "-o", ".venv/.setup-done", "grade",
                           *variables], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=env)


def test_make_grade_itself_stops_before_grading(tmp_path):
    course = _course(tmp_path, ["submitted/alice/ps1.ipynb"])
    misplaced = _make_grade(f"COURSE={course}", "ASSIGNMENT=ps1")
    assert misplaced.returncode != 0
    assert "expected submitted/alice/ps1/ps1.ipynb" in misplaced.stderr, misplaced.stderr
    assert "demo" not in misplaced.stdout
    unknown = _make_grade(f"COURSE={course}", "ASSIGNMENT=ps99")
    assert "no problem set ps99" in unknown.stderr and "Traceback" not in unknown.stderr
    workers = _make_grade(f"COURSE={course}", "WORKERS=-1")
    assert "make grade: WORKERS (--workers) must be at least 0, not -1" in workers.stderr


def test_every_grade_option_is_a_make_variable_that_make_help_lists_with_its_default():
    """Each field of GradeSettings: `make grade VARIABLE=value` passes it to the option, and
    `make help` lists the variable with the default the option has."""
    import dataclasses

    from grader.cohort import settings

    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    listed = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                            check=True, env=env).stdout
    for field in dataclasses.fields(settings.GradeSettings):
        variable, flag = field.metadata["make"], settings.option_name(field)
        default = field.default
        shown = "" if isinstance(default, bool) else \
            f"{default:g}" if isinstance(default, (int, float)) else str(default or "")
        assert f"  {variable}={shown} " in listed, (variable, listed)
        value = "1" if isinstance(default, bool) else "ps1 ps2" if field.metadata["repeat"] else "7"
        env.pop(variable, None)
        recipe = subprocess.run(["make", "-n", "--no-print-directory", "-o", ".venv/.setup-done",
                                 "grade", f"{variable}={value}"], cwd=ROOT, capture_output=True,
                                text=True, check=True, env=env).stdout
        line = next(l for l in recipe.splitlines() if "grader.cli grade" in l)
        args = line.split("grader.cli grade", 1)[1].split()
        expected = [flag] if isinstance(default, bool) else \
            [flag, "ps1", flag, "ps2"] if field.metadata["repeat"] else [flag, value]
        assert args == expected, (variable, line)
