"""The fresh process that grades one problem from the learner's source.

Run as ``python -m grader.worker SPEC.json RESULT.json`` by :mod:`grader.isolate`. The order of
the steps is the point of this module:

1. import the grader (binding the clock and CUDA synchronize) and torch;
2. build, compile and warm the baseline and the reference solution — before any learner code
   runs, so nothing the learner does can change or slow them;
3. take a snapshot of the functions a cheat would replace (clock, synchronize, torch.compile,
   torch's operators, the grader itself);
4. execute the learner's cells (named "cell N" in every message);
5. compare with the snapshot: a replaced function is reported as tampering, and nothing is
   measured;
6. run the checks (correctness first, on fresh seeds nobody could predict), speed last, and
   re-check the outputs of the timed runs against the baseline.
"""
from __future__ import annotations

# Step 1. These imports must come before anything of the learner's.
import json
import linecache
import os
import sys
import threading
import time
import traceback

import torch

from . import _torch_internals as ti
from . import breaks, correctness, fusion, recompiles, targets, timing
from .problems import Problem, get_problem, seeded_generator
from .source import Cell, strip_magics


# ---------------------------------------------------------------------------------------------
# Step 3 and 5: tamper detection

def _watched_namespaces() -> dict[str, dict]:
    import torch.nn.functional as F

    spaces = {
        "time": vars(time), "torch": vars(torch), "torch.nn.functional": vars(F),
        "torch.Tensor": dict(vars(torch.Tensor)), "torch.nn.Module": dict(vars(torch.nn.Module)),
        "torch.cuda": vars(torch.cuda), "torch.compiler": vars(torch.compiler),
        "torch._dynamo": vars(torch._dynamo), "torch.nn": vars(torch.nn),
    }
    for name, obj in vars(torch.nn).items():  # every layer's forward (nn.Linear.forward, ...)
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
            spaces[f"torch.nn.{name}"] = dict(vars(obj))
    for mod_name, mod in list(sys.modules.items()):
        if mod_name == "grader" or mod_name.startswith("grader."):
            spaces[mod_name] = vars(mod)
    return spaces


def snapshot() -> dict[tuple[str, str], int]:
    """Identities of every function a cheat could replace."""
    snap = {}
    for space, names in _watched_namespaces().items():
        for name, value in list(names.items()):
            if callable(value) or isinstance(value, (staticmethod, classmethod, property)):
                snap[(space, name)] = id(value)
    snap[("sys", "trace")] = id(sys.gettrace())
    snap[("sys", "profile")] = id(sys.getprofile())
    return snap


def tampering(before: dict[tuple[str, str], int], threads_before: int) -> list[str]:
    """What the learner's code replaced (empty when nothing)."""
    after = snapshot()
    changed = [f"{space}.{name}" for (space, name), ident in before.items()
               if after.get((space, name)) != ident]
    if threading.active_count() > threads_before:
        changed.append("started a background thread")
    return sorted(changed)


# ---------------------------------------------------------------------------------------------
# Step 4: executing learner cells

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


def _learner_traceback(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("<cell")]
    where = f" ({frames[-1].filename.strip('<>')}, line {frames[-1].lineno}: `{frames[-1].line}`)" \
        if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _namespace_for(problem_module: str) -> dict:
    """What a learner's cell sees: the problem set's public names, as in the notebook."""
    import importlib

    mod = importlib.import_module(problem_module)
    names = getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")])
    ns = {"__name__": "__learner__", "torch": torch, "nn": torch.nn}
    ns.update({n: getattr(mod, n) for n in names})
    return ns


# ---------------------------------------------------------------------------------------------
# Step 6: checks

def _inputs_pool(problem: Problem, device: str, seeds: list[int]) -> list[tuple]:
    return [problem.make_inputs(seeded_generator(s), device) for s in seeds]


def _no_grad(fn):
    def call(*args):
        with torch.no_grad():
            return fn(*args)
    return call


