"""Points need the lesson: answers that skip it score what the design says, through the judge
and its subject (the timed checks left out where the verdict does not depend on them).

- the given model unchanged earns 0 in every set (correct outputs alone earn nothing: each
  correctness cell's points need the set's lesson; structural checks are made from a fresh
  model's first call and over every call the problem makes, so a debug branch that runs on call
  1 is a break, as ps4's is);
- ps1 with one side of the data-dependent `if` dropped is right on one class of inputs only: it
  earns nothing, although its graph is one graph and fast;
- a forward that does none of the work earns no structural point (one graph, breaks, kernels,
  recompiles) in any set: they are credited only to a graph that computes what the original does;
- ps2's two-line library answer (F.group_norm, then the tanh-GELU) is not credited for fusion or
  speed: a library norm skips writing the statistics, which is the lesson;
- ps6's "static history" step (write the token into a buffer, recompute every position, select
  one) is one graph that compiles once, but it does ~60x the reference's work a step: not timed;
- ps3's job rule is graded on pairs of hidden sizes 1.5-3x below and above this machine's
  break-even: a rule that answers the same for every size, or a threshold halfway between the
  notebook's examples, earns nothing; the measured break-even earns all five pairs; a job within
  the spread of the judge's rounds is undecided, not wrong; a rule that raises or returns
  anything but a mode earns nothing (the figures are the judge's own measurement; here synthetic
  ones stand in for it, so the tests need no compile); the self-check judges no hidden job;
- ps3 q2's padded per-row loop compiles once but holds a copy of its body per row: the operator
  check refuses it, batched rewrites pass.
"""
from __future__ import annotations

import dataclasses
import os

import pytest

# ps3 q1: synthetic figures stand for the judge's measurement, so the tests need no compile
from synthetic_jobs import COMPILE_S, MODES, PER_CALL_S, figures as _figures
from grader.checks import correctness
from grader.checks.declared.job import PROBE_SIZES
from grader.cohort.demo import demo_solutions
from grader.isolation.judge import reference_side
from grader.isolation.cell_scores import Evaluation, score_cell
from grader.isolation.judge.judging import job_for
from grader.isolation.judge.steps import Judge
from grader.isolation.cells.source import Cell, solution_cells
from grader.problems import get_problem, seeded_generator
from grader.problems import test_cells as declared_test_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRUCTURAL = ("fullgraph", "breaks", "recompiles", "fusion", "operators")


@pytest.fixture(scope="module")
def judge():
    return Judge()


def grade(judge, keys: list[str], source: str, checks: list[str] | None = None,
          reference: str | None = None) -> dict:
    """``reference='off'``: without the instructor's cells (for ps3 q1: no yardstick rule)."""
    job = job_for(keys, [Cell("cell 7", source)], course_root=ROOT,
                  checks={k: [c for c in get_problem(k).checks if checks is None or c in checks]
                          for k in keys}, budget_s=8.0,
                  **({"reference": reference} if reference else {}))
    return judge.grade(job).to_dict()["results"]


def points(assignment: str, results: dict) -> float:
    evaluations = {k: Evaluation(get_problem(k), r) for k, r in results.items()}
    return sum(score_cell(cell, evaluations).points
               for cell in declared_test_cells(assignment).values()
               if all(k in evaluations for k in cell.problems))


DO_NOTHING = {
    "ps1.q1": "class FixedModel(Original):\n    def forward(self, x):\n        return x\n",
    "ps2.q1": "class FusedGroupNormGELU(GroupNormGELU):\n    def forward(self, x):\n        return x\n",
    "ps3.q2": "class BatchScorer(PerSampleScorer):\n    def forward(self, x):\n        return x\n",
    "ps4.q1": ("class FastGPT(TinyGPT):\n    def forward(self, idx):\n"
               "        return torch.softmax(self.head(self.emb(idx[:, -1])), dim=-1)\n"),
    "ps5.q1": ("class FastClassifier(Classifier):\n    def forward(self, x, y):\n"
               "        return self.head(x[:, :256]).logsumexp(-1).mean()\n"),
    "ps6.q1": ("class CachedGPT(TinyGPT):\n    def forward(self, tokens, pos):\n"
               "        return self.head(self.emb(tokens))\n"),
}


