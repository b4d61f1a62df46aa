"""The one place that touches private torch APIs (``torch._dynamo``, ``torch._inductor``).

A torch upgrade that moves one of these breaks this module and its test
(``tests/test_torch_internals.py``), not the rest of the grader. Everything here works on
torch 2.6 and newer; where names moved between releases, both spellings are tried.
"""
from __future__ import annotations

import contextlib
import logging
import re
from typing import Any, Callable, Iterator

import torch


def dynamo_reset() -> None:
    """Forget every compiled function's cache in this process (``torch._dynamo.reset``)."""
    torch._dynamo.reset()


def explain(fn: Callable, *args, **kwargs):
    """Run ``torch._dynamo.explain`` on ``fn(*args, **kwargs)``.

    ``explain`` resets Dynamo before and after it runs, which wipes the caches of other compiled
    functions in the process. Callers that must not disturb them run this in a fresh process
    (see :mod:`grader.isolate`); here we only make the reset explicit.
    """
    return torch._dynamo.explain(fn)(*args, **kwargs)


def guard_failures_for(code) -> list[str]:
    """The guard-failure messages Dynamo recorded for a code object (one per recompile)."""
    failures = getattr(torch._dynamo.utils, "guard_failures", {})
    return [str(m) for m in failures.get(code, [])]


def clear_guard_failures() -> None:
    failures = getattr(torch._dynamo.utils, "guard_failures", None)
    if failures is not None:
        failures.clear()


def set_recompile_limit(limit: int) -> contextlib.AbstractContextManager:
    """Temporarily set Dynamo's recompile limit (named ``cache_size_limit`` before 2.7)."""
    cfg = torch._dynamo.config
    name = "recompile_limit" if hasattr(cfg, "recompile_limit") else "cache_size_limit"
    return cfg.patch(**{name: limit})


def recompile_limit() -> int:
    cfg = torch._dynamo.config
    return int(getattr(cfg, "recompile_limit", getattr(cfg, "cache_size_limit", 8)))


def fresh_inductor_cache() -> contextlib.AbstractContextManager:
    """A context with an empty, temporary Inductor/FX-graph cache.

    Kernel counts and cold compile times lie when the FX graph cache already holds the graph.
    """
    from torch._inductor import utils

    maker = getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache
    return maker()


@contextlib.contextmanager
def count_generated_kernels() -> Iterator[dict]:
    """Count the kernels Inductor generates inside the block.

    Yields a dict whose ``"kernels"`` entry is filled in when the block ends.
    """
    from torch._inductor import metrics

    result: dict[str, Any] = {}
    metrics.reset()
    try:
        yield result
    finally:
        result["kernels"] = int(metrics.generated_kernel_count)
        metrics.reset()


def run_and_get_code(fn: Callable, *args) -> tuple[Any, list[str]]:
    """Call a compiled ``fn`` and return its result and the source of the code Inductor wrote."""
    from torch._inductor.utils import run_and_get_code as _run_and_get_code

    return _run_and_get_code(fn, *args)


def inductor_config_patch(**options) -> contextlib.AbstractContextManager:
    """``torch._inductor.config.patch`` (e.g. ``freezing=True``)."""
    import torch._inductor.config as cfg

    return cfg.patch(**options)


def list_mode_options() -> dict:
    """What each ``mode=`` of ``torch.compile`` switches on in Inductor."""
    import torch._inductor

    return dict(torch._inductor.list_mode_options())


def graph_break_counter_total() -> int:
    """Total graph breaks recorded in ``torch._dynamo.utils.counters`` (keyed by message)."""
    return int(sum(torch._dynamo.utils.counters["graph_break"].values()))


def clear_counters() -> None:
    torch._dynamo.utils.counters.clear()


@contextlib.contextmanager
def quiet_torch_logs() -> Iterator[None]:
    """Keep torch's warnings and log lines off stderr inside the block.

    nbgrader scores a test cell zero when anything reaches stderr, and torch warns there about
    graph breaks and missing CUDA runtimes even when nothing is wrong.
    """
    import warnings

    loggers = [logging.getLogger(n) for n in ("torch", "torch._dynamo", "torch._inductor")]
    saved = [(lg, lg.level, lg.propagate, list(lg.handlers)) for lg in loggers]
    try:
        for lg in loggers:
            lg.setLevel(logging.CRITICAL)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level, propagate, handlers in saved:
            lg.setLevel(level)
            lg.propagate = propagate
            lg.handlers[:] = handlers


_GRAPH_BREAK_LOGGER = "torch._dynamo.symbolic_convert.__graph_breaks"
_GRAPH_BREAK_RECORD = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\s*\n"
                                 r"Graph Break Reason: (?P<reason>.*?)(?:\n\s*\nUser code traceback|\Z)",
                                 re.S)


class _BreakCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = _GRAPH_BREAK_RECORD.search(record.getMessage())
        if m:
            self.records.append((m["file"], int(m["line"]), m["reason"].strip()))


@contextlib.contextmanager
def capture_graph_breaks() -> Iterator[list]:
    """Collect ``(filename, lineno, reason)`` for every graph break Dynamo logs in the block.

    Uses the ``graph_breaks`` logging artifact (what ``TORCH_LOGS="graph_breaks"`` prints), which
    sees every break, also those that end an empty graph, which ``explain``'s list misses.
    Nothing is printed.
    """
    logger = logging.getLogger(_GRAPH_BREAK_LOGGER)
    collector = _BreakCollector()
    saved = (logger.level, logger.propagate, logger.disabled)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.disabled = False
    logger.addHandler(collector)
    try:
        yield collector.records
    finally:
        logger.removeHandler(collector)
        logger.setLevel(saved[0])
        logger.propagate, logger.disabled = saved[1], saved[2]


def is_compiling() -> bool:
    fn = getattr(torch.compiler, "is_compiling", None)
    return bool(fn()) if fn else False