def _breaks_dict(report: breaks.GraphBreakReport | None) -> list[dict]:
    if report is None:
        return []
    return [{"cause": b.cause, "explanation": b.explanation, "fix": b.fix,
             "where": b.location.label if b.location else "", "line": b.location.line
             if b.location else "", "reason": b.reason.splitlines()[0] if b.reason else ""}
            for b in report.breaks]


def run_checks(spec: dict) -> dict:
    started = time.monotonic()
    problem = get_problem(spec["problem"], spec.get("problem_module"))
    problem_module = spec.get("problem_module") or f"grader.problems.{problem.assignment}"
    device = spec.get("device") or targets.default_device()
    if device == "cpu":
        # One thread per timed CPU measurement: far steadier ratios (COURSE_DESIGN.md).
        torch.set_num_threads(int(spec.get("cpu_threads", 1)))
    checks = [c for c in problem.checks if c in spec.get("checks", problem.checks)]
    seeds = correctness.fresh_seeds(problem.pool_size + 3)
    pool = _inputs_pool(problem, device, seeds[: problem.pool_size])
    result: dict = {"status": "ok", "problem": problem.key, "device": device,
                    "device_class": targets.device_class(device), "checks": {}}

    # Step 2: baseline and reference, compiled and warmed before learner code.
    with torch.no_grad():
        base_model = problem.make_baseline(device)
    base_eager = _no_grad(base_model)
    base_timed = base_eager
    if problem.baseline_compile is not None:
        base_timed = _no_grad(torch.compile(base_model, **problem.baseline_compile))
    reference = None
    if spec.get("reference_cells"):
        ref_ns = _namespace_for(problem_module)
        with ti.quiet_torch_logs():
            exec_cells([Cell.from_dict(c) for c in spec["reference_cells"]], ref_ns,
                       prefix="reference ")
        ref_model = problem.instantiate(ref_ns[problem.entry], base_model, device)
        reference = _no_grad(torch.compile(ref_model, **problem.compile_kwargs(ref_ns[problem.entry])))
    with ti.quiet_torch_logs():
        for fn in (base_timed, reference):
            if fn is not None and "speed" in checks:
                timing.first_call_seconds(fn, pool[0], device)
    expected = [base_eager(*args) for args in pool]

    # Steps 3-5.
    before, threads_before = snapshot(), threading.active_count()
    namespace = _namespace_for(problem_module)
    try:
        exec_cells([Cell.from_dict(c) for c in spec["learner_cells"]], namespace)
    except BaseException as exc:  # SystemExit too: a learner's exit() is their error, not ours
        result.update(status="learner_error",
                      message=f"your code raised while it was being loaded: {_learner_traceback(exc)}")
        return result
    replaced = tampering(before, threads_before)
    if replaced:
        result.update(status="tampered",
                      message="your code replaced or hooked functions the grader relies on "
                              f"({', '.join(replaced[:6])}); nothing was measured")
        return result
    if problem.entry not in namespace:
        result.update(status="learner_error",
                      message=f"your solution must define `{problem.entry}`")
        return result
    try:
        learner_model = problem.instantiate(namespace[problem.entry], base_model, device)
    except Exception as exc:
        result.update(status="learner_error",
                      message=f"could not build `{problem.entry}`: {_learner_traceback(exc)}")
        return result
    learner_eager = _no_grad(learner_model)
    try:
        compile_kwargs = problem.compile_kwargs(namespace[problem.entry])
    except Exception as exc:
        result.update(status="learner_error", message=f"{_learner_traceback(exc)}")
        return result
    fresh_inputs = [problem.make_inputs(seeded_generator(s), device) for s in seeds[-3:]]

    res = result["checks"]

    def correctness_check() -> dict:
        rep = correctness.check_outputs(
            learner_eager, base_eager,
            lambda s: problem.make_inputs(seeded_generator(s), device), seeds=seeds[-3:])
        return {"ok": rep.ok, "message": str(rep)}

    def fullgraph_check() -> dict:
        fg = breaks.fullgraph_check(learner_eager, *fresh_inputs[0])
        return {"ok": fg.ok, "message": str(fg), "breaks": _breaks_dict(fg.report)}

    def breaks_check() -> dict:
        rep = breaks.graph_break_report(learner_eager, *fresh_inputs[0])
        return {"ok": rep.ok, "graph_count": rep.graph_count, "message": str(rep),
                "breaks": _breaks_dict(rep)}

    def recompiles_check() -> dict:
        rep = recompiles.recompile_check(learner_eager, problem.recompile_inputs(device),
                                         max_compiles=problem.max_compiles,
                                         **{k: v for k, v in compile_kwargs.items() if k == "dynamic"})
        return {"ok": rep.ok, "compiles": rep.compiles, "message": str(rep)}

    def fusion_check() -> dict:
        rep = fusion.fusion_report(learner_eager, *fresh_inputs[0], **compile_kwargs)
        ok = problem.max_kernels is None or rep.kernels <= problem.max_kernels
        return {"ok": ok, "kernels": rep.kernels, "max_kernels": problem.max_kernels,
                "message": f"{rep} (allowed: at most {problem.max_kernels})"}

    def speed_check() -> dict:
        if not res.get("correctness", {"ok": True})["ok"]:
            return {"ok": False, "verdict": "fail",
                    "message": "speed not measured: the outputs are wrong"}
        return _speed(problem, spec, learner_model, compile_kwargs, base_timed, reference, pool,
                      expected, device)

    steps = {"correctness": correctness_check, "fullgraph": fullgraph_check,
             "breaks": breaks_check, "fusion": fusion_check, "speed": speed_check}
    if problem.recompile_inputs is not None:
        steps["recompiles"] = recompiles_check
    # Fixed order: speed last, because it is only measured for correct outputs.
    order = ("correctness", "fullgraph", "breaks", "recompiles", "fusion", "speed")
    with ti.quiet_torch_logs():
        for name in order:
            if name in checks and name in steps:
                res[name] = _guarded(name, steps[name])
    result["seconds"] = time.monotonic() - started
    return result


