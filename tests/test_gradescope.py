"""`make gradescope ASSIGNMENT=ps2`: the autograder zip Gradescope takes, and its run_autograder
run for real on a fake /autograder tree (AUTOGRADER_ROOT) with submissions of ps2 (the
cheapest set to grade), its results.json checked against Gradescope's documented format
(gradescope-autograders.readthedocs.io, "Autograder Specifications": results.json).

run_autograder runs with the Python of a venv that holds exactly what the zip's setup.sh installs
(torch, torchvision, the course package without extras: ``grader/tools/clean_venv.py``), never with the
course's own venv: a module the zip does not install (nbgrader, jupyter_client, ...) fails here.
"""
import json
import os
import shutil
import stat
import re
import subprocess
import sys
import zipfile

import pytest

from conftest import at_once
from grader.tools import clean_venv
from grader.cohort.demo import expected_scores
from grader.isolation.sandbox import process
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


def _persona(name: str = "ada_full") -> str:
    """ps2 as the demo student ``name`` submits it (ada_full: every solution cell filled with the
    reference's)."""
    import nbformat

    from grader.cohort.demo import demo_solutions, personas_for

    source = nbformat.read(os.path.join(ROOT, "source", ASSIGNMENT, f"{ASSIGNMENT}.ipynb"), 4)
    release = nbformat.read(os.path.join(ROOT, "release", ASSIGNMENT, f"{ASSIGNMENT}.ipynb"), 4)
    personas = personas_for(ASSIGNMENT, release, source, demo_solutions(ROOT).get(ASSIGNMENT))
    return nbformat.writes(personas[name])


def _full_solution() -> str:
    return _persona("ada_full")


@pytest.fixture(scope="module")
def autograder_zip(tmp_path_factory):
    return build_autograder(ASSIGNMENT, str(tmp_path_factory.mktemp("gs") / "autograder.zip"),
                            course=ROOT, torch_pins="torch==2.6.0 torchvision==0.21.0")


@pytest.fixture(scope="module")
def setup_sh_python(autograder_zip, tmp_path_factory):
    """The Python of /autograder/venv as setup.sh leaves it (the zip's own course package)."""
    folder = tmp_path_factory.mktemp("gradescope-image")
    with zipfile.ZipFile(autograder_zip) as zf:
        zf.extractall(folder / "zip")
    return clean_venv.gradescope_venv(str(folder / "venv"), str(folder / "zip" / "course"))


def _autograder_env(root: str, python: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "VIRTUAL_ENV", "COURSE_"))}
    ours = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)
    env.update(AUTOGRADER_ROOT=root, COURSE_AUTOGRADER_PYTHON=python,
               COURSE_AUTOGRADER_SANDBOX="auto")
    return env


def _autograder_tree(zip_path: str, folder) -> str:
    """What Gradescope makes of the zip: /autograder/source (the zip extracted), the script
    copied to /autograder/run_autograder, an empty /autograder/submission."""
    root = str(folder / "autograder")
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(os.path.join(root, "source"))
    shutil.copy(os.path.join(root, "source", "run_autograder"), os.path.join(root, "run_autograder"))
    os.makedirs(os.path.join(root, "submission"))
    return root


