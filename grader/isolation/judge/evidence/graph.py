"""``Need.GRAPH``: the graph of the learner's traced call (``fullgraph=True``, kept as ATen
operators), captured by the subject on a fresh model and shipped as data, and for each other class
of inputs whose shapes differ the graph captured there; where the judge would refuse it, where
it breaks, in the learner's lines (feedback only). Fills ``graph``, ``capture_error``,
``compiled``, ``class_graphs``, ``breaks`` and ``graph_count``.

The judge's validation of it, after the subject is gone, is :func:`validate` (a
:class:`GraphVerdict`): loaded under :mod:`grader.checks.graph_artifact`'s allow-list, bounded
by the problem's size budget (:func:`over_budget`), run against the original on every class of
inputs, and read against the calls the problem makes
(:mod:`grader.isolation.judge.evidence.compile_count`)."""
from __future__ import annotations

import dataclasses

import torch

from grader.checks import correctness, graph_artifact
from grader.common.wire import Packer
from grader.isolation.judge.evidence import compile_count, outputs
from grader.isolation.judge.reference_side import (ReferenceSide, captured_inputs,
                                                    inputs_shaped_like, shapes_of, traced_inputs)
from grader.isolation.judge.subject_session import SubjectSession, learner_text
from grader.problems import Problem, seeded_generator


@dataclasses.dataclass
class GraphVerdict:
    """The judge's verdict on the captured graph (:func:`validate`), and the model rebuilt from
    it: ``case.graph`` for a check that needs ``Need.GRAPH``."""

    ok: bool
    message: str
    module: graph_artifact.ArtifactModule | None = None
    operators: int = 0
    refused: bool = False
    general: str = ""       # why the graph does not serve every call the problem makes ('' : it does)
    by_class: dict = dataclasses.field(default_factory=dict)  # input class -> the graph run there

    @property
    def headline(self) -> str:
        """The verdict's first line without its subject ("does not compile with ...")."""
        first = self.message.splitlines()[0] if self.message else ""
        return first.replace("the graph your code compiles to ", "compiles to a graph that ", 1)


def ask(subject: SubjectSession, problem: Problem, side: ReferenceSide, ev,
        device: str) -> None:
    """The graph of a fresh model's first call on the first class of inputs (fresh, of the
    shapes of the problem's first call); and, for each other class whose inputs have other
    shapes, the graph captured on one of them (Dynamo would compile such a call again: that
    graph is the one that would run there). Each graph's input shapes are kept with it."""
    options = {**problem.learner_compile, **ev.choice}
    inputs = captured_inputs(problem, device, correctness.fresh_seeds(1)[0])
    ev.captured_shapes = {problem.inputs_name: shapes_of(inputs)}
    header, blob = _capture(subject, problem, inputs, options)
    if isinstance(header.get("graph"), dict):
        ev.graph = (header["graph"], blob)
        if _refused(problem, side, ev, device):
            # Say where the breaks are, in the learner's lines (feedback only).
            packer = Packer()
            report, _ = subject.request({"op": "breaks", "problem": problem.key,
                                         "inputs": packer.value(inputs)}, packer.blob())
            ev.breaks = report.get("breaks") if isinstance(report.get("breaks"), list) else []
            count = report.get("graph_count")
            ev.graph_count = count if isinstance(count, int) else None
    else:
        ev.capture_error = learner_text(header.get("error", "no graph was sent"))
        ev.compiled = header.get("compiled") is True
        ev.breaks = header.get("breaks") if isinstance(header.get("breaks"), list) else []
        count = header.get("graph_count")
        ev.graph_count = count if isinstance(count, int) else None
        return
    if problem.step_inputs is not None:  # a step of the problem's loop: one shape for all
        return
    for name, make in list(ev.classes.items())[1:]:
        class_inputs = make(seeded_generator(correctness.fresh_seeds(1)[0]), device)
        if shapes_of(class_inputs) == ev.captured_shapes[problem.inputs_name]:
            continue   # the same shapes: the first graph is the one that runs there
        ev.captured_shapes[name] = shapes_of(class_inputs)
        header, blob = _capture(subject, problem, class_inputs, options)
        ev.class_graphs[name] = (header["graph"], blob) if isinstance(header.get("graph"),
                                                                      dict) \
            else learner_text(str(header.get("error", "no graph was sent")).splitlines()[0])


