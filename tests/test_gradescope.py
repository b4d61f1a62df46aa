"""`make gradescope ASSIGNMENT=ps2`: the autograder zip Gradescope takes, and its run_autograder
run for real on a fake /autograder tree (AUTOGRADER_ROOT) with one submission of ps2 (the
cheapest set to grade), its results.json checked against Gradescope's documented format
(gradescope-autograders.readthedocs.io, "Autograder Specifications": results.json).
"""
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile

import pytest

from grader.isolation import sandbox
from grader.cohort.gradescope import build_autograder, cell_info, find_submission_notebook
from grader.problems import test_cells as declared_test_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSIGNMENT = "ps2"

# Gradescope's results.json: the keys it documents, at the top and per test.
TOP_KEYS = {"score", "execution_time", "output", "output_format", "test_output_format",
            "test_name_format", "visibility", "stdout_visibility", "extra_data", "tests",
            "leaderboard"}
TEST_KEYS = {"score", "max_score", "status", "name", "name_format", "number", "output",
             "output_format", "tags", "visibility", "extra_data"}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}


def validate_results(results: dict) -> list[str]:
    """Why ``results`` is not a results.json Gradescope accepts (empty when it is)."""
    problems = [f"unknown key {k!r}" for k in set(results) - TOP_KEYS]
    number = (int, float)
    tests = results.get("tests")
    if "score" not in results and not (tests and all("score" in t for t in tests)):
        problems.append("no score: needed at the top or on every test")
    if "score" in results and not isinstance(results["score"], number):
        problems.append("score is not a number")
    for key in ("visibility", "stdout_visibility"):
        if key in results and results[key] not in VISIBILITY:
            problems.append(f"{key} {results[key]!r}")
    if "output" in results and not isinstance(results["output"], str):
        problems.append("output is not a string")
    if "extra_data" in results and not isinstance(results["extra_data"], dict):
        problems.append("extra_data is not an object")
    for i, test in enumerate(tests or []):
        problems += [f"test {i}: unknown key {k!r}" for k in set(test) - TEST_KEYS]
        for key in ("score", "max_score"):
            if key in test and not isinstance(test[key], number):
                problems.append(f"test {i}: {key} is not a number")
        if test.get("status") not in (None, "passed", "failed"):
            problems.append(f"test {i}: status {test['status']!r}")
        if test.get("visibility", "visible") not in VISIBILITY:
            problems.append(f"test {i}: visibility {test['visibility']!r}")
        for key in ("name", "output", "number"):
            if key in test and not isinstance(test[key], str):
                problems.append(f"test {i}: {key} is not a string")
    return problems


def _full_solution() -> str:
    """ps2 as a learner would submit it, every solution cell filled with the reference's."""
    import nbformat

    from grader.cohort.demo import personas_for

    source = nbformat.read(os.path.join(ROOT, "source", ASSIGNMENT, f"{ASSIGNMENT}.ipynb"), 4)
    release = nbformat.read(os.path.join(ROOT, "release", ASSIGNMENT, f"{ASSIGNMENT}.ipynb"), 4)
    return nbformat.writes(personas_for(ASSIGNMENT, release, source)["ada_full"])


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory):
    return build_autograder(ASSIGNMENT, str(tmp_path_factory.mktemp("gs") / "autograder.zip"),
                            course=ROOT, torch_pins="torch==2.6.0 torchvision==0.21.0")


def _autograder_tree(zip_path: str, folder) -> str:
    """What Gradescope makes of the zip: /autograder/source (the zip extracted), the script
    copied to /autograder/run_autograder, an empty /autograder/submission."""
    root = str(folder / "autograder")
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(os.path.join(root, "source"))
    shutil.copy(os.path.join(root, "source", "run_autograder"), os.path.join(root, "run_autograder"))
    os.makedirs(os.path.join(root, "submission"))
    return root


