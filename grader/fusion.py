"""The fusion report under the name notebooks import (``from grader.fusion import
fusion_report``). The code is :mod:`grader.checks.fusion`; this module only re-exports its
public names."""
from grader.checks.fusion import FusionReport, fusion_report, kernel_sources, library_calls

__all__ = ["FusionReport", "fusion_report", "kernel_sources", "library_calls"]
