"""What the subject said about one problem (:class:`Evidence`), filled by the parts of
:mod:`grader.isolation.judge.evidence`, and its form on the way to a child of the judge's zygote
(:func:`to_wire`, :func:`from_wire`: a training problem's checks run there)."""
from __future__ import annotations

import dataclasses
import json
import random

from grader.checks import custom_ops
from grader.checks.results import CheckOutcome
from grader.isolation.judge.evidence import custom_op
from grader.problems import Problem

NOT_DATA = {"travels": "in its own form"}   # dataclass field metadata (Evidence)


@dataclasses.dataclass
class Evidence:
    """Everything the subject sent about one problem (data, checked before anything is used),
    by the part of :mod:`grader.isolation.judge.evidence` that fills it. Fields marked ``NOT_DATA``
    go to a child of the judge's zygote in their own form, or are made again there from others
    (:func:`to_wire`); every other field travels as it is."""

    # The load (grader.isolation.judge.evidence.gather): whether the learner's code built, and the
    # compile options it chose, as data the problem allows.
    status: str = "ok"
    message: str = ""
    choice: dict = dataclasses.field(default_factory=dict)
    traceback: str = ""                     # the grader's own failure, for the instructor
    # Every input class the problem tests (name -> inputs), shapes drawn from this seed.
    classes: dict = dataclasses.field(default_factory=dict, metadata=NOT_DATA)
    classes_seed: int | None = None
    # outputs (Need.OUTPUTS): the learner's outputs against the original's, on every class.
    correctness: CheckOutcome | None = dataclasses.field(default=None, metadata=NOT_DATA)
    # custom_op (Need.CUSTOM_OP): the registration as data, (reply, blob); the judge's
    # operator rebuilt from it around the problem's own kernel, and the graph name the learner's
    # graphs call it by.
    custom_op_wire: tuple | None = dataclasses.field(default=None, metadata=NOT_DATA)
    custom_op: custom_ops.Rebuilt | None = dataclasses.field(default=None, metadata=NOT_DATA)
    operators: dict = dataclasses.field(default_factory=dict, metadata=NOT_DATA)
    # graph (Need.GRAPH): the captured graph (header, blob), or why there is none; the graph of
    # each other class whose shapes differ (name -> graph or why not); the shapes of the inputs
    # each was captured on (class name -> reference_side.shapes_of); the breaks the subject
    # reported (its words: feedback only).
    graph: tuple | None = dataclasses.field(default=None, metadata=NOT_DATA)
    captured_shapes: dict = dataclasses.field(default_factory=dict)
    capture_error: str = ""
    compiled: bool = False                  # the subject says Dynamo took it (feedback only)
    class_graphs: dict = dataclasses.field(default_factory=dict, metadata=NOT_DATA)
    breaks: list = dataclasses.field(default_factory=list)
    graph_count: int | None = None
    # compile_count (Need.COMPILE_COUNT): the problem's calls as used, the subject's report.
    recompiles: dict | None = None
    # rule_answers (Need.RULE_ANSWERS): a planning question's answers,
    # {"device", "examples", "answers", "hidden"}.
    plan: dict | None = None
    # declared (grader.checks.results.EvidencePart): each declared part's answer, validated,
    # by the part's name (JSON data).
    declared: dict = dataclasses.field(default_factory=dict)


def plain_fields() -> tuple[str, ...]:
    """The :class:`Evidence` fields that travel to a zygote's child as they are (JSON)."""
    return tuple(f.name for f in dataclasses.fields(Evidence) if f.metadata != NOT_DATA)


def to_wire(ev: Evidence) -> tuple[dict, bytes]:
    """The evidence of a problem the judge checked, as data for a child of its zygote: every
    field but those made from others (the input classes, from their seed; the custom operator,
    from the learner's registration data), graphs as their (header, blob)."""
    blobs: list[bytes] = []

    def part(data: bytes) -> list[int]:
        start = sum(len(b) for b in blobs)
        blobs.append(bytes(data))
        return [start, len(data)]

    header = {name: getattr(ev, name) for name in plain_fields()}
    header["outputs_verdict"] = ev.correctness.to_dict() if ev.correctness is not None else None
    header["graph"] = [ev.graph[0], part(ev.graph[1])] if ev.graph is not None else None
    header["class_graphs"] = {name: got if isinstance(got, str) else [got[0], part(got[1])]
                              for name, got in ev.class_graphs.items()}
    header["custom_op_wire"] = [ev.custom_op_wire[0], part(ev.custom_op_wire[1])] \
        if ev.custom_op_wire is not None else None
    return json.loads(json.dumps(header)), b"".join(blobs)


def from_wire(problem: Problem, header: dict, blob: bytes) -> Evidence:
    """:func:`to_wire`'s data as the :class:`Evidence` it came from (in the child)."""
    def part(where: list) -> bytes:
        return blob[where[0]:where[0] + where[1]]

    ev = Evidence(**{name: header[name] for name in plain_fields()})
    if header["outputs_verdict"] is not None:
        ev.correctness = CheckOutcome.from_dict(header["outputs_verdict"])
    if header["graph"] is not None:
        ev.graph = (header["graph"][0], part(header["graph"][1]))
    ev.class_graphs = {name: got if isinstance(got, str) else (got[0], part(got[1]))
                       for name, got in header["class_graphs"].items()}
    if ev.classes_seed is not None:
        ev.classes = problem.input_classes(random.Random(ev.classes_seed))
    if header["custom_op_wire"] is not None and problem.custom_op is not None:
        ev.custom_op_wire = (header["custom_op_wire"][0], part(header["custom_op_wire"][1]))
        custom_op.rebuild(problem, ev, *ev.custom_op_wire)
    return ev