def _capture(subject: SubjectSession, problem: Problem, inputs: tuple,
             options: dict) -> tuple[dict, bytes]:
    packer = Packer()
    return subject.request({"op": "capture", "problem": problem.key,
                            "inputs": packer.value(inputs),
                            "dynamic": options.get("dynamic")}, packer.blob())


def _refused(problem: Problem, side: ReferenceSide, ev, device: str) -> bool:
    """A quick look at the graph while the subject is still there (data checks only: the
    full check comes later): would the judge refuse it?"""
    header, blob = ev.graph
    try:
        loaded = graph_artifact.load(header, blob, baseline=side.base_model, device=device)
        if over_budget(side, len(loaded.operators), 0):
            return True   # not even its fake run: refused by its size alone
        graph_artifact.fake_run_on(loaded, loaded.module(side.base_model, device,
                                                      training=problem.training),
                                traced_inputs(problem, device, 0))
    except graph_artifact.GraphRefused:
        return True
    return False


def validate(problem: Problem, side: ReferenceSide, ev, device: str) -> GraphVerdict:
    """The judge's validation of the captured graph, after the subject is gone: loaded from data
    under the allow-list and the problem's size budget, run against the original on fresh inputs
    of every class (on the graph captured there where shapes differ), the one graph of every
    call the problem makes, and (for the recompile check) right on every shape and step."""
    if ev.graph is None:
        first = ev.capture_error.splitlines()[0] if ev.capture_error else ""
        said = ("compiles with fullgraph=True, but is not one graph as the grader defines it"
                if ev.compiled else "does not compile with fullgraph=True")
        return GraphVerdict(False, "\n".join([f"{said}: {first}",
                                            *break_lines(ev)]))
    header, blob = ev.graph
    try:
        loaded = graph_artifact.load(header, blob, baseline=side.base_model, device=device)
        # Its size first: an oversized graph is refused before it is even built.
        peak = 0
        if not over_budget(side, len(loaded.operators), peak):
            module = loaded.module(side.base_model, device, training=problem.training)
            peak = graph_artifact.fake_run_on(loaded, module, traced_inputs(problem, device, 0))
    except graph_artifact.GraphRefused as exc:
        return GraphVerdict(False, "\n".join([f"compiles with fullgraph=True, but is not one "
                                            f"graph as the grader defines it: {exc}",
                                            *break_lines(ev)]), refused=True)
    too_big = over_budget(side, len(loaded.operators), peak)
    if too_big:
        return GraphVerdict(False, f"compiles with fullgraph=True, but the grader will not "
                                 f"compile or run it: {too_big}", refused=True)
    for name in loaded.operators:
        packet = ".".join(name.split(".")[:2])
        if packet in problem.refused_operators:
            return GraphVerdict(False, f"compiles to one graph, but it uses {packet}: "
                                     f"{problem.refused_operators[packet]}", refused=True)
    # The graph must compute what the original computes, on inputs nobody saw before, of
    # every class the problem tests (where a class's shapes differ, on the graph captured
    # there), of the shapes it was captured for: whether one graph serves other shapes too
    # is the recompile check's question (below) ...
    classes = ev.classes or {problem.inputs_name: problem.make_inputs}
    by_class = {}
    for name, make in classes.items():
        make = _drawn_at(make, ev.captured_shapes.get(name,
                                                      ev.captured_shapes.get(problem.inputs_name)))
        got = ev.class_graphs.get(name)
        if got is None:
            graph_here = module
        elif isinstance(got, str):
            return GraphVerdict(False, f"does not compile with fullgraph=True on {name}: {got}")
        else:
            try:
                other = graph_artifact.load(got[0], got[1], baseline=side.base_model,
                                            device=device)
                peak = 0
                if not over_budget(side, len(other.operators), peak):
                    graph_here = other.module(side.base_model, device,
                                              training=problem.training)
                    peak = graph_artifact.fake_run_on(other, graph_here,
                                                   make(seeded_generator(0), device))
            except graph_artifact.GraphRefused as exc:
                return GraphVerdict(False, f"compiles with fullgraph=True, but on {name} it is "
                                         f"not one graph as the grader defines it: {exc}",
                                  refused=True)
            too_big = over_budget(side, len(other.operators), peak)
            if too_big:
                return GraphVerdict(False, f"compiles with fullgraph=True, but on {name} the "
                                         f"grader will not compile or run it: {too_big}",
                                  refused=True)
        by_class[name] = graph_here
        [(_, rep)] = outputs.on_every_class({name: make}, problem.graded_call(graph_here),
                                     side.base_eager, problem, device)
        if not rep.ok:
            where = f" on {name}" if len(classes) > 1 else ""
            return GraphVerdict(False, f"the graph your code compiles to does not compute what "
                                     f"the original computes{where}: {rep}")
    # ... and it must be the one graph of every call the problem makes, from the first.
    used = compile_count.usage_failure(problem, ev)
    if used:
        return GraphVerdict(False, used)
    # ... and, for the recompile check, on every shape and step the problem uses (a graph
    # specialised to one batch size or one position fails there).
    general = ""
    if problem.recompile_inputs is not None:
        why = same_over(problem, module, side.base_model, problem.recompile_inputs(device))
        if why:
            general = (f"the graph your code compiles to is right for the shapes it was "
                       f"captured with, not for every call the problem makes: {why}")
    ops = len(loaded.operators)
    on = (f"on fresh inputs of every kind the problem uses ({', '.join(classes)})"
          if len(classes) > 1 else "on fresh inputs")
    return GraphVerdict(True, f"compiles with fullgraph=True: one graph of {ops} operators, "
                            f"checked by the grader (it computes what the original computes "
                            f"{on}; no break in the {compile_count.calls_made(ev)} calls the "
                            f"problem makes)", module, ops, general=general, by_class=by_class)


