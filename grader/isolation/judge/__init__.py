"""The judge: the process that decides every point and never runs learner code (docs/trust.md).

- ``steps``: the judge itself, the list of the steps of one job
  (``python -m grader.isolation.judge.steps --serve``, ``--once``);
- ``subject_session``: the subject (:mod:`grader.isolation.sandbox.subject`) as the judge sees
  it: requests with deadlines, replies as data;
- ``evidence`` (a package): what the judge asks the subject for, one part per kind, and its
  validation; ``deciding``: the wanted checks decided by their declarations;
- ``judge_child``: where and under what limits the judge's checks of one graph run;
  ``graph_child`` (a forked child, the zygote) and ``spawned_child`` (on a GPU) are those children;
- ``reference_side``: the baseline and the instructor's reference the judge keeps;
  ``reference_cells``: the reference solution in ``source/``, where it is at hand;
- the judge as its driver sees it: ``judging`` (a job made and run: ``job_for``, ``run_job``),
  ``judge_process`` (a process to send jobs to, restarted when it dies), ``judge_job`` (what
  crosses its pipe: ``JudgeJob``, ``JudgeReply``).

Imports :mod:`grader.isolation.cells` and :mod:`grader.isolation.sandbox`; never the notebook API.
"""
