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
- ps3's job rule is graded on hidden sizes around this machine's break-even: "always compile"
  and "never compile" earn only the jobs on their side, the break-even rule earns all four, and
  a rule that raises or returns anything but a mode earns nothing (the figures are the judge's
  own measurement; here synthetic ones stand in for it, so the tests need no compile).
"""
from __future__ import annotations

import json
import os
import re

import pytest

from grader.checks import targets
from grader.isolation import reference_side
from grader.isolation.check import Evaluation, job_for, score_cell
from grader.isolation.judge import Judge
from grader.isolation.reference_side import JobFigures
from grader.isolation.source import Cell, solution_cells
from grader.problems import get_problem
from grader.problems import test_cells as declared_test_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRUCTURAL = ("fullgraph", "breaks", "recompiles", "fusion")


@pytest.fixture(scope="module")
def judge():
    return Judge()


def grade(judge, keys: list[str], source: str, checks: list[str] | None = None) -> dict:
    job = job_for(keys, [Cell("cell 7", source)], course_root=ROOT,
                  checks={k: [c for c in get_problem(k).checks if checks is None or c in checks]
                          for k in keys})
    job["budget_s"] = 8.0
    return judge.grade(job)["results"]


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


ONE_SIDED_PS1 = """class FixedModel(Original):
    def forward(self, x):
        h = torch.tanh(self.fc1(x)) * 1.5
        scale = h.abs().max()
        h = h / (scale + 1e-6)
        pos = h > 0
        pos_mean = torch.where(pos, h, 0.0).sum() / pos.sum()
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())
"""


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


# ps3 q1: synthetic figures in the shape of this CPU's (a cold compile of ~5 s, 140 us a call
# eager, ~55 us compiled: B ~ 59,000 calls), with a little spread between trials.
FIRST_S = {"none": 0.002, "default": 5.0, "reduce-overhead": 4.8, "max-autotune": 5.1,
           "max-autotune-no-cudagraphs": 5.0}
PER_CALL_S = {"none": 140e-6, "default": 55e-6, "reduce-overhead": 54e-6, "max-autotune": 53e-6,
              "max-autotune-no-cudagraphs": 56e-6}


def _figures(first: dict, per_call: dict) -> JobFigures:
    samples = {m: [s * (1 + 0.01 * ((i % 5) - 2)) for i in range(21)] for m, s in per_call.items()}
    calls, best = targets.break_even(samples, first, "none")
    return JobFigures(dict(first), samples, calls, best)


@pytest.fixture
def ps3_judge(monkeypatch):
    monkeypatch.setattr(reference_side, "measure_jobs",
                        lambda problem, device: _figures(FIRST_S, PER_CALL_S))
    return Judge()


def _rule(body: str) -> str:
    return ("class JobPlanner:\n    @staticmethod\n"
            "    def mode_for(calls: int, device: str) -> str:\n"
            + "".join(f"        {line}\n" for line in body.splitlines()))


REFERENCE_PS3 = solution_cells(os.path.join(ROOT, "source", "ps3", "ps3.ipynb"),
                               ["ps3-q1-solution"])[0].source


@pytest.mark.parametrize("name, source, short, long", [
    ("the reference's break-even rule", REFERENCE_PS3, 2, 2),
    ("never compile", _rule('return "none"'), 2, 0),
    ("always compile", _rule('return "default"'), 0, 2),
    ("always max-autotune", _rule('return "max-autotune"'), 0, 2),
])
def test_ps3_rule_earns_the_jobs_it_gets_right(ps3_judge, name, source, short, long):
    result = grade(ps3_judge, ["ps3.q1"], source)["ps3.q1"]
    assert result["status"] == "ok", result
    evaluations = {"ps3.q1": Evaluation(get_problem("ps3.q1"), result)}
    cells = declared_test_cells("ps3")
    scores = {g: score_cell(cells[g], evaluations) for g in ("ps3-q1-correctness",
                                                            "ps3-q1-short", "ps3-q1-long")}
    assert [s.points for s in scores.values()] == [1, short, long], \
        {g: s.text for g, s in scores.items()}
    # the feedback names each job, the choice, and every choice's total
    text = scores["ps3-q1-long"].text
    assert "break-even: compiling pays after" in text and "totals: none" in text, text
    assert text.count("your rule chose") == 2 and "(long)" in text


def test_ps3_hidden_jobs_are_drawn_fresh_around_the_break_even(ps3_judge):
    figures = _figures(FIRST_S, PER_CALL_S)
    b = figures.break_even
    seen = []
    for _ in range(2):
        result = grade(ps3_judge, ["ps3.q1"], _rule('return "none"'))["ps3.q1"]
        jobs = result["checks"]["job"]["jobs"]
        assert [j["part"] for j in jobs] == ["short", "short", "long", "long"]
        for j in jobs:
            low, high = (b / 30, b / 4) if j["part"] == "short" else (4 * b, 30 * b)
            assert low - 1 <= j["calls"] <= high + 1, (j, b)
        seen.append([j["calls"] for j in jobs])
    assert seen[0] != seen[1]          # drawn from fresh seeds for every submission


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
    slower = {m: (140e-6 if m == "none" else 150e-6) for m in PER_CALL_S}
    monkeypatch.setattr(reference_side, "measure_jobs",
                        lambda problem, device: _figures(FIRST_S, slower))
    results = grade(Judge(), ["ps3.q1"], _rule('return "none"'))
    message = results["ps3.q1"]["checks"]["job"]["message"]
    assert "no compile mode is faster per call than eager here" in message, message
    assert all(10 ** 3 <= j["calls"] <= 10 ** 6 for j in results["ps3.q1"]["checks"]["job"]["jobs"])
    assert points("ps3", results) == 5


def test_ps3_figures_are_measured_once_per_run_and_handed_to_every_other_judge(monkeypatch):
    """A run's first judge measures ps3's figures; the other judges (local workers, Ray tasks)
    build their references from those figures (the same break-even for every submission)
    instead of measuring ~50 s again; figures for other modes are refused, never half-used."""
    measured = []

    def measure(problem, device):
        measured.append(problem.key)
        return _figures(FIRST_S, PER_CALL_S)

    monkeypatch.setattr(reference_side, "measure_jobs", measure)
    job = job_for(["ps3.q1"], [], course_root=ROOT)
    first = Judge().build_references(job)
    assert measured == ["ps3.q1"]
    figures = first["measured_jobs"]["ps3.q1"]
    assert figures["break_even"] == pytest.approx(_figures(FIRST_S, PER_CALL_S).break_even)

    other = Judge()
    again = other.build_references(dict(job, measured_jobs=first["measured_jobs"]))
    assert measured == ["ps3.q1"], "the second judge measured again"
    assert again["measured_jobs"] == first["measured_jobs"]
    result = grade(other, ["ps3.q1"], REFERENCE_PS3)["ps3.q1"]
    assert measured == ["ps3.q1"] and result["status"] == "ok", result
    assert f"compiling pays after {figures['break_even']:,.0f} calls" in \
        result["checks"]["job"]["message"], result["checks"]["job"]["message"]

    wrong = {"ps3.q1": dict(figures, samples={"none": [1e-4]}, first_call_s={"none": 0.0})}
    with pytest.raises(ValueError, match="job figures"):
        Judge().build_references(dict(job, measured_jobs=wrong))


class _InProcessJudge:
    """A judge in this process (so that a test can count its measurements), driven like a
    JudgeProcess."""

    def grade(self, job, timeout_s):
        return Judge().grade(job)   # a fresh judge per job: what self-check starts each time


def test_self_check_measures_ps3_once_and_reuses_the_saved_figures(monkeypatch, tmp_path):
    """A learner checking their rule again does not wait ~50 s for the same measurement: the
    first self-check saves the judge's figures on this machine, the next ones use them (and say
    so); figures too old, or for other grader code, are measured again."""
    from grader import _paths
    from grader.isolation import saved_figures
    from grader.isolation.check import evaluate

    measured = []

    def measure(problem, device):
        measured.append(problem.key)
        return _figures(FIRST_S, PER_CALL_S)

    monkeypatch.setattr(reference_side, "measure_jobs", measure)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rule = [Cell("cell 7", REFERENCE_PS3)]
    first = evaluate("ps3.q1", cells=rule, judge=_InProcessJudge(), cache=False, sandbox="off")
    assert first.status == "ok" and measured == ["ps3.q1"], first.result
    assert "saved in" in first.figures_note and str(tmp_path) in first.figures_note
    again = evaluate("ps3.q1", cells=rule, judge=_InProcessJudge(), cache=False, sandbox="off")
    assert again.status == "ok" and measured == ["ps3.q1"], "measured again"
    assert "measured by a self-check at" in again.figures_note
    pays = [re.search(r"compiling pays after ([\d,]+) calls", e.outcome("job").message).group(1)
            for e in (first, again)]
    assert pays[0] == pays[1], pays

    # Too old: measured again.
    path = saved_figures.path_for("ps3.q1", "cpu")
    data = json.load(open(path))
    json.dump(dict(data, measured_at=data["measured_at"] - saved_figures.MAX_AGE_S - 1),
              open(path, "w"))
    evaluate("ps3.q1", cells=rule, judge=_InProcessJudge(), cache=False, sandbox="off")
    assert measured == ["ps3.q1", "ps3.q1"]
    # Asked not to use them: measured again.
    evaluate("ps3.q1", cells=rule, judge=_InProcessJudge(), cache=False, sandbox="off",
             saved_figures=False)
    assert measured == ["ps3.q1"] * 3
    # Other grader code: another file.
    monkeypatch.setattr(_paths, "grader_fingerprint", lambda: "another grader")
    assert saved_figures.path_for("ps3.q1", "cpu") != path