@pytest.mark.parametrize("key", sorted(DO_NOTHING))
def test_a_forward_that_does_none_of_the_work_earns_no_structural_point(judge, key):
    wanted = [c for c in get_problem(key).checks if c in STRUCTURAL + ("correctness",)]
    result = grade(judge, [key], DO_NOTHING[key], wanted)[key]
    assert result["status"] == "ok", result
    assert not result["checks"]["correctness"]["ok"]
    for name in STRUCTURAL:
        if name in result["checks"]:
            assert not result["checks"][name]["ok"], (name, result["checks"][name]["message"])


LIBRARY_PS2 = """import torch.nn.functional as F


class FusedGroupNormGELU(GroupNormGELU):
    def forward(self, x):
        y = F.group_norm(x, self.groups, self.weight, self.bias, self.eps)
        return F.gelu(y, approximate="tanh")
"""


def test_ps2s_library_answer_earns_nothing(judge):
    results = grade(judge, ["ps2.q1"], LIBRARY_PS2)
    assert results["ps2.q1"]["checks"]["correctness"]["ok"]
    assert "aten.group_norm" in results["ps2.q1"]["checks"]["fusion"]["message"]
    assert points("ps2", results) == 0   # correct outputs alone earn nothing: not fused


STATIC_HISTORY_PS6 = """class CachedGPT(TinyGPT):
    def __init__(self):
        super().__init__()
        self.register_buffer("seen", torch.zeros(MAX_BATCH, MAX_SEQ, dtype=torch.long),
                             persistent=False)

    def forward(self, tokens, pos):
        self.seen.index_copy_(1, pos.view(1), tokens[:, None])
        logits = self.logits(self.seen)                       # every position, every step
        return logits.index_select(1, pos.view(1))[:, 0]
"""


def test_ps6s_static_history_step_earns_nothing(judge):
    """One graph that compiles once, but no cache: the set's lesson is the cache, so the work
    check gates every structural cell, not only speed."""
    results = grade(judge, ["ps6.q1"], STATIC_HISTORY_PS6)
    checks = results["ps6.q1"]["checks"]
    assert checks["correctness"]["ok"]
    for name in ("fullgraph", "breaks", "recompiles", "speed"):
        assert not checks[name]["ok"], (name, checks[name]["message"])
    assert "FLOPs" in checks["fullgraph"]["message"]
    assert points("ps6", results) == 0


DELETION_PS4 = """class FastGPT(TinyGPT):
    def forward(self, idx):
        B, T = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = x + self.attention(blk, x)
            x = x + self.mlp(blk, x)
        logits = self.head(self.ln(x[:, -1]))
        return torch.softmax(logits, dim=-1)
"""


def test_ps4s_two_line_deletion_is_not_enough(judge):
    """Deleting the counter and the debug check gives one graph, but torch.compile's default
    compiles the first prompt length as a constant: the second recompiles, and the graph does not
    serve every length. Correct and one graph only (4 of 10), and the feedback gives the
    direction, not the answer; with compile_dynamic = True it is the reference (10)."""
    checks = ["correctness", "fullgraph", "breaks", "recompiles", "speed"]
    results = grade(judge, ["ps4.q1"], DELETION_PS4, checks)
    recompiles = results["ps4.q1"]["checks"]["recompiles"]
    assert not recompiles["ok"] and "2 compilations" in recompiles["message"]
    assert "dynamic=True" not in recompiles["message"] and "mark_dynamic" not in recompiles["message"]
    speed = results["ps4.q1"]["checks"]["speed"]["message"]
    assert "2 compilations" in speed, speed     # the check that failed, named
    assert points("ps4", results) == 4
    fixed = DELETION_PS4.replace("class FastGPT(TinyGPT):\n",
                                 "class FastGPT(TinyGPT):\n    compile_dynamic = True\n\n")
    results = grade(judge, ["ps4.q1"], fixed, checks[:4])
    assert all(c["ok"] for c in results["ps4.q1"]["checks"].values()), results["ps4.q1"]["checks"]


# The class the learner writes, as the release notebook gives it, changed by nothing.
GIVEN = {"ps1.q1": "class FixedModel(Original):\n    pass\n",
         "ps2.q1": "class FusedGroupNormGELU(GroupNormGELU):\n    pass\n",
         "ps3.q2": "class BatchScorer(PerSampleScorer):\n    pass\n",
         "ps4.q1": "class FastGPT(TinyGPT):\n    pass\n",
         "ps5.q1": "class FastClassifier(Classifier):\n    pass\n",
         "ps6.q1": "class CachedGPT(TinyGPT):\n    pass\n",
         "ps7.q1": "class FixedSensorModel(SensorModel):\n    pass\n"}


