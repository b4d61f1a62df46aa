"""The fresh process that grades one problem from the learner's source.

Run as ``python -m grader.isolation.worker`` by :mod:`grader.isolation.isolate`, inside :mod:`grader.isolation.sandbox`. The
order of the steps is the point of this module:

1. import the grader (binding the clock, CUDA synchronize and what writes the result) and torch;
2. read the whole job from stdin (the spec, the reference solution's source, a one-time key and
   the number of the result channel's file descriptor) and close stdin;
3. build, compile and warm the baseline and the reference solution — before any learner code
   runs, so nothing the learner does can change or slow them; then drop the reference's source
   (the spec, the line cache) and the folder its compiled code was written to;
4. take a snapshot of what a cheat would replace (clock, synchronize, ``torch.compile``, torch's
   operators, ``json``/``os``/``sys``/``builtins``, the grader's functions and classes, the
   compiler configs);
5. execute the learner's cells (named "cell N" in every message), which the trusted parent has
   already screened (:mod:`grader.isolation.static_check`; screened again here);
6. after that and after *every* later call into learner code (building the model, each check):
   compare with the snapshot; a replaced function or changed config ends the run as
   'tampered', and nothing is credited;
7. run the checks (correctness first, on fresh seeds nobody could predict; speed last, compiled
   with ``fullgraph=True`` and re-checking the outputs of the timed runs);
8. write the result, with an HMAC under the one-time key, to the result channel.

Defences against a forged result, and what remains: the result leaves through a pipe whose
number only the job on stdin names (no path, nothing on the command line), authenticated with a
key learner code is not handed; the functions that serialise and write it are bound in step 1;
the parent (:mod:`grader.isolation.verify`) rejects a result that is missing, malformed, unauthenticated or
inconsistent (a pass without the measurements behind it; the speed verdict is recomputed there
from the raw timings). What remains: learner code runs in this process, so code that gets past
the static check *and* the snapshot (reading the key out of memory, say) could still report
made-up measurements. The static check forbids the names that reach memory, files and the
interpreter's internals (``gc``, ``sys``, ``os``, ``open``, dunder attributes, ...), and the
sandbox leaves nothing secret to read.
"""
from __future__ import annotations

# Step 1. These imports must come before anything of the learner's.
import base64
import dataclasses
import hashlib
import hmac
import json
import linecache
import os
import re
import shutil
import sys
import threading
import time
import traceback
import types

import torch

from grader.checks import _torch_internals as ti
from grader.checks import breaks, correctness, fusion, recompiles, targets, timing
from grader.isolation import static_check
from grader.isolation import check as _check_api  # noqa: F401  (imported so that the snapshot covers it too)
from grader.problems import NO_COMPILE, Problem, get_problem, seeded_generator
from grader.checks.results import CHECKS, CheckOutcome, ProblemResult, Status
from grader.isolation.sandbox import pack_folder, unpack_folder
from grader.isolation.source import Cell, strip_magics

_DUMPS = json.dumps
_HMAC_NEW = hmac.new
_SHA256 = hashlib.sha256
_WRITE = os.write
_CLOSE = os.close
# In the sandbox TMPDIR is its private /tmp; without one, the worker's own temporary home
# (grader.isolation.isolate), so that two workers never share these folders.
REFERENCE_CACHE = os.path.join(os.environ.get("TMPDIR") or "/tmp", "inductor-reference")
LEARNER_CACHE = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or \
    os.path.join(os.environ.get("TMPDIR") or "/tmp", "inductor")


# ---------------------------------------------------------------------------------------------
# Steps 4 and 6: tamper detection

_GUARDED_MODULES = ("builtins", "json", "json.encoder", "os", "sys", "hmac", "hashlib", "time",
                    "threading", "linecache")