def _run_autograder(root: str, python: str) -> tuple[dict, str]:
    proc = subprocess.run(["bash", os.path.join(root, "run_autograder")], cwd=root,
                          env=_autograder_env(root, python), capture_output=True, text=True,
                          timeout=900)
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
    assert config == {"assignment": ASSIGNMENT, "deadline_s": 540,     # 600 s less 60
                      "require_confinement": False}
    assert "README.md" in names
    assert {"course/pyproject.toml", "course/grader/cohort/scoring.py",
            "course/grader/isolation/judge/steps.py",
            f"course/grader/problems/{ASSIGNMENT}/__init__.py",
            f"course/grader/problems/{ASSIGNMENT}/demo_expected.json",
            f"course/grader/problems/{ASSIGNMENT}/gradescope_measured.json",
            f"course/source/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"} <= names
    # Only this set's reference solution travels; no caches, no other sets, no demo cohort (its
    # personas beside the notebook stay with the instructor).
    assert os.path.exists(os.path.join(ROOT, "source", ASSIGNMENT, "demo_cohort.py"))
    assert not [n for n in names if n.startswith("course/source/")
                and n != f"course/source/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_setup_sh_installs_no_notebook_machinery(setup_sh_python):
    """The image has no kernel, nbgrader or Ray: run_autograder must not need them."""
    assert clean_venv.importable(setup_sh_python, ["torch", "torchvision", "matplotlib",
                                                   "grader"]) == ["torch", "torchvision",
                                                                  "matplotlib", "grader"]
    assert clean_venv.importable(setup_sh_python, clean_venv.NOT_ON_GRADESCOPE) == []


PERSONA_RUNS = ["ben_partial", "eve_wrong", "fay_crash"]


@pytest.fixture(scope="module")
def graded_personas(request, autograder_zip, setup_sh_python, tmp_path_factory):
    """run_autograder on the demo personas the session's tests ask for (the full solution and
    the PERSONA_RUNS), each in a tree of its own, TEST_JOBS at a time (tests/conftest.py): each
    run keeps about one core busy. persona -> (results.json, stdout)."""
    wanted = []
    for item in request.session.items:
        if getattr(item, "function", None) is \
                test_run_autograder_grades_a_submission_into_gradescope_results:
            wanted.append("ada_full")
        elif getattr(item, "function", None) is \
                test_run_autograder_scores_the_demo_students_as_make_grade_does:
            wanted.append(item.callspec.params["student"])

    def run(student):
        root = _autograder_tree(autograder_zip, tmp_path_factory.mktemp(f"gs-{student}"))
        with open(os.path.join(root, "submission", f"{ASSIGNMENT}.ipynb"), "w") as fh:
            fh.write(_persona(student))
        return _run_autograder(root, setup_sh_python)

    return dict(zip(wanted, at_once(run, wanted)))


def test_run_autograder_grades_a_submission_into_gradescope_results(graded_personas):
    results, stdout = graded_personas["ada_full"]     # the full solution

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
    # Which isolation graded it is recorded (bubblewrap wherever this machine can run it), and
    # shown to the student and the instructor on the results page (its first lines).
    assert results["extra_data"]["isolation"] == process.probe("auto").describe()
    assert results["extra_data"]["isolation"] in stdout
    assert f"Your code ran in: {process.probe('auto').describe()}." in \
        results["output"].splitlines()[:2]
    assert results["stdout_visibility"] == "hidden"


@pytest.mark.parametrize("student", PERSONA_RUNS)
def test_run_autograder_scores_the_demo_students_as_make_grade_does(graded_personas, student):
    """A partial, a wrong and a crashing submission, in setup.sh's environment: the demo's
    written-down scores (grader/problems/psN/demo_expected.json), each test with its reason."""
    results, stdout = graded_personas[student]
    assert validate_results(results) == []
    assert results["extra_data"]["finished"] is True, results["output"]
    assert results["score"] == expected_scores()[ASSIGNMENT][student], json.dumps(results)[:3000]
    assert "the grader failed" not in results["output"], results["output"]
    for test in results["tests"]:
        assert test["output"].strip(), test


def test_a_submission_without_its_notebook_scores_zero_with_the_reason(autograder_zip, tmp_path,
                                                                       setup_sh_python):
    root = _autograder_tree(autograder_zip, tmp_path)
    with open(os.path.join(root, "submission", "notes.txt"), "w") as fh:
        fh.write("forgot the notebook")
    results, _ = _run_autograder(root, setup_sh_python)
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


# ---------------------------------------------------------------------------------------------
# setup.sh: the base image it needs, and torch from PyTorch's CPU index only

def _pip_install_lines(setup: str) -> list[str]:
    return [line for line in setup.splitlines() if " install " in line and "pip" in line]


def test_setup_sh_installs_torch_from_the_cpu_index_only(autograder_zip):
    import shlex

    from grader.cohort.gradescope import TORCH_INDEX

    with zipfile.ZipFile(autograder_zip) as zf:
        setup = zf.read("setup.sh").decode()
    torch_lines = [line for line in _pip_install_lines(setup) if "torch==" in line]
    assert len(torch_lines) == 1, torch_lines
    words = shlex.split(torch_lines[0])
    assert TORCH_INDEX == "https://download.pytorch.org/whl/cpu"
    # Only PyTorch's CPU index: no extra index, no find-links, no PIP_* variable or pip.conf
    # that could add one (--isolated; PIP_CONFIG_FILE=/dev/null skips every config file).
    assert words[words.index("--index-url") + 1] == TORCH_INDEX
    assert not [w for w in words if w.startswith(("--extra-index-url", "-f", "--find-links",
                                                  "-i", "--trusted-host"))]
    assert "--isolated" in words and words[0] == "PIP_CONFIG_FILE=/dev/null"
    assert "torch==2.6.0" in words and "torchvision==0.21.0" in words
    # What it installed is printed, and a CUDA build stops setup.sh (set -e).
    assert "set -euxo pipefail" in setup
    assert "assert torch.version.cuda is None" in setup and "installed torch" in setup
    # The course's own install comes after: torch is then already satisfied.
    lines = setup.splitlines()
    assert lines.index(torch_lines[0]) < next(i for i, l in enumerate(lines) if "./course" in l)


def _base_image_check(setup: str) -> str:
    block = setup.split("<<'CHECK'\n", 1)[1].split("\nCHECK\n", 1)[0]
    return block


def test_setup_sh_stops_clearly_on_a_base_image_too_old_for_torch(autograder_zip):
    with zipfile.ZipFile(autograder_zip) as zf:
        setup = zf.read("setup.sh").decode()
    check = _base_image_check(setup)
    assert check.index("need_py") < setup.index("pip install")  # checked before any install
    ok = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert ok.returncode == 0 and "fine" in ok.stdout, ok.stderr
    # An image with an older Python or glibc than needed (here: needs raised past this one's).
    for old, new in (("need_py, need_glibc = (3, 10)", "need_py, need_glibc = (9, 0)"),
                     ("(2, 28)\n", "(99, 0)\n")):
        assert old in check, old
        proc = subprocess.run([sys.executable, "-c", check.replace(old, new)],
                              capture_output=True, text=True)
        assert proc.returncode == 1, proc.stdout
        assert "choose a newer Ubuntu base image" in proc.stderr, proc.stderr


def test_the_base_image_minimums_cover_this_torchs_wheels():
    """MIN_PYTHON and MIN_GLIBC of setup.sh against the torch installed here: its wheel's
    manylinux tag and its Requires-Python."""
    from importlib.metadata import distribution

    from grader.cohort.gradescope import MIN_GLIBC, MIN_PYTHON

    dist = distribution("torch")
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]
    glibcs = [tuple(int(x) for x in re.search(r"manylinux_(\d+)_(\d+)", t).groups())
              for t in tags if "manylinux_" in t]
    if not glibcs:
        pytest.skip(f"torch here is not a manylinux wheel: {tags}")
    assert max(glibcs) <= MIN_GLIBC, (tags, MIN_GLIBC)
    requires = dist.metadata["Requires-Python"] or ""
    m = re.search(r">=\s*(\d+)\.(\d+)", requires)
    assert m and (int(m.group(1)), int(m.group(2))) <= MIN_PYTHON, requires


