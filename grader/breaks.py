"""`grader.breaks` is `grader.checks.breaks` (the name notebooks import); see grader/checks/."""
import sys

from grader.checks import breaks as _module

sys.modules[__name__] = _module
