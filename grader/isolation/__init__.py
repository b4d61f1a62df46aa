"""Grading learner code without trusting it: the notebook API (``check``: ``check``,
``evaluate``, ``run_test``), ``judge`` (the process that decides every point and never runs
learner code), ``subject`` (the sandboxed process that runs it and decides nothing), ``channel``
(their messages: JSON and raw tensor bytes), ``sandbox`` (bubblewrap, limits: the one way to start
a limited process), ``static_check`` (screens learner code before it runs: defence in depth) and
``source`` (learner cells). Imports checks and problems only.
"""
