"""The learner's code as data, before anything runs it: where its cells come from (``source``: a
kernel's cells through ``linecache``, a notebook's solution cells) and the static screen they
pass (``screen``: defence in depth; no point depends on it). Imports no other room of
:mod:`grader.isolation`.
"""
