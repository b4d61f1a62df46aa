"""Screen a learner's solution cells before any of them runs: the static check.

A solution to these problem sets is a few class and function definitions that call torch. Code
that reads files, reaches the interpreter's internals, rebinds the grader's or torch's functions,
changes the compiler's configuration or does work when it is loaded is not a solution, and it is
how a grade would be forged; so it is refused, with the line and the reason, before anything runs
(in the trusted grading process, and in self-check so that a learner hears it before submitting).
The judge screens again before it starts the subject. No point depends on the screen: it is defence
in depth in front of a process that decides nothing (:mod:`grader.isolation.judge`).

The rules, for every solution cell:

* **At the top of a cell, and directly in a class body**, only: imports, ``def`` and ``class``,
  assignments, a docstring, ``pass``. Nothing else runs at load time; the values assigned there
  may call only a short list of library constructors (``torch.tensor``, ``math.sqrt``,
  ``tuple``, ...) — not the solution's own functions, not the problem set's.
* **Imports** of ``torch`` (public modules only, without the ones that load code or files),
  ``math``, ``functools``, ``itertools``, ``typing``, ``dataclasses``, ``collections``,
  ``numbers``, ``enum``, ``abc``, ``__future__``. The problem set's names are already defined.
* **Names** that reach files, processes, memory or the interpreter are refused anywhere:
  ``open``, ``exec``, ``eval``, ``compile``, ``getattr``/``setattr``/``delattr``, ``globals``,
  ``locals``, ``vars``, ``dir``, ``id``, ``breakpoint``, ``input``, ``get_ipython`` and modules
  such as ``os``, ``sys``, ``gc``, ``ctypes``, ``json``, ``inspect``, ``importlib``,
  ``subprocess`` (see :data:`FORBIDDEN_NAMES`).
* **Attributes**: none with a double underscore (``__class__``, ``__dict__``, ...) but
  ``__init__``; none private (``_x``) except on ``self``/``cls`` (and ``torch._check``); none
  that load or save code and files, set process-wide torch state, override operators or expose
  frames and storage (:data:`FORBIDDEN_ATTRIBUTES`).
* **Assigning or deleting an attribute** of anything but ``self``/``cls`` is refused (so
  ``Evaluation.require = ...``, ``torch.compile = ...``); a compiler setting only when the
  problem allows it (``Problem.allowed_config``), at the top of a cell.
* **Decorators** from :data:`ALLOWED_DECORATORS`; no class keywords (``metaclass=``); no
  ``async``; no string constant with a double underscore or a format field that reads an
  attribute (``"{0.__class__}"``).

Why one long module (~480 lines): the screen's rules are read as one list, each rule beside
the reason a learner is shown.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from typing import Iterable

from grader.isolation.source import Cell, strip_magics

ALLOWED_MODULES = ("torch", "math", "functools", "itertools", "typing", "dataclasses",
                   "collections", "numbers", "enum", "abc", "__future__")
FORBIDDEN_TORCH_MODULES = ("torch.hub", "torch.utils.cpp_extension", "torch.multiprocessing",
                           "torch.distributed", "torch.package", "torch.serialization",
                           "torch.overrides", "torch.library.Library", "torch.utils.data")
FORBIDDEN_NAMES = {
    # reach files, code, memory or the interpreter
    "open", "exec", "eval", "compile", "getattr", "setattr", "delattr", "globals", "locals",
    "vars", "dir", "id", "breakpoint", "input", "help", "exit", "quit", "memoryview",
    "get_ipython", "display",
    # modules (refused as names too, in case one is reachable some other way)
    "os", "sys", "gc", "ctypes", "json", "inspect", "importlib", "subprocess", "builtins",
    "pickle", "marshal", "shutil", "socket", "threading", "multiprocessing", "pathlib",
    "tempfile", "hmac", "hashlib", "linecache", "traceback", "weakref", "grader", "IPython",
    "numpy", "np",
}
FORBIDDEN_ATTRIBUTES = {
    # load or save code and files
    "load", "save", "from_file", "hub", "cpp_extension", "load_inline", "load_library",
    "multiprocessing", "distributed", "package", "serialization",
    # process-wide torch state that would change the baseline's speed too
    "set_num_threads", "set_num_interop_threads", "set_default_device", "set_default_dtype",
    "set_stance", "use_deterministic_algorithms", "set_float32_matmul_precision",
    "set_flush_denormal", "register_kernel", "impl", "Library", "register_torch_dispatch",
    "register_module_forward_hook", "register_module_forward_pre_hook",
    "register_module_full_backward_hook", "register_module_full_backward_pre_hook",
    "register_module_backward_hook", "register_module_buffer_registration_hook",
    "register_module_module_registration_hook", "register_module_parameter_registration_hook",
    # frames, code objects, raw memory
    "f_globals", "f_locals", "f_back", "f_builtins", "f_code", "tb_frame", "tb_next",
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "co_code", "co_consts", "mro",
    "data_ptr", "untyped_storage", "storage", "format_map",
}
ALLOWED_PRIVATE = {"torch._check", "torch._check_is_size", "torch._assert"}
SELF_NAMES = {"self", "cls"}
ALLOWED_DUNDER_ATTRIBUTES = {"__init__"}
ALLOWED_DECORATORS = {
    "staticmethod", "classmethod", "property", "torch.no_grad", "torch.inference_mode",
    "torch.compiler.disable", "torch.compiler.allow_in_graph", "torch.library.custom_op",
    "functools.wraps", "dataclasses.dataclass", "dataclass", "wraps",
}
ALLOWED_DECORATOR_ATTRIBUTES = {"setter", "getter", "deleter", "register_fake",
                                "register_autograd"}
# What an assignment at load time (top of a cell, class body, default values) may call.
ALLOWED_LOAD_TIME_CALLS = {
    "int", "float", "bool", "str", "tuple", "list", "dict", "set", "frozenset", "range", "len",
    "min", "max", "abs", "round", "sum", "sorted", "zip", "enumerate", "slice", "isinstance",
    "torch.tensor", "torch.zeros", "torch.ones", "torch.full", "torch.empty", "torch.arange",
    "torch.linspace", "torch.eye", "torch.device", "torch.Size", "torch.finfo", "torch.iinfo",
    "torch.Generator", "functools.partial", "collections.namedtuple", "dataclasses.field",
    "field", "torch.library.custom_op", "torch.no_grad", "torch.inference_mode",
}
# The names a solution may use without defining or importing them (every other free name must be
# the problem set's, or refused): builtins that compute, nothing that reaches files, code,
# memory or the interpreter.
ALLOWED_BUILTINS = frozenset("""
abs all any bool callable chr dict divmod enumerate filter float format frozenset hasattr hash
int isinstance issubclass iter len list map max min next ord pow print property range repr
reversed round set slice sorted staticmethod classmethod str sum super tuple zip True False None
NotImplemented Ellipsis Exception ValueError TypeError RuntimeError AssertionError KeyError
IndexError ZeroDivisionError StopIteration NotImplementedError ArithmeticError FloatingPointError
""".split())
# torch's submodules a solution may reach (``torch.jit``, ``torch.fx``, ``torch.export``,
# ``torch.package`` ... compile or load code and are not among them).
ALLOWED_TORCH_SUBMODULES = frozenset({"nn", "linalg", "fft", "special", "compiler", "library",
                                      "cuda", "amp", "autograd", "types"})
_FORMAT_ATTRIBUTE = re.compile(r"\{[^{}]*[.\[][^{}]*\}")
_TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign,
              ast.AnnAssign, ast.AugAssign, ast.Pass)


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One thing in a solution cell that the grader will not run."""

    cell: str
    line: int
    code: str
    why: str

    def __str__(self) -> str:
        return f"{self.cell}, line {self.line}: `{self.code}`: {self.why}"


