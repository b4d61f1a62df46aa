"""Each of the worker's checks is a module-level function of a Session, testable without a
subprocess (grading runs them in the sandboxed worker; here they run in-process on ps5)."""
from __future__ import annotations

import os

from grader.isolation import worker
from grader.problems import get_problem, seeded_generator
from grader.problems import ps5
from grader.isolation.source import solution_cells


def _fast_classifier():
    """The reference solution's class, as the source notebook has it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    [cell] = solution_cells(os.path.join(root, "source", "ps5", "ps5.ipynb"), ["ps5-q1-solution"])
    namespace = dict(vars(ps5))
    exec(cell.source, namespace)
    return namespace["FastClassifier"]


def _session(entry) -> worker.Session:
    problem = get_problem("ps5.q1")
    seeds = [11, 12, 13, 14, 15, 16, 17]
    pool = [problem.make_inputs(seeded_generator(s), "cpu") for s in seeds[:4]]
    base = problem.make_baseline("cpu")
    base_call = problem.graded_call(base)
    session = worker.Session(problem, "cpu", seeds, pool, base, base_call, base_call, None,
                             [base_call(*args) for args in pool])
    session.learner_model = problem.instantiate(entry, base, "cpu")
    session.learner_eager = problem.graded_call(session.learner_model)
    session.learner_traced = problem.traced_call(session.learner_model)
    return session


def test_the_checks_run_in_process_on_a_session():
    fixed, original = _session(_fast_classifier()), _session(ps5.Classifier)
    for name in ("correctness", "fullgraph", "breaks", "recompiles"):
        assert worker.CHECK_FUNCTIONS[name](fixed)["ok"], name
    assert worker.check_correctness(original)["ok"]          # the same maths
    assert not worker.check_fullgraph(original)["ok"]
    report = worker.check_recompiles(original)
    assert not report["ok"] and report["compiles"] == 6      # the example counter, every step
