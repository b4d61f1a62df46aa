"""`grader.timing` is `grader.checks.timing` (the name notebooks import); see grader/checks/."""
import sys

from grader.checks import timing as _module

sys.modules[__name__] = _module