def _watched_namespaces() -> dict[str, dict]:
    import torch.nn.functional as F

    spaces = {
        "torch": vars(torch), "torch.nn.functional": vars(F),
        "torch.Tensor": dict(vars(torch.Tensor)), "torch.nn.Module": dict(vars(torch.nn.Module)),
        **ti.tensor_base_namespace(),
        "torch.cuda": vars(torch.cuda), "torch.compiler": vars(torch.compiler),
        "torch._dynamo": vars(torch._dynamo), "torch.nn": vars(torch.nn),
    }
    for name in _GUARDED_MODULES:
        if name in sys.modules:
            spaces[name] = vars(sys.modules[name])
    for name, obj in vars(torch.nn).items():  # every layer's forward (nn.Linear.forward, ...)
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
            spaces[f"torch.nn.{name}"] = dict(vars(obj))
    for mod_name, mod in list(sys.modules.items()):
        if mod_name == "grader" or mod_name.startswith("grader."):
            spaces[mod_name] = vars(mod)
            for attr, obj in list(vars(mod).items()):  # the grader's classes (Evaluation, ...)
                if isinstance(obj, type) and getattr(obj, "__module__", "") == mod_name:
                    spaces[f"{mod_name}.{attr}"] = dict(vars(obj))
    return spaces


# Dynamo adds its compiled functions to the globals of the module it compiled code from.
_DYNAMO_GENERATED = re.compile(r"^(__compiled_fn_|__resume_at_|___)")


def snapshot(allowed_config: frozenset = frozenset()) -> dict[tuple[str, str], object]:
    """What a cheat could replace: identities of functions and modules, values of the compiler
    configs (``allowed_config``: the "module.name" settings a problem lets the learner change)."""
    snap: dict[tuple[str, str], object] = {}
    for space, names in _watched_namespaces().items():
        functions = set()
        for name, value in list(names.items()):
            if _DYNAMO_GENERATED.match(name):  # Dynamo adds and removes these itself
                continue
            if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
                snap[(space, name)] = id(value)
                functions.add(name)
        # A new function on a class shadows the one it inherits (``torch.Tensor.sum = ...``).
        snap[(space, "<functions>")] = frozenset(functions)
    for name in (*_GUARDED_MODULES, "torch", "grader.checks.timing", "grader.isolation.worker"):
        snap[("sys.modules", name)] = id(sys.modules.get(name))
    for key, value in ti.compiler_config_values().items():
        if key not in allowed_config:
            snap[("config", key)] = value
    snap[("sys", "trace")] = id(sys.gettrace())
    snap[("sys", "profile")] = id(sys.getprofile())
    return snap


def _learner_threads(threads_before: set[int]) -> list[str]:
    """Threads started since the snapshot whose code is the learner's (torch starts its own
    threads while compiling; those are not tampering)."""
    found = []
    for thread in threading.enumerate():
        if thread.ident in threads_before:
            continue
        target = getattr(thread, "_target", None)
        code = getattr(getattr(target, "__func__", target), "__code__", None) if target else \
            getattr(type(thread).run, "__code__", None)
        filename = getattr(code, "co_filename", "")
        if filename.startswith("<cell") or not filename or filename.startswith("<"):
            found.append("started a background thread")
    return found[:1]


def tampering(before: dict, threads_before: set[int],
              allowed_config: frozenset = frozenset()) -> list[str]:
    """What the learner's code replaced or changed (empty when nothing)."""
    after = snapshot(allowed_config)
    changed = []
    for (space, name), value in before.items():
        now = after.get((space, name))
        if name == "<functions>":
            changed += [f"{space}.{added}" for added in sorted((now or frozenset()) - value)]
        elif now != value:
            changed.append(f"{space}.{name}")
    changed += _learner_threads(threads_before)
    return sorted(changed)



class Tampered(Exception):
    """Learner code replaced something the grader relies on."""


@dataclasses.dataclass
class Guard:
    """Compares with the snapshot after each call into learner code."""

    before: dict
    threads: set[int]
    allowed_config: frozenset

    def check(self) -> None:
        replaced = tampering(self.before, self.threads, self.allowed_config)
        if replaced:
            raise Tampered(", ".join(replaced[:6]) + (" ..." if len(replaced) > 6 else ""))


