"""grader.targets: SpeedTarget, judge_speed, device_class.

Verdicts are tested with a FakeClock (conftest.py) whose seeded log-normal noise makes them
deterministic; one real smoke test only checks structure.
"""
from __future__ import annotations

import json

import pytest
import torch

from conftest import FakeClock, pool
from grader import targets
from grader.targets import SpeedTarget, SpeedVerdict, device_class, judge_speed

BASE, REF = 2.0 ** -6, 2.0 ** -7          # the reference is 2x faster than the baseline
VERDICTS = {"pass", "fail", "inconclusive"}


def judge(factor: float, seed: int, sigma: float, **kw) -> SpeedVerdict:
    """The learner reaches ``factor`` times the target (0.85 of the reference's speedup)."""
    clock = FakeClock(seed=seed, sigma=sigma)
    learner_cost = REF / (0.85 * factor)
    return judge_speed(clock.fn("learner", learner_cost), clock.fn("baseline", BASE), pool(4),
                       reference=clock.fn("reference", REF), target=SpeedTarget(0.85),
                       clock=clock, keep_outputs=False, **kw)


@pytest.mark.parametrize("seed", range(5))
def test_15_percent_above_target_passes(seed):
    v = judge(1.15, seed, sigma=0.3)
    assert v.verdict == "pass", v
    assert v.passed
    assert v.comparison.trials >= 11


@pytest.mark.parametrize("seed", range(5))
def test_15_percent_below_target_fails(seed):
    v = judge(0.85, seed, sigma=0.3)
    assert v.verdict == "fail", v
    assert not v.passed
    rel = next(c for c in v.conditions if c.name == "speedup relative to reference")
    assert rel.verdict == "fail" and rel.threshold == 0.85


@pytest.mark.parametrize("seed", range(5))
def test_exactly_at_target_is_inconclusive(seed):
    """A learner exactly at the target under heavy noise must never be failed or passed.

    KNOWN FAILURE (grader bug) for seed 3 (fail after 121 trials): judge_speed looks at a 95%
    interval after every batch (11, 21, ..., 201 trials) and stops at the first look that
    excludes the threshold; with ~20 looks the chance of a wrong decision is far above 5%
    (see test_at_target_flip_rate).
    """
    v = judge(1.0, seed, sigma=0.3)
    assert v.verdict == "inconclusive", v
    assert v.comparison.trials > 11             # it tried more trials before giving up
    assert "not a fail" in str(v)


def test_at_target_flip_rate():
    """Over many seeded runs at the target, a 95% procedure may decide wrongly in <= 5%.

    KNOWN FAILURE (grader bug): measured 42/200 = 21% (22 pass, 20 fail). Optional stopping
    without correction; e.g. a per-look confidence of 1 - 0.05/20 (Bonferroni over the at most
    20 looks) gave 2/200 here while still passing/failing the +-15% learners every time.
    """
    verdicts = [judge(1.0, seed, sigma=0.3).verdict for seed in range(200)]
    wrong = sum(v != "inconclusive" for v in verdicts)
    assert wrong <= 10, {v: verdicts.count(v) for v in VERDICTS}


def test_trials_never_exceed_max_trials():
    """KNOWN FAILURE (minor grader bug): the loop checks ``trials >= max_trials`` before adding
    a batch, so with the defaults it stops at 201 trials, one batch past the cap."""
    v = judge(1.0, 0, sigma=0.3, max_trials=200)
    assert v.comparison.trials <= 200


def test_no_budget_left_means_no_extra_trials():
    v = judge(1.0, 0, sigma=0.3, budget_s=0.0)
    assert v.comparison.trials == 11
    assert v.verdict == "inconclusive"


def test_fraction_of_reference_uses_the_reference_measured_in_the_same_run():
    clock = FakeClock()
    learner, base, ref = (clock.fn("learner", 2.0 ** -7), clock.fn("baseline", 2.0 ** -6),
                          clock.fn("reference", 2.0 ** -8))      # learner 2x, reference 4x
    v = judge_speed(learner, base, pool(3), reference=ref, target=SpeedTarget(0.85), clock=clock)
    conds = {c.name: c for c in v.conditions}
    rel = conds["speedup relative to reference"]
    assert rel.estimate.median == 0.5 and rel.threshold == 0.85 and rel.verdict == "fail"
    assert conds["speedup over baseline"].estimate.median == 2.0
    assert conds["speedup over baseline"].verdict == "pass"
    assert v.verdict == "fail"
    assert v.speedup.median == 2.0
    assert "85% of the reference" in v.target_text
    # The same learner with no reference: only "faster than the baseline" applies.
    clock = FakeClock()
    v = judge_speed(clock.fn("learner", 2.0 ** -7), clock.fn("baseline", 2.0 ** -6), pool(3),
                    target=SpeedTarget(0.85), clock=clock)
    assert [c.name for c in v.conditions] == ["speedup over baseline"]
    assert v.verdict == "pass"
    assert "reference" not in v.target_text