def _drawn_at(make, shapes: list | None):
    """``make`` (an input class), its draws kept to ``shapes`` where it draws its shapes too."""
    if not shapes:
        return make

    def drawn(gen: torch.Generator, device: str) -> tuple:
        got = inputs_shaped_like(make, shapes, gen, device)
        return got if got is not None else make(gen, device)
    return drawn


def over_budget(side: ReferenceSide, operators: int, peak_bytes: int) -> str:
    """Why a learner's graph is more than the judge will compile and run ('' : it is not)."""
    max_nodes, max_bytes = side.graph_budget()
    if operators > max_nodes:
        return (f"it has {operators:,} operators, more than the {max_nodes:,} this problem allows "
                f"(its reference has {side.reference_nodes or 'far fewer'})")
    if peak_bytes > max_bytes:
        return (f"its tensors hold {peak_bytes / 2**20:,.0f} MiB at once, more than the "
                f"{max_bytes / 2**20:,.0f} MiB this problem allows")
    return ""


# Memory the judge's child may add to what it holds when forked, for the checks of one graph:
# room for compiling and timing (the baseline's and the reference's calls too), plus a few times
# the most bytes the problem lets a graph's tensors hold at once (ReferenceSide.graph_budget).


def same_over(problem: Problem, module, baseline, calls: list[tuple]) -> str:
    """'' when ``module``'s traced call gives the baseline's outputs on every call of ``calls``
    (in order, so that a model's state carries over as in the problem's loop), else why not."""
    mine, theirs = problem.traced_call(module), problem.traced_call(baseline)
    for i, args in enumerate(calls):
        try:
            with torch.set_grad_enabled(problem.training):
                got = mine(*args)
                want = theirs(*args)
        except Exception as exc:
            return f"call {i + 1} of {len(calls)} raised {type(exc).__name__}: {str(exc)[:160]}"
        why = correctness.compare_output(got, want, f"the output of call {i + 1} of {len(calls)}")
        if why is not None:
            return why
    return ""


def break_lines(ev) -> list[str]:
    """The graph breaks the learner's process reported, one entry each (its words)."""
    lines = []
    for b in breaks(ev)[:8]:
        lines.append(f"- {learner_text(b.get('where', ''))}: `{learner_text(b.get('line', ''))}`\n"
                     f"    cause: {learner_text(b.get('explanation', ''))}\n"
                     f"    fix: {learner_text(b.get('fix', ''))}")
    if lines:
        lines.insert(0, "where (as the process that ran your code reports it):")
    return lines


def breaks(ev) -> list[dict]:
    """The graph breaks the subject reported (its words: feedback only), at most 20."""
    return [b for b in ev.breaks if isinstance(b, dict)][:20]


def graph_operators(graph: GraphVerdict | None, ev, problem: Problem) -> tuple | None:
    """The operators the learner's checked graph calls, by name, the judge's rebuilt custom
    operator under the name the learner's graph sent (None when there is no graph)."""
    if graph is None or graph.module is None:
        return None
    op = ev.custom_op.op if ev.custom_op is not None else None
    return tuple(problem.custom_op.graph_name if op is not None and node.target is op
                 else str(node.target)
                 for node in graph.module.graph_module.graph.nodes if node.op == "call_function")
