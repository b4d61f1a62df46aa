"""The repository's setup: dependency lists agree, setup is idempotent, the CLI answers."""
import os
import re
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement.strip(), maxsplit=1)[0].lower()


def _pyproject() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        return tomllib.load(fh)


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    import yaml

    project = _pyproject()["project"]
    wanted = set(project["dependencies"])
    for name, extra in project["optional-dependencies"].items():
        if name != "cluster":   # only the grading image installs it (deploy/Dockerfile)
            wanted |= set(extra)
    env = yaml.safe_load(open(os.path.join(ROOT, "environment.yml")))
    pip_block = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    listed = {item for item in pip_block if not item.startswith("-e")}
    # Same names and the same version constraints.
    assert {r.replace(" ", "") for r in wanted} == {i.replace(" ", "") for i in listed}


def test_make_setup_is_idempotent():
    # After a setup (make test depends on it), a second `make setup` has nothing to do.
    assert subprocess.run(["make", "-q", "setup"], cwd=ROOT).returncode == 0


def test_every_make_target_that_needs_the_environment_depends_on_setup():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    for target in ("test", "lab", "bench", "gpu-check", "release", "grade", "bench-grade",
                   "gradescope"):
        m = re.search(rf"^{re.escape(target)}:(.*)$", makefile, re.M)
        assert m, f"no `{target}` target"
        assert "setup" in m.group(1), f"`{target}` does not depend on setup"


def test_ci_runs_make_test():
    assert "make test" in open(os.path.join(ROOT, ".ci", "run")).read()