# ---------------------------------------------------------------------------------------------
# results.json when grading does not finish: written at the start, per group, on SIGTERM, at the
# deadline and on an unexpected error

def _partial(cells: dict):
    from grader.cohort.scoring import JudgedScores

    return JudgedScores(ASSIGNMENT, {}, cells, {}, "none")


GRADED = {"ps2-q1-correctness": {"grade_id": "ps2-q1-correctness", "points": 3.0,
                                 "max_points": 3.0, "text": "[PASS] correct on 3 inputs",
                                 "failure": ""}}


@pytest.fixture
def tree(autograder_zip, tmp_path):
    root = _autograder_tree(autograder_zip, tmp_path)
    with open(os.path.join(root, "submission", f"{ASSIGNMENT}.ipynb"), "w") as fh:
        fh.write(_full_solution())
    return root


def _read(root: str) -> dict:
    with open(os.path.join(root, "results", "results.json")) as fh:
        return json.load(fh)


def _stopped_scoring(seen: list, root: str, *, fail: Exception | None = None):
    """A stand-in for grade_notebook: checks what results.json says before anything is graded,
    reports one graded cell through ``progress``, then waits (to be stopped) or raises ``fail``."""
    import time

    def grade_notebook(notebook, assignment, course, *, progress=None, **kwargs):
        seen.append(_read(root))                          # before any group finished
        progress(_partial(GRADED))
        seen.append(_read(root))                          # after the first group
        if fail is not None:
            raise fail
        time.sleep(60)
        raise AssertionError("not stopped")

    return grade_notebook


