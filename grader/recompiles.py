"""The recompile check under the name notebooks import (``from grader.recompiles import
recompile_check``). The code is :mod:`grader.checks.recompiles`; this module only re-exports
its public names."""
from grader.checks.recompiles import RecompileReport, explain_guard_failure, recompile_check

__all__ = ["RecompileReport", "explain_guard_failure", "recompile_check"]