def describe(refusals: Iterable[Refusal]) -> str:
    """The learner-facing message for refused cells."""
    lines = [f"- {r}" for r in refusals]
    return ("your solution was not run: the grader runs only code a solution needs (classes and "
            "functions that call torch), and found this before running anything:\n"
            + "\n".join(lines))


def _dotted(node: ast.AST) -> str | None:
    """``torch.nn.functional.gelu`` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _is_unanswered(stmt: ast.stmt) -> bool:
    """The stub nbgrader leaves in an unanswered solution cell."""
    exc = stmt.exc if isinstance(stmt, ast.Raise) else None
    target = exc.func if isinstance(exc, ast.Call) else exc
    return isinstance(target, ast.Name) and target.id == "NotImplementedError"


def _load_time_nodes(node: ast.AST):
    """The nodes of ``node`` that run when it is evaluated (a lambda's body runs later)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not (isinstance(node, ast.Lambda) and child is node.body):
            yield from _load_time_nodes(child)


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__") and len(name) > 4


def _module_allowed(module: str) -> str | None:
    """None when ``module`` may be imported, else why not."""
    top = module.split(".")[0]
    if top not in ALLOWED_MODULES:
        return (f"the `{top}` module is not available to a solution (only "
                f"{', '.join(ALLOWED_MODULES[:-1])}; the problem set's names are already defined)")
    if any(part.startswith("_") for part in module.split(".")[1:]):
        return "private modules are not available to a solution"
    if any(module == m or module.startswith(m + ".") for m in FORBIDDEN_TORCH_MODULES):
        return f"`{module}` loads code or files, or starts processes: not available to a solution"
    return None


def defined_names(tree: ast.AST) -> set[str]:
    """Every name a piece of code binds anywhere (assignments, definitions, parameters, imports,
    loop, comprehension, ``with`` and ``except`` targets)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names


class _Screen(ast.NodeVisitor):
    def __init__(self, cell: Cell, lines: list[str], allowed_config: frozenset,
                 known: frozenset | None = None):
        self.cell, self.lines, self.allowed_config = cell, lines, allowed_config
        self.known = known   # names a free name may be (None: not checked)
        self.refusals: list[Refusal] = []
        self._seen: set[tuple[int, str]] = set()

    def refuse(self, node: ast.AST, why: str) -> None:
        line = getattr(node, "lineno", 1)
        if (line, why) in self._seen:
            return
        self._seen.add((line, why))
        code = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.refusals.append(Refusal(self.cell.label, line, code[:80], why))

    # -- load-time code: the top of the cell and class bodies ---------------------------------
    def screen_body(self, body: list[ast.stmt], where: str) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                continue  # a docstring
            if _is_unanswered(stmt):
                self.refuse(stmt, "this solution has not been written yet (the cell still has "
                                  "`raise NotImplementedError()`)")
                continue
            if not isinstance(stmt, _TOP_LEVEL):
                self.refuse(stmt, f"only imports, definitions and assignments may stand {where}: "
                                  f"this statement would run when the cell is loaded; put it in a "
                                  f"function (or leave it out of the solution cell)")
                self.visit(stmt)  # and say what else is wrong in it
                continue
            if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                self.screen_load_time_calls(stmt)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    self.screen_assignment_target(target, top_level=True)
                if stmt.value is not None:
                    self.visit(stmt.value)
                if isinstance(stmt, ast.AnnAssign):
                    self.screen_annotation(stmt.annotation)
            elif isinstance(stmt, ast.ClassDef):
                self.screen_class(stmt)
            else:
                self.visit(stmt)

    def screen_load_time_calls(self, node: ast.AST) -> None:
        for sub in _load_time_nodes(node):
            if isinstance(sub, ast.Call):
                name = _dotted(sub.func)
                if name not in ALLOWED_LOAD_TIME_CALLS:
                    shown = name or ast.unparse(sub.func)[:40]
                    self.refuse(sub, f"`{shown}(...)` would run when the cell is loaded: call it "
                                     f"inside a method instead")

    def screen_class(self, node: ast.ClassDef) -> None:
        for decorator in node.decorator_list:
            self.screen_decorator(decorator)
        if node.keywords:
            self.refuse(node, "class keywords (such as `metaclass=`) are not available to a solution")
        for base in node.bases:
            if any(isinstance(sub, ast.Call) for sub in ast.walk(base)):
                self.refuse(base, "a base class must be a name, not a call")
            self.visit(base)
        self.screen_body(node.body, "directly in a class body")

    def screen_decorator(self, decorator: ast.expr) -> None:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = _dotted(target)
        if name in ALLOWED_DECORATORS or (isinstance(target, ast.Attribute)
                                          and target.attr in ALLOWED_DECORATOR_ATTRIBUTES):
            if isinstance(decorator, ast.Call):
                for arg in [*decorator.args, *(k.value for k in decorator.keywords)]:
                    self.screen_load_time_calls(arg)
                    self.visit(arg)
            return
        self.refuse(decorator, f"the decorator `@{name or '...'}` is not available to a solution "
                               f"(allowed: {', '.join(sorted(ALLOWED_DECORATORS))})")

    def screen_assignment_target(self, target: ast.expr, top_level: bool = False) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.screen_assignment_target(element, top_level)
            return
        if isinstance(target, ast.Starred):
            self.screen_assignment_target(target.value, top_level)
            return
        if isinstance(target, ast.Attribute):
            name = _dotted(target)
            if top_level and name in self.allowed_config:
                return
            root = _root(target)
            if not (isinstance(root, ast.Name) and root.id in SELF_NAMES):
                self.refuse(target, "a solution may set attributes of `self` only, not of "
                                    f"`{name or 'another object'}` (that would change code the "
                                    f"grader or torch relies on)")
        self.visit(target)

    # -- everywhere ---------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for decorator in node.decorator_list:
            self.screen_decorator(decorator)
        for default in [*node.args.defaults, *(d for d in node.args.kw_defaults if d)]:
            self.screen_load_time_calls(default)
        if node.returns is not None:
            self.screen_annotation(node.returns)
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                    node.args.vararg, node.args.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.screen_annotation(arg.annotation)
        for child in [*node.args.defaults, *(d for d in node.args.kw_defaults if d), *node.body]:
            self.visit(child)

    def screen_annotation(self, annotation: ast.expr) -> None:
        """An annotation is code that may run later (``typing.get_type_hints``, and torch's
        ``custom_op`` reading a signature): screened as code, and a string one as the code it
        holds."""
        self.screen_load_time_calls(annotation)
        self.visit(annotation)
        for sub in ast.walk(annotation):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                try:
                    inner = ast.parse(sub.value, mode="eval")
                except SyntaxError:
                    self.refuse(annotation, "a string annotation must name a type")
                    continue
                for node in ast.walk(inner):
                    ast.copy_location(node, annotation)
                self.screen_load_time_calls(inner.body)
                self.visit(inner.body)

    def visit_AsyncFunctionDef(self, node) -> None:
        self.refuse(node, "`async` code is not available to a solution")

    visit_Await = visit_AsyncFor = visit_AsyncWith = visit_AsyncFunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.screen_class(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if (why := _module_allowed(alias.name)) is not None:
                self.refuse(node, why)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.refuse(node, "relative imports are not available to a solution")
            return
        if (why := _module_allowed(module)) is not None:
            self.refuse(node, why)
            return
        for alias in node.names:
            if alias.name == "*":
                self.refuse(node, "`import *` is not available to a solution: import names one "
                                  "by one")
            elif alias.name.startswith("_") or alias.name in FORBIDDEN_ATTRIBUTES:
                self.refuse(node, f"`{alias.name}` is not available to a solution")
            elif module.split(".")[0] == "torch" and \
                    (why := _module_allowed(f"{module}.{alias.name}")) is not None:
                self.refuse(node, why)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring (or any bare string): it does nothing
        self.visit(node.value)

    def visit_Name(self, node: ast.Name) -> None:
        if self.known is not None and isinstance(node.ctx, ast.Load) \
                and node.id not in self.known and node.id not in FORBIDDEN_NAMES \
                and not _is_dunder(node.id):
            self.refuse(node, f"`{node.id}` is not available to a solution: a solution may use "
                              f"the problem set's names, what it defines or imports itself, and "
                              f"Python's computing builtins")
            return
        if node.id in FORBIDDEN_NAMES:
            self.refuse(node, f"`{node.id}` is not available to a solution (it reaches files, "
                              f"processes, memory or the interpreter)")
        elif _is_dunder(node.id):
            self.refuse(node, f"`{node.id}` (a double-underscore name) is not available to a "
                              f"solution")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = _dotted(node)
        if name is not None and (name in ALLOWED_PRIVATE or name in self.allowed_config):
            return  # an allowed private chain: its inner parts are private on purpose
        parts = name.split(".") if name else []
        if len(parts) >= 2 and parts[0] == "torch" and not parts[1].startswith("_") \
                and _is_torch_submodule(parts[1]) \
                and parts[1] not in ALLOWED_TORCH_SUBMODULES:
            self.refuse(node, f"`torch.{parts[1]}` is not available to a solution (only "
                              f"{', '.join(sorted(ALLOWED_TORCH_SUBMODULES))} of torch's modules)")
            return
        attr = node.attr
        if _is_dunder(attr) and attr not in ALLOWED_DUNDER_ATTRIBUTES:
            self.refuse(node, f"`.{attr}` (a double-underscore attribute) is not available to a "
                              f"solution")
        elif attr in FORBIDDEN_ATTRIBUTES:
            self.refuse(node, f"`.{attr}` is not available to a solution (it loads or saves code "
                              f"or files, changes process-wide torch state or exposes the "
                              f"interpreter's internals)")
        elif attr.startswith("_") and not _is_dunder(attr) and not (
                isinstance(node.value, ast.Name) and node.value.id in SELF_NAMES):
            self.refuse(node, f"`.{attr}` is private: a solution may use private attributes of "
                              f"`self` only" + (" (compiler settings cannot be changed in this "
                                                "problem)" if name and ".config" in name else ""))
        self.visit(node.value)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.screen_assignment_target(target)
        self.visit(node.value)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self.screen_assignment_target(node.target)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.screen_assignment_target(node.target)
        self.screen_annotation(node.annotation)
        if node.value is not None:
            self.visit(node.value)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self.screen_assignment_target(target)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, (str, bytes)):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if "__" in text:
                self.refuse(node, "strings with a double underscore are not available to a "
                                  "solution")
            elif _FORMAT_ATTRIBUTE.search(text):
                self.refuse(node, "a format field that reads an attribute or an item "
                                  "(`{0.x}`, `{0[x]}`) is not available to a solution: use an "
                                  "f-string")


def _is_torch_submodule(name: str) -> bool:
    import types

    import torch

    return isinstance(getattr(torch, name, None), types.ModuleType)


def check_cells(cells: Iterable[Cell], allowed_config: Iterable[str] = (),
                names: Iterable[str] | None = None) -> list[Refusal]:
    """Everything in ``cells`` the grader will not run (empty: the cells may run).

    ``names``: the problem set's names (what a solution's namespace holds before its cells run,
    :func:`grader.problems.public_names`); a free name that is none of these, nothing the cells
    bind and no allowed builtin is refused. ``None`` leaves free names to the other rules."""
    refusals: list[Refusal] = []
    allowed = frozenset(allowed_config)
    trees = []
    for cell in cells:
        source = strip_magics(cell.source)
        try:
            trees.append((cell, source, ast.parse(source)))
        except SyntaxError as exc:
            line = exc.lineno or 1
            refusals.append(Refusal(cell.label, line, (exc.text or "").strip()[:80],
                                    f"this is not valid Python ({exc.msg})"))
    known = None
    if names is not None:
        known = frozenset(names) | ALLOWED_BUILTINS
        for _, _, tree in trees:
            known |= defined_names(tree)
    for cell, source, tree in trees:
        screen = _Screen(cell, source.splitlines(), allowed, known)
        screen.screen_body(tree.body, "at the top of a solution cell")
        refusals.extend(screen.refusals)
    return refusals
