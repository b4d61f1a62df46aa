"""The evidence the judge gathers about one problem, one part per kind
(:class:`grader.checks.results.Need`): each part is the request to the subject, the judge's validation of the answer, and the fields of
:class:`grader.isolation.judge.evidence.record.Evidence` it fills.

- :mod:`~grader.isolation.judge.evidence.outputs` (``Need.OUTPUTS``): the learner's outputs on
  inputs the judge drew, compared with the original's while the subject runs (``correctness``);
- :mod:`~grader.isolation.judge.evidence.custom_op` (``Need.CUSTOM_OP``): the learner's custom
  operator, as graphs, rebuilt around the problem's kernel (``custom_op``, ``operators``);
- :mod:`~grader.isolation.judge.evidence.graph` (``Need.GRAPH``): the graph of the traced call, and
  of each class of inputs whose shapes differ, shipped as data; validated by the judge after the
  subject is gone (:func:`~grader.isolation.judge.evidence.graph.validate`, a
  :class:`~grader.isolation.judge.evidence.graph.GraphVerdict`: ``case.graph``);
- :mod:`~grader.isolation.judge.evidence.compile_count` (``Need.COMPILE_COUNT``): the problem's
  calls as used, how often a fresh model compiled (``recompiles``);
- :mod:`~grader.isolation.judge.evidence.rule_answers` (``Need.RULE_ANSWERS``): a planning
  question's rule on the sizes the question's check draws (``plan``);
- :mod:`~grader.isolation.judge.evidence.declared`: the kinds declared beside the checks that need
  them (:class:`grader.checks.results.EvidencePart`: its subject side and its validation in one
  object), each asked by its name (``declared``).

:mod:`~grader.isolation.judge.evidence.gather` asks for them in that order, only what the wanted
checks need; :mod:`~grader.isolation.judge.evidence.record` is the record they fill and its form on
the way to a child of the judge's zygote.

New evidence is an :class:`~grader.checks.results.EvidencePart` in the module of the check that
needs it, listed in that check's ``needs``: nothing here changes (docs/design.md, "Adding a kind
of evidence"). A built-in part (its request, its validation, its
:class:`grader.checks.results.Need`, its fields in the record, its line in ``gather`` and the
subject's operation that answers it) is for evidence the judge must verify itself.
"""