def _check_partial(results: dict, reason: str):
    assert validate_results(results) == []
    assert results["extra_data"]["finished"] is False
    by_id = {t["name"].split(":", 1)[0]: t for t in results["tests"]}
    assert by_id["ps2-q1-correctness"]["score"] == 3.0               # graded: kept
    assert by_id["ps2-q1-correctness"]["output"].startswith("[PASS]")
    for grade_id in ("ps2-q1-fusion", "ps2-q1-speed"):              # not graded: say why
        assert by_id[grade_id]["score"] == 0.0
        assert by_id[grade_id]["output"].startswith("not graded: "), by_id[grade_id]
        assert reason in by_id[grade_id]["output"]
    assert results["score"] == 3.0
    assert "Grading did not finish (1 of 3 tests graded)" in results["output"]
    assert reason in results["output"]


def _no_probe(monkeypatch) -> None:
    """The confinement as probed, at once: these tests time the results' writing from the start
    (a probe confines a Python for real, seconds on a loaded machine)."""
    monkeypatch.setattr(process, "probe", lambda mode="auto": process.Isolation("kernel", "test"))


def test_results_say_grading_did_not_finish_from_the_start_and_after_each_group(tree, monkeypatch):
    import threading

    import grader.cohort.scoring as scoring
    from grader.cohort.gradescope import NOT_FINISHED, grade_submission

    seen: list = []
    monkeypatch.setattr(scoring, "grade_notebook", _stopped_scoring(seen, tree))
    _no_probe(monkeypatch)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), __import__("signal").SIGTERM))
    timer.start()
    try:
        results = grade_submission(tree, sandbox="off", deadline_s=0)
    finally:
        timer.cancel()
    first, after_group = seen
    # Before anything is graded: every test at 0, saying grading did not finish, and why.
    assert validate_results(first) == [] and first["score"] == 0
    assert first["extra_data"]["finished"] is False
    assert all(t["output"] == f"not graded: {NOT_FINISHED}" for t in first["tests"])
    _check_partial(after_group, NOT_FINISHED)
    # SIGTERM: the graded test keeps its points, the others say the autograder was stopped.
    _check_partial(results, "the autograder was stopped (signal SIGTERM)")
    assert _read(tree) == results


def test_the_deadline_stops_grading_and_says_so(tree, monkeypatch):
    import grader.cohort.scoring as scoring
    from grader.cohort.gradescope import grade_submission

    monkeypatch.setattr(scoring, "grade_notebook", _stopped_scoring([], tree))
    _no_probe(monkeypatch)
    results = grade_submission(tree, sandbox="off", deadline_s=4)
    _check_partial(results, "the autograder's time budget of 4 s ran out")
    assert _read(tree) == results


def test_an_unexpected_error_of_the_grader_keeps_what_was_graded_and_says_why(tree, monkeypatch):
    import grader.cohort.scoring as scoring
    from grader.cohort.gradescope import grade_submission

    monkeypatch.setattr(scoring, "grade_notebook",
                        _stopped_scoring([], tree, fail=KeyError("judge reply without 'cells'")))
    results = grade_submission(tree, sandbox="off", deadline_s=0)
    _check_partial(results, "the grader failed (KeyError: \"judge reply without 'cells'\")")
    assert "not a verdict on your code" in results["output"]


