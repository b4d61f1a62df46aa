"""Checks that run in the process that calls them: graph breaks and fullgraph (``breaks``),
recompiles, fusion (kernel counts), correctness, timing and speed targets, and ``results`` (the
vocabulary of statuses and checks). ``_torch_internals`` is the only module of the package that
touches ``torch._dynamo`` / ``torch._inductor``. Imports no other role but ``grader.common``.
"""