# ---------------------------------------------------------------------------------------------
# Step 5: executing learner cells

def _register(cell: Cell, filename: str) -> str:
    source = strip_magics(cell.source)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return source


def exec_cells(cells: list[Cell], namespace: dict, prefix: str = "") -> None:
    """Execute cells in ``namespace``; code objects are named ``<cell N>`` so that every report
    (graph breaks, tracebacks) names the learner's cell and line."""
    for cell in cells:
        filename = f"<{prefix}{cell.label}>"
        source = _register(cell, filename)
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (that is the point)


def _forget_sources(prefix: str) -> None:
    for filename in [f for f in linecache.cache if f.startswith(f"<{prefix}")]:
        del linecache.cache[filename]


def _learner_traceback(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell")]
    where = f" ({frames[-1].filename.strip('<>')}, line {frames[-1].lineno}: `{frames[-1].line}`)" \
        if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _namespace_for(problem_module: str, name: str = "__learner__") -> dict:
    """What a learner's cell sees: the problem set's public names, as in the notebook.

    The namespace is the ``__dict__`` of a module registered as ``name`` in ``sys.modules``:
    Dynamo (2.6) imports the module of the globals it traces by name."""
    import importlib

    mod = importlib.import_module(problem_module)
    names = getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")])
    module = types.ModuleType(name)
    sys.modules[name] = module
    ns = module.__dict__
    ns.update({"torch": torch, "nn": torch.nn})
    # The grading API stays out: learner code in here has nothing to call it for.
    ns.update({n: getattr(mod, n) for n in names if n not in _GRADING_API})
    return ns


_GRADING_API = {"check", "evaluate", "run_test"}


def _timed_version(model, problem: Problem, options: dict):
    """What a job or speed measurement calls: ``model`` eagerly for ``mode="none"``, else
    compiled with ``options`` (and ``fullgraph=True`` where the problem times one graph)."""
    if options.get("mode") == NO_COMPILE:
        return problem.graded_call(model)
    options = {**options, "fullgraph": True} if problem.timed_fullgraph else dict(options)
    return problem.graded_call(torch.compile(model, **options))


# ---------------------------------------------------------------------------------------------
# Step 7: the checks, each a function of the session

@dataclasses.dataclass
class Session:
    """What the checks of one problem share."""

    problem: Problem
    device: str
    seeds: list[int]
    pool: list[tuple]
    base_model: object
    base_eager: object
    base_timed: object
    reference: object | None
    expected: list
    learner_model: object = None
    learner_eager: object = None    # the graded call (compared and timed), eager
    learner_traced: object = None   # what the graph-break and recompile checks compile
    compile_kwargs: dict = dataclasses.field(default_factory=dict)
    budget_s: float = 45.0
    reference_first_s: float = 0.0   # the reference's cold compile + first call (job check)
    results: dict = dataclasses.field(default_factory=dict)

    def fresh_inputs(self, index: int = 0) -> tuple:
        return self.problem.make_inputs(seeded_generator(self.seeds[-3:][index]), self.device)

    def traced_inputs(self) -> tuple:
        """What the graph-break checks call the traced model with: one step's arguments where
        the model is a step of the problem's loop, else fresh inputs."""
        if self.problem.step_inputs is not None:
            return self.problem.step_inputs(self.device)
        return self.fresh_inputs()


def _breaks_dict(report: breaks.GraphBreakReport | None) -> list[dict]:
    if report is None:
        return []
    return [{"cause": b.cause, "explanation": b.explanation, "fix": b.fix,
             "where": b.location.label if b.location else "", "line": b.location.line
             if b.location else "", "reason": b.reason.splitlines()[0] if b.reason else ""}
            for b in report.breaks]


def check_correctness(s: Session) -> dict:
    rep = correctness.check_outputs(
        s.learner_eager, s.base_eager,
        lambda seed: s.problem.make_inputs(seeded_generator(seed), s.device), seeds=s.seeds[-3:],
        grad=s.problem.training)
    return {"ok": rep.ok, "checked": rep.checked, "message": str(rep)}


def check_fullgraph(s: Session) -> dict:
    fg = breaks.fullgraph_check(s.learner_traced, *s.traced_inputs())
    return {"ok": fg.ok, "message": str(fg), "breaks": _breaks_dict(fg.report)}


def check_breaks(s: Session) -> dict:
    rep = breaks.graph_break_report(s.learner_traced, *s.traced_inputs())
    return {"ok": rep.ok, "graph_count": rep.graph_count, "message": str(rep),
            "breaks": _breaks_dict(rep)}


def check_recompiles(s: Session) -> dict:
    rep = recompiles.recompile_check(s.learner_traced, s.problem.recompile_inputs(s.device),
                                     max_compiles=s.problem.max_compiles,
                                     **{k: v for k, v in s.compile_kwargs.items() if k == "dynamic"})
    return {"ok": rep.ok, "compiles": rep.compiles, "hit_limit": rep.hit_limit,
            "message": str(rep)}


def check_fusion(s: Session) -> dict:
    rep = fusion.fusion_report(s.learner_traced, *s.traced_inputs(), **s.compile_kwargs)
    limit = s.problem.max_kernels
    hidden = rep.custom_ops
    ok = not hidden and (limit is None or rep.total <= limit)
    message = f"{rep} (allowed: at most {limit} in all)"
    if hidden:
        message += ("; a custom operator hides its work from the count, so it cannot be "
                    "credited as fused: write the computation with torch operations")
    return {"ok": ok, "kernels": rep.total, "generated": rep.kernels, "library": rep.library,
            "max_kernels": limit, "message": message}


def check_speed(s: Session) -> dict:
    if not s.results.get("correctness", {"ok": True})["ok"]:
        return {"ok": False, "verdict": "fail", "message": "speed not measured: the outputs are wrong"}
    problem = s.problem
    # Speed is credited to one graph only: a Python-side cache or shortcut in `forward` would
    # need a graph break, and fullgraph turns that into an error instead of a speedup.
    learner_c = _timed_version(s.learner_model, problem, s.compile_kwargs)
    target = problem.target
    if s.reference is None:  # self-check: shipped floors only
        target = targets.self_check_target(problem)
    try:
        verdict = targets.judge_speed(learner_c, s.base_timed, s.pool, reference=s.reference,
                                      target=target, device=s.device, budget_s=s.budget_s)
    except Exception as exc:
        if not ti.is_graph_break_error(exc):
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return {"ok": False, "verdict": "fail",
                "message": f"not timed: speed is measured only for a solution that compiles as one "
                           f"graph (fullgraph=True), and compiling this one stopped at a graph "
                           f"break: {first}"}
    out = verdict.to_dict()
    out["message"] = str(verdict)
    out["ok"] = verdict.passed
    out["with_reference"] = s.reference is not None
    # The outputs of the timed runs must still be right (no caching, no skipped work).
    for index, output in verdict.comparison.last_outputs.get("learner", []):
        problem_msg = correctness.compare_output(output, s.expected[index], "a timed run's output")
        if problem_msg is not None:
            out.update(ok=False, verdict="fail",
                       message=f"{problem_msg}; speed is only credited for correct outputs")
            break
    return out


JOB_TRIALS = 21


def check_job(s: Session) -> dict:
    """The job's total time (cold compile + ``job_calls`` calls) with the learner's choice of
    mode, against the reference's choice and against not compiling, in the same run."""
    if not s.results.get("correctness", {"ok": True})["ok"]:
        return {"ok": False, "verdict": "fail", "message": "not timed: the outputs are wrong"}
    problem = s.problem
    learner = _timed_version(s.learner_model, problem, s.compile_kwargs)
    with ti.fresh_inductor_cache():  # a cold compile (if any), as the reference's was
        first = timing.first_call_seconds(learner, s.pool[0], s.device)
    fns = {"baseline": s.base_eager, "learner": learner}
    first_call_s = {"baseline": 0.0, "learner": first}
    if s.reference is not None:
        fns["reference"] = s.reference
        first_call_s["reference"] = s.reference_first_s
    comp = timing.compare(fns, s.pool, baseline="baseline", device=s.device, trials=JOB_TRIALS,
                          keep_outputs=("learner",))
    target = problem.target if s.reference is not None else targets.self_check_target(problem)
    samples = {n: list(comp.seconds[n]) for n in comp.names}
    verdict, conds, totals = targets.judge_job(samples, first_call_s, problem.job_calls, target,
                                               targets.device_class(s.device), s.reference is not None)
    lines = [f"job of {problem.job_calls:,} calls: {verdict.upper()} on "
             f"{targets.device_class(s.device)}"] + [f"  {c}" for c in conds]
    lines.append(f"  {'':<12}{'first call s':>13}{'ms/call':>10}{'job total s':>13}")
    for name in comp.names:
        lines.append(f"  {name:<12}{first_call_s[name]:>13.2f}"
                     f"{comp.per_call(name).median * 1e3:>10.3f}{totals[name].median:>13.1f}")
    out = {"ok": verdict == "pass", "verdict": verdict, "samples": samples,
           "first_call_s": first_call_s, "calls": problem.job_calls,
           "with_reference": s.reference is not None, "message": "\n".join(lines)}
    for index, output in comp.last_outputs.get("learner", []):
        problem_msg = correctness.compare_output(output, s.expected[index], "a timed run's output")
        if problem_msg is not None:
            out.update(ok=False, verdict="fail", message=f"{problem_msg}; time is only credited "
                                                          f"for correct outputs")
            break
    return out


# The order is fixed (and is the order of grader.checks.results.REGISTRY): speed and job last, because
# they are only measured for correct outputs.
CHECK_FUNCTIONS = {"correctness": check_correctness, "fullgraph": check_fullgraph,
                   "breaks": check_breaks, "recompiles": check_recompiles,
                   "fusion": check_fusion, "speed": check_speed, "job": check_job}
assert tuple(CHECK_FUNCTIONS) == CHECKS


def _guarded(check, session: Session) -> dict:
    """Run one check; when the learner's code raises inside it (e.g. Dynamo's recompile limit
    under ``fullgraph=True`` while being timed), that check fails with the reason and the
    others keep their results."""
    try:
        return check(session)
    except Tampered:
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return {"ok": False, "verdict": "fail",
                "message": f"your code raised {type(exc).__name__} during this check: {first}"}


# ---------------------------------------------------------------------------------------------
# Steps 2-7

def _prepare(spec: dict, problem: Problem, device: str, checks: list[str],
             keep_cache: bool = False, phases: dict | None = None) -> Session:
    """Step 3: baseline and reference, compiled and warmed before any learner code runs.

    Their generated code goes to a folder of its own (:data:`REFERENCE_CACHE`), removed before
    learner code runs. When the job brings that folder ``prepared`` (compiled once per grading
    run by :func:`prepare_reference`, with the reference's cold first call timed there), it is
    unpacked first: the compiles below then hit its cache instead of compiling again.
    ``keep_cache``: leave the folder (for :func:`prepare_reference` to send back). ``phases``
    receives the seconds of each part."""
    phases = {} if phases is None else phases
    mark = [time.monotonic()]

    def lap(name: str) -> None:
        now = time.monotonic()
        phases[name] = round(now - mark[0], 3)
        mark[0] = now

    seeds = correctness.fresh_seeds(problem.pool_size + 3)
    pool = [problem.make_inputs(seeded_generator(seed), device) for seed in seeds[: problem.pool_size]]
    with torch.no_grad():
        base_model = problem.make_baseline(device)
    base_eager = problem.graded_call(base_model)
    base_timed = base_eager
    if problem.baseline_compile is not None:
        base_timed = problem.graded_call(torch.compile(base_model, **problem.baseline_compile))
    reference = None
    reference_cells = spec.pop("reference_cells", None)
    prepared = spec.pop("prepared", None)
    problem_module = spec.get("problem_module") or f"grader.problems.{problem.assignment}"
    timed = "speed" in checks or "job" in checks
    if timed:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = REFERENCE_CACHE
        if prepared:
            _unpack(prepared["cache"], REFERENCE_CACHE)
        lap("setup")
        # Start the compiler's workers and toolchain now, so no one timed pays for it.
        ti.warm_inductor(device, fresh=False)
        lap("compiler warm-up")
    if reference_cells and timed:
        ref_ns = _namespace_for(problem_module, "__reference__")
        with ti.quiet_torch_logs():
            exec_cells([Cell.from_dict(c) for c in reference_cells], ref_ns, prefix="reference ")
        del reference_cells
        _forget_sources("reference ")
        entry = ref_ns[problem.entry]
        ref_model = problem.instantiate(entry, base_model, device)
        reference = _timed_version(ref_model, problem, problem.compile_kwargs(entry))
        del ref_ns, entry
        sys.modules.pop("__reference__", None)
    reference_first_s = 0.0
    with ti.quiet_torch_logs():
        if base_timed is not base_eager and timed:
            timing.first_call_seconds(base_timed, pool[0], device)
            lap("baseline compile")
        if reference is not None:  # a cold compile, unless the folder came prepared
            reference_first_s = timing.first_call_seconds(reference, pool[0], device)
            lap("reference compile")
            if prepared:  # timed cold where it was compiled, once for the whole run
                reference_first_s = float(prepared["reference_first_s"])
    del prepared
    if not keep_cache:
        shutil.rmtree(REFERENCE_CACHE, ignore_errors=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = LEARNER_CACHE
    expected = [base_eager(*args) for args in pool]
    lap("expected outputs")
    return Session(problem, device, seeds, pool, base_model, base_eager, base_timed, reference,
                   expected, budget_s=float(spec.get("budget_s") or problem.budget_s),
                   reference_first_s=reference_first_s)


def _pack(folder: str) -> str:
    """A folder as text (a gzipped tar, base64), to travel inside a JSON job or result."""
    return base64.b64encode(pack_folder(folder)).decode()


def _unpack(text: str, folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    unpack_folder(base64.b64decode(text), folder)


def prepare_reference(spec: dict, phases: dict | None = None) -> dict:
    """The compiled baseline and reference of one timed problem, for every submission of a
    grading run: the cache folder they were compiled into (packed by :func:`_pack`) and the
    reference's cold first call. No learner code runs in this process."""
    phases = {} if phases is None else phases
    started = time.monotonic()
    problem = get_problem(spec["problem"], spec.get("problem_module"))
    device = spec.get("device") or targets.default_device()
    if device == "cpu":
        torch.set_num_threads(1)  # as in run_checks: the same compiled code
    checks = [c for c in problem.checks if c in spec.get("checks", problem.checks)]
    session = _prepare(spec, problem, device, checks, keep_cache=True, phases=phases)
    return {"status": Status.OK, "problem": problem.key, "device": device,
            "device_class": targets.device_class(device),
            "reference_first_s": session.reference_first_s, "cache": _pack(REFERENCE_CACHE)}


def run_checks(spec: dict, phases: dict | None = None) -> dict:
    """Steps 3-7 for one problem; ``phases`` receives the seconds each step took (the grading
    benchmark's breakdown: what it costs, not what it earns)."""
    started = time.monotonic()
    phases = {} if phases is None else phases
    mark = [started]

    def lap(name: str) -> None:
        now = time.monotonic()
        phases[name] = round(phases.get(name, 0.0) + now - mark[0], 3)
        mark[0] = now

    problem = get_problem(spec["problem"], spec.get("problem_module"))
    problem_module = spec.get("problem_module") or f"grader.problems.{problem.assignment}"
    device = spec.get("device") or targets.default_device()
    if device == "cpu":
        # One thread per timed CPU measurement: far steadier ratios (docs/design.md).
        torch.set_num_threads(1)
    checks = [c for c in problem.checks if c in spec.get("checks", problem.checks)]
    result = ProblemResult(Status.OK, problem.key, device=device,
                           device_class=targets.device_class(device))
    session = _prepare(spec, problem, device, checks, phases=phases)
    mark[0] = time.monotonic()
    learner_cells = [Cell.from_dict(c) for c in spec.pop("learner_cells")]

    # Screened again here (the parent screened first). Only the trusted parent can turn this
    # off, for the tests of the snapshot behind it.
    refusals = static_check.check_cells(learner_cells, problem.allowed_config) \
        if spec.get("static_check", True) else []
    if refusals:
        return _stopped(result, Status.REFUSED, static_check.describe(refusals))
    allowed = frozenset(problem.allowed_config)
    ti.install_dynamo_hooks()
    guard = Guard(snapshot(allowed), {t.ident for t in threading.enumerate()}, allowed)
    namespace = _namespace_for(problem_module)
    try:
        try:
            exec_cells(learner_cells, namespace)
        except BaseException as exc:  # SystemExit too: a learner's exit() is their error, not ours
            guard.check()
            return _stopped(result, Status.LEARNER_ERROR,
                            f"your code raised while it was being loaded: {_learner_traceback(exc)}")
        guard.check()
        if problem.entry not in namespace:
            return _stopped(result, Status.LEARNER_ERROR,
                            f"your solution must define `{problem.entry}`")
        entry = namespace[problem.entry]
        try:
            session.learner_model = problem.instantiate(entry, session.base_model, device)
            session.compile_kwargs = problem.compile_kwargs(entry)
        except Exception as exc:
            guard.check()
            return _stopped(result, Status.LEARNER_ERROR,
                            f"could not build `{problem.entry}`: {_learner_traceback(exc)}")
        guard.check()
        session.learner_eager = problem.graded_call(session.learner_model)
        session.learner_traced = problem.traced_call(session.learner_model)
        lap("learner cells")
        with ti.quiet_torch_logs():
            for name, check in CHECK_FUNCTIONS.items():
                if name in checks and (name != "recompiles" or problem.recompile_inputs is not None):
                    session.results[name] = _guarded(check, session)
                    guard.check()
                    lap(f"check {name}")
    except Tampered as exc:
        return _stopped(result, Status.TAMPERED,
                        f"your code replaced or hooked functions the grader relies on ({exc}); "
                        f"nothing was credited")
    result.checks = {name: CheckOutcome.from_dict(out) for name, out in session.results.items()}
    result.extra["seconds"] = time.monotonic() - started
    return result.to_dict()


def _stopped(result: ProblemResult, status: Status, message: str) -> dict:
    """The result of a problem whose checks did not run (or are void): why, and nothing else."""
    result.status, result.message, result.checks = status, message, {}
    return result.to_dict()


# ---------------------------------------------------------------------------------------------
# Steps 2 and 8: the job in, the result out

def _reporter(key: bytes, fd: int):
    """A function that writes one authenticated result to ``fd``; the key lives only here."""
    def report(result: dict) -> None:
        payload = _DUMPS(result, default=str).encode()
        mac = _HMAC_NEW(key, payload, _SHA256).hexdigest().encode()
        data = mac + b"\n" + payload
        while data:
            data = data[_WRITE(fd, data):]
        _CLOSE(fd)
    return report


def main() -> int:
    job = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    report = _reporter(bytes.fromhex(job.pop("key")), int(job.pop("result_fd")))
    # From the parent's start of this process to here: sandbox, interpreter, imports (torch).
    phases = {"worker start": round(max(0.0, time.time() - float(job.get("sent_at") or time.time())), 3)}
    spec = job["spec"]
    del job
    try:
        result = prepare_reference(spec, phases) if spec.get("prepare") else run_checks(spec, phases)
    except BaseException as exc:
        result = {"status": Status.GRADER_ERROR, "message": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()}
    result["phases"] = phases
    report(result)
    return 0


if __name__ == "__main__":
    # os._exit: skip interpreter teardown (learner atexit hooks cannot add anything).
    sys.stdout.flush()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