def test_run_autograder_killed_half_way_leaves_results_that_say_so(tree, setup_sh_python):
    """The real run_autograder, sent SIGTERM while its judge grades (as a time limit would)."""
    import signal
    import time

    env = _autograder_env(tree, setup_sh_python)
    proc = subprocess.Popen(["bash", os.path.join(tree, "run_autograder")], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:                 # until grading has started
        lines.append(line)
        if line.startswith("grading "):
            break
    started = _read(tree)                    # already there: grading did not finish
    assert validate_results(started) == [] and started["extra_data"]["finished"] is False
    time.sleep(5)                            # the judge is at work
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    results = _read(tree)
    assert validate_results(results) == []
    assert results["extra_data"]["finished"] is False, "".join(lines) + out
    assert "the autograder was stopped (signal SIGTERM)" in results["output"], results["output"]
    assert all(t["output"].startswith("not graded: the autograder was stopped")
               for t in results["tests"]), results["tests"]


def test_run_autograder_writes_the_reason_when_the_grader_itself_breaks(tree, setup_sh_python):
    """A broken grader (the module that starts its judge missing from the zip): an error nobody
    anticipated."""
    os.remove(os.path.join(tree, "source", "course", "grader", "isolation", "judge",
                           "judge_process.py"))
    results, stdout = _run_autograder(tree, setup_sh_python)
    assert validate_results(results) == []
    assert results["score"] == 0 and results["extra_data"]["finished"] is False
    assert "the grader failed (ModuleNotFoundError" in results["output"], results["output"]
    assert "Traceback" in stdout                 # the traceback: for the instructor's eyes only


def test_the_zips_readme_says_which_settings_to_raise_from_the_measurements(autograder_zip):
    from grader.cohort.gradescope import measured, recommended_settings

    with zipfile.ZipFile(autograder_zip) as zf:
        readme = zf.read("README.md").decode()
    assert "768 MB of memory, a 10-minute time limit" in readme and "half a virtual CPU" in readme
    row = measured(ASSIGNMENT)
    assert row, "grader/problems/ps2/gradescope_measured.json has no figures"
    rec = recommended_settings(row, ASSIGNMENT)
    assert rec["memory_gb"] * 1024 >= 1.5 * row["peak_rss_mb"]          # headroom over the peak
    assert rec["timeout_min"] * 60 >= rec["hang_s"] + row["wall_s"]      # even a hanging submission
    assert f"**Memory: {rec['memory_gb']:g} GB**" in readme
    assert f"**Time limit: {rec['timeout_min']} minutes.**" in readme
    assert "**CPU: 1 vCPU**" in readme
    assert f"Measured on {row['date']} with `{row['command']}`" in readme
    assert "stops itself after 540 s" in readme            # the deadline it was built with


def test_every_zip_stops_itself_before_the_time_limit_its_readme_recommends(tmp_path):
    """Built without GRADESCOPE_TIMEOUT, a set's zip is built for the limit its own README tells
    the instructor to set (ps3: 15 minutes, not Gradescope's default 10), and stops itself a
    minute before it; with GRADESCOPE_TIMEOUT, for that limit."""
    import re

    from grader.cohort.gradescope import DEADLINE_MARGIN_S, build_autograder

    for assignment in ("ps2", "ps3"):
        with zipfile.ZipFile(build_autograder(assignment, str(tmp_path / f"{assignment}.zip"),
                                              torch_pins="torch==2.6.0")) as zf:
            readme = zf.read("README.md").decode()
            deadline = json.loads(zf.read("course/gradescope.json"))["deadline_s"]
        minutes = int(re.search(r"\*\*Time limit: (\d+) minutes\.\*\*", readme).group(1))
        assert deadline == minutes * 60 - DEADLINE_MARGIN_S, (assignment, minutes, deadline)
        assert f"stops itself after {deadline:g} s" in readme
    assert minutes == 15   # ps3
    with zipfile.ZipFile(build_autograder("ps3", str(tmp_path / "ps3-20.zip"),
                                          torch_pins="torch==2.6.0", timeout_s=1200)) as zf:
        assert json.loads(zf.read("course/gradescope.json"))["deadline_s"] == 1140


def test_make_gradescope_says_what_the_zip_does_about_isolation_and_can_require_it(tmp_path):
    for required in (False, True):
        out = tmp_path / f"ps2-{required}.zip"
        proc = subprocess.run([sys.executable, "-m", "grader.cli", "gradescope", "ps2", "--out",
                               str(out), *(["--require-confinement"] if required else [])],
                              capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr[-2000:]
        said = [line for line in proc.stdout.splitlines() if line.startswith("isolation: ")]
        assert len(said) == 1 and "bubblewrap is tried first" in said[0]
        assert ("REQUIRES one of them" in said[0]) == required, said
        with zipfile.ZipFile(out) as zf:
            config = json.loads(zf.read("course/gradescope.json"))
            readme = zf.read("README.md").decode()
        assert config["require_confinement"] is required
        assert said[0][len("isolation: "):] in readme
