"""The process that runs learner code, and everything that confines and measures it:

- ``subject``: the sandboxed process itself (``python -m grader.isolation.sandbox.subject``): runs
  the learner's cells, answers the judge's requests, holds nothing of value;
- ``channel``: the messages between the judge and the subject (JSON and raw tensor bytes);
- ``process``: the one way to start a limited, confined process (bubblewrap, else kernel
  confinement, each probed for real: ``probe``, ``start``, ``Isolation``, ``Limits``);
- ``launcher``: the first process of every subject (a child subreaper): confines it, then finds,
  kills and counts what it leaves running; ``supervise``: its decision on calls that name
  another process;
- ``confine``: the kernel's layers as system calls (Landlock, seccomp, no_new_privs, a user id);
- ``cgroups``: a cgroup of its own where the machine allows one; ``usage``: its disk and processes
  measured where nothing else bounds them; ``learner_python``: a Python another user id can run.

Imports only :mod:`grader.isolation.cells` of the other rooms: nothing here knows the judge.
"""
