"""The subject: the sandboxed process that runs the learner's code, and holds nothing of value.

Started by the judge (:mod:`grader.isolation.judge.steps`) as ``python -m
grader.isolation.sandbox.subject --reply-fd N`` inside :mod:`grader.isolation.sandbox.process`;
requests arrive on stdin, replies leave on fd ``N`` (:mod:`grader.isolation.sandbox.channel`: JSON
and raw tensor bytes). It has no key, no reference solution (not its source, its object or its
compiled code), no expected output and no clock that counts: the judge chose every input it is
given, checks every output it returns and decides every point. Assume that anything here can be
replaced by the learner (the threat model in docs/trust.md): a reply is only ever data for the judge
to check.

Requests (``op``):

- ``load``: execute the learner's cells (named ``<cell N>`` in every message) in the problem
  set's namespace and build each problem's model with the problem's (public) baseline weights;
  report which built and the compile options the learner chose (``compile_dynamic`` ...); for a
  planning question (:class:`grader.problems.JobPlan`) the entry is the learner's rule, kept as
  it is;
- ``call``: the problem's graded call on inputs the judge sent (eager): its outputs, and the
  inputs as they are afterwards (a solution must not change them);
- ``capture``: build a *fresh* model, compile its traced call with ``fullgraph=True`` and send the
  graph Dynamo captured on its first call as data (:mod:`grader.checks.graph_artifact`); when that
  fails, Dynamo's reason and the graph-break report, for the learner's feedback;
- ``recompiles`` (the problem as it is used): build a fresh model, compile its traced call with
  ``fullgraph=True`` and call it on the inputs sent, in order and again until ``total`` calls
  were made; count the compiles, with the guard that failed each time, and say at which call
  anything raised (a break on call 101 is a break) (:mod:`grader.checks.recompiles`);
- ``plan``: the learner's rule asked about each job size sent (``mode_for(calls, device)``):
  what it returned, for the judge to check (only strings travel as such; anything else is
  named by its type), or the error it raised;
- ``evidence``: a kind of evidence a check of the problem declared beside it
  (:class:`grader.checks.results.EvidencePart`, by its ``part`` name): its ``answer`` on the
  learner's model, as JSON data for the judge to validate;
- ``bye``: exit.

Text that comes from the learner's code (an exception, Dynamo's message about their line) is cut
to :data:`MAX_TEXT` characters; the judge marks it as the learner's own when it shows it.

Whose error: an exception a request did not expect is the learner's when it was raised in their
code (a frame of a ``<cell N>`` on its way), and the grader's otherwise (``{"grader_error":
traceback}``: the judge flags it for a person, never as the learner's crash). A learner who
fakes a grader error earns nothing by it: the problem goes to a person.
"""
from __future__ import annotations

import argparse
import json
import linecache
import os
import sys
import traceback
import types

import torch

from grader.checks import _torch_internals as ti
from grader.checks import breaks, custom_ops, graph_artifact, recompiles
from grader.checks.results import EvidencePart
from grader.common.wire import Packer, ProtocolError, decode
from grader.isolation.sandbox import channel
from grader.isolation.cells.source import Cell, strip_magics
from grader.problems import Problem, get_problem

MAX_TEXT = 1500


def text(value: str) -> str:
    value = str(value)
    return value if len(value) <= MAX_TEXT else value[:MAX_TEXT] + " [...]"


def exec_cells(cells: list[Cell], namespace: dict) -> None:
    """Execute cells in ``namespace``; code objects are named ``<cell N>`` so that every report
    (graph breaks, tracebacks) names the learner's cell and line."""
    for cell in cells:
        filename = f"<{cell.label}>"
        source = strip_magics(cell.source)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (that is the point)


def _learner_frames(exc: BaseException) -> list:
    """The frames of ``exc``'s traceback (and of the exceptions it was raised from) that ran a
    learner's cell."""
    frames, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if f.filename.startswith("<cell")] + frames
        exc = exc.__cause__ or exc.__context__
    return frames


def raised_in_learner_code(exc: BaseException) -> bool:
    """Whether ``exc`` went through a learner's cell on its way (else it is the grader's)."""
    return bool(_learner_frames(exc))


def learner_traceback(exc: BaseException) -> str:
    frames = _learner_frames(exc)
    where = f" ({frames[-1].filename.strip('<>')}, line {frames[-1].lineno}: `{frames[-1].line}`)" \
        if frames else ""
    return text(f"{type(exc).__name__}: {exc}{where}")


# The notebook API stays out: learner code in here has nothing to call it for.
GRADING_API = {"check", "evaluate", "run_test"}


def namespace_for(problem_module: str, name: str = "__learner__") -> dict:
    """What a learner's cell sees: the problem set's public names, as in the notebook.

    The namespace is the ``__dict__`` of a module registered as ``name`` in ``sys.modules``:
    Dynamo imports the module of the globals it traces by name."""
    import importlib

    mod = importlib.import_module(problem_module)
    names = getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")])
    module = types.ModuleType(name)
    sys.modules[name] = module
    ns = module.__dict__
    ns.update({"torch": torch, "nn": torch.nn})
    ns.update({n: getattr(mod, n) for n in names if n not in GRADING_API})
    return ns