@pytest.mark.parametrize("key", sorted(GIVEN))
def test_the_given_model_unchanged_earns_nothing(judge, key):
    """Right by definition, and earns 0: correct outputs alone earn nothing, and every structural
    check is made from a fresh model's first call over every call the problem makes (ps4's debug
    branch runs on call 1, 101, 201, ...; ps7's counter recompiles), on the judge's graph."""
    result = grade(judge, [key], GIVEN[key])[key]
    assert result["status"] == "ok", result
    assert result["checks"]["correctness"]["ok"], result["checks"]["correctness"]["message"]
    assert points(key.split(".")[0], {key: result}) == 0, {
        n: c["message"][:300] for n, c in result["checks"].items()}


# The demo's eve_wrong ps1 solution (source/psN/demo_cohort.py): one side of the `if` only.
ONE_SIDED_PS1 = demo_solutions(ROOT)["ps1"]["wrong"]["ps1-q1-solution"]


def test_ps1_with_one_side_of_the_if_earns_nothing(judge):
    """One graph, fast, and right on inputs with a positive mean: wrong on the other side of the
    `if`, which every check tests, so no point."""
    results = grade(judge, ["ps1.q1"], ONE_SIDED_PS1, ["correctness", "fullgraph", "breaks"])
    checks = results["ps1.q1"]["checks"]
    message = checks["correctness"]["message"]
    assert not checks["correctness"]["ok"] and "on inputs with a negative mean: outputs do not" \
        in message, message
    assert not checks["fullgraph"]["ok"] and "see the correctness check" in \
        checks["fullgraph"]["message"]
    assert points("ps1", results) == 0


@pytest.fixture
def ps3_judge(monkeypatch):
    monkeypatch.setattr(reference_side, "measure_jobs", lambda problem, device: _figures())
    return Judge()


def _rule(body: str) -> str:
    return ("class JobPlanner:\n    @staticmethod\n"
            "    def mode_for(calls: int, device: str) -> str:\n"
            + "".join(f"        {line}\n" for line in body.splitlines()))


def _threshold(calls: float, mode: str = "default") -> str:
    return _rule(f'return {mode!r} if calls > {calls:.0f} else "none"')


REFERENCE_PS3 = solution_cells(os.path.join(ROOT, "source", "ps3", "ps3.ipynb"),
                               ["ps3-q1-solution"])[0].source


def _reference_threshold() -> float:
    """Where the reference rule starts compiling on a CPU (found from its answers)."""
    namespace: dict = {}
    exec(REFERENCE_PS3, namespace)
    rule = namespace["JobPlanner"].mode_for
    low, high = 1, 10 ** 9
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if rule(mid, "cpu") != "none" else (mid, high)
    return high


def _q1_points(result: dict) -> tuple[float, str, bool]:
    score = score_cell(declared_test_cells("ps3")["ps3-q1-jobs"],
                       {"ps3.q1": Evaluation(get_problem("ps3.q1"), result)})
    return score.points, score.text, score.review


B = _figures().break_even
EXAMPLES = get_problem("ps3.q1").plan.examples


@pytest.mark.parametrize("name, source, points", [
    ("a threshold at the measured break-even", _threshold(B), 5),
    ("a threshold a little off the break-even (1.4x)", _threshold(1.4 * B), 5),
    ("never compile", _rule('return "none"'), 0),
    ("always compile", _rule('return "default"'), 0),
    ("always max-autotune", _rule('return "max-autotune"'), 0),
    ("halfway between the examples", _threshold((EXAMPLES[0] + EXAMPLES[1]) / 2), 0),
    ("a guessed round threshold, 4x too high", _threshold(4 * B), 0),
    ("the right threshold, but the mode whose compile costs more", _threshold(B, "max-autotune"),
     None),
])
def test_ps3_rule_earns_a_point_only_for_pairs_it_gets_right_on_both_sides(ps3_judge, name,
                                                                        source, points):
    """Graded through the real judge: the hidden jobs lie 1.5-3x below and above the break-even,
    and a pair earns its point only when the job below and the job above are both right, so a
    rule that answers the same for every size, or puts its threshold where nothing was
    measured, earns nothing of question 1."""
    result = grade(ps3_judge, ["ps3.q1"], source)["ps3.q1"]
    assert result["status"] == "ok", result
    got, text, review = _q1_points(result)
    if points is not None:
        assert got == points, (name, text)
    assert not review, text
    # the feedback names the figures, the break-even with its spread, each job, the choice and
    # every choice's total, and which way a wrong choice went
    assert "break-even: compiling pays after" in text and "over the 3 rounds" in text, text
    assert text.count("your rule chose") == 10 and "pairs right: " in text, text
    if points == 0 and "never" in name:
        assert "your rule compiles too late" in text, text
    if points == 0 and "always compile" in name:
        assert "your rule compiles too early" in text, text


