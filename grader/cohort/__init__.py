"""Grading a cohort around nbgrader: ``grade`` (the run and its steps behind ``make grade``),
``collect`` (what was submitted), ``attempt`` (one submission graded in its own copy, on local
workers), ``distributed`` (the same on Ray), ``merge`` (the single writer of the gradebook),
``scoring`` (a submission's points, judged, then scored per test cell), ``judged_autograde``
(nbgrader's autograde of the submission as submitted, with the judge's verdicts; it runs no
cell), ``assign`` (nbgrader's command line, releases), ``feedback``, ``demo``, ``report``,
``export`` (CSV, Canvas), ``gradescope``,
and ``files`` (every file name they read or write).
Imports isolation, problems and checks.
"""
