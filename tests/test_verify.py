"""The parent's side of the worker channel: only an authenticated, consistent result counts.

Forged results are written here the way learner code that got past every other defence would
write them; the parent must reject each, or recompute it to what the timings say.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import random

import pytest

from grader.checks import targets
from grader.problems import get_problem
from grader.isolation.verify import Rejected, authenticate, verify

KEY = b"k" * 32
PROBLEM = get_problem("fx.q1", "fixture_problems")


def _signed(result: dict, key: bytes = KEY) -> bytes:
    payload = json.dumps(result).encode()
    return hmac.new(key, payload, hashlib.sha256).hexdigest().encode() + b"\n" + payload


def _samples(speedup: float, trials: int = 11) -> dict:
    rng = random.Random(0)
    base = [1e-3 * (1 + 0.01 * rng.random()) for _ in range(trials)]
    return {"baseline": base, "learner": [b / speedup for b in base]}


def _ok(**checks) -> dict:
    return {"status": "ok", "problem": "fx.q1", "device": "cpu", "device_class": "cpu",
            "checks": checks}


def _speed(verdict: str, ok: bool, samples: dict) -> dict:
    return {"ok": ok, "verdict": verdict, "message": "", "with_reference": False,
            "samples": samples}


CORRECT = {"ok": True, "checked": 3, "message": ""}


def test_a_result_signed_with_the_key_is_read_back():
    assert authenticate(_signed({"status": "ok"}), KEY) == {"status": "ok"}


@pytest.mark.parametrize("channel", [
    b"",                                                   # nothing written (exit before report)
    b'{"status": "ok"}',                                   # a result without a MAC
    _signed({"status": "ok"}, key=b"guessed" * 4),         # a MAC under another key
    _signed({"status": "ok"})[:-3],                        # truncated
])
def test_anything_else_on_the_channel_is_rejected(channel):
    with pytest.raises(Rejected):
        authenticate(channel, KEY)


def _verify(result, checks=("correctness", "speed")):
    return verify(PROBLEM, result, checks=list(checks), with_reference=False, device_class="cpu")


def test_an_honest_result_passes_verification():
    result = _ok(correctness=CORRECT, speed=_speed("pass", True, _samples(2.0)))
    assert _verify(result)["status"] == "ok"


@pytest.mark.parametrize("forged, why", [
    (_ok(correctness=CORRECT, speed={"ok": True, "verdict": "pass", "message": ""}),
     "without the timings"),                                             # a pass, no figures
    (_ok(correctness=CORRECT, speed=_speed("pass", True, _samples(0.5))),
     "does not follow from its timings"),                                # slower, called a pass
    (_ok(correctness=CORRECT, speed=_speed("pass", True, _samples(2.0, trials=3))),
     "too few trials"),
    (_ok(correctness={"ok": True, "message": ""}, speed=_speed("pass", True, _samples(2.0))),
     "3 compared inputs"),
    (_ok(correctness=CORRECT), "should hold the checks"),                # speed left out
    ({**_ok(correctness=CORRECT, speed=_speed("pass", True, _samples(2.0))), "problem": "ps1.q1"},
     "another problem"),
    ({"status": "passed"}, "unknown status"),
])
def test_a_forged_or_inconsistent_result_is_rejected(forged, why):
    result = _verify(forged)
    assert result["status"] == "rejected", result
    assert why in result["message"]


def test_a_fail_may_be_stricter_than_the_timings():
    # A timed run's wrong output fails speed whatever the timings say.
    result = _ok(correctness=CORRECT, speed=_speed("fail", False, _samples(2.0)))
    assert _verify(result)["status"] == "ok"


def test_the_recomputed_verdict_is_the_one_judge_speed_reaches():
    verdict, conds = targets.verdict_from_samples(_samples(2.0), targets.SpeedTarget(None), "cpu",
                                                  False, targets.DEFAULT_LEVEL)
    assert verdict == "pass" and conds[0].estimate.median == pytest.approx(2.0)


def _job_result(first_learner: float, verdict: str, calls: int) -> dict:
    samples = {"baseline": [2e-4] * 9, "learner": [7e-5] * 9, "reference": [2e-4] * 9}
    first = {"baseline": 0.0, "learner": first_learner, "reference": 0.0}
    return {"status": "ok", "problem": "ps3.q1short", "device": "cpu", "device_class": "cpu",
            "checks": {"correctness": CORRECT,
                       "job": {"ok": verdict == "pass", "verdict": verdict, "message": "",
                               "samples": samples, "first_call_s": first, "calls": calls,
                               "with_reference": True}}}


def test_a_job_verdict_must_follow_from_its_timings_and_calls():
    """ps3's short job: compiling (4 s first call) cannot pass; a forged pass is rejected, and
    so is a result judged on another number of calls or with the compile left out."""
    problem = get_problem("ps3.q1short")

    def run(result):
        return verify(problem, result, checks=["correctness", "job"], with_reference=True,
                      device_class="cpu")

    assert run(_job_result(4.0, "fail", problem.job_calls))["status"] == "ok"
    for forged, why in [(_job_result(4.0, "pass", problem.job_calls), "does not follow"),
                        (_job_result(4.0, "fail", 10 ** 7), "another number of calls")]:
        result = run(forged)
        assert result["status"] == "rejected" and why in result["message"], result
    honest_eager = _job_result(0.0, "fail", problem.job_calls)
    honest_eager["checks"]["job"]["samples"]["learner"] = [2e-4] * 9
    honest_eager["checks"]["job"].update(ok=True, verdict="pass")
    assert run(honest_eager)["status"] == "ok"