def test_cli_help_lists_the_workflow_verbs():
    out = subprocess.run([sys.executable, "-m", "grader.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    for verb in ("release", "sync-notebooks", "check", "grade", "canvas", "gradescope", "bench",
                 "bench-grade", "gpu-check-chapters"):
        assert verb in out


def test_every_makefile_target_runs_the_grader_through_one_cli_with_help_for_each_verb():
    """One entry point: a recipe that runs grader code calls `python -m grader.cli VERB`, and
    `VERB --help` describes that verb's options (its usage line names the verb)."""
    from grader import cli

    makefile = open(os.path.join(ROOT, "Makefile")).read()
    calls = re.findall(r"\$\(PY\) -m (grader[\w.]*)(?: ([\w-]+))?", makefile)
    assert calls, "no grader command in the Makefile"
    assert {module for module, _ in calls} == {"grader.cli"}, calls
    verbs = {verb for _, verb in calls}
    assert {"release", "grade", "gradescope", "bench", "bench-grade", "gpu-check-chapters"} <= verbs
    for verb in sorted(verbs | set(cli.DELEGATED)):
        out = subprocess.run([sys.executable, "-m", "grader.cli", verb, "--help"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (verb, out.stderr[-2000:])
        assert f"grader.cli {verb}" in out.stdout or f" {verb} " in out.stdout, (verb, out.stdout)


def test_each_grade_setting_is_declared_once_and_make_passes_only_what_the_user_set():
    """`make grade`'s options come from one declaration (GradeSettings: default and help per
    field); the Makefile adds an option only when its variable is set, so no default is written
    twice."""
    import dataclasses

    from grader.cohort import settings

    out = subprocess.run([sys.executable, "-m", "grader.cli", "grade", "--help"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for field in dataclasses.fields(settings.GradeSettings):
        flag = field.metadata["flag"] or "--" + field.name.replace("_", "-")
        assert flag in out.stdout and field.metadata["help"], field.name
    parsed = settings.from_arguments(_grade_parser().parse_args([]))
    assert parsed == settings.DEFAULTS
    parsed = settings.from_arguments(_grade_parser().parse_args(
        ["--assignment", "ps1", "--assignment", "ps2", "--workers", "2", "--regrade"]))
    assert (parsed.assignments, parsed.workers, parsed.regrade) == (("ps1", "ps2"), 2, True)

    def dry_run(*variables):
        # Run from `make test` too: drop the outer make's variables (MAKELEVEL makes it print
        # "Leaving directory") and the ones under test.
        env = {k: v for k, v in os.environ.items()
               if k not in ("WORKERS", "SANDBOX", "EXECUTOR", "ASSIGNMENT", "DEMO", "REGRADE",
                            "MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
        done = subprocess.run(["make", "-n", "--no-print-directory", "-W", ".venv/.setup-done",
                               "grade", *variables],
                              cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
        line = next(l for l in done.stdout.splitlines() if "grader.cli grade" in l)
        return line.split()

    assert dry_run()[-2:] == ["grader.cli", "grade"]
    assert dry_run("WORKERS=2", "SANDBOX=off")[-4:] == ["--workers", "2", "--sandbox", "off"]


def _grade_parser():
    import argparse

    from grader.cohort import settings

    parser = argparse.ArgumentParser()
    settings.add_arguments(parser)
    return parser


def test_venv_and_student_data_are_ignored_by_git():
    ignored = open(os.path.join(ROOT, ".gitignore")).read().split()
    for entry in (".venv/", "submitted/", "autograded/", "feedback/", "gradebook.db"):
        assert entry in ignored


def test_the_published_package_carries_no_answers():
    """Students and Colab install grader/: no line of a reference solution (nor of the demo
    cohort's near-answers, which live in source/) may be in it."""
    import glob
    import json

    package = "".join(open(p).read() for p in glob.glob(os.path.join(ROOT, "grader", "**", "*"),
                                                        recursive=True)
                      if os.path.isfile(p) and p.endswith((".py", ".json")))
    lines = set()
    for path in glob.glob(os.path.join(ROOT, "source", "ps*", "*.ipynb")):
        for cell in json.load(open(path))["cells"]:
            text = "".join(cell["source"])
            if "### BEGIN SOLUTION" in text and cell["cell_type"] == "code":
                body = text.split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION", 1)[0]
                lines |= {ln.strip() for ln in body.splitlines() if len(ln.strip()) > 25}
    from grader.cohort.demo import demo_solutions

    demo = demo_solutions(ROOT)
    for personas in demo.values():
        for cells in personas.values():
            for code in cells.values():
                lines |= {ln.strip() for ln in code.splitlines() if len(ln.strip()) > 25
                          and "def forward" not in ln and "class " not in ln}
    assert lines, "no reference lines found: the test would pass vacuously"
    # Lines the given (original) models have too are the task, not the answer.
    import inspect

    from grader.problems import get_problem, sets, test_cells
    given = ""
    for ps in sets.names():
        for cell in test_cells(ps).values():
            for key in cell.problems:
                model = get_problem(key).make_baseline("cpu")
                given += "".join(inspect.getsource(k) for k in type(model).__mro__
                                 if k.__module__.startswith("grader."))
    leaked = sorted(ln for ln in lines if ln in package and ln not in given)
    assert leaked == [], leaked


def test_every_json_file_of_the_package_ships_with_it():
    """Each set's figures (grader/problems/psN/*.json) and the chapters' records are package
    data: an installed grader (Colab, Gradescope) reads them too."""
    import fnmatch
    import glob

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        package_data = tomllib.load(fh)["tool"]["setuptools"]["package-data"]
    found = glob.glob(os.path.join(ROOT, "grader", "**", "*.json"), recursive=True)
    assert any(os.sep + "problems" + os.sep in p for p in found), found
    unshipped = []
    for path in found:
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if not any(rel.startswith(package.replace(".", "/") + "/") and fnmatch.fnmatch(
                rel[len(package) + 1:], pattern)
                   for package, patterns in package_data.items() for pattern in patterns):
            unshipped.append(rel)
    assert unshipped == [], unshipped


def test_the_package_docstring_examples_run():
    """grader/__init__.py's examples: the in-process imports work, and the problem set's setup
    lines give the `check` the example calls (running it is the problem-set tests' job)."""
    import textwrap

    import grader
    import grader.isolation.check

    blocks = re.findall(r"::\n\n((?:    .*\n)+)", grader.__doc__)
    assert len(blocks) == 2, grader.__doc__
    namespace: dict = {}
    exec(textwrap.dedent(blocks[0]), namespace)
    for name in ("graph_break_report", "fullgraph_check", "recompile_check", "fusion_report",
                 "check_outputs", "compare", "judge_speed", "SpeedTarget"):
        assert callable(namespace[name]), name
    *setup, call = textwrap.dedent(blocks[1]).strip().splitlines()
    exec("\n".join(setup), namespace)
    assert namespace["check"] is grader.isolation.check.check and call.startswith("check(")
