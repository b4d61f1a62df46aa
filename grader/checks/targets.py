"""Speed targets that hold on any machine, and the verdict on them.

A target is relative to what the instructor's reference solution achieves in the same run on the
same device ("at least 85% of the reference's speedup") plus "faster than the baseline";
absolute floors per device class may be added on top. Self-check, which has no reference, uses
the floors alone and says so.
"""
from __future__ import annotations

import dataclasses
import math
import re
import statistics
from typing import Callable, Mapping, Sequence

import torch

from grader.checks.timing import DEFAULT_CLOCK, Clock, Comparison, Estimate, budget_deadline, compare, time_left

DEVICE_CLASSES = ("cpu", "T4", "L4", "A100", "H100", "H200", "cuda")


def device_class(device: str | torch.device = "cpu") -> str:
    """'cpu', or the GPU family ('T4', 'A100', 'H100', 'H200', ...; 'cuda' for others).

    A family matches only as a whole word of the device name ("NVIDIA A100-SXM4-80GB" is an
    A100), never as part of a longer one: an "NVIDIA L40S" is not an L4 and gets 'cuda'.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device)
    for family in sorted(DEVICE_CLASSES[1:-1], key=len, reverse=True):
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(family)}(?![A-Za-z0-9])", name, re.IGNORECASE):
            return family
    return "cuda"


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclasses.dataclass
class SpeedTarget:
    """What a learner's speedup over the baseline must reach.

    - ``fraction_of_reference``: learner speedup >= this fraction of the reference solution's
      speedup, both measured in the same run (``None`` when no reference is at hand).
    - ``faster_than_baseline``: the learner's version must beat the baseline outright.
    - ``floors``: optional absolute minimum speedups per device class (see :func:`device_class`),
      used on top of the relative target, and alone by self-check.
    """

    fraction_of_reference: float | None = 0.85
    faster_than_baseline: bool = True
    floors: Mapping[str, float] = dataclasses.field(default_factory=dict)
    # A self-check's target (no reference at hand): the rule the grade is decided by instead.
    graded_as: str = ""

    def describe(self, dev_class: str, with_reference: bool) -> str:
        parts = []
        if with_reference and self.fraction_of_reference is not None:
            parts.append(f">= {self.fraction_of_reference:.0%} of the reference solution's speedup")
        if self.faster_than_baseline:
            parts.append("faster than the baseline")
        if dev_class in self.floors:
            parts.append(f">= {self.floors[dev_class]:.2f}x on {dev_class} (floor)")
        text = ", ".join(parts) or ("none here: no floor is shipped for " + dev_class
                                    if self.graded_as else "none")
        if self.graded_as:
            text += (f"; this is a self-check, without the reference solution: the grade is "
                     f"decided by {self.graded_as}, measured in the grading run")
        return text


@dataclasses.dataclass
class Condition:
    name: str
    estimate: Estimate
    threshold: float
    verdict: str
    confidence: float = 0.95   # of the interval in ``estimate`` (per look, see judge_speed)

    def __str__(self) -> str:
        return (f"{self.name}: {self.estimate} ({_percent(self.confidence)} CI) "
                f"vs {self.threshold:.2f} -> {self.verdict}")


def _percent(confidence: float) -> str:
    return f"{100 * confidence:.4g}%"


@dataclasses.dataclass
class SpeedVerdict:
    """'pass', 'fail' or 'inconclusive', with every figure that led to it."""

    verdict: str
    conditions: list[Condition]
    comparison: Comparison
    device_class: str
    target_text: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def speedup(self) -> Estimate:
        return self.comparison.speedup("learner")

    def __str__(self) -> str:
        lines = [f"speed: {self.verdict.upper()} on {self.device_class} "
                 f"(target: {self.target_text})"]
        lines += [f"  {c}" for c in self.conditions]
        lines += ["  " + row for row in self.comparison.table().splitlines()]
        if self.verdict == "inconclusive":
            lines.append("  The confidence interval still straddles the target after the time "
                         "budget (or the most trials allowed): the machine is too noisy to "
                         "decide. This is not a fail; re-run on a quieter machine or with a "
                         "larger budget.")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        c = self.comparison
        return {
            "verdict": self.verdict,
            "device_class": self.device_class,
            "target": self.target_text,
            "conditions": [
                {"name": k.name, "median": k.estimate.median, "low": k.estimate.low,
                 "high": k.estimate.high, "threshold": k.threshold, "verdict": k.verdict,
                 "confidence": k.confidence}
                for k in self.conditions],
            "speedups": {n: dataclasses.asdict(c.speedup(n)) for n in c.names if n != c.baseline},
            "ms_per_call": {n: c.per_call(n).median * 1e3 for n in c.names},
            "first_call_s": dict(c.first_call_s),
            "trials": c.trials,
            "reps": c.reps,
            "seconds": self.seconds,
            # The raw timings, so that a process that never ran learner code can recompute the
            # verdict (grader.isolation.verify): seconds per call of every trial, and the interval level.
            "samples": {n: list(c.seconds[n]) for n in c.names},
            "level": self.conditions[0].confidence if self.conditions else None,
        }


def _conditions(comp: Comparison, target: SpeedTarget, dev_class: str,
                has_reference: bool, confidence: float = 0.95) -> list[Condition]:
    conds = []
    if has_reference and target.fraction_of_reference is not None:
        # = learner speedup / reference speedup
        est = comp.ratio("reference", "learner", confidence)
        conds.append(Condition("speedup relative to reference", est,
                               target.fraction_of_reference,
                               est.versus(target.fraction_of_reference), confidence))
    sp = comp.speedup("learner", confidence)
    if target.faster_than_baseline:
        conds.append(Condition("speedup over baseline", sp, 1.0, sp.versus(1.0), confidence))
    if dev_class in target.floors:
        floor = float(target.floors[dev_class])
        conds.append(Condition(f"speedup floor on {dev_class}", sp, floor, sp.versus(floor),
                               confidence))
    return conds


def _overall(conds: Sequence[Condition]) -> str:
    verdicts = {c.verdict for c in conds}
    if "fail" in verdicts:
        return "fail"
    if verdicts <= {"pass"}:
        return "pass"
    return "inconclusive"


def max_looks(min_trials: int, batch_trials: int, max_trials: int) -> int:
    """How many times :func:`judge_speed` may look at the intervals: after the first
    ``min_trials`` trials, then after every batch of ``batch_trials`` up to ``max_trials``."""
    min_trials = max(1, min(min_trials, max_trials))
    return 1 + math.ceil(max(0, max_trials - min_trials) / max(1, batch_trials))


def per_look_confidence(confidence: float, looks: int) -> float:
    """The confidence of each look's interval such that ``looks`` looks together decide wrongly
    with probability at most ``1 - confidence`` (Bonferroni: each look spends an equal share of
    the error). With 20 looks at 95% overall: 1 - 0.05/20 = 99.75% per look."""
    return 1.0 - (1.0 - confidence) / max(1, looks)


# judge_speed's defaults, which grading uses; DEFAULT_LEVEL is the interval level of each look.
MIN_TRIALS, BATCH_TRIALS, MAX_TRIALS, CONFIDENCE = 11, 10, 200, 0.95
DEFAULT_LEVEL = per_look_confidence(CONFIDENCE, max_looks(MIN_TRIALS, BATCH_TRIALS, MAX_TRIALS))


def _trial_seconds(comp: Comparison) -> float:
    """Clock seconds one interleaved trial takes: every callable's block of ``reps`` calls
    (the mean, so that slow outliers count). Leaves out first calls (compile), warm-up and
    calibration, which are paid only once."""
    return sum(sum(comp.seconds[n]) / len(comp.seconds[n]) for n in comp.names) * comp.reps


def job_totals(samples: Mapping[str, Sequence[float]], first_call_s: Mapping[str, float],
               calls: int) -> dict[str, float]:
    """Seconds for a job of ``calls`` calls each way: the first call (the cold compile) plus
    ``calls`` times the median seconds per call."""
    return {name: float(first_call_s.get(name, 0.0)) + calls * statistics.median(seconds)
            for name, seconds in samples.items()}


def break_even(samples: Mapping[str, Sequence[float]], first_call_s: Mapping[str, float],
               eager: str) -> tuple[float | None, str | None]:
    """The fewest calls after which compiling pays on these figures, and the mode that gets
    there first: for each mode faster per call than ``eager`` (medians), the calls at which its
    total (first call + calls x time per call) meets eager's; ``(None, None)`` when no mode is
    faster per call than eager (compiling never pays)."""
    per = {name: statistics.median(seconds) for name, seconds in samples.items()}
    best: tuple[float | None, str | None] = (None, None)
    for name in samples:
        if name == eager:
            continue
        calls = calls_to_pay_back(first_call_s[name] - first_call_s[eager], per[eager] - per[name])
        if math.isinf(calls):
            continue
        calls = max(1.0, calls)
        if best[0] is None or calls < best[0]:
            best = (calls, name)
    return best


def calls_to_pay_back(extra_seconds: float, saved_per_call_s: float) -> float:
    """How many calls repay a one-off cost (a compile) from what each call saves: ``inf`` when a
    call saves nothing. The one break-even formula of the course: ps3's judge counts the calls
    after the first (its extra cost is the compiled first call over eager's), chapter 3 all of
    them (:func:`grader.course.chapters.break_even_calls`)."""
    if saved_per_call_s <= 0:
        return math.inf
    return max(extra_seconds, 0.0) / saved_per_call_s


def judge_plan_choice(figure_sets: Sequence[tuple[Mapping[str, Sequence[float]],
                                                Mapping[str, float]]],
                      calls: int, choice: str, fraction: float
                      ) -> tuple[str, str, float | None, dict[str, float]]:
    """Whether ``choice`` is a right way to run a job of ``calls`` calls: its modelled total
    (:func:`job_totals`) is at least ``fraction`` of the best choice's, judged on each of
    ``figure_sets`` (``(samples, first_call_s)``: the figures jobs are priced with first, then
    each repeated measurement of them). 'pass' when it is right on all of them, 'fail' when on
    none, 'inconclusive' when the verdict changes within the measurement's spread. Returns the
    verdict, the best choice, the ratio (best total / yours; ``None`` when yours is the best)
    and every choice's total, on the first set."""
    rights = []
    for samples, first in figure_sets:
        totals = job_totals(samples, first, calls)
        best = min(totals, key=lambda name: totals[name])
        rights.append(totals[best] >= fraction * totals[choice])
    verdict = "pass" if all(rights) else "fail" if not any(rights) else "inconclusive"
    totals = job_totals(*figure_sets[0], calls)
    best = min(totals, key=lambda name: totals[name])
    ratio = None if choice == best else totals[best] / totals[choice]
    return verdict, best, ratio, totals


def self_check_target(problem) -> SpeedTarget:
    """Self-check has no reference: the problem's target less the relative part, with the
    floors shipped for each device class (its set's ``floors.json``,
    ``problem.shipped_floors``) under the problem's own."""
    target = problem.target
    graded = SpeedTarget(target.fraction_of_reference, target.faster_than_baseline)
    return SpeedTarget(fraction_of_reference=None, faster_than_baseline=target.faster_than_baseline,
                       floors={**problem.shipped_floors, **dict(target.floors)},
                       graded_as=graded.describe("", with_reference=True))


def judge_speed(learner: Callable, baseline: Callable, args_pool: Sequence[tuple], *,
                reference: Callable | None = None, target: SpeedTarget | None = None,
                device: str = "cpu", budget_s: float = 60.0, min_trials: int = MIN_TRIALS,
                batch_trials: int = BATCH_TRIALS, max_trials: int = MAX_TRIALS,
                block_seconds: float = 0.02, keep_outputs: bool = True,
                confidence: float = CONFIDENCE,
                clock: Clock = DEFAULT_CLOCK) -> SpeedVerdict:
    """Measure ``learner`` against ``baseline`` (and ``reference``) and decide on ``target``.

    Runs ``min_trials`` interleaved trials, then more in batches of ``batch_trials`` while any
    condition's confidence interval straddles its threshold, time is left in ``budget_s`` and
    fewer than ``max_trials`` trials have run (never more); the verdict is 'inconclusive' if the
    budget or ``max_trials`` runs out first: never a silent fail.

    Stopping at the first look whose interval clears the threshold would, over many looks,
    pass or fail a learner exactly at the target far more often than ``1 - confidence``; so
    every look uses the interval at :func:`per_look_confidence` over the :func:`max_looks`
    possible looks, and the whole procedure decides wrongly with probability at most
    ``1 - confidence`` (5%) per condition.
    """
    target = target or SpeedTarget()
    dev_class = device_class(device)
    min_trials = max(1, min(min_trials, max_trials))
    batch_trials = max(1, batch_trials)
    level = per_look_confidence(confidence, max_looks(min_trials, batch_trials, max_trials))
    fns = {"baseline": baseline, "learner": learner}
    if reference is not None:
        fns["reference"] = reference
    deadline = budget_deadline(budget_s)
    start_left = time_left(deadline)
    comp = compare(fns, args_pool, baseline="baseline", device=device, trials=min_trials,
                   block_seconds=block_seconds, clock=clock,
                   keep_outputs=("learner",) if keep_outputs else ())
    # What one more trial costs: first from the timed blocks (compile and warm-up, paid once,
    # are not repeated), then from how long the latest batch really took.
    per_trial = _trial_seconds(comp)
    while True:
        conds = _conditions(comp, target, dev_class, reference is not None, level)
        verdict = _overall(conds)
        if verdict != "inconclusive" or comp.trials >= max_trials:
            break
        batch = min(batch_trials, max_trials - comp.trials)
        left = time_left(deadline)
        if left <= 0 or left < per_trial * batch:
            break
        comp = compare(fns, args_pool, baseline="baseline", device=device, trials=batch,
                       clock=clock, previous=comp)
        per_trial = (left - time_left(deadline)) / batch
    return SpeedVerdict(verdict, conds, comp, dev_class,
                        target.describe(dev_class, reference is not None),
                        start_left - time_left(deadline))
