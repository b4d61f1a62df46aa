"""The reference side: what the judge compares a learner's graph with, built in the judge's
process (which never runs learner code) once per process and shared by every submission it grades.

:class:`ReferenceSide` holds a problem's baseline model and the instructor's reference solution,
captured, shipped and rebuilt exactly as a learner's graph is (:func:`_ship`), then compiled; for
a planning question (ps3 q1) instead the figures its hidden jobs are judged on
(:class:`grader.checks.jobs.JobFigures`, :func:`measure_jobs`: every mode's cold first call and
time per call, measured once per machine (kept with the judges' compiler cache; on Ray, once per
run), when first needed, and handed to the run's other judges).
"""
from __future__ import annotations

import dataclasses
import json
import time

import torch

from grader.checks import _torch_internals as ti
from grader.checks import custom_ops, graph_artifact, jobs, timing
from grader.checks.jobs import JobFigures
from grader.checks.results import Need
from grader.common.wire import Packer
from grader.isolation.cells.source import Cell
from grader.problems import NO_COMPILE, Problem, seeded_generator

# A learner's graph may have this many times the reference graph's operators and hold this many
# times the bytes it holds at once (ReferenceSide.graph_budget), and never less than the minimum:
# room for a clumsy but honest rewrite, none for a graph made to hold the judge up.
GRAPH_BUDGET_FACTOR = 10
MIN_GRAPH_BUDGET = (500, 256 * 1024 ** 2)
# Without a reference (self-check, on the learner's own machine): operators, bytes held at once.
FALLBACK_GRAPH_BUDGET = (5_000, 4 * 1024 ** 3)


def timed_version(model, problem: Problem, options: dict):
    """What a job or speed measurement calls: ``model`` eagerly for ``mode="none"``, else
    compiled with ``options`` (and ``fullgraph=True`` where the problem times one graph)."""
    if options.get("mode") == NO_COMPILE:
        return problem.graded_call(model)
    options = {**options, "fullgraph": True} if problem.timed_fullgraph else dict(options)
    options = {k: v for k, v in options.items() if k in ("mode", "fullgraph", "dynamic")}
    return problem.graded_call(torch.compile(ti.fresh_copy(model), **options))


def traced_inputs(problem: Problem, device: str, seed: int) -> tuple:
    """What the graph is captured on: one step's arguments where the model is a step of the
    problem's loop, else inputs drawn from ``seed``."""
    if problem.step_inputs is not None:
        return problem.step_inputs(device)
    return problem.make_inputs(seeded_generator(seed), device)


def shapes_of(inputs: tuple) -> list:
    """What makes Dynamo compile a call again when it changes, as data: each tensor's shape and
    dtype, and any other argument's value."""
    return [[list(a.shape), str(a.dtype)] if isinstance(a, torch.Tensor) else repr(a)
            for a in inputs]


# How many draws :func:`inputs_shaped_like` makes before it gives up (ps3 q2's batch size is one
# of 63, so the chance that 10,000 draws miss one is below 1e-60).
DRAWS_FOR_A_SHAPE = 10_000


def inputs_shaped_like(make, shapes: list, gen: torch.Generator, device: str) -> tuple | None:
    """Fresh inputs from ``make`` (an input class, which may draw its shapes too), drawn from
    ``gen`` until they have ``shapes`` (:func:`shapes_of`); None if they never do."""
    for _ in range(DRAWS_FOR_A_SHAPE):
        inputs = make(gen, device)
        if shapes_of(inputs) == shapes:
            return inputs
    return None


def captured_inputs(problem: Problem, device: str, seed: int) -> tuple:
    """What a learner's graph is captured on: :func:`traced_inputs` drawn from ``seed``, with the
    shapes of the first call the problem makes where it declares its calls (a class that draws
    its shapes, as ps3 q2's batch sizes, would otherwise give a graph of a size chosen by chance:
    the graph of the first call is the one every later call must reuse, and the one whose
    operators count)."""
    inputs = traced_inputs(problem, device, seed)
    if problem.step_inputs is not None or problem.recompile_inputs is None:
        return inputs
    first = shapes_of(problem.recompile_inputs(device)[0])
    if shapes_of(inputs) == first:
        return inputs
    again = inputs_shaped_like(problem.make_inputs, first, seeded_generator(seed), device)
    return again if again is not None else inputs


def _ship(captured: graph_artifact.Captured) -> tuple[dict, bytes]:
    """A captured graph as it travels (JSON round trip included), so that the reference's
    graph is rebuilt exactly as a learner's is."""
    packer = Packer()
    header = json.loads(json.dumps(graph_artifact.to_wire(captured, packer)))
    return header, packer.blob()


def measure_jobs(problem: Problem, device: str) -> JobFigures:
    """The figures a planning question is judged on (:class:`grader.problems.JobPlan`): the
    given model run each way in ``problem.plan.modes`` as a job calls it (compiled with
    ``fullgraph=True``, a fresh code object each time, so that every compile is a first one), in
    this process (no learner code), measured as :func:`grader.checks.jobs.measure` says."""
    pool = [problem.make_inputs(seeded_generator(s), device) for s in range(problem.pool_size)]
    return jobs.measure(
        lambda mode: timed_version(problem.make_baseline(device), problem, {"mode": mode}),
        pool, problem.plan.modes, eager=NO_COMPILE, device=device)


