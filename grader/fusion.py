"""`grader.fusion` is `grader.checks.fusion` (the name notebooks import); see grader/checks/."""
import sys

from grader.checks import fusion as _module

sys.modules[__name__] = _module