class Subject:
    """What one subject process knows: the learner's models, one per problem."""

    def __init__(self) -> None:
        self.models: dict[str, object] = {}
        self.entries: dict[str, object] = {}   # what the learner defined: a fresh model's source
        self.problems: dict[str, Problem] = {}
        self.device = "cpu"

    def handle(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        op = request.get("op")
        handler = {"load": self.load, "call": self.call, "capture": self.capture,
                   "breaks": self.breaks, "recompiles": self.recompiles,
                   "plan": self.plan, "custom_op": self.custom_op,
                   "evidence": self.evidence}.get(op)
        if handler is None:
            raise ProtocolError(f"unknown request {op!r}")
        return handler(request, blob)

    def load(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        self.device = str(request["device"])
        if self.device == "cpu":
            torch.set_num_threads(1)
        keys = list(request["problems"])
        module = request.get("problem_module")
        problems = {k: get_problem(k, module) for k in keys}
        first = problems[keys[0]]
        namespace = namespace_for(module or f"grader.problems.{first.assignment}")
        cells = [Cell.from_dict(c) for c in request["cells"]]
        try:
            with ti.quiet_torch_logs():
                exec_cells(cells, namespace)
        except BaseException as exc:  # SystemExit too: a learner's exit() is their error
            why = f"your code raised while it was being loaded: {learner_traceback(exc)}"
            return {"problems": {k: {"status": "learner_error", "message": why} for k in keys}}, b""
        out = {}
        for key, problem in problems.items():
            if problem.entry not in namespace:
                out[key] = {"status": "learner_error",
                            "message": f"your solution must define `{problem.entry}`"}
                continue
            entry = namespace[problem.entry]
            if problem.plan is not None:  # a rule, not a model: asked by the `plan` request
                if not callable(getattr(entry, problem.plan.method, None)):
                    out[key] = {"status": "learner_error",
                                "message": f"`{problem.entry}` must have a static method "
                                           f"`{problem.plan.method}(calls, device)`"}
                    continue
                self.models[key], self.problems[key] = entry, problem
                out[key] = {"status": "ok", "choice": {}}
                continue
            try:
                with torch.no_grad():
                    baseline = problem.make_baseline(self.device)
                model = problem.instantiate(entry, baseline, self.device)
                choice = problem.compile_options(entry) if problem.compile_options else {}
            except Exception as exc:
                out[key] = {"status": "learner_error",
                            "message": f"could not build `{problem.entry}`: {learner_traceback(exc)}"}
                continue
            self.models[key], self.problems[key], self.entries[key] = model, problem, entry
            out[key] = {"status": "ok", "choice": {k: v for k, v in choice.items()
                                                   if isinstance(v, (str, bool, int)) or v is None}}
        return {"problems": out}, b""

    def _model(self, request: dict):
        key = request["problem"]
        if key not in self.models:
            raise ProtocolError(f"problem {key!r} was not loaded")
        return self.problems[key], self.models[key]

    def _fresh_model(self, request: dict):
        """A model built again from what the learner defined, never called: a structural
        check sees the problem as it is used, from its first call (a debug branch that runs on
        call 1, 101, 201 ... is not skipped because earlier checks called the model)."""
        problem, _ = self._model(request)
        with torch.no_grad():
            baseline = problem.make_baseline(self.device)
        return problem, problem.instantiate(self.entries[request["problem"]], baseline,
                                            self.device)

    def call(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        problem, model = self._model(request)
        inputs = decode(request["inputs"], blob, self.device)
        packer = Packer()
        try:
            with ti.quiet_torch_logs():
                outputs = problem.graded_call(model)(*inputs)
            reply = {"outputs": packer.value(outputs), "inputs_after": packer.value(inputs)}
        except Exception as exc:
            return {"error": f"your code raised: {learner_traceback(exc)}"}, b""
        return reply, packer.blob()

    def capture(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        problem, model = self._fresh_model(request)
        inputs = decode(request["inputs"], blob, self.device)
        dynamic = request.get("dynamic")
        traced = problem.traced_call(model)
        try:
            captured = graph_artifact.capture(traced, inputs, model=model, dynamic=dynamic)
            packer = Packer()
            return {"graph": graph_artifact.to_wire(captured, packer)}, packer.blob()
        except graph_artifact.CaptureError as exc:
            # compiled: Dynamo took it whole, but the grader does not call it one graph.
            reply = {"error": text(str(exc)),
                     "compiled": isinstance(exc, graph_artifact.HostRead)}
        reply.update(self._report(problem.traced_call(self._fresh_model(request)[1]), inputs))
        return reply, b""

    def custom_op(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        """The learner's registration of the problem's custom operator as graphs (ps8: its fake
        and its autograd formula traced into ATen operators), never as code."""
        problem, _ = self._model(request)
        packer = Packer()
        try:
            with ti.quiet_torch_logs():
                reply = custom_ops.registration_data(problem.custom_op, packer)
        except Exception as exc:
            return {"error": f"your operator could not be traced: {learner_traceback(exc)}"}, b""
        return json.loads(json.dumps(reply)), packer.blob()

    def evidence(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        """A kind of evidence declared beside a check of the problem
        (:class:`grader.checks.results.EvidencePart`): its ``answer`` on the learner's model."""
        problem, model = self._model(request)
        part = next((n for n in problem.needs() if isinstance(n, EvidencePart)
                     and n.name == request.get("part")), None)
        if part is None:
            raise ProtocolError(f"no evidence part {str(request.get('part'))[:60]!r}")
        with ti.quiet_torch_logs():
            data = part.answer(model, problem)
        return {"data": json.loads(json.dumps(data))}, b""

    def breaks(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        problem, model = self._fresh_model(request)
        inputs = decode(request["inputs"], blob, self.device)
        return self._report(problem.traced_call(model), inputs), b""

    @staticmethod
    def _report(traced, inputs) -> dict:
        """Why it is not one graph, in the learner's own lines (feedback only: nothing is
        credited from it)."""
        try:
            report = breaks.graph_break_report(traced, *inputs)
        except Exception as exc:
            return {"report_error": learner_traceback(exc)}
        return {"graph_count": report.graph_count,
                "breaks": [_break_dict(b) for b in report.breaks[:20]]}

    def recompiles(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        problem, model = self._fresh_model(request)
        calls = decode(request["calls"], blob, self.device)
        total = max(len(calls), int(request.get("total") or 0))
        try:
            rep = recompiles.recompile_check(problem.traced_call(model),
                                             [calls[i % len(calls)] for i in range(total)],
                                             dynamic=request.get("dynamic"),
                                             max_compiles=int(request["max_compiles"]),
                                             fullgraph=True, give_fix=False)
        except Exception as exc:
            return {"error": f"your code raised: {learner_traceback(exc)}"}, b""
        return {"compiles": rep.compiles, "hit_limit": rep.hit_limit, "calls": rep.calls,
                "reasons": [text(r) for r in rep.reasons[:10]], "message": text(str(rep)),
                "failed_call": rep.failed_call,
                "failure": text(rep.failure) if rep.failure else ""}, b""

    def plan(self, request: dict, blob: bytes) -> tuple[dict, bytes]:
        problem, rule = self._model(request)
        if problem.plan is None:
            raise ProtocolError(f"problem {problem.key!r} is not a planning question")
        device, answers, kinds = str(request["device"]), [], []
        for calls in request["sizes"]:
            try:
                answer = getattr(rule, problem.plan.method)(int(calls), device)
            except BaseException as exc:  # SystemExit too: the learner's error
                return {"error": f"your rule raised for calls={int(calls):,}, device="
                                 f"{device!r}: {learner_traceback(exc)}"}, b""
            answers.append(text(answer) if isinstance(answer, str) else None)
            kinds.append(type(answer).__name__)
        return {"modes": answers, "types": kinds}, b""


def _break_dict(b: breaks.GraphBreak) -> dict:
    return {"cause": b.cause, "explanation": b.explanation, "fix": b.fix,
            "where": b.location.label if b.location else "",
            "line": text(b.location.line) if b.location else "",
            "reason": text(b.reason.splitlines()[0]) if b.reason else ""}


def serve(reply_fd: int) -> int:
    """Answer the judge's requests from stdin on ``reply_fd`` until it says bye or stdin closes
    (:func:`grader.isolation.sandbox.channel.serve`)."""
    subject = Subject()

    def answer(request: dict, blob: bytes) -> tuple[dict, bytes]:
        if request.get("op") == "bye":
            return {"bye": True}, b""
        if request.get("op") == "hello":  # started: the judge measures how long that took
            return {"hello": True}, b""
        try:
            return subject.handle(request, blob)
        except Exception as exc:  # noqa: BLE001 (whose it is decides what the judge makes of it)
            if raised_in_learner_code(exc):
                return {"error": f"your code raised: {learner_traceback(exc)}"}, b""
            return {"grader_error": traceback.format_exc()[-4 * MAX_TEXT:]}, b""

    return channel.serve(reply_fd, answer, done=lambda request: request.get("op") == "bye")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the sandboxed process that runs learner code")
    parser.add_argument("--reply-fd", type=int, required=True,
                        help="the file descriptor replies are written to")
    parser.add_argument("--import-ahead", action="store_true",
                        help="import Dynamo before the first request (a subject started ahead of "
                             "its job: the imports are done when the job comes)")
    args = parser.parse_args(argv)
    if args.import_ahead:
        import torch._dynamo  # noqa: F401  (what capturing and counting compiles import)
    return serve(args.reply_fd)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: nothing of the learner's runs after the last reply
