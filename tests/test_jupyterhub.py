"""The student-side nbgrader configuration shipped with release/ (docs/jupyterhub.md): loaded as
nbgrader loads it, the Validate button gives every cell the time a test cell needs."""
import os

from traitlets.config.loader import PyFileConfigLoader

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
