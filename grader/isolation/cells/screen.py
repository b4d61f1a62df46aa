"""The screen: a learner's solution cells read before any of them runs (a static check).

A solution to these problem sets is a few class and function definitions that call torch. Code
that reads files, reaches the interpreter's internals, rebinds the grader's or torch's functions,
changes the compiler's configuration or does work when it is loaded is not a solution, and it is
how a grade would be forged; so it is refused, with the line and the reason, before anything runs
(in the trusted grading process, and in self-check so that a learner hears it before submitting).
The judge screens again before it starts the subject. No point depends on the screen: it is defence
in depth in front of a process that decides nothing (:mod:`grader.isolation.judge.steps`).

The screen is an allow-list in every form it checks: what a solution may import, reach, call at
load time, decorate with or hand to an API is listed here, and anything else is refused. The
rules, for every solution cell:

* **At the top of a cell, and directly in a class body**, only: imports, ``def`` and ``class``,
  assignments, a docstring, ``pass``. Nothing else runs at load time; the values assigned there
  may call only a short list of library constructors (``torch.tensor``, ``math.sqrt``,
  ``tuple``, ...) — not the solution's own functions, not the problem set's.
* **Modules**: only those in :data:`ALLOWED_MODULES` (``torch`` and a few of its modules,
  ``math``, ``functools``, ``typing``, ...) may be imported (``import m``, ``from m import x``) or
  reached through attributes (``torch.utils``, ``F.torch.utils``), wherever a module is reached
  and whatever it is called; a module is used through its attributes, never passed around, and a
  name that holds one is not rebound. ``torch.utils.collect_env`` or ``torch.utils.benchmark``
  are not on the list, so neither is their ``run`` or ``Timer``.
* **Names of a module**: each allowed module lists what a solution may take from it
  (:data:`MODULE_NAMES`): torch's tensor operations, dtypes and a few classes (not
  ``torch.load``, ``torch.CompilationUnit``, ``torch.set_num_threads``); of ``torch.library`` only
  ``custom_op`` (chapter 8), no other registration (``define``, ``impl``, ``Library``); of
  ``torch.compiler`` its escape hatches (``disable``, ``allow_in_graph``, ``nonstrict_trace``),
  not ``set_default_backend``; of ``typing`` and ``dataclasses`` the types and decorators, not
  ``get_type_hints``, ``ForwardRef`` or ``make_dataclass``. Pure modules (``math``,
  ``itertools``, ``torch.nn.functional`` ...) give every public name.
* **Names** that reach files, processes, memory or the interpreter are refused anywhere:
  ``open``, ``exec``, ``eval``, ``compile``, ``getattr``/``setattr``/``delattr``, ``globals``,
  ``locals``, ``vars``, ``dir``, ``id``, ``breakpoint``, ``input``, ``get_ipython`` and modules
  such as ``os``, ``sys``, ``gc``, ``ctypes``, ``json``, ``inspect``, ``importlib``,
  ``subprocess`` (see :data:`FORBIDDEN_NAMES`); with the problem set's names known, a free name
  must be one of them, a name the cells bind, or a computing builtin.
* **Attributes**: none with a double underscore (``__class__``, ``__dict__``, ...) but
  ``__init__``; none private (``_x``) except on ``self``/``cls`` (and ``torch._check``); none
  that load or save code and files, set process-wide torch state, override operators or expose
  frames and storage (:data:`FORBIDDEN_ATTRIBUTES`).
* **Assigning or deleting an attribute** of anything but ``self``/``cls`` is refused (so
  ``Evaluation.require = ...``, ``torch.compile = ...``); a compiler setting only when the
  problem allows it (``Problem.allowed_config``), at the top of a cell.
* **Code that runs later, from text or from an API**: a format string is a literal written in
  the cell (``"{}".format(x)``; one built at run time, or ``str.format(s, ...)``, is refused, and
  no field may read an attribute or an item: ``"{0.__class__}"``); a type is written as an
  expression, never as a string (``x: "torch.Tensor"``, ``Optional["T"]``, the call forms of
  ``NamedTuple``/``TypedDict``: an API that reads the type evaluates the string as code);
  ``torch.compile`` (or a module's ``.compile``) is called directly with a backend named by a
  string on :data:`ALLOWED_BACKENDS`, never a function, and no ``options``; a custom operator is
  named by a string literal.
* **Decorators** from :data:`ALLOWED_DECORATORS`; no class keywords (``metaclass=``); no
  ``async``; no string constant with a double underscore.

Why one long module: the screen's rules are read as one list, each rule beside
the reason a learner is shown.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import re
import sys
import types
from typing import Iterable

from grader.isolation.cells.source import Cell, strip_magics

# Every module a solution may import or reach, by the module's own name (``__name__``).
ALLOWED_MODULES = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.linalg", "torch.fft",
    "torch.special", "torch.types", "torch.amp", "torch.autograd", "torch.cuda", "torch.compiler",
    "torch.library", "math", "functools", "itertools", "typing", "dataclasses", "collections",
    "collections.abc", "numbers", "enum", "abc", "__future__"})
EVERY_PUBLIC_NAME = None   # a module whose every public name only computes (math, torch.linalg)
# What a solution may take from each allowed module (its names; a submodule must be allowed too).
MODULE_NAMES: dict[str, frozenset | None] = {
    # torch itself: see _torch_names (its tensor operations, dtypes and these)
    "torch": frozenset("""Tensor Size device dtype finfo iinfo layout memory_format Generator
        is_tensor is_floating_point is_complex is_grad_enabled is_inference_mode_enabled
        get_default_dtype cond vmap no_grad enable_grad inference_mode set_grad_enabled autocast
        sym_max sym_min sym_int sym_float sym_not sym_ite sym_sqrt sym_sum SymInt SymFloat
        SymBool e pi inf nan newaxis compile typename""".split()),
    "torch.nn": EVERY_PUBLIC_NAME, "torch.nn.functional": EVERY_PUBLIC_NAME,
    "torch.nn.init": EVERY_PUBLIC_NAME, "torch.linalg": EVERY_PUBLIC_NAME,
    "torch.fft": EVERY_PUBLIC_NAME, "torch.special": EVERY_PUBLIC_NAME,
    "torch.types": EVERY_PUBLIC_NAME, "math": EVERY_PUBLIC_NAME, "itertools": EVERY_PUBLIC_NAME,
    "numbers": EVERY_PUBLIC_NAME, "collections.abc": EVERY_PUBLIC_NAME,
    "torch.amp": frozenset({"autocast"}),
    "torch.autograd": frozenset({"Function", "grad", "no_grad", "enable_grad", "inference_mode",
                                 "set_grad_enabled"}),
    "torch.cuda": frozenset({"is_available", "synchronize", "device_count", "current_device",
                             "get_device_name", "get_device_capability", "is_bf16_supported",
                             "Event", "Stream", "stream", "current_stream"}),
    # chapter 8's escape hatches; not set_default_backend, load_cache_artifacts, ...
    "torch.compiler": frozenset({"disable", "allow_in_graph", "nonstrict_trace", "is_compiling",
                                 "is_dynamo_compiling", "is_exporting",
                                 "cudagraph_mark_step_begin"}),
    # chapter 8's custom operator; no other registration (define, impl, Library, register_*)
    "torch.library": frozenset({"custom_op"}),
    "functools": frozenset({"partial", "reduce", "wraps", "lru_cache", "cache", "cached_property",
                            "total_ordering", "partialmethod", "cmp_to_key", "update_wrapper"}),
    # types and decorators; nothing that evaluates a type given as a string (get_type_hints,
    # ForwardRef), nothing that makes types from strings (NewType, TypeVar)
    "typing": frozenset("""Any Optional Union List Tuple Dict Set FrozenSet Sequence
        MutableSequence Mapping MutableMapping Iterable Iterator Callable Literal Final ClassVar
        NamedTuple TYPE_CHECKING Type Generic Protocol Annotated Hashable Sized Collection
        overload final""".split()),
    "dataclasses": frozenset({"dataclass", "field", "fields", "asdict", "astuple", "replace",
                              "InitVar", "KW_ONLY", "is_dataclass", "FrozenInstanceError"}),
    "collections": frozenset({"namedtuple", "deque", "OrderedDict", "defaultdict", "Counter",
                              "ChainMap", "abc"}),
    "enum": frozenset({"Enum", "IntEnum", "Flag", "IntFlag", "auto", "unique"}),
    "abc": frozenset({"ABC", "abstractmethod"}),
    "__future__": frozenset({"annotations"}),
}
# Why some modules that are not on the list are not (the refusal says it).
_MODULE_WHY = {
    "torch.utils": "it runs commands and code (collect_env, benchmark's Timer, cpp_extension)",
    "torch.hub": "it loads code or files", "torch.jit": "it compiles code",
    "torch.fx": "it builds code", "torch.export": "it loads code or files",
    "torch.package": "it loads code or files", "torch.serialization": "it loads files",
    "torch.multiprocessing": "it starts processes", "torch.distributed": "it starts processes",
    "torch.ops": "it reaches every registered operator",
    "torch.overrides": "it overrides torch's functions",
}
# The problem sets' names that are modules (what the subject's namespace binds them to).
NAMESPACE_MODULES = {"torch": "torch", "nn": "torch.nn", "F": "torch.nn.functional",
                     "math": "math"}
ALWAYS_IN_NAMESPACE = ("torch", "nn")
# torch.compile(backend=...): Dynamo's own backends, named; never a function of the learner's.
ALLOWED_BACKENDS = ("inductor", "eager", "aot_eager")
_COMPILE_KEYWORDS = frozenset({"fullgraph", "dynamic", "mode", "backend", "disable"})
# Generic aliases whose subscripts are types: a string there is a type read later as code.
_GENERIC_BUILTINS = frozenset({"list", "tuple", "dict", "set", "frozenset", "type"})
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
    "torch.compiler.disable", "torch.compiler.allow_in_graph", "torch.compiler.nonstrict_trace",
    "torch.library.custom_op",
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
_MODULE_AS_VALUE = ("`{}` is a module: a solution uses a module through its names "
                    "(`torch.tanh`), and does not pass it around or keep it")
_MODULE_REBOUND = ("`{}` names a module here: a solution does not rebind it (choose another "
                   "name)")
_PRIVATE_HINTS = {
    f"torch._dynamo.{mark}": f"`torch._dynamo.{mark}` marks an input before torch.compile first "
                             f"sees it, outside the compiled code: in a problem set the grader "
                             f"compiles your model, and where a set lets you choose how, a class "
                             f"attribute says it (`compile_dynamic = True`, chapter 6)"
    for mark in ("mark_dynamic", "maybe_mark_dynamic")}
_FORMAT_ATTRIBUTE = re.compile(r"\{[^{}:!]*[.\[][^{}]*\}")   # {0.x}, {0[x]}; not {:.3f}
_TOP_LEVEL = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign,
              ast.AnnAssign, ast.AugAssign, ast.Pass)


# Statements a solution cell may hold besides definitions: registering the fake implementation or
# autograd formula of a custom operator the cell made (``op.register_autograd(backward,
# setup_context=...)``: it has no decorator form with ``setup_context``). The ``torch.library``
# functions stay refused: they register code behind any operator's name.
REGISTRATION_CALLS = frozenset({"register_fake", "register_autograd"})


def _is_registration(stmt: ast.stmt) -> bool:
    """A top-level statement that only registers a custom operator's fake or autograd formula."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    func = stmt.value.func
    if not (isinstance(func, ast.Attribute) and func.attr in REGISTRATION_CALLS):
        return False
    return isinstance(func.value, ast.Name)


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


