"""grader: checks for a torch.compile course — graph breaks, fullgraph, recompiles, fusion,
correctness and honest speedups — usable in any notebook, with or without nbgrader.

In-process checks (for chapters and exploring)::

    from grader import graph_break_report, fullgraph_check, recompile_check, fusion_report
    from grader import check_outputs, compare, judge_speed, SpeedTarget

Grading a learner's solution in a fresh process (problem sets, self-check)::

    from grader import check
    check("ps1.q1", FixedModel)
"""
from .breaks import FullgraphResult, GraphBreakReport, fullgraph_check, graph_break_report
from .correctness import CorrectnessReport, check_outputs, compare_output
from .fusion import FusionReport, fusion_report
from .recompiles import RecompileReport, recompile_check
from .targets import SpeedTarget, SpeedVerdict, default_device, device_class, judge_speed
from .timing import Comparison, Estimate, compare, time_first_call, time_per_call

__all__ = [
    "FullgraphResult", "GraphBreakReport", "fullgraph_check", "graph_break_report",
    "CorrectnessReport", "check_outputs", "compare_output",
    "FusionReport", "fusion_report",
    "RecompileReport", "recompile_check",
    "SpeedTarget", "SpeedVerdict", "default_device", "device_class", "judge_speed",
    "Comparison", "Estimate", "compare", "time_first_call", "time_per_call",
]