def _guarded(name: str, check) -> dict:
    """Run one check; when the learner's code raises inside it (e.g. Dynamo's recompile limit
    under ``fullgraph=True`` while being timed), that check fails with the reason and the
    others keep their results."""
    try:
        return check()
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return {"ok": False, "verdict": "fail",
                "message": f"your code raised {type(exc).__name__} during this check: {first}"}


def _speed(problem: Problem, spec: dict, learner_model, compile_kwargs: dict, base_timed,
           reference, pool, expected, device: str) -> dict:
    learner_c = _no_grad(torch.compile(learner_model, **compile_kwargs))
    target = problem.target
    if reference is None:  # self-check: shipped floors only
        target = targets.SpeedTarget(fraction_of_reference=None,
                                     faster_than_baseline=target.faster_than_baseline,
                                     floors={**targets.shipped_floors(problem.key),
                                             **dict(target.floors)})
    verdict = targets.judge_speed(learner_c, base_timed, pool, reference=reference,
                                  target=target, device=device,
                                  budget_s=float(spec.get("budget_s") or problem.budget_s))
    out = verdict.to_dict()
    out["message"] = str(verdict)
    out["ok"] = verdict.passed
    out["with_reference"] = reference is not None
    # The outputs of the timed runs must still be right (no caching, no skipped work).
    for index, output in verdict.comparison.last_outputs.get("learner", []):
        problem_msg = correctness.compare_output(output, expected[index], "a timed run's output")
        if problem_msg is not None:
            out.update(ok=False, verdict="fail",
                       message=f"{problem_msg}; speed is only credited for correct outputs")
            break
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec_path, result_path = argv
    with open(spec_path) as fh:
        spec = json.load(fh)
    try:
        result = run_checks(spec)
    except BaseException as exc:
        result = {"status": "grader_error", "message": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()}
    tmp = result_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh, default=str)
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    # os._exit: skip interpreter teardown (learner atexit hooks cannot rewrite the result).
    sys.stdout.flush()
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
