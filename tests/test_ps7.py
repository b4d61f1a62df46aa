"""Problem set 7: the given model is wrong and slow only when compiled, for the two causes its
design plants, and the points need the diagnosis.

- the premise: eagerly, ``SensorModel`` is what it is; compiled with ``eager``, ``aot_eager`` and
  ``aot_eager_decomp_partition`` it gives eager's outputs, with ``inductor`` it does not, because
  Inductor's float floor division differs from eager's on values at a bucket edge (the compiler
  bisector names the lowering of ``div``); and it compiles every call (an int attribute);
- the judge's ``compiled`` check: its own Inductor compile of the learner's graph against eager;
- the blind rewrites a learner tries before diagnosing (``floor(t / B)``, float64, whole readings,
  ``torch.bucketize``, ``torch.div(..., rounding_mode="floor")``, the bucket behind
  ``torch.compiler.disable``, the counter removed only) each fail a check the fix passes;
- the demo personas score what ``grader/problems/psN/demo_expected.json`` says;
- run top to bottom, the learner's notebook shows what its questions ask about (question 3's
  recompile log).
"""
from __future__ import annotations

import os
import re

import pytest
import torch

import notebook_solutions as sol
from grader.course import chapters as ch
from grader.checks import _torch_internals as ti
from grader.cohort.demo import demo_solutions, expected_scores
from grader.isolation.cell_scores import Evaluation, score_cell
from grader.isolation.judge.judging import job_for
from grader.isolation.judge.steps import Judge
from grader.isolation.cells.source import Cell, solution_cells
from grader.problems import get_problem, ps7
from grader.problems import test_cells as declared_test_cells

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERSONAS = demo_solutions(ROOT)["ps7"]
NO_SPEED = ["correctness", "fullgraph", "breaks", "recompiles", "compiled"]


def _reference_source() -> str:
    [cell] = solution_cells(os.path.join(ROOT, "source", "ps7", "ps7.ipynb"), ["ps7-q1-solution"])
    return cell.source


def _bucket_of(source: str):
    namespace = dict(vars(ps7))
    exec(compile(source, "<solution>", "exec"), namespace)  # noqa: S102  the reference's text
    return namespace["FixedSensorModel"]().bucket


@pytest.fixture(scope="module")
def judge():
    return Judge()


def grade(judge, source: str, checks: list[str] | None = None, reference: str = "off") -> dict:
    problem = get_problem("ps7.q1")
    job = job_for(["ps7.q1"], [Cell("cell 7", source)], course_root=ROOT, reference=reference,
                  checks={"ps7.q1": [c for c in problem.checks if checks is None or c in checks]},
                  budget_s=8.0)
    return judge.grade(job).to_dict()["results"]


def points(results: dict) -> float:
    evaluations = {k: Evaluation(get_problem(k), r) for k, r in results.items()}
    return sum(score_cell(cell, evaluations).points
               for cell in declared_test_cells("ps7").values()
               if all(k in evaluations for k in cell.problems))


def test_the_compiled_check_asks_for_a_captured_graph():
    """Declared, not listed: the judge asks the subject for the graph wherever the compiled
    check is wanted, even alone (it was once a grader error unless a graph check came too)."""
    from grader.checks.results import Need
    from grader.problems import Problem

    alone = Problem(key="x.q1", title="", entry="X", make_baseline=lambda d: None,
                    make_inputs=lambda g, d: (), solution_grade_id="x", checks=("compiled",))
    assert Need.GRAPH in alone.needs()
    assert Need.GRAPH in get_problem("ps7.q1").needs(["compiled"])


def test_only_inductor_changes_the_given_models_result_and_the_bisector_names_div():
    t, x = ps7.example_inputs(3)
    found = ch.compare_backends(ps7.SensorModel().eval(), t, x, tolerance=ps7.TOLERANCE,
                                show=False)
    assert [b for b, (_, ok) in found.items() if not ok] == ["inductor"], found
    assert found["inductor"][0] > 0.1                     # a bug, not rounding
    with torch.no_grad():
        eager_buckets = ps7.SensorModel().bucket(t)
        compiled_buckets = torch.compile(ps7.SensorModel().bucket)(t)
    moved = (compiled_buckets != eager_buckets)
    assert 0 < moved.float().mean() < 0.2
    assert bool(((compiled_buckets - eager_buckets)[moved] == 1).all())   # always one bucket up
    if not ti.has_compiler_bisector():
        pytest.skip(f"torch {torch.__version__} has no compiler bisector")
    model = ps7.SensorModel().eval()
    with torch.no_grad():
        want = model(t, x)

        def right() -> bool:
            got = torch.compile(ps7.SensorModel().eval())(t, x)
            return torch.allclose(got, want, rtol=ps7.TOLERANCE[0], atol=ps7.TOLERANCE[1])

        result, _ = ti.compiler_bisect(right)
    assert result is not None
    assert (result["backend"], result["subsystem"]) == ("inductor", "lowerings"), result
    assert result["debug_info"] is None or "div" in str(result["debug_info"])


def test_the_reference_bucket_is_eagers_eagerly_and_compiled():
    bucket = _bucket_of(_reference_source())
    for seed in range(3):
        t, _ = ps7.example_inputs(seed)
        with torch.no_grad():
            want = ps7.SensorModel().bucket(t)
            assert torch.equal(bucket(t), want)
            assert torch.equal(torch.compile(bucket)(t), want)


