"""grader.cohort.report on a made-up cohort folder: what it collects and plots, in-process."""
import json
import os
from types import SimpleNamespace

from grader.cohort import report
from grader._files import RESULTS_FILE


def _submission(course, student, result, score, seconds=9.0):
    folder = os.path.join(course, "autograded", student, "ps9")
    os.makedirs(folder)
    with open(os.path.join(folder, RESULTS_FILE), "w") as fh:
        json.dump({"problems": {"ps9.q1": result}}, fh)
    return SimpleNamespace(submission=SimpleNamespace(student=student, assignment="ps9"),
                           score=score, max_score=10.0, reason="", seconds=seconds)


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


def test_the_report_says_what_is_absent_and_links_every_score_to_its_feedback(tmp_path):
    course = str(tmp_path)
    outcomes = [_submission(course, "ann", {"checks": {}}, 7.0, seconds=12.4),
                _submission(course, "bob", {"checks": {}}, 0.0, seconds=71.0)]
    outcomes[1].reason = "the .ipynb file is not a readable notebook"
    for student, page in (("ann", "ps9.html"), ("bob", "NOT_GRADED.html")):
        folder = os.path.join(course, "feedback", student, "ps9")
        os.makedirs(folder)
        open(os.path.join(folder, page), "w").write("<html></html>")
    page = open(report.write_report(course, outcomes, os.path.join(course, "reports"))).read()
    # Beside each score, the seconds grading it took: the slow ones show.
    assert "<a href='../feedback/ann/ps9/ps9.html'>7 / 10</a> <span class='seconds'>12 s</span>" in page
    assert "<a href='../feedback/bob/ps9/NOT_GRADED.html'>not graded</a> <span class='seconds'>71 s</span>" in page
    for student, link in (("ann", "ps9.html"), ("bob", "NOT_GRADED.html")):  # the links resolve
        assert os.path.exists(os.path.join(course, "reports", "..", "feedback", student, "ps9", link))


def test_empty_panels_say_no_data_instead_of_blank_axes(monkeypatch):
    texts = []
    import matplotlib.axes

    original = matplotlib.axes.Axes.text
    monkeypatch.setattr(matplotlib.axes.Axes, "text",
                        lambda self, x, y, s, *a, **k: texts.append(s) or original(self, x, y, s, *a, **k))
    d = {"scores": [3.0, 5.0], "max": 10.0, "speedups": [], "causes": {}}
    report._figure("ps9", d)
    assert any("no speedup measured" in t for t in texts)
    assert any("no graph break" in t for t in texts)


def test_feedback_lines_wrap(tmp_path):
    from grader.cohort.feedback import wrap_feedback_lines

    page = tmp_path / "ps9.html"
    page.write_text("<html><head></head><body><pre>" + "x" * 500 + "</pre></body></html>")
    wrap_feedback_lines(str(tmp_path))
    wrap_feedback_lines(str(tmp_path))   # once
    text = page.read_text()
    assert text.count("white-space: pre-wrap") == 1


def test_an_inconclusive_verdict_is_flagged_for_review_not_paid(tmp_path):
    from grader.isolation.cell_scores import Evaluation, score_cell
    from grader.problems import TestCell, get_problem

    problem = get_problem("ps2.q1")
    evaluation = Evaluation(problem, {"status": "ok", "problem": "ps2.q1", "checks": {
        "correctness": {"ok": True, "message": "match"},
        "speed": {"ok": False, "verdict": "inconclusive", "message": "noisy"}}})
    cell = TestCell("ps2-q1-speed", 3, requires=(("ps2.q1", "correctness"),),
                    scored=("ps2.q1", "speed"))
    score = score_cell(cell, {"ps2.q1": evaluation})
    assert score.points == 0.0 and score.review and "[REVIEW]" in score.text
    assert "scores 0 of 3 until a person looks" in score.failure
    course = str(tmp_path)
    outcome = _submission(course, "ann", {"checks": {}}, 7.0)
    path = os.path.join(course, "autograded", "ann", "ps9", RESULTS_FILE)
    data = json.load(open(path))
    data["cells"] = {"ps9-q1-speed": score.to_dict()}
    json.dump(data, open(path, "w"))
    page = open(report.write_report(course, [outcome], os.path.join(course, "reports"))).read()
    assert "Flagged for review" in page and "ps9-q1-speed" in page


def test_markdown_tables_have_one_row_per_item_and_escape_bars():
    """Every Markdown table (benchmarks, chapters' claims, Gradescope figures) is written by one
    function: a header, a rule, one line per row, a `|` inside a cell kept inside it."""
    from grader.common.tables import markdown_table

    text = markdown_table(["set", "time"], [["ps1", 3], ["a|b", "4 s"]])
    assert text.splitlines() == ["| set | time |", "|---|---|", "| ps1 | 3 |", "| a\\|b | 4 s |"]
