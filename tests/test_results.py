"""grader.checks.results: one vocabulary for statuses and the form of a check, used by every module
that reads a result (the checks themselves: grader.checks.declared, tests/test_declared_checks.py)."""
import json

from grader.checks import results
from grader.checks.declared import CHECK_TITLES, CHECKS
from grader.checks.results import PROCESS_FAILURES, DECIDED_STATUSES, Status


def test_a_status_travels_in_json_as_its_value_and_compares_with_what_comes_back():
    text = json.dumps({"status": Status.LEARNER_ERROR})
    assert text == '{"status": "learner_error"}'
    back = json.loads(text)["status"]
    assert back == Status.LEARNER_ERROR and back in DECIDED_STATUSES
    assert f"{Status.TIMEOUT}" == str(Status.TIMEOUT) == "timeout"
    assert "timeout" in PROCESS_FAILURES and "timeout" not in DECIDED_STATUSES
    # A status says either what the learner's code did or what happened to its process, never both.
    assert set(DECIDED_STATUSES) | set(PROCESS_FAILURES) == set(Status)
    assert not set(DECIDED_STATUSES) & set(PROCESS_FAILURES)


def test_one_registry_gives_the_checks_their_order_and_titles_everywhere():
    from grader.checks import declared

    assert CHECKS == tuple(c.name for c in declared.REGISTRY)
    assert set(CHECK_TITLES) == set(CHECKS) and all(CHECK_TITLES.values())
    assert not hasattr(results, "REGISTRY"), "one registry: grader.checks.declared"


def test_a_problem_result_reads_and_writes_the_json_the_judge_sends():
    from grader.checks.results import CheckOutcome, ProblemResult

    raw = {"status": "ok", "problem": "ps1.q1", "device": "cpu", "device_class": "cpu",
           "checks": {"correctness": {"ok": True, "message": "match", "checked": 3},
                      "speed": {"ok": False, "verdict": "inconclusive", "message": "noisy",
                                "speedups": {"learner": {"median": 1.4}}}},
           "phases": {"subject start": 1.0}, "sandbox": "bwrap"}
    result = ProblemResult.from_dict(raw)
    assert result.status == Status.OK and result.extra == {"phases": {"subject start": 1.0},
                                                          "sandbox": "bwrap"}
    speed = result.outcome("speed")
    assert isinstance(speed, CheckOutcome) and speed.final_verdict == "inconclusive"
    assert speed.details["speedups"]["learner"]["median"] == 1.4
    assert speed.details.get("missing", 0) == 0 and not hasattr(speed, "__getitem__")
    assert result.outcome("correctness").final_verdict == "pass"
    assert result.outcome("fusion").message == "fusion was not checked"
    back = result.to_dict()
    assert back["checks"] == {name: {**out} for name, out in raw["checks"].items()}
    assert json.loads(json.dumps(back)) == back
    refused = ProblemResult.from_dict({"status": "refused", "problem": "ps1.q1",
                                       "message": "line 3 reads a file"})
    assert refused.outcome("speed").ok is False
    assert refused.outcome("speed").message == "line 3 reads a file"
