"""Helpers for the chapter notebooks (``notebooks/``): size switch, progress, plots, records.

The chapters import this module (``from grader.course import chapters as ch``) instead of copying
code into cells. Nothing here grades anything; measuring goes through :mod:`grader.checks.timing`, kernel
counts through :mod:`grader.checks.fusion`, and private torch APIs through :mod:`grader.checks._torch_internals`.

Size switch
    ``COURSE_SIZE`` = ``full`` (default on CUDA), ``small`` (default on CPU) or ``ci`` (tiny
    shapes, for the test suite). :func:`pick` chooses a value per size.

Records
    :func:`record` appends a measured figure, with the seed chapter's claim beside it, to the JSON
    file named by ``COURSE_RECORD`` (``make gpu-check`` and the tests set it); without that
    variable it only prints it. :func:`claims_table` renders rows as a markdown table.

The helpers live in small modules by subject, and every public name of each is re-exported here,
so ``ch.NAME`` works for all of them:

- :mod:`~grader.course.chapters.core`: the size switch, device, progress, quiet logs, caches,
  generated code, seconds per call;
- :mod:`~grader.course.chapters.roofline`: bandwidth, compute, FLOPs, the roofline, break-even
  (and ps3's job figures, :func:`measure_modes`, measured as ps3's judge measures them);
- :mod:`~grader.course.chapters.records`: :func:`record`, :func:`claims_table`;
- :mod:`~grader.course.chapters.dynamic`: compile counts (the recompile check's
  :class:`~grader.checks.recompiles.CompileCounter`), marking dynamic, padding, shape sweeps
  (chapter 6);
- :mod:`~grader.course.chapters.training`: AOT graphs, saved tensors, peak memory (chapter 7);
- :mod:`~grader.course.chapters.compile_time`: fresh processes, caches, tlparse (chapter 8);
- :mod:`~grader.course.chapters.debugging`: backend bisection, the compiler bisector, the
  minifier, logs, compiled autograd (chapter 9);
- :mod:`~grader.course.chapters.distributed`: DDP, FSDP2 and random numbers in two processes,
  activation checkpointing, generated code (chapter 10).
- :mod:`~grader.course.chapters.extend`: custom-operator checks, FlexAttention masks and where
  FlexAttention compiles, Triton's availability, AOTInductor packages loaded in a fresh process
  (chapter 11).
"""
from grader.course.chapters.core import *  # noqa: F401,F403
from grader.course.chapters.roofline import *  # noqa: F401,F403
from grader.course.chapters.records import *  # noqa: F401,F403
from grader.course.chapters.dynamic import *  # noqa: F401,F403
from grader.course.chapters.training import *  # noqa: F401,F403
from grader.course.chapters.compile_time import *  # noqa: F401,F403
from grader.course.chapters.debugging import *  # noqa: F401,F403
from grader.course.chapters.distributed import *  # noqa: F401,F403
from grader.course.chapters.extend import *  # noqa: F401,F403