def _module_why(name: str) -> str | None:
    """None when the module named ``name`` may be imported or reached, else why not."""
    if name in ALLOWED_MODULES:
        return None
    top = name.split(".")[0]
    shown = name if any(m.split(".")[0] == top for m in ALLOWED_MODULES) else top
    reason = "it is private" if any(p.startswith("_") for p in name.split(".")) else next(
        (why for m, why in _MODULE_WHY.items() if name == m or name.startswith(m + ".")), "")
    return (f"the `{shown}` module is not available to a solution{f' ({reason})' if reason else ''}"
            f": a solution may use only {_MODULES_LISTED} (the problem set's names are already "
            f"defined)")


_MODULES_LISTED = "torch ({}), {}".format(
    ", ".join(sorted(m[len("torch."):] for m in ALLOWED_MODULES if m.startswith("torch."))),
    ", ".join(sorted(m for m in ALLOWED_MODULES
                     if not m.startswith("torch") and m not in ("__future__", "collections.abc"))))


@functools.lru_cache(maxsize=None)
def _torch_names() -> frozenset:
    """What a solution may take from ``torch`` itself: its tensor operations, dtypes, layouts
    and memory formats, the names listed in :data:`MODULE_NAMES` and its allowed modules."""
    import torch

    from grader.checks import _torch_internals as ti

    kinds = (torch.dtype, torch.layout, torch.memory_format, torch.qscheme)
    names = set(ti.tensor_operation_names()) | set(MODULE_NAMES["torch"])
    names |= {n for n in dir(torch)
              if not n.startswith("_") and isinstance(getattr(torch, n), kinds)}
    names |= {m.split(".")[1] for m in ALLOWED_MODULES
              if m.count(".") == 1 and m.startswith("torch.")}
    return frozenset(names - FORBIDDEN_ATTRIBUTES)


