"""The reference side: what the judge compares a learner's graph with, built in the judge's
process (which never runs learner code) once per process and shared by every submission it grades.

:class:`ReferenceSide` holds a problem's baseline model and the instructor's reference solution,
captured, shipped and rebuilt exactly as a learner's graph is (:func:`_ship`), then compiled; for
a planning question (ps3 q1) instead the figures its hidden jobs are judged on
(:class:`JobFigures`, :func:`measure_jobs`: every mode's cold first call and time per call,
measured once per run and handed to the run's other judges).
"""
from __future__ import annotations

import dataclasses
import json
import time

import torch

from grader.checks import _torch_internals as ti
from grader.checks import graph_artifact, targets, timing
from grader.checks.wire import Packer
from grader.isolation.source import Cell
from grader.problems import NO_COMPILE, Problem, seeded_generator

JOB_TRIALS = 21
COLD_ROUNDS = 3   # cold first calls measured per mode of a planning question (the least is kept)
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


def _ship(captured: graph_artifact.Captured) -> tuple[dict, bytes]:
    """A captured graph as it travels (JSON round trip included), so that the reference's
    graph is rebuilt exactly as a learner's is."""
    packer = Packer()
    header = json.loads(json.dumps(graph_artifact.to_wire(captured, packer)))
    return header, packer.blob()


@dataclasses.dataclass
class JobFigures:
    """What each way of running a planning question's model costs on this machine, measured by
    the judge (:func:`measure_jobs`): the cold first call of each mode (compile included, in a
    fresh compiler cache) and its seconds per call over interleaved trials; the break-even they
    give (``None``: no compile mode is faster per call than eager here)."""

    first_call_s: dict
    samples: dict
    break_even: float | None
    best_mode: str | None
    seconds: float = 0.0

    def per_call(self, mode: str) -> float:
        return timing.Estimate.of(self.samples[mode]).median

    def table(self) -> list[str]:
        lines = [f"  {'mode':<28}{'first call s':>13}{'us/call':>10}"]
        for mode in self.samples:
            lines.append(f"  {mode:<28}{self.first_call_s[mode]:>13.2f}"
                         f"{self.per_call(mode) * 1e6:>10.1f}")
        return lines

    def to_dict(self) -> dict:
        return {"first_call_s": dict(self.first_call_s), "samples": dict(self.samples),
                "break_even": self.break_even, "best_mode": self.best_mode,
                "seconds": round(self.seconds, 2)}

    @classmethod
    def from_dict(cls, data: dict, modes) -> "JobFigures":
        """Figures another judge of the run measured (:meth:`to_dict`), checked to be figures
        for exactly ``modes``: a ``ValueError`` otherwise."""
        try:
            first = {m: float(data["first_call_s"][m]) for m in modes}
            samples = {m: [float(x) for x in data["samples"][m]] for m in modes}
            calls = None if data["break_even"] is None else float(data["break_even"])
            best = data["best_mode"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"job figures without every mode's numbers: {exc!r}") from exc
        if set(data["first_call_s"]) != set(modes) or set(data["samples"]) != set(modes) \
                or not all(samples.values()) or (best is not None and best not in modes):
            raise ValueError(f"job figures for other modes than {list(modes)}")
        return cls(first, samples, calls, best, float(data.get("seconds") or 0.0))


def measure_jobs(problem: Problem, device: str) -> JobFigures:
    """The figures a planning question is judged on (:class:`grader.problems.JobPlan`): the
    given model run each way in ``problem.plan.modes``, in this process (no learner code)."""
    started = time.monotonic()
    pool = [problem.make_inputs(seeded_generator(s), device) for s in range(problem.pool_size)]
    with ti.quiet_torch_logs():
        # One compile first, thrown away: the first compile in a process also loads and sets
        # up Inductor, which would be charged to whichever mode came first.
        with ti.fresh_inductor_cache():
            warm = timed_version(problem.make_baseline(device), problem, {"mode": "default"})
            timing.first_call_seconds(warm, pool[0], device)
        # Each mode's cold first call, COLD_ROUNDS times in an order that turns round, keeping
        # the least: one compile slowed by the machine's other work would make an equal mode
        # look worse (on a CPU the four compile modes compile alike).
        fns, first = {}, {}
        modes = list(problem.plan.modes)
        for round_ in range(COLD_ROUNDS):
            for mode in timing.interleave_order(modes, round_ * len(modes)):
                fns[mode] = timed_version(problem.make_baseline(device), problem, {"mode": mode})
                with ti.fresh_inductor_cache():  # cold, as in a fresh process
                    seconds = timing.first_call_seconds(fns[mode], pool[0], device)
                first[mode] = min(seconds, first.get(mode, seconds))
        first = {mode: first[mode] for mode in modes}
        comp = timing.compare(fns, pool, baseline=NO_COMPILE, device=device, trials=JOB_TRIALS)
    samples = {mode: list(comp.seconds[mode]) for mode in comp.names}
    calls, best = targets.break_even(samples, first, NO_COMPILE)
    return JobFigures(first, samples, calls, best, time.monotonic() - started)


@dataclasses.dataclass
class ReferenceSide:
    """A problem's baseline and the instructor's reference, in the judge's process: built once
    (:meth:`build`) and shared by every submission the process grades. For a planning question,
    the figures its hidden jobs are judged on instead (``jobs``: :func:`measure_jobs`)."""

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
              problem_module: str | None, jobs: JobFigures | None = None) -> "ReferenceSide":
        """``jobs``: a planning question's figures as another judge of the run measured them
        (every submission of a run is then judged on the same figures); measured here without."""
        started = time.monotonic()
        with torch.no_grad():
            base_model = problem.make_baseline(device)
        base_eager = problem.graded_call(base_model)
        base_timed = base_eager
        if problem.plan is not None:
            side = cls(problem, device, base_model, base_eager, base_timed,
                       jobs=jobs or measure_jobs(problem, device))
            side.seconds = time.monotonic() - started
            return side
        timed = "speed" in problem.checks
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

    def _build_reference(self, cells: list[Cell], problem_module: str | None, pool,
                         timed: bool) -> None:
        """The reference's graph, captured, shipped and rebuilt as a learner's is (its size sets
        :meth:`graph_budget`); for a timed problem, compiled and warmed up too."""
        from grader.isolation.subject import exec_cells, namespace_for

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
        loaded = graph_artifact.load(header, blob, baseline=self.base_model, device=device)
        self.reference_module = loaded.module(self.base_model, device, training=problem.training)
        self.reference_nodes = len(loaded.operators)
        self.reference_peak_bytes = graph_artifact.check_on(loaded, self.reference_module,
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
