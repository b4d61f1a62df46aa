"""The package's layout: one folder per role, imports pointing one way (docs/design.md), and no
import cycle between any two modules.

common <- checks <- problems <- isolation <- cohort; course -> checks; every role may import
common, which imports none; nothing imports the tools or the command line. Inside isolation, its
rooms too: cells <- sandbox <- judge <- the notebook API (the sandbox, which runs learner code,
imports no judge). Within a role too, modules import one way: the graph of every import between the
package's modules (function-level imports included) has no cycle. Notebooks import each module by
its path in its role; no alias of one sits at the top of the package. No check's name is spelled
where checks are asked for, decided or scored: each is its declaration's (grader.checks.declared).
"""
from __future__ import annotations

import ast
import importlib
import os
import re

import grader

PACKAGE = os.path.dirname(grader.__file__)
# role -> the roles its modules may import (every role may import itself, grader._paths,
# grader._environment and grader._files).
ALLOWED = {
    "common": set(),
    "checks": {"common"},
    "problems": {"common", "checks"},
    "isolation": {"common", "checks", "problems"},
    "cohort": {"common", "checks", "problems", "isolation"},
    "course": {"common", "checks"},
    "tools": {"common", "checks", "problems", "isolation", "cohort", "course"},
    "cli": {"common", "checks", "problems", "isolation", "cohort", "course", "tools"},
}
# Top-level aliases removed in 0.2.0 (issue 34) -> the module that is the code; no file of the
# course may import the old name (a notebook installing an older release on Colab still can).
REMOVED_ALIASES = {"check": "grader.isolation.check", "chapters": "grader.course.chapters",
                   "breaks": "grader.checks.breaks", "recompiles": "grader.checks.recompiles",
                   "timing": "grader.checks.timing", "fusion": "grader.checks.fusion"}