def test_ps3_the_reference_rule_earns_question_1_where_its_figures_were_measured(monkeypatch):
    """The reference rule, judged on figures whose break-even is where its own written-in
    figures put it (a grading machine like the one it was measured on), earns all five pairs."""
    threshold = _reference_threshold()
    per_call = dict(PER_CALL_S)
    first = {m: (0.002 if m == "none" else threshold * (per_call["none"] - per_call[m]))
             for m in MODES}
    monkeypatch.setattr(reference_side, "measure_jobs",
                        lambda problem, device: _figures(first, per_call))
    result = grade(Judge(), ["ps3.q1"], REFERENCE_PS3)["ps3.q1"]
    assert _q1_points(result)[0] == 5, result["checks"]["job"]["message"]


def test_ps3_hidden_jobs_are_pairs_drawn_fresh_near_the_break_even(ps3_judge):
    # 1.5-3x below the least of the rounds' break-evens, and above the greatest.
    least, greatest = _figures().spread()
    seen = []
    for _ in range(2):
        result = grade(ps3_judge, ["ps3.q1"], _rule('return "none"'))["ps3.q1"]
        jobs = result["checks"]["job"]["jobs"]
        assert [j["part"] for j in jobs] == ["short"] * 5 + ["long"] * 5
        for j in jobs:
            low, high = (least / 3, least / 1.5) if j["part"] == "short" else \
                (1.5 * greatest, 3 * greatest)
            assert low - 1 <= j["calls"] <= high + 1, (j, least, greatest)
        seen.append([j["calls"] for j in jobs])
    assert seen[0] != seen[1]          # drawn from fresh seeds for every submission


def test_ps3_the_rule_is_asked_among_decoys_drawn_like_the_hidden_jobs(ps3_judge, monkeypatch):
    """A rule that sees every size cannot pick the graded ones out: besides the examples and a
    grid, it is asked about clusters drawn as the hidden ones are, around false break-evens."""
    from grader.isolation.judge import steps as judge_module

    asked = []
    original = judge_module.SubjectSession.request

    def spy(self, request, blob=b""):
        if request.get("op") == "plan":
            asked.append(list(request["sizes"]))
        return original(self, request, blob)

    monkeypatch.setattr(judge_module.SubjectSession, "request", spy)
    result = grade(ps3_judge, ["ps3.q1"], _threshold(B))["ps3.q1"]
    sizes = asked[0]
    hidden = {j["calls"] for j in result["checks"]["job"]["jobs"]}
    assert hidden < set(sizes) and set(EXAMPLES) < set(sizes)
    near = [n for n in sizes if B / 3 <= n <= 3 * B]
    elsewhere = [n for n in sizes if n not in hidden and n not in PROBE_SIZES
                 and n not in EXAMPLES]
    assert len(elsewhere) >= 20, sizes           # three decoy clusters of ten
    assert len(near) < len(sizes) / 2, sizes
    assert sizes != sorted(sizes)                # shuffled


def test_ps3_on_a_busy_machine_the_jobs_lie_outside_the_rounds_spread_and_are_decided(
        monkeypatch):
    """A machine busy while the judge measured (here one round's compiles took 5x, another's a
    fifth: a loaded 2-core machine's rounds once ranged 37,410-69,460 calls) would have made
    every job 1.5-3x from the break-even undecided, the reference's rule included (it scored
    0 of 5): the jobs are drawn outside the spread of the rounds, and each is decided."""
    figures = _figures(rounds=(1.0, 0.2, 5.0))
    least, greatest = figures.spread()
    assert greatest / least > 9
    monkeypatch.setattr(reference_side, "measure_jobs", lambda problem, device: figures)
    result = grade(Judge(), ["ps3.q1"], _threshold(B))["ps3.q1"]
    points, text, review = _q1_points(result)
    assert (points, review) == (5, False), text
    assert "UNDECIDED" not in text
    for job in result["checks"]["job"]["jobs"]:
        assert job["calls"] < least / 1.5 + 1 if job["part"] == "short" else \
            job["calls"] > 1.5 * greatest - 1, job


