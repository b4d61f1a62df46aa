"""Checking a solution under the name notebooks import (``from grader.check import check,
evaluate, run_test, skip_while_grading``). The code is :mod:`grader.isolation.check`; this
module only re-exports what notebooks call."""
from grader.isolation.check import (CheckFailed, Evaluation, check, evaluate, run_test,
                                    skip_while_grading)

__all__ = ["CheckFailed", "Evaluation", "check", "evaluate", "run_test", "skip_while_grading"]
