"""`grader.recompiles` is `grader.checks.recompiles` (the name notebooks import); see grader/checks/."""
import sys

from grader.checks import recompiles as _module

sys.modules[__name__] = _module
