"""grader.checks.targets: SpeedTarget, judge_speed, device_class.

Verdicts are tested with a FakeClock (conftest.py) whose seeded log-normal noise makes them
deterministic; one real smoke test only checks structure.
"""
from __future__ import annotations

import json

import pytest
import torch

from conftest import FakeClock, pool
from grader.checks import targets
from grader.checks.targets import SpeedTarget, SpeedVerdict, device_class, judge_speed

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

    judge_speed looks at the intervals after every batch (11, 21, ..., 200 trials) and stops at
    the first look that excludes the threshold; a plain 95% interval at each of ~20 looks would
    decide wrongly far more than 5% of the time (with these seeds: seed 3 failed after 121
    trials), so each look uses a Bonferroni-corrected interval (see test_at_target_flip_rate).
    """
    v = judge(1.0, seed, sigma=0.3)
    assert v.verdict == "inconclusive", v
    assert v.comparison.trials > 11             # it tried more trials before giving up
    assert "not a fail" in str(v)


def test_at_target_flip_rate():
    """Over many seeded runs at the target, a 95% procedure may decide wrongly in <= 5%.

    Optional stopping without correction (a 95% interval at every look) decided wrongly in
    42/200 = 21% here (22 pass, 20 fail); with a per-look confidence of 1 - 0.05/20
    (Bonferroni over the at most 20 looks) it stays inconclusive, while the +-15% learners
    above still pass/fail.
    """
    verdicts = [judge(1.0, seed, sigma=0.3).verdict for seed in range(200)]
    wrong = sum(v != "inconclusive" for v in verdicts)
    assert wrong <= 10, {v: verdicts.count(v) for v in VERDICTS}


def test_trials_never_exceed_max_trials():
    """The last batch is cut to what is left under the cap (11 + 19 batches of 10 would be 201)."""
    v = judge(1.0, 0, sigma=0.3, max_trials=200)
    assert v.comparison.trials <= 200
    assert v.comparison.trials == 200           # inconclusive: it used every trial allowed


@pytest.mark.parametrize("min_trials, batch_trials, max_trials", [
    (11, 10, 200), (11, 7, 50), (11, 10, 11), (11, 10, 15), (20, 10, 12)])
def test_trials_cap_holds_for_any_batch_size(min_trials, batch_trials, max_trials):
    v = judge(1.0, 0, sigma=0.3, min_trials=min_trials, batch_trials=batch_trials,
              max_trials=max_trials)
    assert v.comparison.trials == max_trials     # at the target: runs to the cap, not past it
    assert v.verdict == "inconclusive"


def test_looks_and_per_look_confidence():
    assert targets.max_looks(11, 10, 200) == 20          # 11, 21, ..., 191, 200
    assert targets.max_looks(11, 10, 201) == 20
    assert targets.max_looks(11, 10, 202) == 21
    assert targets.max_looks(11, 10, 11) == 1
    assert targets.max_looks(11, 10, 5) == 1
    assert targets.per_look_confidence(0.95, 20) == pytest.approx(0.9975)
    assert targets.per_look_confidence(0.95, 1) == pytest.approx(0.95)
    v = judge(1.15, 0, sigma=0.3)
    assert all(c.confidence == pytest.approx(0.9975) for c in v.conditions)
    assert all(d["confidence"] == pytest.approx(0.9975) for d in v.to_dict()["conditions"])
    assert "99.75% CI" in str(v)


def test_budget_estimate_leaves_out_the_first_call():
    """Compile time (the first call) is paid once: it must not make every later batch look
    too expensive for the budget. Virtual costs on the FakeClock: 1000 s of "compile", then
    cheap blocks."""
    clock = FakeClock(seed=0, sigma=0.3)
    learner = clock.fn("learner", REF / 0.85)            # exactly at the target
    compiled = {"done": False}

    def learner_with_compile(*args):
        if not compiled["done"]:
            compiled["done"] = True
            clock.t += 1000.0
        return learner(*args)

    v = judge_speed(learner_with_compile, clock.fn("baseline", BASE), pool(4),
                    reference=clock.fn("reference", REF), target=SpeedTarget(0.85),
                    clock=clock, keep_outputs=False, budget_s=60.0)
    assert v.comparison.first_call_s["learner"] >= 1000.0
    assert v.comparison.trials > 11


def test_no_batch_that_does_not_fit_the_budget():
    """Trials costing (virtually) seconds each: a batch of 10 cannot fit a 5 s budget."""
    clock = FakeClock(seed=0, sigma=0.3)
    v = judge_speed(clock.fn("learner", 0.5), clock.fn("baseline", 0.5), pool(3),
                    clock=clock, keep_outputs=False, budget_s=5.0)
    assert v.comparison.trials == 11
    assert v.verdict == "inconclusive"


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


def test_the_self_check_says_the_rule_the_grade_is_decided_by():
    """Without the reference at hand, the self-check compares with a floor, or with nothing
    (ps8 ships none): its target line says so, and which rule the grade uses instead."""
    from grader.problems import get_problem

    ps1 = targets.self_check_target(get_problem("ps1.q1")).describe("cpu", False)
    assert "on cpu (floor)" in ps1 and "the grade is decided by >= 85% of the reference " \
        "solution's speedup, faster than the baseline, measured in the grading run" in ps1
    ps8 = targets.self_check_target(get_problem("ps8.q1")).describe("cpu", False)
    assert ps8.startswith("none here: no floor is shipped for cpu") and ">= 80% of the " \
        "reference solution's speedup" in ps8


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
    # "L4" is a substring of "L40S"/"L40": only whole words count, so an L40S is not judged
    # against L4 floors.
    ("NVIDIA L40S", "cuda"),
    ("NVIDIA L40", "cuda"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA H100 PCIe", "H100"),
    ("NVIDIA H100 NVL", "H100"),
    ("NVIDIA A10G", "cuda"),
    ("NVIDIA GH200 480GB", "cuda"),
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


def test_shipped_floors_are_read_from_and_written_to_the_sets_folder(tmp_path, monkeypatch):
    from grader.problems import get_problem, sets

    monkeypatch.setattr(sets, "folders", lambda: {"ps1": str(tmp_path)})
    path = tmp_path / "floors.json"
    path.write_text(json.dumps({"ps1.q1": {"cpu": 9.5}, "ps1.q3": {"cpu": 1.4, "T4": 2.0}}))
    assert sets.floors("ps1.q3") == {"cpu": 1.4, "T4": 2.0}
    assert sets.floors("ps1.q9") == {} and sets.floors("ps9.q9") == {}
    # Self-check's target takes them from the problem's set.
    assert targets.self_check_target(get_problem("ps1.q1")).floors["cpu"] == 9.5
    # A calibration writes one class of one problem; the set's other figures are kept.
    assert sets.write_floors({"ps1.q3": {"cpu": 1.6, "T4": 2.0}}) == [str(path)]
    assert sets.all_floors() == {"ps1.q1": {"cpu": 9.5}, "ps1.q3": {"T4": 2.0, "cpu": 1.6}}
    path.unlink()
    assert sets.floors("ps1.q3") == {}


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


def test_a_job_choice_is_judged_on_its_modelled_total():
    """A job's total is first call + calls x time per call: a compile that saves per call loses
    a short job and wins a long one; a choice within 80% of the best total is right."""
    samples = {"none": [2e-4] * 9, "default": [7e-5] * 9, "slow-compile": [7e-5] * 9}
    first = {"none": 0.0, "default": 4.0, "slow-compile": 40.0}
    calls, best = targets.break_even(samples, first, "none")
    assert best == "default" and calls == pytest.approx(4.0 / 1.3e-4)
    figures = [(samples, first)]
    verdict, best, ratio, totals = targets.judge_plan_choice(figures, 2_000, "default", 0.8)
    assert verdict == "fail" and best == "none" and ratio < 0.1
    assert totals["default"] == pytest.approx(4.0 + 2_000 * 7e-5)
    assert targets.judge_plan_choice(figures, 2_000, "none", 0.8)[:3] == ("pass", "none", None)
    assert targets.judge_plan_choice(figures, 200_000, "default", 0.8)[0] == "pass"
    assert targets.judge_plan_choice(figures, 200_000, "none", 0.8)[0] == "fail"
    # a mode whose compile the job cannot win back loses even where compiling pays
    assert targets.judge_plan_choice(figures, 200_000, "slow-compile", 0.8)[0] == "fail"


def test_a_job_choice_is_judged_on_every_repeated_measurement():
    """Judged on each set of figures (the run's, then each round's own): right on all of them
    passes, wrong on all fails, and a verdict that changes within the measurement's spread is
    inconclusive, not wrong."""
    samples = {"none": [2e-4] * 9, "default": [7e-5] * 9}
    quick, slow = {"none": 0.0, "default": 4.0}, {"none": 0.0, "default": 12.0}
    calls = 60_000   # ~2x the break-even on the quick figures, ~0.65x on the slow ones
    both = [(samples, quick), (samples, slow)]
    assert targets.judge_plan_choice([(samples, quick)], calls, "default", 0.9)[0] == "pass"
    assert targets.judge_plan_choice([(samples, slow)], calls, "default", 0.9)[0] == "fail"
    verdict, best, _, totals = targets.judge_plan_choice(both, calls, "default", 0.9)
    assert verdict == "inconclusive" and best == "default"     # best on the first set
    assert totals["default"] == pytest.approx(4.0 + calls * 7e-5)
    assert targets.judge_plan_choice(both, 2_000, "none", 0.9)[0] == "pass"
    assert targets.judge_plan_choice(both, 2_000, "default", 0.9)[0] == "fail"


def test_compiling_never_pays_where_no_mode_is_faster():
    # no mode faster per call than eager: compiling never pays
    assert targets.break_even({"none": [1e-4] * 9, "default": [1e-4] * 9},
                              {"none": 0.0, "default": 4.0}, "none") == (None, None)


def test_job_figures_are_measured_in_rounds_and_modes_that_compile_alike_once():
    """ps3's yardstick (grader.checks.jobs.measure): on a CPU, reduce-overhead compiles what
    default does (it differs only in CUDA graphs), so it is measured once for both; every
    measured way gets a cold first call and interleaved trials in each round, after a tiny
    throwaway compile; the figures are the least first call and the median per call, and each
    round's own figures give the break-even's spread."""
    from grader.checks import jobs

    built = []

    def build(mode):
        built.append(mode)
        return lambda x: x * 2 if mode == "none" else x + 1

    modes = ("none", "default", "reduce-overhead")
    figures = jobs.measure(build, [(torch.ones(3),)], modes, eager="none", device="cpu",
                           rounds=3, trials=4)
    assert figures.shared == {"none": "none", "default": "default", "reduce-overhead": "default"}
    # each measured way once a round (after a tiny throwaway compile); reduce-overhead never
    assert sorted(built) == sorted(["none", "default"] * 3), built
    assert len(figures.rounds) == 3 and figures.compile_threads == 1
    assert all(len(r["samples"]["default"]) == 4 for r in figures.rounds)
    assert figures.first_call_s["reduce-overhead"] == figures.first_call_s["default"] == \
        min(r["first_call_s"]["default"] for r in figures.rounds)
    again = jobs.JobFigures.from_dict(json.loads(json.dumps(figures.to_dict())), modes)
    assert again.first_call_s == figures.first_call_s and again.samples == figures.samples
    with pytest.raises(ValueError):
        jobs.JobFigures.from_dict(figures.to_dict(), ("none", "default"))


def test_job_figures_from_the_warm_cache_say_so_and_open_no_fresh_cache(monkeypatch):
    """``measure(cold=False)`` (the exploration cell at COURSE_SIZE=ci): the compiles use the
    warm on-disk cache, never a fresh one (nor the throwaway compile that pays a process's
    one-time costs), and the figures say their first calls are not cold; the judge's (the
    default) open a fresh cache for every compile and say cold."""
    from grader.checks import _torch_internals as ti
    from grader.checks import jobs

    opened = []
    real = ti.fresh_inductor_cache

    def counting_fresh_cache():
        opened.append(1)
        return real()

    monkeypatch.setattr(ti, "fresh_inductor_cache", counting_fresh_cache)

    def build(mode):
        return lambda x: x * 2 if mode == "none" else x + 1

    modes = ("none", "default")
    warm = jobs.measure(build, [(torch.ones(3),)], modes, eager="none", rounds=1, trials=3,
                        cold=False)
    assert opened == [] and not warm.cold
    assert warm.how().startswith("1 round on one core") and "warm cache (not cold" in warm.how()
    assert "one round: no spread" in warm.summary() or "never" in warm.summary()
    cold = jobs.measure(build, [(torch.ones(3),)], modes, eager="none", rounds=2, trials=3)
    assert len(opened) == 1 + 2 * 2 and cold.cold   # the throwaway compile, then each way a round
    assert cold.how().startswith("2 rounds on one core") and "each a cold compile" in cold.how()


def test_job_figures_spread_is_the_rounds_break_evens():
    from grader.checks import jobs

    rounds = [{"first_call_s": {"none": 0.0, "default": f}, "samples": {"none": [2e-4] * 5,
                                                                         "default": [1e-4] * 5}}
              for f in (4.0, 5.0, 3.0)]
    figures = jobs.JobFigures(("none", "default"), "none", rounds,
                              {"none": "none", "default": "default"})
    assert figures.break_even == pytest.approx(30_000)             # the least compile: 3 s
    assert figures.spread() == pytest.approx((30_000, 50_000))
    assert "30,000-50,000 calls over the 3 rounds" in figures.summary()
    assert len(figures.figure_sets()) == 4
    assert jobs.compile_alike(("none", "default", "reduce-overhead"), "none", "cuda") == \
        {"none": "none", "default": "default", "reduce-overhead": "reduce-overhead"}
