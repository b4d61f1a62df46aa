"""Graph-break reports and the ``fullgraph=True`` check, in the learner's own words and lines.

>>> report = graph_break_report(model, example_input)
>>> print(report)            # "2 graphs, 1 graph break ... cell 7, line 3: `.item()` ..."
>>> fullgraph_check(model, example_input).ok
"""
from __future__ import annotations

import dataclasses
import linecache
import os
import re
from typing import Callable

import torch

from grader._paths import PACKAGE_DIR

from grader.checks import _torch_internals as ti

# (cause, plain words, fix) — matched against Dynamo's reason text and the learner's source line.
# Order matters: the first match wins, and specific causes come before general ones.
CAUSES: list[tuple[str, str, str, re.Pattern, re.Pattern | None]] = [
    (
        "scalar_read",
        "`.item()` reads a tensor value into Python, a host sync that ends the graph",
        "keep it a tensor (e.g. `x.max()` instead of `x.max().item()`), or use `torch.where(...)` "
        "where the number steered a choice",
        re.compile(r"item\(\)|Tensor\.item\b|capture_scalar_outputs|_local_scalar_dense", re.I),
        re.compile(r"\.item\(\)"),
    ),
    (
        "host_conversion",
        "`.tolist()` / `.numpy()` / `float(t)` / `int(t)` converts a tensor to Python or NumPy values",
        "stay in torch: use tensor ops instead of Python numbers or NumPy arrays",
        re.compile(r"tolist|numpy\(\)|__float__|__int__|__bool__", re.I),
        re.compile(r"\.tolist\(\)|\.numpy\(\)|\b(float|int|bool)\("),
    ),
    (
        "print",
        "`print` (or logging) inside `forward` is a Python side effect Dynamo cannot put in a graph",
        "move the `print`/logging out of `forward` (log the returned tensors after the call)",
        re.compile(r"`print`|builtin operator `print`|\bprint\b|logging|logger", re.I),
        re.compile(r"\bprint\(|\blog(ger|ging)?\.\w+\("),
    ),
    (
        "data_dependent_branch",
        "a Python `if`/`while` on a tensor's value: which branch runs depends on data Dynamo "
        "cannot see while tracing",
        "compute both branches and select with `torch.where(cond, a, b)`, or use "
        "`torch.cond(pred, true_fn, false_fn, operands)`",
        re.compile(r"generic_jump|data.?dependent (branch|jump|control)|jump.*tensor|"
                   r"Data-dependent branching", re.I),
        re.compile(r"^\s*(if|elif|while)\b|\bif\b.*\belse\b"),
    ),
    (
        "dynamic_shape_op",
        "an op whose output shape depends on the data (e.g. `nonzero`, boolean masking, `unique`)",
        "keep shapes static: instead of `x[mask]`, keep every element and let the mask choose "
        "(`torch.where(mask, x, 0)`); a reduction then sees the zeros too, so count only the "
        "selected ones (a mean is `torch.where(mask, x, 0).sum() / mask.sum()`, not `.mean()`)",
        re.compile(r"dynamic.?shape|data.?dependent.*(output|shape)|nonzero|unbacked", re.I),
        re.compile(r"nonzero|unique\(|\[\s*\w+\s*[<>=!]"),
    ),
    (
        "disabled_or_skipped",
        "a function marked `torch._dynamo.disable` / `torch.compiler.disable`, or one Dynamo skips",
        "remove the `disable` decorator, or keep that call outside the compiled `forward`",
        re.compile(r"disable|skip(ped|files)?\b|force_skip", re.I),
        re.compile(r"disable"),
    ),
    (
        "unsupported_call",
        "a call Dynamo cannot trace (a C extension, an unsupported builtin or library function)",
        "replace it with a torch operation, or wrap it with `torch.library.custom_op`",
        re.compile(r"unsupported|not supported|does not know how|cannot trace|Failed to trace", re.I),
        None,
    ),
]
OTHER = ("other", "a construct Dynamo could not put in the graph", "see Dynamo's message below")


@dataclasses.dataclass
class Location:
    """Where in the learner's code something happened."""

    filename: str
    lineno: int
    line: str
    label: str  # e.g. "cell 7, line 3" or "model.py, line 12"

    def __str__(self) -> str:
        return self.label


