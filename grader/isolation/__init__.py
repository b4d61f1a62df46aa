"""One problem graded in a fresh, limited, sandboxed process: the notebook API (``check``:
``check``, ``evaluate``, ``run_test``), ``isolate`` (starts the worker), ``worker`` (the process
that runs learner code), ``sandbox`` (bubblewrap, limits, the one way to start a limited process),
``static_check`` (screens learner code before it runs), ``verify`` (trusts nothing the worker
says without checking) and ``source`` (learner cells). Imports checks and problems only.
"""
