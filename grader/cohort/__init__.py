"""Grading a cohort around nbgrader: ``grade`` (the pipeline of steps behind ``make grade``),
``pipeline`` (a submission's points), ``distributed`` (Ray), ``kernel`` (the sandboxed notebook
kernel), ``apply_scores`` and ``robust_execute`` (nbgrader preprocessors), ``assign`` (nbgrader's
command line, releases), ``demo``, ``report``, ``export`` (CSV, Canvas) and ``gradescope``.
Imports isolation, problems and checks.
"""