def test_ps3_a_job_the_rounds_disagree_about_is_undecided_not_wrong(monkeypatch):
    """Where one round found that compiling never pays (its compiled calls as slow as eager's),
    the rounds have no spread to draw outside of: the jobs are drawn around the break-even, the
    rounds' figures disagree about the long ones, and those are undecided: the cell is held for
    review, and no job is marked wrong. (Judged without the instructor's rule, which would hold
    the whole question on such figures: the next test.)"""
    figures = _figures()
    figures.rounds[2]["samples"] = {m: list(figures.rounds[2]["samples"]["none"])
                                    for m in figures.rounds[2]["samples"]}
    assert figures.spread() is None and figures.break_even is not None
    monkeypatch.setattr(reference_side, "measure_jobs", lambda problem, device: figures)
    result = grade(Judge(), ["ps3.q1"], _threshold(B), reference="off")["ps3.q1"]
    points, text, review = _q1_points(result)
    assert result["checks"]["job"]["verdict"] == "inconclusive"
    assert review and "UNDECIDED" in text and "-> WRONG" not in text, text
    assert "[REVIEW]" in text


def test_ps3_figures_the_reference_rule_misses_hold_the_question_for_everyone(monkeypatch):
    """On figures where the instructor's own rule does not earn question 1 (compiles four times
    slower than where its threshold was written: a busy or different machine), the judge
    measures again once, then holds the question for every submission with one reason for the
    instructor: no learner scores 0 there for the machine's sake (the reference once did)."""
    measured = []

    def measure(problem, device):
        measured.append(1)
        return _figures({m: 4 * t for m, t in COMPILE_S.items()})

    monkeypatch.setattr(reference_side, "measure_jobs", measure)
    threshold = _reference_threshold()
    assert threshold < _figures({m: 4 * t for m, t in COMPILE_S.items()}).break_even / 1.5
    result = grade(Judge(), ["ps3.q1"], REFERENCE_PS3)["ps3.q1"]
    points, text, review = _q1_points(result)
    assert len(measured) == 2                       # measured again once
    assert review and points == 0 and "HELD FOR REVIEW" in text, text
    assert "the reference solution's own rule does not earn ps3.q1" in text
    assert "[REVIEW]" in text and "-> WRONG" not in text


@pytest.mark.parametrize("body, said", [
    ('return "fast" if calls > 100_000 else "none"', "returned 'fast'"),
    ("return None", "returned a NoneType"),
    ("return 1 / 0", "ZeroDivisionError"),
])
def test_ps3_rule_that_raises_or_answers_no_mode_scores_nothing(ps3_judge, body, said):
    result = grade(ps3_judge, ["ps3.q1"], _rule(body))["ps3.q1"]
    assert result["status"] == "learner_error", result
    assert said in result["message"], result["message"]
    assert points("ps3", {"ps3.q1": result}) == 0


def test_ps3_where_compiling_never_pays_every_right_answer_is_eager(monkeypatch):
    # (Judged without the instructor's rule, which compiles past its threshold and would hold
    # the question on such figures.)
    slower = {m: (140e-6 if m == "none" else 150e-6) for m in MODES}
    monkeypatch.setattr(reference_side, "measure_jobs",
                        lambda problem, device: _figures(per_call=slower))
    results = grade(Judge(), ["ps3.q1"], _rule('return "none"'), reference="off")
    message = results["ps3.q1"]["checks"]["job"]["message"]
    assert "no compile mode is faster per call than eager here" in message, message
    assert all(10 ** 3 <= j["calls"] <= 10 ** 6 for j in results["ps3.q1"]["checks"]["job"]["jobs"])
    assert points("ps3", results) == 5


