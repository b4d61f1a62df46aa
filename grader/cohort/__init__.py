"""Grading a cohort around nbgrader: ``grade`` (the run and its steps behind ``make grade``),
``collect`` (what was submitted), ``attempt`` (one submission graded in its own copy, on local
workers), ``distributed`` (the same on Ray), ``merge`` (the single writer of the gradebook),
``scoring`` (a submission's points, judged, then scored per test cell), ``kernel`` (the sandboxed notebook kernel),
``apply_scores`` and ``robust_execute`` (nbgrader preprocessors), ``assign`` (nbgrader's command
line, releases), ``feedback``, ``demo``, ``report``, ``export`` (CSV, Canvas), ``gradescope``,
and ``files`` (every file name they read or write).
Imports isolation, problems and checks.
"""
