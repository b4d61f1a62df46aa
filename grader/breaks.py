"""The graph-break checks under the name notebooks import (``from grader.breaks import
graph_break_report``). The code is :mod:`grader.checks.breaks`; this module only re-exports
its public names."""
from grader.checks.breaks import (OTHER, FullgraphResult, GraphBreak, GraphBreakReport,
                                  fullgraph_check, graph_break_report)

__all__ = ["FullgraphResult", "GraphBreak", "GraphBreakReport", "OTHER", "fullgraph_check",
           "graph_break_report"]
