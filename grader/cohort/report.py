"""The cohort report: per problem set a score histogram, learners' speedups against the target,
and the most common graph-break causes; one HTML page with PNG figures beside it."""
from __future__ import annotations

import base64
import collections
import html
import io
import json
import os
from typing import NamedTuple

from grader.checks.results import ProblemResult


class SpeedPoint(NamedTuple):
    """One learner's measured speedup on one problem, as the report plots it."""

    student: str
    problem: str
    learner: float
    reference: float | None
    verdict: str | None


def _load(course: str, student: str, assignment: str, name: str, empty):
    path = os.path.join(course, "autograded", student, assignment, name)
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return empty


def _results(course: str, student: str, assignment: str) -> list[ProblemResult]:
    """The grading pipeline's result for each problem of a submission (written by the trusted
    process, never by the notebook's kernel)."""
    from grader.cohort.grade import RESULTS_FILE

    problems = _load(course, student, assignment, RESULTS_FILE, {}).get("problems", {})
    return [ProblemResult.from_dict({**result, "problem": key}) for key, result in problems.items()]


def collect(course: str, outcomes) -> dict:
    """Per assignment: scores, :class:`SpeedPoint` s, and graph-break causes counted once per
    student and problem."""
    from grader.cohort.grade import DISAGREEMENTS_FILE

    data: dict = collections.defaultdict(lambda: {"scores": [], "max": 0.0, "speedups": [],
                                                  "causes": collections.Counter(),
                                                  "not_graded": [], "disagreed": []})
    for o in outcomes:
        sub = o.submission
        d = data[sub.assignment]
        d["scores"].append(o.score)
        d["max"] = max(d["max"], o.max_score)
        if o.reason:
            d["not_graded"].append((sub.student, o.reason.splitlines()[0]))
        for row in _load(course, sub.student, sub.assignment, DISAGREEMENTS_FILE, []):
            d["disagreed"].append((sub.student, row.get("grade_id"), row.get("kernel_points"),
                                   row.get("points")))
        seen = set()
        for r in _results(course, sub.student, sub.assignment):
            speed = r.checks.get("speed")
            sp = speed.details.get("speedups", {}) if speed else {}
            if "learner" in sp and (sub.student, r.problem) not in seen:
                seen.add((sub.student, r.problem))
                d["speedups"].append(SpeedPoint(sub.student, r.problem, sp["learner"]["median"],
                                                sp.get("reference", {}).get("median"),
                                                speed.verdict))
            for name in ("fullgraph", "breaks"):
                outcome = r.checks.get(name)
                for b in outcome.details.get("breaks", []) if outcome else []:
                    key = (sub.student, r.problem, b["cause"])
                    if key not in seen:
                        seen.add(key)
                        d["causes"][b["cause"]] += 1
    return data


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()


def _figure(assignment: str, d: dict) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    ax = axes[0]
    ax.hist(d["scores"], bins=min(10, max(3, len(set(d["scores"])))), range=(0, max(d["max"], 1)),
            color="#4c72b0", edgecolor="white")
    ax.set(title=f"{assignment}: scores (n={len(d['scores'])})", xlabel=f"points of {d['max']:g}",
           ylabel="students")
    ax = axes[1]
    if d["speedups"]:
        points = d["speedups"]
        labels = [f"{p.student}\n{p.problem.split('.', 1)[1]}" for p in points]
        values = [p.learner for p in points]
        colors = {"pass": "#55a868", "fail": "#c44e52", "inconclusive": "#dd8452"}
        ax.bar(range(len(values)), values, color=[colors.get(p.verdict, "grey") for p in points])
        refs = [p.reference for p in points if p.reference]
        if refs:
            ax.axhline(sorted(refs)[len(refs) // 2], ls="--", color="black", label="reference (median)")
            ax.legend(fontsize=8)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks(range(len(values)), labels, fontsize=7, rotation=60)
    ax.set(title="speedup over baseline (green pass, red fail, orange inconclusive)", ylabel="x")
    ax = axes[2]
    if d["causes"]:
        causes = d["causes"].most_common(6)
        ax.barh([c for c, _ in causes][::-1], [n for _, n in causes][::-1], color="#8172b2")
    ax.set(title="graph-break causes in the cohort", xlabel="student x problem")
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    return png


def write_report(course: str, outcomes, report_dir: str) -> str:
    """Write ``report.html`` (and one PNG per assignment) into ``report_dir``; return its path."""
    os.makedirs(report_dir, exist_ok=True)
    data = collect(course, outcomes)
    parts = ["<html><head><meta charset='utf-8'><title>Grading report</title></head><body>",
             "<h1>Grading report</h1>"]
    for assignment in sorted(data):
        d = data[assignment]
        png = _figure(assignment, d)
        with open(os.path.join(report_dir, f"{assignment}.png"), "wb") as fh:
            fh.write(png)
        mean = sum(d["scores"]) / len(d["scores"]) if d["scores"] else 0
        parts.append(f"<h2>{html.escape(assignment)}</h2><p>{len(d['scores'])} submissions, "
                     f"mean {mean:.1f} of {d['max']:g} points.</p>")
        parts.append(f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}'/>")
        if d["causes"]:
            parts.append("<p>Most common graph-break causes: " + ", ".join(
                f"{html.escape(c)} ({n})" for c, n in d["causes"].most_common()) + "</p>")
        if d["disagreed"]:
            parts.append("<p>Test cells where the notebook's own output disagreed with the "
                         "grader's measurement (the grade is the grader's):</p><ul>" + "".join(
                             f"<li>{html.escape(str(s))}: {html.escape(str(g))}: notebook "
                             f"{html.escape(str(k))}, grader {p:g}</li>"
                             for s, g, k, p in d["disagreed"]) + "</ul>")
        if d["not_graded"]:
            parts.append("<p>Not graded (scored 0):</p><ul>" + "".join(
                f"<li>{html.escape(s)}: {html.escape(r)}</li>" for s, r in d["not_graded"]) + "</ul>")
    parts.append("</body></html>")
    path = os.path.join(report_dir, "report.html")
    with open(path, "w") as fh:
        fh.write("\n".join(parts))
    return path
