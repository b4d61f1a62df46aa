"""Problem definitions: what each graded question gives the learner and how it is checked.

A problem set is a package ``grader/problems/psN/`` (found by its folder: :mod:`grader.problems.sets`)
whose ``__init__.py`` defines ``PROBLEMS = {key: Problem(...)}`` and ``TEST_CELLS``. The student notebook imports the baseline from here (``from grader.problems.ps1 import *``), and the
judge and the subject (:mod:`grader.isolation.judge.steps`) rebuild it from here, never from the
learner's kernel.
"""
from __future__ import annotations

import dataclasses
import importlib
import random
from typing import Any, Callable

import torch

from grader.checks import declared
from grader.checks.results import Check, Need
from grader.checks.targets import SpeedTarget

# A compile mode that means "do not compile" (a job too short for compiling to pay).
NO_COMPILE = "none"
# How many calls the problem makes of the learner's compiled model, as it is used (the judge has
# the subject make them, ``fullgraph=True``, from a fresh model's first call): a graph break or a
# recompile on call 1, 101 or 201 is one.
USAGE_CALLS = 201


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """A planning question (ps3 q1): the learner's entry is a rule, a class whose static method
    ``method(calls, device)`` returns one of ``modes`` (``"none"``: eager, else a
    ``torch.compile`` mode) for a job of ``calls`` calls of the problem's baseline model on its
    inputs, in a fresh process. It is graded on jobs the learner cannot try
    (:meth:`grader.isolation.judge.steps.Judge.grade`, checks ``rule`` and ``job``):

    - the judge measures, once per machine and never in the subject, each mode's cold first call
      and its time per call, in rounds (:func:`grader.checks.jobs.measure`: the least of the rounds'
      cold compiles, the median of every interleaved trial, one core on a CPU), and from them
      this machine's break-even ``B``: the fewest calls after which some compile mode's total
      (first call + calls x time per call) beats eager's; each round's own figures give one
      break-even, and the rounds' least and greatest are ``B``'s spread;
    - for each submission it draws ``pairs`` pairs of job sizes from fresh seeds, log-uniformly,
      one in ``[B/far, B/near]`` (below the break-even) and one in ``[near*B, far*B]`` (above),
      or, where no compile mode is faster per call than eager, across ``fallback`` (every right
      answer is then ``"none"``);
    - it sends them to the subject with the ``examples`` (the sizes the notebook names), a grid
      of sizes from 10 to 10^8, and ``decoys`` more sets of pairs drawn the same way around false
      break-evens 3 to 30 times away, shuffled, so that a rule which sees every size cannot tell
      which are graded; only the mode strings come back, each checked against ``modes``;
    - a choice is right when its modelled total is at least ``fraction`` of the best choice's,
      on the figures and on each round's own (``grader.checks.targets.judge_plan_choice``): a
      job whose verdict changes from one round's figures to another's is inconclusive (held for
      review), not wrong; a pair earns its share when both of its jobs are right, so a rule
      that answers the same for every size earns nothing.

    The hidden jobs are judged only when grading (``make grade``, Gradescope, the instructor's
    ``grader.cli check``): a self-check asks the rule about the examples and the grid and says
    what it answers, because judging hidden jobs there would tell the learner ``B``, which the
    question asks them to measure.
    """

    modes: tuple[str, ...]
    method: str = "mode_for"
    examples: tuple[int, ...] = ()
    pairs: int = 5
    near: float = 1.5
    far: float = 3.0
    fallback: tuple[int, int] = (10 ** 3, 10 ** 6)
    decoys: int = 3
    fraction: float = 0.9


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
      text is the reference solution (and, in a submission, the learner's).
    - ``timed_fullgraph``: the speed check compiles with ``fullgraph=True`` (default): speed is
      credited to one graph only, so no Python-side shortcut in ``forward`` can be timed.
    - ``plan``: a planning question (:class:`JobPlan`): the entry is a rule that chooses how to
      run a job, not a model; its checks are ``rule`` (it answers one of the modes for every
      size it is asked about) and ``job`` (its choices on hidden jobs: ``credit`` is the share of
      pairs it got right, which the test cell scoring it earns).
    - ``training``: the graded call is a training step (:func:`training_step`: forward, which
      returns the loss, then backward; the loss and every parameter's gradient are compared and
      timed), not an inference call under ``torch.no_grad()``. The model is built in train mode
      and compiled for the backward pass too; graph breaks and recompiles are checked on the
      model's forward with gradients enabled.
    - ``driver``: the model is one step of a loop the problem owns (ps6: decoding, a token at a
      time): the graded call is ``driver(model, *inputs)``, compared and timed through the loop;
      the graph-break and recompile checks compile the step alone, called with
      ``step_inputs(device)`` (default: the problem's inputs).
    - ``choices``: the ``torch.compile`` options the learner chooses (what ``compile_options``
      returns), with the values each may take (``{"mode": MODES}``): the judge accepts the
      choice only as data from this list.
    - ``refused_operators``: ATen operators (``"aten.group_norm"``) a graph of this problem may
      not use, with the reason the learner reads: a library call that would skip the lesson.
    - ``max_operators``: the ``operators`` check's bound: the learner's captured graph may hold at
      most this many ATen operators (a Python loop over rows unrolls into a copy of its body per
      row, even where it compiles once).
    - ``lessons``: what a graph the judge checked must also do to be this problem's lesson,
      declared by the problem set (ps6: the work of a cached step, ``ps6.cached_step``; ps8: the
      library called through the custom operator, ``ps8.through_the_operator``): each
      ``lesson(case)`` (``case.graph`` the judge's verdict on the rebuilt graph, passed) returns
      '' or why not, and a graph that misses one earns no structural point.
    - ``reference_eager_baseline``: when the reference is at hand, speed is measured over the
      reference's own model run eagerly (so the speedup credited is compilation's, not a better
      algorithm's); self-check, which has no reference, keeps the given baseline and its floors.
    - ``allowed_config``: compiler settings the learner may change, as
      ``"torch._inductor.config.NAME"``; any other change is refused (the screen) or detected
      (not credited).
    - ``inputs_name``: what ``make_inputs`` draws, in words ("inputs with a positive mean").
    - ``other_inputs(rng)``: the problem's other classes of inputs, ``{name: make_inputs}``
      (ps1: inputs whose mean is negative, the other side of the ``if``; ps2: other numbers of
      rows), each drawing inputs of one shape; shapes are chosen per grading job from ``rng``
      (a fresh seed) so that none can be known in advance. Every credited claim is checked on
      every class (:meth:`input_classes`): the learner's outputs, and the graph the judge checks
      (captured again by the subject where a class's shapes differ).
    - ``usage_calls``: how many calls of the compiled model the problem makes as it is used
      (:data:`USAGE_CALLS`): the subject compiles a fresh model with ``fullgraph=True`` and calls
      it that many times (``recompile_inputs`` in order, again and again, or inputs of the first
      class): a break or a recompile on any of them is one.
    - ``tolerance``: ``(rtol, atol)`` the ``compiled`` check states and uses (the judge compiles
      the learner's graph with Inductor itself and compares its outputs on fresh inputs with
      the original's eager ones); ``None``: the dtype's (:data:`grader.checks.correctness.TOLERANCES`).
    - ``checks``: the checks the judge decides, by name (:mod:`grader.checks.declared`), or a
      problem set's own declaration (a :class:`grader.checks.results.Check`: docs/design.md,
      "Adding a check"), which ``own_checks`` then holds.
    - ``custom_op``: a custom operator the learner registers around a library call
      (:class:`grader.checks.custom_ops.OpSpec`, ps8): the subject ships its fake and autograd
      formula as graphs, the judge rebuilds the operator around the problem's own kernel, runs
      the learner's model graph with it and decides the ``custom_op`` check.
    """

    key: str
    title: str
    entry: str
    make_baseline: Callable[[str], Any]
    make_inputs: Callable[[torch.Generator, str], tuple]
    solution_grade_id: str
    checks: tuple = declared.DEFAULT_CHECKS
    build: Callable[[Any, Any, str], Callable] | None = None
    baseline_compile: dict | None = None
    learner_compile: dict = dataclasses.field(default_factory=dict)
    compile_options: Callable[[Any], dict] | None = None
    target: SpeedTarget = dataclasses.field(default_factory=SpeedTarget)
    max_kernels: int | None = None
    max_operators: int | None = None
    recompile_inputs: Callable[[str], list[tuple]] | None = None
    max_compiles: int = 1
    pool_size: int = 4
    budget_s: float = 45.0
    hints: dict = dataclasses.field(default_factory=dict)
    timed_fullgraph: bool = True
    allowed_config: frozenset = frozenset()
    choices: dict = dataclasses.field(default_factory=dict)
    refused_operators: dict = dataclasses.field(default_factory=dict)
    lessons: tuple[Callable[[Any], str], ...] = ()
    reference_eager_baseline: bool = False
    plan: JobPlan | None = None
    training: bool = False
    driver: Callable[..., Any] | None = None
    step_inputs: Callable[[str], tuple] | None = None
    tolerance: tuple[float, float] | None = None
    inputs_name: str = "fresh random inputs"
    other_inputs: Callable[[random.Random], dict[str, Callable]] | None = None
    usage_calls: int = USAGE_CALLS
    custom_op: Any = None
    own_checks: tuple[Check, ...] = ()

    def __post_init__(self) -> None:
        # A check the problem set declares itself comes in ``checks`` as its declaration: kept in
        # ``own_checks``, named in ``checks`` like the registry's.
        own = {c.name: c for c in (*self.own_checks, *self.checks)
               if isinstance(c, Check) and declared.BY_NAME.get(c.name) is not c}
        self.own_checks = tuple(own.values())
        self.checks = tuple(c.name if isinstance(c, Check) else c for c in self.checks)
        why = declared.problems_with(self.checks, self.own_checks, self)
        if why:
            raise ValueError(f"{self.key}: " + "; ".join(why))

    @property
    def parts(self) -> tuple[Check, ...]:
        """The checks this problem asks for, declared, in the order the judge decides them."""
        return declared.in_order(self.checks, self.own_checks)

    def needs(self, wanted=None) -> frozenset[Need]:
        """The evidence the checks ``wanted`` (names; default: every check of the problem) are
        decided on."""
        names = set(self.checks if wanted is None else wanted)
        return declared.needs_of(tuple(c for c in self.parts if c.name in names))

    @property
    def assignment(self) -> str:
        return self.key.split(".")[0]

    @property
    def shipped_floors(self) -> dict[str, float]:
        """Self-check's speed floors for this problem per device class, from its set's folder
        (:func:`grader.problems.sets.floors`); {} where none were measured."""
        from grader.problems import sets

        return sets.floors(self.key)

    def input_classes(self, rng: random.Random) -> dict[str, Callable]:
        """Every class of inputs the problem is checked on, ``{name: make_inputs}``: its own
        inputs first, then the :attr:`other_inputs` drawn for this job from ``rng``."""
        classes = {self.inputs_name: self.make_inputs}
        if self.other_inputs is not None:
            classes.update(self.other_inputs(rng))
        return classes

    def compile_kwargs(self, entry_object: Any) -> dict:
        """``torch.compile`` options for a solution whose entry is ``entry_object`` (the
        learner's or the reference's: each is compiled with its own choice)."""
        extra = self.compile_options(entry_object) if self.compile_options else {}
        return {**self.learner_compile, **extra}

    def instantiate(self, entry_object: Any, baseline: Any, device: str) -> Callable:
        if self.build is not None:
            return self.build(entry_object, baseline, device)
        return default_build(entry_object, baseline, device, train=self.training)

    def graded_call(self, model: Callable) -> Callable:
        """What is compared and timed for ``model`` (eager or compiled): a training step, the
        problem's loop around a step, or an inference call without autograd."""
        if self.training:
            return training_step(model)
        if self.driver is not None:
            driver = self.driver
            return no_grad_call(lambda *inputs: driver(model, *inputs))
        return no_grad_call(model)

    def traced_call(self, model: Callable) -> Callable:
        """What the graph-break and recompile checks compile: the model itself with gradients
        enabled for a training problem (``.backward()`` is not traced by Dynamo), else the
        inference call."""
        return model if self.training else no_grad_call(model)


@dataclasses.dataclass(frozen=True)
class TestCell:
    """How one autograded test cell of a problem set earns its points: the declaration the
    judged scoring reads (``grade_id`` of the test cell in the notebook).

    - ``requires``: ``(problem key, check)`` pairs that must all pass (an inconclusive speed
      verdict holds the cell for review: it scores ``inconclusive_credit`` of its points and is
      flagged for the instructor);
    - ``scored``: the ``(problem key, check)`` whose verdict gives partial credit (full for
      pass, ``inconclusive_credit`` of the points for inconclusive, none for fail), once
      ``requires`` hold; without it the cell is all or nothing.
      A scored check that reports ``credit`` (the share of its items it got right, as the
      ``job`` check of a :class:`JobPlan` does) earns the cell ``credit`` x its points.
    """

    grade_id: str
    points: float
    requires: tuple[tuple[str, str], ...] = ()
    scored: tuple[str, str] | None = None
    inconclusive_credit: float = 0.0

    @property
    def problems(self) -> list[str]:
        keys = [key for key, _ in self.requires] + ([self.scored[0]] if self.scored else [])
        return list(dict.fromkeys(keys))

    @property
    def checks(self) -> list[tuple[str, str]]:
        return list(self.requires) + ([self.scored] if self.scored else [])


def no_grad_call(fn: Callable) -> Callable:
    """``fn`` called under ``torch.no_grad()``: an inference call."""
    def call(*args):
        with torch.no_grad():
            return fn(*args)
    return call


def training_step(model: Callable) -> Callable:
    """One training step of ``model`` (a module, eager or compiled, whose ``forward`` returns
    the loss): ``step(*batch)`` runs forward and backward and returns ``(loss, *gradients)``,
    one gradient per parameter in ``model.parameters()`` order, then clears the gradients, so
    every call starts from the same state. (The optimizer's update is left to the training
    loop: a step that changed the weights could not be compared call by call.)"""
    params = list(model.parameters())

    def step(*batch):
        for p in params:
            p.grad = None
        loss = model(*batch)
        loss.backward()
        grads = tuple(p.grad for p in params)
        for p in params:
            p.grad = None
        return (loss.detach(), *grads)
    return step


def default_build(entry_object: Any, baseline: Any, device: str, train: bool = False) -> Callable:
    """Instantiate a module class with no arguments, load the baseline's weights when the
    shapes agree (so outputs are comparable), switch to eval (or ``train``) mode, move to
    ``device``."""
    if isinstance(entry_object, type) and issubclass(entry_object, torch.nn.Module):
        model = entry_object()
        if isinstance(baseline, torch.nn.Module):
            model.load_state_dict(baseline.state_dict())
        return model.to(device).train(train)
    if isinstance(entry_object, torch.nn.Module):
        return entry_object.to(device).train(train)
    if callable(entry_object):
        return entry_object
    raise TypeError(f"expected a nn.Module subclass or a function, got {type(entry_object).__name__}")


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed``: inputs are drawn on the CPU, then moved to the
    device, so the same seed gives the same inputs on every device."""
    return torch.Generator(device="cpu").manual_seed(int(seed))


def problem_set(assignment: str, module: str | None = None):
    """The module ``grader.problems.<assignment>`` (or ``module``)."""
    return importlib.import_module(module or f"{__name__}.{assignment}")


def public_names(problem: Problem, module: str | None = None) -> list[str]:
    """The names a solution cell of ``problem`` finds defined (its problem set's public names,
    ``torch`` and ``nn``): what the subject's namespace holds before the learner's cells run."""
    mod = problem_set(problem.assignment, module)
    names = getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")])
    return ["torch", "nn", *names]


def test_cells(assignment: str, module: str | None = None) -> dict[str, TestCell]:
    """``{grade_id: TestCell}`` of a problem set (its ``TEST_CELLS``)."""
    cells = getattr(problem_set(assignment, module), "TEST_CELLS", [])
    return {cell.grade_id: cell for cell in cells}


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