def test_ps3_figures_are_measured_once_per_run_and_handed_to_every_other_judge(monkeypatch):
    """A run's first judge measures ps3's figures; the other judges (local workers, Ray tasks)
    build their references from those figures (the same break-even for every submission)
    instead of measuring again; figures for other modes are refused, never half-used."""
    measured = []

    def measure(problem, device):
        measured.append(problem.key)
        return _figures()

    monkeypatch.setattr(reference_side, "measure_jobs", measure)
    job = job_for(["ps3.q1"], [], course_root=ROOT)
    first = Judge().build_references(job).to_dict()
    assert measured == ["ps3.q1"]
    figures = first["measured_jobs"]["ps3.q1"]
    assert figures["break_even"] == pytest.approx(B)
    assert figures["spread"][0] <= B < figures["spread"][1]

    other = Judge()
    again = other.build_references(dataclasses.replace(
        job, measured_jobs=first["measured_jobs"])).to_dict()
    assert measured == ["ps3.q1"], "the second judge measured again"
    assert again["measured_jobs"] == first["measured_jobs"]
    result = grade(other, ["ps3.q1"], _threshold(B))["ps3.q1"]
    assert measured == ["ps3.q1"] and result["status"] == "ok", result
    assert f"compiling pays after {figures['break_even']:,.0f} calls" in \
        result["checks"]["job"]["message"], result["checks"]["job"]["message"]

    # A judge that builds the references inside a grading job (restarted mid-run) judges on
    # the figures the job carries (grader.cohort.scoring.grade_notebook passes the run's).
    restarted = Judge()
    carried = job_for(["ps3.q1"], [Cell("cell 7", _threshold(B))], course_root=ROOT,
                      budget_s=8.0, measured_jobs=first["measured_jobs"])
    result = restarted.grade(carried).to_dict()["results"]["ps3.q1"]
    assert measured == ["ps3.q1"] and result["status"] == "ok", result
    assert f"compiling pays after {figures['break_even']:,.0f} calls" in \
        result["checks"]["job"]["message"], result["checks"]["job"]["message"]

    wrong = {"ps3.q1": dict(figures, modes=["none", "default"])}
    with pytest.raises(ValueError, match="job figures"):
        Judge().build_references(dataclasses.replace(job, measured_jobs=wrong))
    broken = {"ps3.q1": dict(figures, rounds=[{"first_call_s": {}, "samples": {}}])}
    with pytest.raises(ValueError, match="job figures"):
        Judge().build_references(dataclasses.replace(job, measured_jobs=broken))


class _InProcessJudge:
    """A judge in this process (so that a test can count its measurements), driven like a
    JudgeProcess."""

    def grade(self, job, timeout_s):
        return Judge().grade(job)   # a fresh judge per job: what self-check starts each time


def test_self_check_neither_measures_nor_judges_ps3s_hidden_jobs(monkeypatch):
    """The self-check (and a test cell run in the learner's notebook) asks the rule what it
    answers and says the hidden jobs are judged when graded: it never measures the judge's
    figures, so it cannot print the break-even the question asks the learner to measure. The
    instructor's check (hidden_jobs=True) judges them."""
    from grader.isolation.check import evaluate

    measured = []

    def measure(problem, device):
        measured.append(problem.key)
        return _figures()

    monkeypatch.setattr(reference_side, "measure_jobs", measure)
    rule = [Cell("cell 7", _threshold(B))]
    ev = evaluate("ps3.q1", cells=rule, judge=_InProcessJudge(), cache=False, sandbox="off")
    assert ev.status == "ok" and measured == [], ev.result
    assert ev.verdict("rule") == "pass" and ev.verdict("job") == "not judged here"
    text = str(ev)
    assert "break-even: compiling pays" not in text and "job of" not in text, text
    assert f"'none' for 10..{max(n for n in _probe() if n <= B):,} calls" in text, text
    score = score_cell(declared_test_cells("ps3")["ps3-q1-jobs"], {"ps3.q1": ev})
    assert score.points == 0 and "[NOT JUDGED HERE]" in score.text and not score.review

    graded = evaluate("ps3.q1", cells=rule, judge=_InProcessJudge(), cache=False, sandbox="off",
                      hidden_jobs=True)
    assert measured == ["ps3.q1"] and graded.verdict("job") == "pass", graded.result


def _probe():
    return PROBE_SIZES


