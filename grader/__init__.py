"""grader: checks for a torch.compile course — graph breaks, fullgraph, recompiles, fusion,
correctness and honest speedups — usable in any notebook, with or without nbgrader.

In-process checks (for chapters and exploring)::

    from grader import graph_break_report, fullgraph_check, recompile_check, fusion_report
    from grader import check_outputs, compare, judge_speed, SpeedTarget

Checking a solution to a problem set in a fresh process (what a problem set's self-check cell
runs; ``FixedModel`` is the learner's class)::

    from grader.problems.ps1 import *
    from grader.isolation.check import check
    check("ps1.q1", FixedModel)

The package is split by role (docs/design.md): ``checks/`` (in-process checks), ``problems/``,
``isolation/`` (one problem in a fresh sandboxed process), ``cohort/`` (grading around nbgrader),
``course/`` (chapter helpers), ``tools/`` (benchmarks) and ``cli``; imports point one way,
checks <- problems <- isolation <- cohort, and course -> checks. Notebooks import each module by
its path in its role (``grader.isolation.check``, ``grader.checks.breaks``,
``grader.course.chapters``, ...); the top of the package holds no alias of one.

The names below are imported on first use, so that ``import grader.isolation.sandbox.process``
(which the sandbox probe runs) does not import torch.
"""
import importlib

_EXPORTS = {
    "breaks": ["FullgraphResult", "GraphBreakReport", "fullgraph_check", "graph_break_report"],
    "correctness": ["CorrectnessReport", "check_outputs", "compare_output"],
    "fusion": ["FusionReport", "fusion_report"],
    "recompiles": ["RecompileReport", "recompile_check"],
    "targets": ["SpeedTarget", "SpeedVerdict", "default_device", "device_class", "judge_speed"],
    "timing": ["Comparison", "Estimate", "compare", "time_first_call", "time_per_call"],
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".checks.{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'grader' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
