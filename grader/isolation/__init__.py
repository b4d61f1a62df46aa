"""Grading learner code without trusting it, in three rooms and the notebook's face:

- the notebook API, here: ``check`` (``check``, ``evaluate``, ``run_test``,
  ``skip_while_grading``: what test cells and self-check call) and ``cell_scores`` (a test cell's
  points from the judge's verdicts, for the notebook and ``make grade`` alike);
- ``cells`` (:mod:`grader.isolation.cells`): the learner's code as data: its cells, read from a
  kernel or a notebook (``source``), and the static screen they pass before any runs (``screen``:
  defence in depth);
- ``sandbox`` (:mod:`grader.isolation.sandbox`): the process that runs learner code and decides
  nothing (``subject``), the one way to start it confined and limited (``process``: bubblewrap,
  else kernel confinement), and everything that confines and measures it (``launcher``,
  ``confine``, ``supervise``, ``cgroups``, ``usage``, ``learner_python``) with the messages it
  exchanges (``channel``);
- ``judge`` (:mod:`grader.isolation.judge`): the process that decides every point and never runs
  learner code (``steps``), its children, its evidence and decision, the reference side, and the
  judge as its driver sees it (``judging``, ``judge_process``, ``judge_job``).

Imports point one way inside too: cells <- sandbox <- judge <- the notebook API
(tests/test_architecture.py). Imports checks and problems only.
"""