PADDED_LOOP_PS3 = """class BatchScorer(PerSampleScorer):
    def forward(self, x):
        n = x.shape[0]
        padded = torch.cat([x, x.new_zeros(64 - n, x.shape[1])])
        rows = []
        for i in range(64):
            r = torch.relu(self.fc(padded[i]))
            rows.append(r / (r.norm() + 1e-6))
        return torch.stack(rows)[:n]
"""
HAND_NORM_PS3 = """class BatchScorer(PerSampleScorer):
    def forward(self, x):
        r = torch.relu(x @ self.fc.weight.T + self.fc.bias)
        return r / (torch.sqrt((r * r).sum(dim=-1, keepdim=True)) + 1e-6)
"""


def test_ps3s_padded_per_row_loop_compiles_once_but_earns_nothing(judge):
    """Padding every batch to 64 rows and keeping the per-row loop is correct, one graph, and
    compiles once; but its graph holds a copy of the loop's body per row, which the operator
    check counts (the lesson is one batched computation): neither cell earns anything (the
    correctness cell's 2 points once did)."""
    results = grade(judge, ["ps3.q2"], PADDED_LOOP_PS3)
    checks = results["ps3.q2"]["checks"]
    assert checks["correctness"]["ok"] and checks["fullgraph"]["ok"], checks
    assert checks["recompiles"]["ok"], checks["recompiles"]["message"]
    operators = checks["operators"]
    assert not operators["ok"] and operators["operators"] > 300, operators
    assert "a copy of its body into the graph for every iteration" in operators["message"]
    cell = declared_test_cells("ps3")["ps3-q2-recompiles"]
    score = score_cell(cell, {"ps3.q2": Evaluation(get_problem("ps3.q2"), results["ps3.q2"])})
    assert score.points == 0 and "operators in the graph" in score.text, score.text
    assert "hint: no Python loop over rows at all" in score.text, score.text
    assert points("ps3", results) == 0


def _seed_drawing_batch(size: int) -> int:
    return next(seed for seed in range(10_000)
                if get_problem("ps3.q2").make_inputs(seeded_generator(seed))[0].shape[0] == size)


@pytest.mark.parametrize("drawn", [32, 63])
def test_ps3s_verdicts_do_not_depend_on_the_batch_size_the_grader_draws(judge, drawn,
                                                                        monkeypatch):
    """The padded loop's graph is specialised where it is captured at batch 32 (the same size
    as the rows, so Dynamo gives both one symbol) or 63 (one padding row); the grader's seeds
    drew such a batch now and then, and the verdict then said its graph does not compute what
    the original computes and that it recompiles. The graph is captured at the problem's first
    call (batch 64) and checked at its own shapes, whatever the seeds draw."""
    seed = _seed_drawing_batch(drawn)
    monkeypatch.setattr(correctness, "fresh_seeds", lambda n: [seed] * n)
    checks = grade(judge, ["ps3.q2"], PADDED_LOOP_PS3)["ps3.q2"]["checks"]
    assert checks["fullgraph"]["ok"] and checks["recompiles"]["ok"], checks
    assert not checks["operators"]["ok"] and checks["operators"]["operators"] > 300, checks


@pytest.mark.parametrize("source", [HAND_NORM_PS3, solution_cells(
    os.path.join(ROOT, "source", "ps3", "ps3.ipynb"), ["ps3-q2-solution"])[0].source])
def test_ps3s_batched_rewrites_pass_the_operator_check(judge, source):
    results = grade(judge, ["ps3.q2"], source)
    checks = results["ps3.q2"]["checks"]
    assert all(c["ok"] for c in checks.values()), checks
    assert checks["operators"]["operators"] <= get_problem("ps3.q2").max_operators
    assert points("ps3", results) == 5


VMAP_PS3 = """class BatchScorer(PerSampleScorer):
    def forward(self, x):
        def one(row):
            r = torch.relu(self.fc(row))
            return r / (r.norm() + 1e-6)
        return torch.vmap(one)(x)
"""


def test_ps3s_vmap_rewrite_of_the_per_row_function_is_graded(judge):
    """`torch.vmap` over the per-row function is one batched computation too: its graph travels
    (it once crashed the subject shipping fake constants: a grader error) and earns question 2."""
    results = grade(judge, ["ps3.q2"], VMAP_PS3)
    checks = results["ps3.q2"]["checks"]
    assert results["ps3.q2"]["status"] == "ok", results["ps3.q2"]
    assert all(c["ok"] for c in checks.values()), {n: c["message"][:200] for n, c in checks.items()}
    assert points("ps3", results) == 5
