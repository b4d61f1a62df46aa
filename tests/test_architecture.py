"""The package's layout: one folder per role, imports pointing one way (docs/design.md).

checks <- problems <- isolation <- cohort; course -> checks; nothing imports the tools or the
command line. The names notebooks import (``grader.check``, ``grader.chapters``, ...) are the
same module objects as their role's modules.
"""
from __future__ import annotations

import ast
import importlib
import os

import grader

PACKAGE = os.path.dirname(grader.__file__)
# role -> the roles its modules may import (every role may import itself and grader._paths).
ALLOWED = {
    "checks": set(),
    "problems": {"checks"},
    "isolation": {"checks", "problems"},
    "cohort": {"checks", "problems", "isolation"},
    "course": {"checks"},
    "tools": {"checks", "problems", "isolation", "cohort", "course"},
    "cli": {"checks", "problems", "isolation", "cohort", "course", "tools"},
}
ALIASES = {"check": "isolation", "chapters": "course", "breaks": "checks", "recompiles": "checks",
           "timing": "checks", "fusion": "checks", "colab": "course"}


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
            names = [f"{name}.{a.name}" for a in node.names] if not node.module or node.level else [name]
            found += [(node.lineno, n) for n in names]
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
    assert top == sorted(["__init__", "_paths", "cli", *ALIASES]), top
    for role in ALLOWED:
        if role != "cli":
            assert os.path.isfile(os.path.join(PACKAGE, role, "__init__.py")), role


def test_imports_point_one_way():
    wrong = []
    for path, module in _modules():
        role = _role(module)
        if role in ALIASES or role in ("_paths", None) or module == "grader":
            continue
        for line, target in _imports(path, module):
            other = _role(target)
            if other in ALIASES:
                other = ALIASES[other]
            if other in (None, role, "_paths"):
                continue
            if other not in ALLOWED[role]:
                wrong.append(f"{module} (line {line}) imports {target}: {role} may not import {other}")
    assert not wrong, "\n".join(wrong)


def test_the_names_notebooks_import_are_the_role_modules():
    for name, role in ALIASES.items():
        assert importlib.import_module(f"grader.{name}") is importlib.import_module(f"grader.{role}.{name}")
    from grader.check import check, run_test

    assert check is importlib.import_module("grader.isolation.check").check and callable(run_test)
