"""`grader.colab` is `grader.course.colab` (the name notebooks import); see grader/course/."""
import sys

from grader.course import colab as _module

sys.modules[__name__] = _module