def test_slower_than_baseline_fails():
    clock = FakeClock()
    v = judge_speed(clock.fn("learner", 2.0 ** -5), clock.fn("baseline", 2.0 ** -6), pool(3),
                    clock=clock)
    assert v.verdict == "fail"


def test_floors_per_device_class():
    def run(floors):
        clock = FakeClock()
        return judge_speed(clock.fn("learner", 2.0 ** -7), clock.fn("baseline", 2.0 ** -6),
                           pool(3), target=SpeedTarget(floors=floors), clock=clock)

    v = run({"cpu": 3.0})
    assert v.device_class == "cpu"
    floor = next(c for c in v.conditions if c.name == "speedup floor on cpu")
    assert floor.threshold == 3.0 and floor.verdict == "fail"
    assert v.verdict == "fail"
    assert "3.00x on cpu (floor)" in v.target_text
    v = run({"cpu": 1.5})
    assert v.verdict == "pass"
    v = run({"T4": 50.0, "H100": 50.0})      # floors of other device classes do not apply
    assert v.verdict == "pass"
    assert [c.name for c in v.conditions] == ["speedup over baseline"]
    assert "floor" not in v.target_text


def test_describe():
    t = SpeedTarget(0.9, True, {"cpu": 1.2})
    assert t.describe("cpu", True) == (">= 90% of the reference solution's speedup, "
                                       "faster than the baseline, >= 1.20x on cpu (floor)")
    assert t.describe("T4", False) == "faster than the baseline"
    assert SpeedTarget(None, False).describe("cpu", True) == "none"


def test_verdict_to_dict_round_trips_through_json():
    clock = FakeClock(seed=1, sigma=0.1)
    v = judge_speed(clock.fn("learner", 2.0 ** -7), clock.fn("baseline", 2.0 ** -6), pool(3),
                    reference=clock.fn("reference", 2.0 ** -7), clock=clock)
    d = v.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["verdict"] == v.verdict and d["verdict"] in VERDICTS
    assert d["device_class"] == "cpu"
    assert d["trials"] == v.comparison.trials and d["reps"] == v.comparison.reps
    assert set(d["speedups"]) == {"learner", "reference"}
    assert set(d["ms_per_call"]) == {"baseline", "learner", "reference"}
    assert set(d["first_call_s"]) == {"baseline", "learner", "reference"}
    assert [c["name"] for c in d["conditions"]] == [c.name for c in v.conditions]
    assert v.verdict.upper() in str(v)


def test_learner_outputs_of_timed_runs_are_kept():
    clock = FakeClock()
    v = judge_speed(clock.fn("learner", 2.0 ** -7, lambda x: x + 1),
                    clock.fn("baseline", 2.0 ** -6, lambda x: x + 1), pool(3), clock=clock)
    kept = v.comparison.last_outputs["learner"]
    assert len(kept) == v.comparison.trials
    inputs = pool(3)
    assert all(torch.equal(out, inputs[i][0] + 1) for i, out in kept)


@pytest.mark.parametrize("name, family", [
    ("Tesla T4", "T4"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA GeForce RTX 4090", "cuda"),
    # KNOWN FAILURE (grader bug): "L4" is a substring of "L40S"/"L40", so an L40S is judged
    # against L4 floors.
    ("NVIDIA L40S", "cuda"),
])
def test_device_class_of_gpu_names(monkeypatch, name, family):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert device_class("cuda") == family
    assert device_class(torch.device("cuda", 0)) == family


def test_device_class_cpu():
    assert device_class() == "cpu"
    assert device_class("cpu") == "cpu"
    assert device_class(torch.device("cpu")) == "cpu"
    assert targets.default_device() in ("cpu", "cuda")


def test_shipped_floors(tmp_path, monkeypatch):
    path = tmp_path / "floors.json"
    path.write_text(json.dumps({"ps1.q3": {"cpu": 1.4, "T4": 2.0}}))
    monkeypatch.setattr(targets, "FLOORS_FILE", str(path))
    assert targets.shipped_floors("ps1.q3") == {"cpu": 1.4, "T4": 2.0}
    assert targets.shipped_floors("ps9.q9") == {}
    monkeypatch.setattr(targets, "FLOORS_FILE", str(tmp_path / "missing.json"))
    assert targets.shipped_floors("ps1.q3") == {}


def test_real_clock_smoke():
    """Real timing, structure only: eager against torch.compile(backend="eager")."""

    def f(x):
        return torch.sin(x) * 2 + 1

    compiled = torch.compile(f, backend="eager")
    inputs = [(torch.randn(64),) for _ in range(3)]
    v = judge_speed(compiled, f, inputs, budget_s=3.0, min_trials=11, block_seconds=0.002,
                    max_trials=31)
    assert v.verdict in VERDICTS
    assert v.comparison.trials >= 11
    assert v.comparison.reps >= 1
    assert set(v.comparison.first_call_s) == {"baseline", "learner"}
    assert v.device_class == "cpu"
    assert json.loads(json.dumps(v.to_dict()))["verdict"] == v.verdict
    assert all(torch.equal(out, f(*inputs[i])) for i, out in v.comparison.last_outputs["learner"])
