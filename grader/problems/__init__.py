"""Problem definitions: what each graded question gives the learner and how it is checked.

A problem set module ``grader/problems/psN.py`` defines ``PROBLEMS = {key: Problem(...)}``. The
student notebook imports the baseline from here (``from grader.problems.ps1 import *``), and the
fresh-process worker (:mod:`grader.worker`) rebuilds it from here, never from the learner's kernel.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable

import torch

from ..targets import SpeedTarget

CHECKS = ("correctness", "fullgraph", "breaks", "recompiles", "fusion", "speed")


@dataclasses.dataclass
class Problem:
    """One graded question.

    - ``entry``: the name the learner defines (a ``nn.Module`` subclass or a function).
    - ``make_baseline(device)``: the original (eager) model or function; the learner's output
      must match it and its speed is the baseline.
    - ``make_inputs(generator, device)``: one tuple of inputs drawn from ``generator``.
    - ``build(entry_object, baseline, device)``: turn what the learner defined into a callable
      (default: instantiate a class, copy the baseline's weights, ``eval()``, move to device).
    - ``baseline_compile``: ``None`` for an eager baseline, or ``torch.compile`` options when the
      baseline is the original *compiled* (e.g. with its graph breaks).
    - ``learner_compile``: ``torch.compile`` options for the learner's (and reference's) version.
    - ``compile_options(entry_object)``: extra options read from what the learner defined (e.g.
      the mode they chose), merged over ``learner_compile``; see :meth:`compile_kwargs`.
    - ``solution_grade_id``: the nbgrader ``grade_id`` of the solution cell in ``source/`` whose
      text is the reference solution.
    """

    key: str
    title: str
    entry: str
    make_baseline: Callable[[str], Any]
    make_inputs: Callable[[torch.Generator, str], tuple]
    solution_grade_id: str
    checks: tuple[str, ...] = ("correctness", "fullgraph", "speed")
    build: Callable[[Any, Any, str], Callable] | None = None
    baseline_compile: dict | None = None
    learner_compile: dict = dataclasses.field(default_factory=dict)
    compile_options: Callable[[Any], dict] | None = None
    target: SpeedTarget = dataclasses.field(default_factory=SpeedTarget)
    max_kernels: int | None = None
    recompile_inputs: Callable[[str], list[tuple]] | None = None
    max_compiles: int = 1
    pool_size: int = 4
    budget_s: float = 45.0
    hints: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.checks) - set(CHECKS)
        if unknown:
            raise ValueError(f"{self.key}: unknown checks {sorted(unknown)}; known: {CHECKS}")

    @property
    def assignment(self) -> str:
        return self.key.split(".")[0]

    def compile_kwargs(self, entry_object: Any) -> dict:
        """``torch.compile`` options for a solution whose entry is ``entry_object`` (the
        learner's or the reference's: each is compiled with its own choice)."""
        extra = self.compile_options(entry_object) if self.compile_options else {}
        return {**self.learner_compile, **extra}

    def instantiate(self, entry_object: Any, baseline: Any, device: str) -> Callable:
        if self.build is not None:
            return self.build(entry_object, baseline, device)
        return default_build(entry_object, baseline, device)


def default_build(entry_object: Any, baseline: Any, device: str) -> Callable:
    """Instantiate a module class with no arguments, load the baseline's weights when the
    shapes agree (so outputs are comparable), switch to eval mode, move to ``device``."""
    if isinstance(entry_object, type) and issubclass(entry_object, torch.nn.Module):
        model = entry_object()
        if isinstance(baseline, torch.nn.Module):
            model.load_state_dict(baseline.state_dict())
        return model.to(device).eval()
    if isinstance(entry_object, torch.nn.Module):
        return entry_object.to(device).eval()
    if callable(entry_object):
        return entry_object
    raise TypeError(f"expected a nn.Module subclass or a function, got {type(entry_object).__name__}")


def seeded_generator(seed: int, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(int(seed))


def get_problem(key: str, module: str | None = None) -> Problem:
    """The problem ``key`` ("ps1.q2"), from ``grader.problems.ps1`` or from ``module``."""
    module = module or f"{__name__}.{key.split('.')[0]}"
    try:
        problems = importlib.import_module(module).PROBLEMS
    except (ImportError, AttributeError) as exc:
        raise KeyError(f"no problem set module {module!r} for {key!r}: {exc}") from exc
    if key not in problems:
        raise KeyError(f"unknown problem {key!r}; {module} defines {sorted(problems)}")
    return problems[key]