# The rewrites a learner tries before the diagnosis: each changes the buckets *eagerly*.
BUCKET_REWRITES = {
    "floor of the quotient": "torch.floor((t - t[:, :1]) / BUCKET_S)",
    "float64": "(t - t[:, :1]).double() // BUCKET_S",
    "whole readings": "torch.div(torch.round((t - t[:, :1]) / PERIOD).long(), round(BUCKET_S / PERIOD), "
                      "rounding_mode='floor')",
    "bucketize": "torch.bucketize(t - t[:, :1], torch.arange(1, BUCKETS, device=t.device) * BUCKET_S, "
                 "right=True)",
}


def _rewrite(expression: str) -> str:
    return (f"class FixedSensorModel(SensorModel):\n"
            f"    def bucket(self, t):\n"
            f"        return ({expression}).long().clamp(max=BUCKETS - 1)\n\n"
            f"    def forward(self, t, x):\n"
            f"        h = self.inp(x) + self.when(self.bucket(t))\n"
            f"        h = h + self.fc2(self.gelu(self.fc1(self.norm1(h))))\n"
            f"        return self.head(self.norm2(h))\n")


@pytest.mark.parametrize("name", sorted(BUCKET_REWRITES))
def test_a_blind_bucket_rewrite_changes_eagers_buckets(name):
    bucket = _bucket_of(_rewrite(BUCKET_REWRITES[name]))
    t, _ = ps7.example_inputs(1)
    with torch.no_grad():
        assert not torch.equal(bucket(t), ps7.SensorModel().bucket(t)), name


def test_blind_rewrites_score_less_than_the_fix(judge):
    """Through the judge and its subject (speed left out: what fails decides before it)."""
    cases = {
        # Right eagerly, wrong compiled: correct outputs alone earn nothing (the correctness
        # cell's points need the compiled check too).
        "given as it is": ("class FixedSensorModel(SensorModel):\n    pass\n", 0),
        "counter removed only": (_rewrite("(t - t[:, :1]) // BUCKET_S"), 2),
        "floor of the quotient": (_rewrite(BUCKET_REWRITES["floor of the quotient"]), 0),
        "div with rounding_mode='floor'": (_rewrite(
            "torch.div(t - t[:, :1], BUCKET_S, rounding_mode='floor')"), 2),
        "bucket behind torch.compiler.disable": (
            "class FixedSensorModel(SensorModel):\n"
            "    @torch.compiler.disable\n"
            "    def bucket(self, t):\n"
            "        return super().bucket(t)\n\n"
            "    def forward(self, t, x):\n"
            "        h = self.inp(x) + self.when(self.bucket(t))\n"
            "        h = h + self.fc2(self.gelu(self.fc1(self.norm1(h))))\n"
            "        return self.head(self.norm2(h))\n", 0),
        "the fix": (_reference_source(), 7),
    }
    scored = {}
    for name, (source, _) in cases.items():
        result = grade(judge, source, NO_SPEED)["ps7.q1"]
        assert result["status"] == "ok", (name, result)
        scored[name] = points({"ps7.q1": result})
        checks = result["checks"]
        if name != "the fix":
            assert not (checks["correctness"]["ok"] and checks["compiled"]["ok"]
                        and checks["fullgraph"]["ok"] and checks["recompiles"]["ok"]), name
    assert scored == {name: want for name, (_, want) in cases.items()}, scored
    # the compiled check says what differs, and that it is the compiled code, not the eager one
    given = grade(judge, cases["counter removed only"][0], NO_SPEED)["ps7.q1"]["checks"]
    assert given["correctness"]["ok"] and not given["compiled"]["ok"]
    assert "compiled your graph with Inductor" in given["compiled"]["message"]
    assert "max abs difference" in given["compiled"]["message"]


@pytest.mark.parametrize("persona", ["partial", "slow", "wrong"])
def test_demo_personas_score_what_demo_expected_says(judge, persona):
    student = {"partial": "ben_partial", "slow": "dee_slow", "wrong": "eve_wrong"}[persona]
    results = grade(judge, PERSONAS[persona]["ps7-q1-solution"], reference="auto")
    assert points(results) == expected_scores()["ps7"][student], results["ps7.q1"]["checks"]


def test_run_top_to_bottom_question_3_shows_the_recompile_log(tmp_path):
    """The learner's notebook, solved, run top to bottom in one kernel (Jupyter's Run All): the
    explore cell before question 3 already compiled ``SensorModel.forward`` for every value
    ``readings_seen`` takes over six windows, so question 3's cell shows its log only because it
    starts from an empty Dynamo cache."""
    import json

    import nbformat
    from nbclient import NotebookClient

    with open(os.path.join(ROOT, "release", "ps7", "ps7.ipynb")) as fh:
        release_nb = json.load(fh)
    with open(os.path.join(ROOT, "source", "ps7", "ps7.ipynb")) as fh:
        source_nb = json.load(fh)
    nb = nbformat.reads(json.dumps(sol.fill_solutions(release_nb, source_nb)), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": os.path.join(ROOT, "release", "ps7")}}).execute()

    def text(marker: str) -> str:
        [cell] = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")

    log = text("# Explore for question 3")
    assert log.count("Recompiling function forward") == 5, log[-3000:]
    for seen in (0, 2048, 4096, 6144, 8192):
        assert f"self.readings_seen == {seen}" in log, seen
    windows = [float(m) for m in re.findall(r"window \d: +([\d.]+) ms", text("# Explore (not graded)"))]
    assert len(windows) == 6