_NAMES_WHY = {
    "torch": "of torch's own names a solution may use its tensor operations, dtypes and a few "
             "classes and context managers: nothing that loads files, compiles code from text "
             "or changes process-wide settings",
    "torch.library": "of torch.library a solution may use `custom_op` (chapter 8) only: any other "
                     "registration puts code behind an operator's name",
    "torch.compiler": "of torch.compiler a solution may use the escape hatches of chapter 8 "
                      "(disable, allow_in_graph, nonstrict_trace) and is_compiling only",
    "typing": "of typing a solution may use its types and decorators, nothing that reads a type "
              "from a string (get_type_hints, ForwardRef) or makes one (NewType, TypeVar)",
    "dataclasses": "of dataclasses a solution may use the decorator and its helpers, not "
                   "make_dataclass (its field types may be strings, read later as code)",
}


def _name_why(module: str, name: str) -> str | None:
    """None when a solution may take ``name`` from the module named ``module``."""
    allowed = _torch_names() if module == "torch" else MODULE_NAMES.get(module, frozenset())
    if allowed is EVERY_PUBLIC_NAME:
        if not name.startswith("_") and name not in FORBIDDEN_ATTRIBUTES:
            return None
    elif name in allowed:
        return None
    listed = _NAMES_WHY.get(module) or (f"of `{module}` a solution may use "
                                        f"{', '.join(sorted(allowed or ())) or 'nothing'}")
    return f"`{module}.{name}` is not available to a solution ({listed})"


