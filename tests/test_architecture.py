"""The package's layout: one folder per role, imports pointing one way (docs/design.md), and no
import cycle between any two modules.

checks <- problems <- isolation <- cohort; course -> checks; nothing imports the tools or the
command line. Within a role too, modules import one way: the graph of every import between the
package's modules (function-level imports included) has no cycle. The names notebooks import
(``grader.check``, ``grader.breaks``, ...) re-export their role's modules' names with
``__all__``; ``grader.chapters`` is ``grader.course.chapters`` itself.
"""
from __future__ import annotations

import ast
import importlib
import os

import grader

PACKAGE = os.path.dirname(grader.__file__)
# role -> the roles its modules may import (every role may import itself, grader._paths and
# grader._environment).
ALLOWED = {
    "checks": set(),
    "problems": {"checks"},
    "isolation": {"checks", "problems"},
    "cohort": {"checks", "problems", "isolation"},
    "course": {"checks"},
    "tools": {"checks", "problems", "isolation", "cohort", "course"},
    "cli": {"checks", "problems", "isolation", "cohort", "course", "tools"},
}
# The names notebooks import at the top of grader/ -> their role (grader.ROLE.NAME is the code).
ALIASES = {"check": "isolation", "chapters": "course", "breaks": "checks", "recompiles": "checks",
           "timing": "checks", "fusion": "checks"}
SWAPPED = {"chapters"}   # the module itself (sys.modules swap); the others re-export with __all__


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


def test_each_role_is_a_folder_and_the_top_level_holds_only_entry_points_and_aliases():
    top = sorted(f[:-3] for f in os.listdir(PACKAGE) if f.endswith(".py"))
    assert top == sorted(["__init__", "_paths", "_environment", "cli", *ALIASES]), top
    for role in ALLOWED:
        if role != "cli":
            assert os.path.isfile(os.path.join(PACKAGE, role, "__init__.py")), role


def test_imports_point_one_way():
    wrong = []
    for path, module in _modules():
        role = _role(module)
        if role in ALIASES or role in ("_paths", "_environment", None) or module == "grader":
            continue
        for line, target in _imports(path, module):
            other = _role(target)
            if other in ALIASES:
                other = ALIASES[other]
            if other in (None, role, "_paths", "_environment"):
                continue
            if other not in ALLOWED[role]:
                wrong.append(f"{module} (line {line}) imports {target}: {role} may not import {other}")
    assert not wrong, "\n".join(wrong)


def test_the_names_notebooks_import_are_the_role_modules_names():
    for name, role in ALIASES.items():
        alias = importlib.import_module(f"grader.{name}")
        module = importlib.import_module(f"grader.{role}.{name}")
        if name in SWAPPED:
            assert alias is module, name
            continue
        assert alias is not module and alias.__all__, name
        for public in alias.__all__:   # the very objects, so isinstance and identity hold
            assert getattr(alias, public) is getattr(module, public), f"grader.{name}.{public}"
        extra = {n for n in vars(alias) if not n.startswith("_")} - set(alias.__all__)
        assert not extra, f"grader.{name} defines {extra} beyond its __all__"
    from grader.check import check, run_test

    assert check is importlib.import_module("grader.isolation.check").check and callable(run_test)


def test_the_re_exports_keep_what_the_package_top_exports():
    """``from grader import graph_break_report`` and ``from grader.breaks import
    graph_break_report`` name the same function."""
    for module, names in grader._EXPORTS.items():
        if module in ALIASES:
            alias = importlib.import_module(f"grader.{module}")
            assert set(names) <= set(alias.__all__), (module, set(names) - set(alias.__all__))


def _module_graph() -> dict[str, set[str]]:
    """grader module -> the grader modules it imports (at any depth: a function-level import is
    an edge too). ``from grader.cohort import files`` is an edge to ``grader.cohort.files``."""
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


def test_every_environment_variable_is_named_in_one_module():
    """Modules read and set the course's environment variables through grader._environment, where
    each is named with its meaning; no other module spells a COURSE_ string."""
    import re

    from grader import _environment

    spelled = []
    for path, module in _modules():
        if module == "grader._environment":
            continue
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            for name in re.findall(r"[\"'](COURSE_[A-Z_]+)[\"']", line):
                spelled.append(f"{module}:{number}: {name}")
    assert not spelled, "\n".join(spelled)
    assert all(value.startswith("COURSE_") for value in _environment.ALL.values())
    assert len(set(_environment.ALL.values())) == len(_environment.ALL)


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