@dataclasses.dataclass
class GraphBreak:
    """One graph break: its cause in plain words, the learner's line, and a one-line fix."""

    cause: str
    explanation: str
    fix: str
    reason: str
    location: Location | None

    def __str__(self) -> str:
        where = f"{self.location}: `{self.location.line}`" if self.location else "(no user frame)"
        return f"{where}\n    cause: {self.explanation}\n    fix: {self.fix}"


@dataclasses.dataclass
class GraphBreakReport:
    """How Dynamo split a function: number of graphs and each break, explained."""

    graph_count: int
    breaks: list[GraphBreak]
    op_count: int = 0

    @property
    def break_count(self) -> int:
        return len(self.breaks)

    @property
    def ok(self) -> bool:
        return not self.breaks

    @property
    def causes(self) -> list[str]:
        return [b.cause for b in self.breaks]

    def __str__(self) -> str:
        head = (f"{self.graph_count} graph{'s' * (self.graph_count != 1)}, "
                f"{self.break_count} graph break{'s' * (self.break_count != 1)}")
        if self.ok and self.graph_count == 0:
            return head + (": Dynamo captured no tensor operations (the function does none, or "
                           "Dynamo skipped it), so there is no graph to break.")
        if self.ok:
            return head + ": the whole function compiles as one graph."
        return head + "\n" + "\n".join(f"- {b}" for b in self.breaks)

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731  (IPython display)


# ---------------------------------------------------------------------------------------------
# Locations: learner frames, notebook cells

_TORCH_DIR = os.path.dirname(torch.__file__)
_GRADER_DIR = PACKAGE_DIR
# The problem sets' given models live here: a break in a method the learner inherited is reported
# at the given model's line (e.g. "ps1/__init__.py, line 38"), which is where the learner starts.
_PROBLEMS_DIR = os.path.join(_GRADER_DIR, "problems")
_CELL_FILE = re.compile(r"<cell (?P<n>[\w.\-]+)>$")  # how grader.isolation.isolate names learner cells


def _is_user_frame(filename: str) -> bool:
    if filename.startswith(_PROBLEMS_DIR + os.sep):
        return True
    return not (filename.startswith(_TORCH_DIR) or filename.startswith(_GRADER_DIR)
                or "site-packages" in filename or filename.startswith("<frozen"))


def _ipython_cell_number(filename: str) -> str | None:
    """The execution count of the IPython cell whose code lives in ``filename``, if any."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    ip = get_ipython()
    if ip is None:
        return None
    try:  # ipykernel names cell files after a hash; its compiler keeps the mapping.
        text = "".join(linecache.getlines(filename))
        history = ip.user_ns.get("In") or []
        for number in range(len(history) - 1, 0, -1):
            if history[number].strip() == text.strip():
                return str(number)
    except Exception:
        return None
    return None


def describe_location(filename: str, lineno: int) -> Location:
    """A learner-facing label for ``filename:lineno`` ("cell 7, line 3" inside notebooks)."""
    line = linecache.getline(filename, lineno).strip()
    m = _CELL_FILE.search(filename)
    if m:
        label = f"cell {m.group('n')}, line {lineno}"
    elif (number := _ipython_cell_number(filename)) is not None:
        label = f"cell [{number}], line {lineno}"
    elif filename.startswith(_PROBLEMS_DIR + os.sep):
        # A set is a folder whose __init__.py holds its given models: the folder names the set.
        label = f"{os.path.relpath(filename, _PROBLEMS_DIR)}, line {lineno}"
    else:
        label = f"{os.path.basename(filename)}, line {lineno}"
    return Location(filename, lineno, line, label)


def classify(reason: str, line: str = "") -> tuple[str, str, str]:
    """(cause, explanation, fix) for a Dynamo break reason and the learner's source line."""
    for cause, explanation, fix, reason_re, line_re in CAUSES:
        if reason_re.search(reason):
            return cause, explanation, fix
    for cause, explanation, fix, _, line_re in CAUSES:  # Dynamo's wording changed: try the line
        if line_re is not None and line and line_re.search(line):
            return cause, explanation, fix
    return OTHER


def _headline(reason: str) -> str:
    """Dynamo's own summary of a break: the message without its hints and debug context."""
    text = re.sub(r"^Encountered graph break when attempting to trace.*?:\s*\n\s*\n", "", reason.strip(),
                  flags=re.S)
    return re.split(r"\n\s*(Hint:|Developer debug context:| For more details)", text)[0].strip()


def _graph_break(filename: str, lineno: int, reason: str) -> GraphBreak:
    loc = describe_location(filename, lineno) if _is_user_frame(filename) else None
    headline = _headline(reason)
    cause, explanation, fix = classify(headline, loc.line if loc else "")
    return GraphBreak(cause, explanation, fix, headline, loc)