@dataclasses.dataclass
class ReferenceSide:
    """A problem's baseline and the instructor's reference, in the judge's process: built once
    (:meth:`build`) and shared by every submission the process grades. For a planning question,
    the figures its hidden jobs are judged on instead (:meth:`job_figures`)."""

    problem: Problem
    device: str
    base_model: torch.nn.Module
    base_eager: object
    base_timed: object
    reference: object | None = None
    reference_module: object | None = None   # the reference's graph, rebuilt (work per call)
    reference_options: dict = dataclasses.field(default_factory=dict)
    jobs: JobFigures | None = None
    seconds: float = 0.0
    reference_rule: object | None = None     # a planning question's: the instructor's rule
    reference_nodes: int | None = None       # the reference graph's operators
    reference_peak_bytes: int | None = None  # ... and the most bytes its tensors hold at once

    def graph_budget(self) -> tuple[int, int]:
        """The most operators, and bytes held at once, the judge will compile and run in a
        learner's graph: :data:`GRAPH_BUDGET_FACTOR` x the reference's (where ``source/`` is at
        hand), else :data:`FALLBACK_GRAPH_BUDGET`. The judge's own work on learner data is
        bounded by what the problem needs, so one hostile graph cannot hold it or starve it."""
        if self.reference_nodes is None or self.reference_peak_bytes is None:
            return FALLBACK_GRAPH_BUDGET
        return (max(GRAPH_BUDGET_FACTOR * self.reference_nodes, MIN_GRAPH_BUDGET[0]),
                max(GRAPH_BUDGET_FACTOR * self.reference_peak_bytes, MIN_GRAPH_BUDGET[1]))

    @classmethod
    def build(cls, problem: Problem, reference_cells: list[Cell] | None, device: str,
              problem_module: str | None, jobs: JobFigures | None = None,
              timed: bool | None = None) -> "ReferenceSide":
        """``jobs``: a planning question's figures as another judge of the run measured them
        (every submission of a run is then judged on the same figures); without them they are
        measured here when first needed (:meth:`job_figures`). ``timed``: whether to compile
        and warm up what the speed check times (default: where the problem has one; a child
        that checks a job without it builds the rest only)."""
        started = time.monotonic()
        with torch.no_grad():
            base_model = problem.make_baseline(device)
        base_eager = problem.graded_call(base_model)
        base_timed = base_eager
        if problem.plan is not None:
            side = cls(problem, device, base_model, base_eager, base_timed, jobs=jobs)
            if reference_cells:     # the instructor's rule: the yardstick of the run's figures
                from grader.isolation.sandbox.subject import exec_cells, namespace_for

                namespace = namespace_for(problem_module or f"grader.problems.{problem.assignment}",
                                          f"__reference_{problem.key.replace('.', '_')}__")
                exec_cells(reference_cells, namespace)  # the instructor's code, never a learner's
                side.reference_rule = getattr(namespace[problem.entry], problem.plan.method)
            side.seconds = time.monotonic() - started
            return side
        timed = Need.TIMINGS in problem.needs() if timed is None else timed
        with ti.quiet_torch_logs():
            if problem.baseline_compile is not None and timed:
                base_timed = problem.graded_call(torch.compile(base_model,
                                                               **problem.baseline_compile))
            side = cls(problem, device, base_model, base_eager, base_timed)
            pool = [problem.make_inputs(seeded_generator(s), device) for s in range(2)]
            if base_timed is not base_eager:
                timing.first_call_seconds(base_timed, pool[0], device)
            if reference_cells:
                side._build_reference(reference_cells, problem_module, pool, timed)
        side.seconds = time.monotonic() - started
        return side

    def job_figures(self) -> JobFigures:
        """A planning question's figures: given to :meth:`build`, or measured now, once (about
        half a minute on a CPU: only a job that judges hidden jobs asks for them)."""
        if self.jobs is None:
            self.jobs = measure_jobs(self.problem, self.device)
            self.seconds += self.jobs.seconds
        return self.jobs

    def _build_reference(self, cells: list[Cell], problem_module: str | None, pool,
                         timed: bool) -> None:
        """The reference's graph, captured, shipped and rebuilt as a learner's is (its size sets
        :meth:`graph_budget`); for a timed problem, compiled and warmed up too."""
        from grader.isolation.sandbox.subject import exec_cells, namespace_for

        problem, device = self.problem, self.device
        # A module name of its own per problem: Dynamo finds a function's globals by its module's
        # name, and one judge keeps several references.
        namespace = namespace_for(problem_module or f"grader.problems.{problem.assignment}",
                                  f"__reference_{problem.key.replace('.', '_')}__")
        exec_cells(cells, namespace)  # the instructor's code, never the learner's
        entry = namespace[problem.entry]
        ref_model = problem.instantiate(entry, self.base_model, device)
        self.reference_options = problem.compile_kwargs(entry)
        captured = graph_artifact.capture(problem.traced_call(ref_model),
                                          traced_inputs(problem, device, 0), model=ref_model,
                                          dynamic=self.reference_options.get("dynamic"))
        header, blob = _ship(captured)
        # A custom operator (ps8) runs as the problem's own registration, as a learner's
        # graph runs with the judge's operator rebuilt from the learner's registration.
        operators = custom_ops.trusted_operators(problem.custom_op) \
            if problem.custom_op is not None else {}
        with graph_artifact.extra_operators(operators):
            loaded = graph_artifact.load(header, blob, baseline=self.base_model, device=device)
        self.reference_module = loaded.module(self.base_model, device, training=problem.training)
        self.reference_nodes = len(loaded.operators)
        self.reference_peak_bytes = graph_artifact.fake_run_on(loaded, self.reference_module,
                                                            traced_inputs(problem, device, 0))
        if not timed:
            return
        timed_model = loaded.module(self.base_model, device, training=problem.training)
        self.reference = timed_version(timed_model, problem, self.reference_options)
        if problem.reference_eager_baseline:
            # Speed over the reference's own model, eagerly: what compiling it gains.
            self.base_timed = problem.graded_call(ref_model)
            timing.first_call_seconds(self.base_timed, pool[0], device)
        timing.first_call_seconds(self.reference, pool[0], device)
