"""grader.checks.results: one vocabulary for statuses and checks, used by every module that reads a
result."""
import json

from grader import results
from grader.checks.results import CHECK_TITLES, CHECKS, PROCESS_FAILURES, WORKER_STATUSES, Status


def test_a_status_travels_in_json_as_its_value_and_compares_with_what_comes_back():
    text = json.dumps({"status": Status.LEARNER_ERROR})
    assert text == '{"status": "learner_error"}'
    back = json.loads(text)["status"]
    assert back == Status.LEARNER_ERROR and back in WORKER_STATUSES
    assert f"{Status.TIMEOUT}" == str(Status.TIMEOUT) == "timeout"
    assert "timeout" in PROCESS_FAILURES and "timeout" not in WORKER_STATUSES
    # Every status is either the worker's to report or the parent's to decide, never both.
    assert set(WORKER_STATUSES) | set(PROCESS_FAILURES) == set(Status)
    assert not set(WORKER_STATUSES) & set(PROCESS_FAILURES)


def test_one_registry_gives_the_checks_their_order_and_titles_everywhere():
    from grader import check, problems, worker

    assert CHECKS == tuple(c.name for c in results.REGISTRY)
    assert tuple(worker.CHECK_FUNCTIONS) == CHECKS        # the order the worker runs them in
    assert problems.CHECKS is CHECKS and check.CHECK_TITLES is CHECK_TITLES
    assert set(CHECK_TITLES) == set(CHECKS) and all(CHECK_TITLES.values())
