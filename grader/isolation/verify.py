"""Check a worker's result in a process that never ran learner code, before anything is credited.

The worker executed learner code, so its result is the learner's word. The parent accepts it only
when it is authenticated (:func:`authenticate`: an HMAC under a key sent on the worker's stdin)
and consistent (:func:`verify`): every check the parent asked for is there, each pass carries the
measurements behind it, and the speed verdict is recomputed here from the raw per-trial timings
with the target the parent knows. Anything else becomes a 'rejected' result that earns nothing and
says why.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import math

from grader.checks import targets
from grader.problems import Problem
from grader.checks.results import WORKER_STATUSES, Status



class Rejected(ValueError):
    """The result cannot be trusted; the message says why."""


def authenticate(channel: bytes, key: bytes) -> dict:
    """The result dict the worker wrote to its channel, if its HMAC under ``key`` is right."""
    if not channel:
        raise Rejected("the grading process wrote no result")
    mac, sep, payload = channel.partition(b"\n")
    if not sep:
        raise Rejected("the grading process's result is malformed")
    expected = hmac.new(key, payload, hashlib.sha256).hexdigest().encode()
    if not hmac.compare_digest(mac, expected):
        raise Rejected("the grading process's result is not authenticated (it was not written "
                       "by the grader)")
    try:
        result = json.loads(payload)
    except ValueError as exc:
        raise Rejected(f"the grading process's result is not valid JSON ({exc})") from exc
    if not isinstance(result, dict):
        raise Rejected("the grading process's result is not an object")
    return result


def _require(condition: bool, why: str) -> None:
    if not condition:
        raise Rejected(why)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def expected_checks(problem: Problem, checks: list[str] | None) -> list[str]:
    """The checks a worker must report for ``problem`` (in the grader's order)."""
    wanted = [c for c in problem.checks if checks is None or c in checks]
    return [c for c in wanted if c != "recompiles" or problem.recompile_inputs is not None]


def _check_correctness(out: dict, problem: Problem) -> None:
    if out["ok"]:
        _require(out.get("checked") == 3, "correctness passed without 3 compared inputs")


def _check_fullgraph(out: dict, problem: Problem) -> None:
    if out["ok"]:
        _require(out.get("breaks", []) == [], "fullgraph passed with graph breaks listed")


def _check_breaks(out: dict, problem: Problem) -> None:
    if out["ok"]:
        _require(out.get("graph_count") in (0, 1) and out.get("breaks") == [],
                 "no-breaks passed without a single graph")


def _check_recompiles(out: dict, problem: Problem) -> None:
    if out["ok"]:
        compiles = out.get("compiles")
        _require(isinstance(compiles, int) and 0 <= compiles <= problem.max_compiles
                 and out.get("hit_limit") is False,
                 "no-recompiles passed with more compilations than allowed")


def _check_fusion(out: dict, problem: Problem) -> None:
    if out["ok"]:
        kernels = out.get("kernels")
        _require(isinstance(kernels, int) and kernels >= 0 and (
            problem.max_kernels is None or kernels <= problem.max_kernels),
            "the kernel count passed above the limit")


def _check_speed(out: dict, problem: Problem, with_reference: bool, device_class: str) -> None:
    verdict = out.get("verdict")
    _require(verdict in ("pass", "fail", "inconclusive"), "speed has no verdict")
    if verdict == "fail" and not out["ok"] and "samples" not in out:
        return  # not timed (wrong outputs, a graph break): a fail needs no figures
    samples = out.get("samples")
    names = {"baseline", "learner"} | ({"reference"} if with_reference else set())
    _require(isinstance(samples, dict) and set(samples) == names,
             f"speed was judged without the timings of {sorted(names)}")
    trials = {len(v) if isinstance(v, list) else -1 for v in samples.values()}
    _require(len(trials) == 1 and trials.pop() >= targets.MIN_TRIALS,
             "speed was judged on too few trials")
    _require(all(_is_number(x) and x > 0 for v in samples.values() for x in v),
             "speed timings are not positive numbers")
    _require(out.get("with_reference") is with_reference,
             "speed was judged against the wrong target")
    target = problem.target if with_reference else targets.self_check_target(problem)
    recomputed, _ = targets.verdict_from_samples(samples, target, device_class, with_reference,
                                                 targets.DEFAULT_LEVEL)
    # The worker may fail a timed run for more reasons (a wrong output), never pass more.
    if verdict == "pass" or out["ok"]:
        _require(recomputed == "pass" and verdict == "pass" and out["ok"],
                 "the speed verdict does not follow from its timings")
    elif verdict == "inconclusive":
        _require(recomputed == "inconclusive", "the speed verdict does not follow from its timings")


def _check_job(out: dict, problem: Problem, with_reference: bool, device_class: str) -> None:
    verdict = out.get("verdict")
    _require(verdict in ("pass", "fail", "inconclusive"), "the job check has no verdict")
    if verdict == "fail" and not out["ok"] and "samples" not in out:
        return
    samples, first = out.get("samples"), out.get("first_call_s")
    names = {"baseline", "learner"} | ({"reference"} if with_reference else set())
    _require(isinstance(samples, dict) and set(samples) == names and isinstance(first, dict)
             and set(first) == names, f"the job was judged without the timings of {sorted(names)}")
    _require(all(_is_number(x) and x > 0 for v in samples.values() for x in v)
             and all(_is_number(x) and x >= 0 for x in first.values()),
             "job timings are not positive numbers")
    _require(len({len(v) for v in samples.values()}) == 1 and len(samples["baseline"]) >= 5,
             "the job was judged on too few trials")
    _require(out.get("calls") == problem.job_calls and first["baseline"] == 0.0,
             "the job was judged on another number of calls")
    target = problem.target if with_reference else targets.self_check_target(problem)
    recomputed, _, _ = targets.judge_job(samples, first, problem.job_calls, target, device_class,
                                         with_reference)
    if verdict == "pass" or out["ok"]:
        _require(recomputed == "pass" and verdict == "pass" and out["ok"],
                 "the job verdict does not follow from its timings")
    elif verdict == "inconclusive":
        _require(recomputed == "inconclusive", "the job verdict does not follow from its timings")


_CHECKS = {"correctness": _check_correctness, "fullgraph": _check_fullgraph,
           "breaks": _check_breaks, "recompiles": _check_recompiles, "fusion": _check_fusion}


def verify(problem: Problem, result: dict, *, checks: list[str] | None, with_reference: bool,
           device_class: str) -> dict:
    """``result`` if it is a consistent answer to what was asked, else a 'rejected' result."""
    try:
        status = result.get("status")
        _require(status in WORKER_STATUSES, f"unknown status {status!r}")
        _require(isinstance(result.get("message", ""), str), "the message is not text")
        if status != Status.OK:
            return {"status": status, "message": result.get("message", status),
                    "problem": problem.key}
        _require(result.get("problem") == problem.key, "the result is for another problem")
        _require(result.get("device_class") == device_class, "the result is for another device")
        reported = result.get("checks")
        wanted = expected_checks(problem, checks)
        _require(isinstance(reported, dict) and list(reported) == wanted,
                 f"the result should hold the checks {wanted}")
        for name, out in reported.items():
            _require(isinstance(out, dict) and isinstance(out.get("ok"), bool)
                     and isinstance(out.get("message"), str), f"{name}: malformed outcome")
            if name == "speed":
                _check_speed(out, problem, with_reference, device_class)
            elif name == "job":
                _check_job(out, problem, with_reference, device_class)
            else:
                _require("verdict" not in out or out["verdict"] == ("pass" if out["ok"] else "fail"),
                         f"{name}: verdict and outcome disagree")
                _CHECKS[name](out, problem)
        return result
    except Rejected as exc:
        return rejected(problem, str(exc))
    except (TypeError, KeyError, AttributeError) as exc:
        return rejected(problem, f"malformed result ({type(exc).__name__}: {exc})")


def rejected(problem: Problem, why: str) -> dict:
    return {"status": Status.REJECTED, "problem": problem.key,
            "message": f"the grader could not trust this result, so nothing was credited: {why}"}