def _walk(module: str, names: Iterable[str]) -> tuple[str | None, object]:
    """Follow ``module.name1.name2...`` through the real modules (``module`` is an allowed one):
    (why not, None) at the first module or name that is not on the lists, else (None, what it
    reaches). Past the first object that is not a module, the other rules apply. A private name
    is left to the rule on private attributes."""
    obj: object = sys.modules.get(module) or importlib.import_module(module)
    for name in names:
        if not isinstance(obj, types.ModuleType) or name.startswith("_"):
            return None, None
        found = inspect.getattr_static(obj, name, None)   # no module __getattr__ runs
        if not isinstance(found, types.ModuleType):
            if (why := _name_why(obj.__name__, name)) is not None:
                return why, None
            found = getattr(obj, name, None)
        if isinstance(found, types.ModuleType) and (why := _module_why(found.__name__)):
            return why, None
        obj = found
    return None, obj


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


@dataclasses.dataclass
class _Aliases:
    """What the names of a solution's cells stand for when they stand for a module or a module's
    name: ``{"F": ("torch.nn.functional", ()), "gelu": ("torch.nn.functional", ("gelu",))}``,
    from the problem set's namespace, the cells' imports and assignments such as
    ``F = torch.nn.functional``."""

    names: dict[str, tuple[str, tuple[str, ...]]]
    statements: set[int]     # ids of the nodes that bind them (imports, alias assignments)

    def modules(self) -> set[str]:
        return {n for n, (_, rest) in self.names.items() if not rest}

    def resolve(self, node: ast.AST) -> tuple[str, tuple[str, ...]] | None:
        """(module, names) for a name or attribute chain rooted at an alias, else None."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.names:
            return None
        module, rest = self.names[node.id]
        return module, (*rest, *reversed(parts))

    def dotted(self, node: ast.AST) -> str | None:
        found = self.resolve(node)
        return ".".join((found[0], *found[1])) if found else None


def _aliases(trees: list[ast.AST], names: Iterable[str] | None) -> _Aliases:
    namespace = set(names or ()) | set(ALWAYS_IN_NAMESPACE)
    aliases = _Aliases({n: (m, ()) for n, m in NAMESPACE_MODULES.items() if n in namespace}, set())
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _module_why(alias.name) is None:
                        bound = alias.asname or alias.name.split(".")[0]
                        aliases.names[bound] = (alias.name if alias.asname else bound, ())
                        aliases.statements.add(id(node))
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                    and _module_why(node.module) is None:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    aliases.names[alias.asname or alias.name] = \
                        (full, ()) if full in ALLOWED_MODULES else (node.module, (alias.name,))
                    aliases.statements.add(id(node))
    for _ in range(2):   # an alias of an alias
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                        and isinstance(node.targets[0], ast.Name) \
                        and (found := aliases.resolve(node.value)) is not None:
                    why, reached = _walk(*found)
                    if why is None and isinstance(reached, types.ModuleType):
                        aliases.names[node.targets[0].id] = (reached.__name__, ())
                        aliases.statements.update({id(node), id(node.value), id(node.targets[0])})
    return aliases


class _Screen(ast.NodeVisitor):
    def __init__(self, cell: Cell, lines: list[str], allowed_config: frozenset,
                 known: frozenset | None = None, aliases: _Aliases | None = None):
        self.cell, self.lines, self.allowed_config = cell, lines, allowed_config
        self.known = known   # names a free name may be (None: not checked)
        self.aliases = aliases or _aliases([], None)
        self.refusals: list[Refusal] = []
        self._seen: set[tuple[int, str]] = set()
        self._inner: set[int] = set()     # attribute nodes inside a chain already followed
        self._roots: set[int] = set()     # names at the root of such a chain
        self._called: set[int] = set()    # `.compile` attributes that are called
        self._literals: set[int] = set()  # strings inside `Literal[...]`: values, not types

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
            if where == "at the top of a solution cell" and _is_registration(stmt):
                # A custom operator's registration (ps8): `op.register_autograd(backward,
                # setup_context=...)` has no decorator form. Its arguments are names, screened.
                for arg in [*stmt.value.args, *(k.value for k in stmt.value.keywords)]:
                    self.screen_load_time_calls(arg)
                self.visit(stmt.value)
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
                self.visit(decorator)
            else:
                self.visit(target)
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
        ``custom_op`` reading a signature): screened as code; a string in it is refused, since
        such an API would evaluate it as code."""
        self.screen_load_time_calls(annotation)
        self.screen_string_types(annotation)
        self.visit(annotation)

    def screen_string_types(self, node: ast.AST) -> None:
        """Refuse a string used as a type in ``node`` (strings in ``Literal[...]`` are values)."""
        self.mark_literals(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) \
                    and id(sub) not in self._literals:
                self.refuse(sub, "a type is written as an expression (`x: torch.Tensor`), never "
                                 "as a string: an API that reads the type (typing.get_type_hints, "
                                 "torch.library.custom_op) evaluates the string as code")

    def mark_literals(self, node: ast.AST) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Subscript) and (
                    self.aliases.dotted(sub.value) == "typing.Literal"
                    or _dotted(sub.value) in ("Literal", "typing.Literal")):
                self._literals.update(id(c) for c in ast.walk(sub.slice))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        dotted = self.aliases.dotted(node.value)
        generic = (dotted is not None and dotted.startswith("typing.")
                   and dotted != "typing.Literal") or (
            isinstance(node.value, ast.Name) and node.value.id in _GENERIC_BUILTINS)
        if generic:
            self.screen_string_types(node.slice)
        self.generic_visit(node)

    # -- calls that run code given to them ----------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        dotted = self.aliases.dotted(node.func)
        if dotted == "torch.compile" or (isinstance(node.func, ast.Attribute)
                                         and node.func.attr == "compile"):
            self._called.add(id(node.func))
            self.screen_compile(node)
        elif dotted in ("typing.NamedTuple", "typing.TypedDict"):
            self.refuse(node, f"the call form of `{dotted}` takes its field types as values, "
                              f"strings included, read later as code: use the class form "
                              f"(`class P({dotted.split('.')[1]}): x: torch.Tensor`)")
        elif dotted == "torch.library.custom_op" and not (
                node.args and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)):
            self.refuse(node, "a custom operator is named by a string written in the cell "
                              "(`\"course::my_op\"`)")
        self.generic_visit(node)

    def screen_compile(self, node: ast.Call) -> None:
        """``torch.compile(model, fullgraph=..., dynamic=..., mode=..., backend="inductor")``:
        options as constants, and a backend of Dynamo's own, named; never a function (a backend
        is handed the graph and runs as the compiler), no ``options`` (Inductor settings include
        the commands it runs)."""
        if len(node.args) > 1 or any(k.arg is None for k in node.keywords):
            self.refuse(node, "torch.compile's options are passed by name, one by one")
        for keyword in node.keywords:
            if keyword.arg is None:
                continue
            value = keyword.value
            constant = isinstance(value, ast.Constant)
            if keyword.arg not in _COMPILE_KEYWORDS:
                self.refuse(keyword, f"torch.compile's `{keyword.arg}=` is not available to a "
                                     f"solution (allowed: {', '.join(sorted(_COMPILE_KEYWORDS))})")
            elif keyword.arg == "backend" and not (constant and value.value in ALLOWED_BACKENDS):
                self.refuse(keyword, f"a backend is named by a string, one of "
                                     f"{', '.join(map(repr, ALLOWED_BACKENDS))}: a function as a "
                                     f"backend runs as the compiler, on every graph")
            elif keyword.arg != "backend" and not constant:
                self.refuse(keyword, f"torch.compile's `{keyword.arg}=` is a constant written in "
                                     f"the cell (True, False, None or a mode's name)")

    def visit_AsyncFunctionDef(self, node) -> None:
        self.refuse(node, "`async` code is not available to a solution")

    visit_Await = visit_AsyncFor = visit_AsyncWith = visit_AsyncFunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.screen_class(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if (why := _module_why(alias.name)) is not None:
                self.refuse(node, why)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.refuse(node, "relative imports are not available to a solution")
            return
        if (why := _module_why(module)) is not None:
            self.refuse(node, why)
            return
        for alias in node.names:
            if alias.name == "*":
                self.refuse(node, "`import *` is not available to a solution: import names one "
                                  "by one")
            elif alias.name.startswith("_") or alias.name in FORBIDDEN_ATTRIBUTES:
                self.refuse(node, f"`{alias.name}` is not available to a solution")
            elif (why := _walk(module, [alias.name])[0]) is not None:
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
        elif node.id in self.aliases.modules() and id(node) not in self.aliases.statements:
            if isinstance(node.ctx, ast.Load) and id(node) not in self._roots:
                self.refuse(node, _MODULE_AS_VALUE.format(node.id))
            elif not isinstance(node.ctx, ast.Load):
                self.refuse(node, _MODULE_REBOUND.format(node.id))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = _dotted(node)
        if name is not None and (name in ALLOWED_PRIVATE or name in self.allowed_config):
            return  # an allowed private chain: its inner parts are private on purpose
        if name in _PRIVATE_HINTS:
            self.refuse(node, _PRIVATE_HINTS[name])
            return
        if id(node) not in self._inner:
            self.screen_chain(node)
        attr = node.attr
        if attr == "format" and not (isinstance(node.value, ast.Constant)
                                     and isinstance(node.value.value, str)):
            self.refuse(node, "a format string is a literal written in the cell "
                              "(`\"{} rows\".format(n)`, or an f-string): one built at run time "
                              "could read any attribute")
        if attr == "compile" and id(node) not in self._called:
            self.refuse(node, "`compile` is called directly (`torch.compile(model, ...)`), not "
                              "passed around: its backend and options are checked at the call")
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

    def screen_rebinding(self, tree: ast.AST) -> None:
        """A definition, parameter or ``except`` name that rebinds a module's name (a plain
        assignment is found where its name is visited)."""
        modules = self.aliases.modules()
        for node in ast.walk(tree):
            bound = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                   ast.ClassDef, ast.ExceptHandler)) \
                else node.arg if isinstance(node, ast.arg) else None
            if bound in modules:
                self.refuse(node, _MODULE_REBOUND.format(bound))

    def screen_chain(self, node: ast.Attribute) -> None:
        """A chain rooted at a module (``torch.utils.benchmark.Timer``, ``F.torch.utils``):
        every module it reaches and every name it takes from one must be on the lists, and a
        chain that ends at a module is not used as a value."""
        chain, root = [], node
        while isinstance(root, ast.Attribute):
            chain.append(root)
            root = root.value
        found = self.aliases.resolve(node)
        if found is None:
            return
        self._inner.update(id(c) for c in chain[1:])
        self._roots.add(id(root))
        why, reached = _walk(*found)
        if why is not None:
            self.refuse(node, why)
        elif isinstance(reached, types.ModuleType) and id(node) not in self.aliases.statements:
            self.refuse(node, _MODULE_AS_VALUE.format(_dotted(node)))

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


def screen_cells(cells: Iterable[Cell], allowed_config: Iterable[str] = (),
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
        names = list(names)
        known = frozenset(names) | ALLOWED_BUILTINS
        for _, _, tree in trees:
            known |= defined_names(tree)
    aliases = _aliases([tree for _, _, tree in trees], names)
    for cell, source, tree in trees:
        screen = _Screen(cell, source.splitlines(), allowed, known, aliases)
        screen.screen_rebinding(tree)
        screen.screen_body(tree.body, "at the top of a solution cell")
        refusals.extend(screen.refusals)
    return refusals