def _run_autograder(root: str) -> tuple[dict, str]:
    env = dict(os.environ, AUTOGRADER_ROOT=root, COURSE_AUTOGRADER_PYTHON=sys.executable,
               COURSE_AUTOGRADER_SANDBOX="auto")
    env.pop("PYTHONPATH", None)   # the zip's own copy of the package must be enough
    env.pop("COURSE_ROOT", None)
    proc = subprocess.run(["bash", os.path.join(root, "run_autograder")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(os.path.join(root, "results", "results.json")) as fh:
        return json.load(fh), proc.stdout


def test_the_zip_has_what_gradescope_expects_and_only_this_sets_solution(autograder_zip):
    with zipfile.ZipFile(autograder_zip) as zf:
        names = set(zf.namelist())
        for script in ("setup.sh", "run_autograder"):
            assert script in names, script   # at the root of the archive, not in a folder
            mode = zf.getinfo(script).external_attr >> 16
            assert mode & stat.S_IXUSR, f"{script} is not executable"
        setup = zf.read("setup.sh").decode()
        config = json.loads(zf.read("course/gradescope.json"))
    assert setup.startswith("#!/usr/bin/env bash")
    assert "torch==2.6.0 torchvision==0.21.0" in setup and "pip install -q ./course" in setup
    assert config == {"assignment": ASSIGNMENT}
    assert {"course/pyproject.toml", "course/grader/cohort/pipeline.py", "course/grader/isolation/judge.py",
            f"course/grader/problems/{ASSIGNMENT}.py",
            f"course/source/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"} <= names
    # Only this set's reference solution travels; no caches, no other sets, no demo cohort.
    assert not [n for n in names if n.startswith("course/source/")
                and not n.startswith(f"course/source/{ASSIGNMENT}/")]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_run_autograder_grades_a_submission_into_gradescope_results(autograder_zip, tmp_path):
    root = _autograder_tree(autograder_zip, tmp_path)
    with open(os.path.join(root, "submission", f"{ASSIGNMENT}.ipynb"), "w") as fh:
        fh.write(_full_solution())
    results, stdout = _run_autograder(root)

    assert validate_results(results) == []
    declared = declared_test_cells(ASSIGNMENT)
    by_id = {t["name"].split(":", 1)[0]: t for t in results["tests"]}
    assert list(by_id) == list(declared)       # one test per autograded test cell, in order
    for grade_id, cell in declared.items():
        assert by_id[grade_id]["max_score"] == cell.points
        assert by_id[grade_id]["visibility"] == "visible"   # ps2 has no hidden tests
        assert by_id[grade_id]["output"].strip()             # the verdicts the cell prints
    # The reference solution: correct and fused, whatever this loaded machine's timings say.
    for grade_id in ("ps2-q1-correctness", "ps2-q1-fusion"):
        assert by_id[grade_id]["score"] == by_id[grade_id]["max_score"], by_id[grade_id]["output"]
        assert by_id[grade_id]["status"] == "passed"
    assert "[PASS]" in by_id["ps2-q1-fusion"]["output"]
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]))
    # Which isolation graded it is recorded (bubblewrap wherever this machine can run it).
    assert results["extra_data"]["isolation"] == sandbox.probe("auto").describe()
    assert results["extra_data"]["isolation"] in stdout
    assert results["stdout_visibility"] == "hidden"


def test_a_submission_without_its_notebook_scores_zero_with_the_reason(autograder_zip, tmp_path):
    root = _autograder_tree(autograder_zip, tmp_path)
    with open(os.path.join(root, "submission", "notes.txt"), "w") as fh:
        fh.write("forgot the notebook")
    results, _ = _run_autograder(root)
    assert validate_results(results) == []
    assert results["score"] == 0
    assert [t["score"] for t in results["tests"]] == [0.0] * len(declared_test_cells(ASSIGNMENT))
    assert f"upload {ASSIGNMENT}.ipynb" in results["output"]


def test_the_validator_catches_what_gradescope_would_refuse():
    assert validate_results({"tests": [{"name": "a", "max_score": 1}]})   # no score anywhere
    assert validate_results({"score": 1, "tests": [{"score": 1, "visibility": "secret"}]})
    assert validate_results({"score": "10"})


def test_a_test_cell_with_nbgrader_hidden_tests_is_shown_after_publishing(tmp_path):
    path = os.path.join(ROOT, "source", ASSIGNMENT, f"{ASSIGNMENT}.ipynb")
    nb = json.load(open(path))
    for cell in nb["cells"]:
        if (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id") == "ps2-q1-fusion":
            cell["source"] = "".join(cell["source"]) + \
                "\n### BEGIN HIDDEN TESTS\nassert True\n### END HIDDEN TESTS\n"
    copy = tmp_path / "ps2.ipynb"
    copy.write_text(json.dumps(nb))
    info = cell_info(str(copy))
    assert info["ps2-q1-fusion"]["visibility"] == "after_published"
    assert info["ps2-q1-correctness"]["visibility"] == "visible"
    assert info["ps2-q1-fusion"]["title"].startswith("Inductor generates at most")
    assert "points" not in info["ps2-q1-correctness"]["title"]


def test_the_submitted_notebook_is_found_by_name_or_alone(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "ps2 (1).ipynb").write_text("{}")
    assert find_submission_notebook(str(tmp_path / "sub"), "ps2.ipynb").endswith("ps2 (1).ipynb")
    (tmp_path / "sub" / "scratch.ipynb").write_text("{}")
    with pytest.raises(FileNotFoundError, match="several notebooks"):
        find_submission_notebook(str(tmp_path / "sub"), "ps2.ipynb")
    (tmp_path / "sub" / "ps2.ipynb").write_text("{}")
    assert find_submission_notebook(str(tmp_path / "sub"), "ps2.ipynb").endswith("/ps2.ipynb")
