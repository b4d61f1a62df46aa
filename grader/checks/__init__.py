"""Checks that run in the process that calls them: graph breaks and fullgraph (``breaks``),
recompiles, fusion (kernel counts), correctness, timing and speed targets, ``results`` (the
vocabulary of statuses, and the form a check is declared in), and ``declared`` (the checks the
judge decides, one module each, in their order). ``_torch_internals`` is the only module of the package that
touches ``torch._dynamo`` / ``torch._inductor``. Imports no other role but ``grader.common``.
"""
