"""The timing helpers under the name notebooks import (``from grader.timing import
time_first_call``). The code is :mod:`grader.checks.timing`; this module only re-exports its
public names."""
from grader.checks.timing import Comparison, Estimate, compare, time_first_call, time_per_call

__all__ = ["Comparison", "Estimate", "compare", "time_first_call", "time_per_call"]
