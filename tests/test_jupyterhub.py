"""The student-side nbgrader configuration shipped with release/ (docs/jupyterhub.md): loaded as
nbgrader loads it, the Validate button gives every cell the time a test cell needs."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from traitlets.config.loader import PyFileConfigLoader

import fresh_machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STUDENT_CONFIG = os.path.join(ROOT, "release", "nbgrader_config.py")


def _config():
    return PyFileConfigLoader(os.path.basename(STUDENT_CONFIG),
                              os.path.dirname(STUDENT_CONFIG)).load_config()


def test_validate_runs_cells_with_the_course_timeout_not_nbgraders_30_s():
    from nbgrader.preprocessors import Execute
    from nbgrader.validator import Validator

    assert Execute().timeout == 30                       # nbgrader's default, too short
    validator = Validator(config=_config())
    execute = Execute(parent=validator)                  # as Validator builds its preprocessors
    # A test cell evaluates each of its problems in a judge and a fresh subject, which may run for
    # max(300 s, 4 x the problem's budget) (grader.isolation.check.evaluate): the cell timeout must let
    # the slowest test cell's judges finish.
    from grader.cohort.assign import assignments
    from grader.problems import get_problem, test_cells

    worst = max(sum(max(300.0, 4 * get_problem(key).budget_s) for key in cell.problems)
                for ps in assignments(ROOT) for cell in test_cells(ps).values())
    assert execute.timeout >= worst, (execute.timeout, worst)


def test_student_config_names_the_course_and_is_documented():
    assert _config().CourseDirectory.course_id == "torch-compile"
    guide = open(os.path.join(ROOT, "docs", "jupyterhub.md")).read()
    assert "release/nbgrader_config.py" in guide


def test_the_guides_name_the_problem_sets_with_written_answers():
    """docs/jupyterhub.md and docs/grading.md say which problem sets hold written answers graded by
    hand: the ones whose source notebook has a graded markdown cell."""
    import re

    from grader.cohort.assign import assignments

    written = []
    for ps in assignments(ROOT):
        with open(os.path.join(ROOT, "source", ps, f"{ps}.ipynb")) as fh:
            cells = json.load(fh)["cells"]
        if any(c["cell_type"] == "markdown" and (c["metadata"].get("nbgrader") or {}).get("grade")
               for c in cells):
            written.append(ps)
    assert written == [f"ps{n}" for n in range(3, 8)], written
    for guide in ("docs/jupyterhub.md", "docs/grading.md"):
        said = re.findall(r"[Ww]ritten answers \((ps\d) to (ps\d)\)", open(os.path.join(ROOT, guide)).read())
        assert said and all(pair == (written[0], written[-1]) for pair in said), (guide, said)


# ---------------------------------------------------------------------------------------------
# The exchange: both configurations name the same folder (COURSE_EXCHANGE, else nbgrader's default)

INSTRUCTOR_CONFIG = os.path.join(ROOT, "nbgrader_config.py")
NBGRADER_DEFAULT_EXCHANGE = "/usr/local/share/nbgrader/exchange"


def _load(path, monkeypatch, **env):
    for name in ("COURSE_EXCHANGE", "COURSE_HUB_MULTI_COURSE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return PyFileConfigLoader(os.path.basename(path), os.path.dirname(path)).load_config()


def test_both_configurations_set_the_exchange_root_from_course_exchange(monkeypatch):
    from nbgrader.exchange.default.exchange import Exchange

    # The documented default is nbgrader's own (docs/jupyterhub.md says so).
    assert Exchange.class_traits()["root"].default_value == NBGRADER_DEFAULT_EXCHANGE
    for path in (STUDENT_CONFIG, INSTRUCTOR_CONFIG):
        assert _load(path, monkeypatch).Exchange.root == NBGRADER_DEFAULT_EXCHANGE, path
        assert _load(path, monkeypatch, COURSE_EXCHANGE="/srv/x").Exchange.root == "/srv/x", path
    guide = open(os.path.join(ROOT, "docs", "jupyterhub.md")).read()
    assert NBGRADER_DEFAULT_EXCHANGE in guide and "COURSE_EXCHANGE" in guide


def test_the_instructors_config_gives_validate_and_formgrader_the_students_cell_timeout(monkeypatch):
    # make grade runs no cell; Formgrader's autograde and an instructor's Validate do, like a
    # student's Validate.
    student, instructor = _load(STUDENT_CONFIG, monkeypatch), _load(INSTRUCTOR_CONFIG, monkeypatch)
    for config in (student, instructor):
        assert config.Execute.timeout == config.ExecutePreprocessor.timeout == 600


def test_student_config_for_several_courses_is_nbgraders_multi_course_setup(monkeypatch):
    from nbgrader.auth import JupyterHubAuthPlugin

    one = _load(STUDENT_CONFIG, monkeypatch)
    assert one.CourseDirectory.course_id == "torch-compile"
    assert "path_includes_course" not in one.Exchange
    several = _load(STUDENT_CONFIG, monkeypatch, COURSE_HUB_MULTI_COURSE="1")
    assert "course_id" not in several.CourseDirectory     # each grader account names its course
    assert several.Exchange.path_includes_course is True
    assert several.Authenticator.plugin_class is JupyterHubAuthPlugin
    assert several.Execute.timeout == 600                  # the cell timeout holds either way


def _nbgrader_run(argv, cwd, env, user=None):
    nbgrader = os.path.join(os.path.dirname(sys.executable), "nbgrader")
    command = [nbgrader, *argv]
    if user is not None:
        command = fresh_machine.command(command, user=user)
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (argv, proc.stdout[-2000:], proc.stderr[-3000:])
    return proc.stdout + proc.stderr


def test_release_fetch_submit_collect_through_the_exchange_as_two_users():
    """nbgrader's own commands, no hub: the instructor (root) releases ps1 from a course folder
    with the course's nbgrader_config.py; the student (user nobody, 65534) fetches it with the
    student configuration, changes it and submits it; the instructor collects it. Both find the
    exchange through COURSE_EXCHANGE alone (no --Exchange.root on any command line)."""
    why_not = fresh_machine.available()
    if why_not:
        pytest.skip(why_not)
    top = tempfile.mkdtemp(prefix="hub-exchange-", dir="/tmp")
    try:
        os.chmod(top, 0o755)
        exchange = os.path.join(top, "exchange")
        os.mkdir(exchange)
        os.chmod(exchange, 0o1777)               # what an administrator creates, once
        course = os.path.join(top, "course")
        os.makedirs(os.path.join(course, "release"))
        shutil.copy(INSTRUCTOR_CONFIG, course)
        shutil.copytree(os.path.join(ROOT, "release", "ps1"), os.path.join(course, "release", "ps1"))
        student = os.path.join(top, "student")
        os.makedirs(os.path.join(student, "home"))
        # nbgrader reads nbgrader_config.py from the current folder too: the same file the guide
        # installs as /etc/jupyter/nbgrader_config.py.
        shutil.copy(STUDENT_CONFIG, student)
        fresh_machine.give_to(student, fresh_machine.NOBODY)

        path = os.path.dirname(sys.executable) + ":/usr/local/bin:/usr/bin:/bin"
        instructor_env = {"PATH": path, "HOME": os.path.join(top, "instructor-home"),
                          "COURSE_EXCHANGE": exchange}
        # nbgrader names the student after the passwd entry of the process's user id
        # (nbgrader.utils.get_username; JUPYTERHUB_USER only when that name is 'jovyan');
        # HOME holds the student's submission cache ($JUPYTER_DATA_DIR/nbgrader_cache).
        student_env = {"PATH": path, "HOME": os.path.join(student, "home"), "USER": "nobody",
                       "LOGNAME": "nobody", "COURSE_EXCHANGE": exchange}

        out = _nbgrader_run(["release_assignment", "ps1"], course, instructor_env)
        assert "Released as: torch-compile ps1" in out, out
        assert os.path.isfile(os.path.join(exchange, "torch-compile", "outbound", "ps1", "ps1.ipynb"))

        out = _nbgrader_run(["fetch_assignment", "ps1"], student, student_env, fresh_machine.NOBODY)
        assert "Fetched as: torch-compile ps1" in out, out
        fetched = os.path.join(student, "ps1", "ps1.ipynb")
        assert os.stat(fetched).st_uid == fresh_machine.NOBODY
        # The student's work: a marker in the notebook, written as the student.
        edit = ("import json, sys; p = sys.argv[1]; nb = json.load(open(p)); "
                "nb['cells'][-1]['source'] = '# the student was here'; json.dump(nb, open(p, 'w'))")
        proc = subprocess.run(fresh_machine.command([sys.executable, "-c", edit, fetched],
                                                    user=fresh_machine.NOBODY),
                              cwd=student, env=student_env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr

        out = _nbgrader_run(["submit", "ps1"], student, student_env, fresh_machine.NOBODY)
        assert "Submitted as: torch-compile ps1" in out, out
        inbound = os.listdir(os.path.join(exchange, "torch-compile", "inbound"))
        assert len(inbound) == 1 and inbound[0].startswith("nobody+ps1+"), inbound

        out = _nbgrader_run(["collect", "ps1"], course, instructor_env)
        assert "Collecting submission: nobody ps1" in out, out
        collected = os.path.join(course, "submitted", "nobody", "ps1")
        with open(os.path.join(collected, "ps1.ipynb")) as fh:
            assert json.load(fh)["cells"][-1]["source"] == "# the student was here"
        assert os.path.isfile(os.path.join(collected, "timestamp.txt"))
    finally:
        shutil.rmtree(top, ignore_errors=True)
