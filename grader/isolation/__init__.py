"""Grading learner code without trusting it: the notebook API (``check``: ``check``,
``evaluate``, ``run_test``), the judge's jobs (``jobs`` builds them, ``judge_job`` types what
crosses the judge's pipe), test-cell scoring (``cell_scores``), the reference finder
(``reference_cells``), ``judge`` (the process that decides every point and never runs
learner code), ``subject`` (the sandboxed process that runs it and decides nothing), ``channel``
(their messages: JSON and raw tensor bytes), ``sandbox`` (bubblewrap, limits: the one way to start
a limited process), ``screen`` (screens learner code before it runs: defence in depth) and
``source`` (learner cells). Imports checks and problems only.
"""