def _role(module: str) -> str | None:
    """'grader.isolation.worker' -> 'isolation'; the package's own modules -> their name."""
    parts = module.split(".")
    if parts[0] != "grader" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: str, module: str) -> list[tuple[int, str]]:
    """Every grader module ``path`` imports, at any depth (function-level imports count too)."""
    package = module.rsplit(".", 1)[0] if not path.endswith("__init__.py") else module
    found = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            # name.a: the submodule a when there is one (callers trim it to a module).
            found += [(node.lineno, f"{name}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return [(line, n) for line, n in found if n == "grader" or n.startswith("grader.")]


def _modules():
    for folder, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
                yield path, rel.removesuffix(".__init__")


def test_each_role_is_a_folder_and_the_top_level_holds_only_entry_points():
    top = sorted(f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py"))
    assert top == sorted(["__init__", "_paths", "_environment", "_files", "cli"]), \
        f"{top}: put a module in its role's folder; an alias at the top is not needed " \
        f"(the removed ones: {REMOVED_ALIASES})"
    for role in ALLOWED:
        if role != "cli":
            assert os.path.isfile(os.path.join(PACKAGE, role, "__init__.py")), role


def test_imports_point_one_way():
    wrong = []
    for path, module in _modules():
        role = _role(module)
        if role in ("_paths", "_environment", "_files", None) or module == "grader":
            continue
        for line, target in _imports(path, module):
            other = _role(target)
            if other in (None, role, "_paths", "_environment", "_files"):
                continue
            if other not in ALLOWED[role]:
                wrong.append(f"{module} (line {line}) imports {target}: {role} may not import {other}")
    assert not wrong, "\n".join(wrong)


_OLD_NAME = re.compile(r"\bgrader\.(%s)\b(?!s)|\bfrom grader import (%s)\b"
                       % ("|".join(REMOVED_ALIASES), "|".join(REMOVED_ALIASES)))


def test_no_file_of_the_course_uses_a_removed_alias():
    """Notebooks, tests, pages and the package name each module by its path in its role."""
    root = os.path.dirname(PACKAGE)
    found, seen = [], 0
    for top in ("grader", "notebooks", "source", "release", "tests", "docs", "deploy", "README.md"):
        for folder, dirs, files in os.walk(os.path.join(root, top)) if top != "README.md" \
                else [(root, [], ["README.md"])]:
            dirs[:] = [d for d in dirs if d not in ("artifacts", "__pycache__", ".ipynb_checkpoints")]
            for name in files:
                path = os.path.join(folder, name)
                if not name.endswith((".py", ".ipynb", ".md")) or path == os.path.abspath(__file__):
                    continue
                seen += 1
                for number, line in enumerate(open(path, encoding="utf-8"), 1):
                    if m := _OLD_NAME.search(line):
                        found.append(f"{os.path.relpath(path, root)}:{number}: {m.group(0)}")
    assert seen > 50, "the scan sees no course files"
    assert not found, "import the module by its path (" + ", ".join(
        f"grader.{old} -> {new}" for old, new in REMOVED_ALIASES.items()) + "):\n" + "\n".join(found)


def test_the_package_top_exports_the_checks_own_objects():
    """``from grader import graph_break_report`` names :func:`grader.checks.breaks.graph_break_report`."""
    for module, names in grader._EXPORTS.items():
        for name in names:
            assert getattr(grader, name) is getattr(
                importlib.import_module(f"grader.checks.{module}"), name), (module, name)
    assert _OLD_NAME.search("from grader.check import check") and \
        _OLD_NAME.search("from grader import chapters as ch") and \
        not _OLD_NAME.search("from grader.checks import breaks")


def _module_graph() -> dict[str, set[str]]:
    """grader module -> the grader modules it imports (at any depth: a function-level import is
    an edge too). ``from grader.cohort import merge`` is an edge to ``grader.cohort.merge``."""
    found = dict((module, path) for path, module in _modules())
    graph: dict[str, set[str]] = {module: set() for module in found}
    for module, path in found.items():
        for _, target in _imports(path, module):
            while target not in found and "." in target:   # grader.x.name -> grader.x
                target = target.rsplit(".", 1)[0]
            if target in found and target != module:
                graph[module].add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (its modules in import order, the first repeated last), or None."""
    state: dict[str, int] = {}   # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_module_imports_another_that_imports_it_back():
    graph = _module_graph()
    assert graph["grader.cohort.grade"] >= {"grader.cohort.attempt", "grader.cohort.merge"}, \
        "the module graph lost its edges"
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# The rooms of grader.isolation (issue 45), lowest first: a module imports its own room and those
# below it. The learner's cells as data; the sandbox (the subject, which runs learner code, and
# what starts, confines and measures it), which knows no judge; the judge, which starts the
# sandbox and never runs learner code; the notebook API (grader.isolation.check, cell_scores),
# which drives the judge. grader.isolation.<room>.* is in <room>, the rest in the notebook API.
ISOLATION_ROOMS = ("cells", "sandbox", "judge", "notebook API")
# What of the judge the notebook API may import: the judge as its driver sees it, a job made and
# run in a process of its own, never the judge's steps, evidence or children.
JUDGE_AS_DRIVEN = {"grader.isolation.judge.judging", "grader.isolation.judge.judge_process",
                   "grader.isolation.judge.judge_job"}


def _isolation_room(module: str) -> str | None:
    """'grader.isolation.sandbox.launcher' -> 'sandbox'; 'grader.isolation.check' -> 'notebook
    API'; a module of another role -> None."""
    parts = module.split(".")
    if parts[:2] != ["grader", "isolation"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in ISOLATION_ROOMS else ISOLATION_ROOMS[-1]


def _imports_up_a_room(graph: dict[str, set[str]]) -> list[str]:
    """Every import of ``graph`` from a room of grader.isolation into a room above it, and of the
    judge by the notebook API past its driver's side."""
    wrong = []
    for module in sorted(graph):
        room = _isolation_room(module)
        if room is None:
            continue
        for target in sorted(graph[module]):
            other = _isolation_room(target)
            if other is None:
                continue
            if ISOLATION_ROOMS.index(other) > ISOLATION_ROOMS.index(room):
                wrong.append(f"{module} imports {target}: the {room} may not import the {other}")
            elif room == "notebook API" and other == "judge" and target not in JUDGE_AS_DRIVEN:
                wrong.append(f"{module} imports {target}: the notebook API drives the judge "
                             f"through {sorted(JUDGE_AS_DRIVEN)} only")
    return wrong


def test_the_rooms_of_isolation_import_one_way():
    """The sandbox imports no judge and no notebook API; the judge no notebook API."""
    for room in ISOLATION_ROOMS[:-1]:
        assert os.path.isfile(os.path.join(PACKAGE, "isolation", room, "__init__.py")), room
    graph = _module_graph()
    assert graph["grader.isolation.judge.steps"] >= {"grader.isolation.sandbox.process",
                                                     "grader.isolation.cells.screen"}, \
        "the module graph lost its edges"
    assert {_isolation_room(module) for module in graph} - {None} == set(ISOLATION_ROOMS)
    wrong = _imports_up_a_room(graph)
    assert not wrong, "\n".join(wrong)
    # The rule sees an import that runs up a room.
    assert _imports_up_a_room({"grader.isolation.sandbox.process": {"grader.isolation.judge.steps"},
                               "grader.isolation.judge.steps": set()}) == [
        "grader.isolation.sandbox.process imports grader.isolation.judge.steps: the sandbox may "
        "not import the judge"]
    assert len(_imports_up_a_room({"grader.isolation.cells.source": {"grader.isolation.check"},
                                   "grader.isolation.check": {"grader.isolation.judge.steps"},
                                   "grader.isolation.judge.steps": set()})) == 2


def _spelled(pattern: str, outside: str, keep: set[str] | None = None) -> list[str]:
    """``module:line: string`` for every string ``pattern`` (one group) finds in a module of the
    package other than ``outside`` (only those in ``keep``, when given)."""
    found = []
    for path, module in _modules():
        if module == outside:
            continue
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            found += [f"{module}:{number}: {name}" for name in re.findall(pattern, line)
                      if keep is None or name in keep]
    return found


def test_every_environment_variable_is_named_in_one_module():
    """Modules read and set the course's environment variables through grader._environment, where
    each is named with its meaning; no other module spells a COURSE_ string."""
    from grader import _environment

    spelled = _spelled(r"[\"'](COURSE_[A-Z_]+)[\"']", outside="grader._environment")
    assert not spelled, "\n".join(spelled)
    assert all(value.startswith("COURSE_") for value in _environment.ALL.values())
    assert len(set(_environment.ALL.values())) == len(_environment.ALL)


def test_every_file_name_is_spelled_in_one_module():
    """Modules name the grader's files through grader._files (``files.GRADEBOOK``); no other
    module spells one of its file names as a string."""
    from grader import _files

    names = {value for key, value in vars(_files).items()
             if key.isupper() and isinstance(value, str) and "." in value}
    assert {"gradebook.db", "judged-scores.json", "nbgrader_config.py"} <= names, names
    spelled = _spelled(r"[\"']([\w.-]+\.\w+)[\"']", outside="grader._files", keep=names)
    assert not spelled, "\n".join(spelled)
    # Folder names too, wherever a path is joined (a cell's "source" key is not a folder).
    folders = {value for key, value in vars(_files).items()
               if key.isupper() and isinstance(value, str) and "." not in value}
    assert {"source", "release", "submitted", "notebooks"} <= folders, folders
    joined = [hit for hit in _spelled(r"os\.path\.join\((.*)", outside="grader._files")
              if set(re.findall(r"[\"']([\w-]+)[\"']", hit.split(": ", 1)[1])) & folders]
    assert not joined, "\n".join(joined)


LONG_MODULE_LINES = 420   # "no module over ~400 lines without a reason written at its top"


def test_a_long_module_says_at_its_top_why_it_is_one_module():
    long_ones, unexplained = [], []
    for root, _, names in os.walk(PACKAGE):
        for name in names:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            source = open(path).read()
            if source.count("\n") <= LONG_MODULE_LINES:
                continue
            long_ones.append(os.path.relpath(path, PACKAGE))
            if "Why " not in (ast.get_docstring(ast.parse(source)) or ""):
                unexplained.append(os.path.relpath(path, PACKAGE))
    assert long_ones, "the check sees no module at all"
    assert not unexplained, f"over {LONG_MODULE_LINES} lines with no reason in the docstring: " \
                            f"{unexplained}"


def test_no_module_docstring_quotes_its_own_size():
    """A size written at a module's top is stale by the next change (issue 45): the reason a
    module is long stays, its line count does not."""
    quoted = []
    for root, _, names in os.walk(PACKAGE):
        for name in (n for n in names if n.endswith(".py")):
            path = os.path.join(root, name)
            doc = ast.get_docstring(ast.parse(open(path).read())) or ""
            if re.search(r"~?\d[\d,]*\s+lines\b", doc):
                quoted.append(os.path.relpath(path, PACKAGE))
    assert not quoted, f"module docstrings quoting a line count: {quoted}"


# Where a check's name may not be spelled (issue 34): what decides, asks for evidence, or scores
# reads the declarations (grader.checks.declared), so that adding a check touches none of these.
# The judge: its steps, the evidence it gathers, where it decides (issue 45: one module a step).
JUDGE = ("grader/isolation/judge/steps.py", "grader/isolation/judge/deciding.py",
         "grader/isolation/judge/judge_child.py",
         *sorted(f"grader/isolation/judge/evidence/{name}"
                 for name in os.listdir(os.path.join(os.path.dirname(PACKAGE),
                                                     "grader/isolation/judge/evidence"))
                 if name.endswith(".py")))
NO_CHECK_NAMES = (*JUDGE, "grader/problems/__init__.py", "grader/cohort/scoring.py")
# Words of the subject's protocol that happen to be check names: a request's operation
# ({"op": "breaks"}) and the fields of its replies (report.get("breaks")).
_REPLIES = ("header", "report", "reply")


def _check_names_spelled(source: str, names: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` for each string constant of ``source`` that is a check's name, but a
    request's operation or a reply's field."""
    tree = ast.parse(source)
    allowed = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            allowed |= {id(v) for k, v in zip(node.keys, node.values)
                        if isinstance(k, ast.Constant) and k.value == "op"}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and isinstance(node.func.value, ast.Name) \
                and node.func.value.id in _REPLIES and node.args:
            allowed.add(id(node.args[0]))
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in allowed]


def test_the_judge_names_no_problem_set():
    """What a problem set teaches beyond one graph (ps3's planning question, ps6's cached step,
    ps8's custom operator) is declared by the set, or by a check it names (issue 45): the
    judge's modules name no set, in code or in words."""
    root = os.path.dirname(PACKAGE)
    assert "grader/isolation/judge/evidence/graph.py" in JUDGE
    found = [f"{path}:{number}: {line.strip()}" for path in JUDGE
             for number, line in enumerate(open(os.path.join(root, path)), 1)
             if re.search(r"\bps\d", line)]
    assert not found, "\n".join(found)


def test_the_judge_is_the_list_of_its_steps():
    """judge/steps.py holds the steps of one job; the evidence, the decision and where it runs are
    modules of their own (issue 45: at most 400 lines)."""
    lines = open(os.path.join(os.path.dirname(PACKAGE), "grader/isolation/judge/steps.py")).read()
    assert lines.count("\n") <= 400, lines.count("\n")


def test_no_check_name_is_spelled_outside_its_declaration():
    from grader.checks.declared import CHECKS

    root = os.path.dirname(PACKAGE)
    found = [f"{path}:{line}: {name!r}" for path in NO_CHECK_NAMES
             for line, name in _check_names_spelled(open(os.path.join(root, path)).read(),
                                                    set(CHECKS))]
    assert not found, ("a check's name is its declaration's (grader.checks.declared): read "
                       "what it declares (problem.parts, problem.needs(...), Check.requires) "
                       "instead:\n" + "\n".join(found))
    # The rule sees a name where one is spelled, and lets the subject's protocol words be.
    assert _check_names_spelled('if "speed" in wanted: pass', {"speed"}) == [(1, "speed")]
    assert _check_names_spelled('subject.request({"op": "breaks"}); report.get("breaks")',
                                {"breaks"}) == []