# ---------------------------------------------------------------------------------------------
# Public API

def graph_break_report(fn: Callable, *example_inputs, **example_kwargs) -> GraphBreakReport:
    """Trace ``fn(*example_inputs)`` with Dynamo and explain every graph break.

    Runs ``fn`` once (its side effects, such as a ``print``, happen). Unlike
    ``torch._dynamo.explain`` it does not reset Dynamo, so other compiled functions in the
    process keep their caches. It compiles a fresh copy of ``fn`` (new code objects, see
    :func:`grader.checks._torch_internals.fresh_copy`): an earlier compile of ``fn`` (the learner's, or
    an earlier report's) is neither reused nor counted against ``fn``'s recompile limit, so the
    report is the same however often it runs.
    """
    backend = ti.explain_backend()
    with ti.quiet_torch_logs(), ti.own_automatic_dynamic_state(), \
            ti.capture_graph_breaks() as records:
        ti.compile_fresh(fn, backend=backend)(*example_inputs, **example_kwargs)
        out = backend.output()
    # One entry per distinct learner line and cause: Dynamo may log a break again when it
    # resumes or retries a frame.
    seen, breaks = set(), []
    for filename, lineno, reason in records:
        b = _graph_break(filename, lineno, reason)
        key = (b.cause, filename, lineno)
        if key not in seen:
            seen.add(key)
            breaks.append(b)
    return GraphBreakReport(graph_count=out.graph_count, breaks=breaks, op_count=out.op_count)


@dataclasses.dataclass
class FullgraphResult:
    """Did ``torch.compile(fn, fullgraph=True)`` succeed; if not, why, in the learner's words."""

    ok: bool
    error: str = ""
    report: GraphBreakReport | None = None

    def __str__(self) -> str:
        if self.ok:
            return "compiles with fullgraph=True: one graph, no breaks."
        text = "does not compile with fullgraph=True"
        if self.report is not None and self.report.breaks:
            return f"{text}:\n{self.report}"
        return f"{text}: {self.error.splitlines()[0] if self.error else 'unknown error'}"

    _repr_pretty_ = lambda self, p, cycle: p.text(str(self))  # noqa: E731


def fullgraph_check(fn: Callable, *example_inputs, backend: str = "eager",
                    **example_kwargs) -> FullgraphResult:
    """Does ``fn`` compile as one graph, with no graph break? Calls ``fn`` once or twice.

    First the graph-break report (a plain ``torch.compile``): any break, or more than one graph,
    fails the check and the result carries the report. Then, if the report is clean,
    ``torch.compile(fn, fullgraph=True)`` must also succeed. The report comes first because, from
    torch 2.10 on, ``fullgraph=True`` is more permissive than the compile the learner will run: it
    turns on ``capture_scalar_outputs`` and ``capture_dynamic_output_shape_ops``, so ``.item()``
    and ``x[x > 0]`` compile there as one graph while a plain ``torch.compile`` breaks on them
    (torch 2.8 and 2.9 raise on both under ``fullgraph=True``; docs/versions.md).

    Both compiles use a fresh copy of ``fn`` (an earlier compile of ``fn`` is never reused).
    ``backend="eager"`` (Dynamo only) is enough: whether a function is one graph is decided by
    Dynamo, before any code generation.
    """
    try:
        report = graph_break_report(fn, *example_inputs, **example_kwargs)
    except Exception as exc:  # the function itself raised: report that
        return FullgraphResult(ok=False, error=f"{type(exc).__name__}: {exc}")
    if report.breaks or report.graph_count > 1:
        if report.breaks:
            first = report.breaks[0]
            where = f" at {first.location}" if first.location else ""
            headline = first.reason.splitlines()[0] if first.reason else first.cause
            error = f"graph break{where}: {headline}"
        else:
            error = f"Dynamo splits the function into {report.graph_count} graphs"
        return FullgraphResult(ok=False, error=error, report=report)
    try:
        with ti.quiet_torch_logs(), ti.own_automatic_dynamic_state():
            ti.compile_fresh(fn, fullgraph=True, backend=backend)(*example_inputs, **example_kwargs)
    except Exception as exc:  # Dynamo raises Unsupported / UserError subclasses
        return FullgraphResult(ok=False, error=f"{type(exc).__name__}: {exc}", report=report)
    return FullgraphResult(ok=True)
