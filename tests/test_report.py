"""grader.cohort.report on a made-up cohort folder: what it collects and plots, in-process."""
import json
import os
from types import SimpleNamespace

from grader.cohort import report
from grader.cohort.grade import RESULTS_FILE


def _submission(course, student, result, score):
    folder = os.path.join(course, "autograded", student, "ps9")
    os.makedirs(folder)
    with open(os.path.join(folder, RESULTS_FILE), "w") as fh:
        json.dump({"problems": {"ps9.q1": result}}, fh)
    return SimpleNamespace(submission=SimpleNamespace(student=student, assignment="ps9"),
                           score=score, max_score=10.0, reason="")


def test_the_report_collects_speedups_and_break_causes_per_student(tmp_path):
    course = str(tmp_path)
    fast = {"checks": {"speed": {"verdict": "pass", "speedups": {"learner": {"median": 1.9},
                                                                 "reference": {"median": 2.0}}}}}
    broken = {"checks": {"fullgraph": {"breaks": [{"cause": "print"}, {"cause": "print"}]},
                         "breaks": {"breaks": [{"cause": "print"}]}}}
    outcomes = [_submission(course, "ann", fast, 10.0), _submission(course, "bob", broken, 3.0)]
    data = report.collect(course, outcomes)["ps9"]
    assert data["speedups"] == [report.SpeedPoint("ann", "ps9.q1", 1.9, 2.0, "pass")]
    assert data["causes"] == {"print": 1}          # once per student and problem
    assert data["scores"] == [10.0, 3.0] and data["max"] == 10.0
    page = open(report.write_report(course, outcomes, os.path.join(course, "reports"))).read()
    assert "2 submissions, mean 6.5 of 10 points" in page and "print (1)" in page
    assert os.path.exists(os.path.join(course, "reports", "ps9.png"))
