"""`grader.chapters` is `grader.course.chapters` (``from grader import chapters as ch``, the name
every chapter notebook imports); see grader/course/.

The one name at the top of ``grader/`` that stays the module itself (``sys.modules`` swap)
rather than a re-export with ``__all__``: the chapters reach all of its ~70 names through
``ch.`` (sizes, records, roofline, shapes, training and debugging helpers, in the small modules of
the ``grader.course.chapters`` package, which re-exports them), and so do the tests, so a list here
would be a second copy of the package's contents to keep in step.
"""
import sys

from grader.course import chapters as _module

sys.modules[__name__] = _module
