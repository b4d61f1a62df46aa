"""The cohort report: per problem set a score histogram, learners' speedups against the target,
and the most common graph-break causes; one HTML page with PNG figures beside it."""
from __future__ import annotations

import base64
import collections
import html
import io
import os
from typing import NamedTuple

from grader import _files as files
from grader.cohort.scoring import JudgedScores, yardstick


class SpeedPoint(NamedTuple):
    """One learner's measured speedup on one problem, as the report plots it."""

    student: str
    problem: str
    learner: float
    reference: float | None
    verdict: str | None


def _judged(course: str, student: str, assignment: str) -> JudgedScores | None:
    """A submission's judged scores (written by the trusted process), kept beside its graded
    notebook."""
    return JudgedScores.load(os.path.join(files.autograded_dir(course, student, assignment),
                                          files.RESULTS_FILE))


def collect(course: str, outcomes) -> dict:
    """Per assignment: scores, :class:`SpeedPoint` s, and graph-break causes counted once per
    student and problem."""
    data: dict = collections.defaultdict(lambda: {"scores": [], "max": 0.0, "speedups": [],
                                                  "causes": collections.Counter(),
                                                  "not_graded": [], "review": [],
                                                  "yardsticks": {}})
    for o in outcomes:
        sub = o.submission
        d = data[sub.assignment]
        d["scores"].append(o.score)
        d["max"] = max(d["max"], o.max_score)
        if o.reason:
            d["not_graded"].append((sub.student, o.reason.splitlines()[0]))
        judged = _judged(course, sub.student, sub.assignment)
        cells = judged.cell_scores() if judged else {}
        d["review"] += [(sub.student, grade_id, "the grader itself failed: its traceback is in "
                         "the submission's judged results" if not c.passed and c.points == 0
                         and "the grader itself failed" in c.failure else
                         "an inconclusive speed verdict")
                        for grade_id, c in sorted(cells.items()) if c.review]
        seen = set()
        for r in judged.problem_results() if judged else []:
            job = r.checks.get("job")
            if job is not None and isinstance(job.details.get("figures"), dict):
                d["yardsticks"].setdefault(r.problem, job.details["figures"])
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
    if not d["speedups"]:
        _absent(ax, "no speedup measured: no problem of this set is timed on its own,\n"
                    "or no submission reached the timed check")
    else:
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
        ax.set(xlabel="student x problem")
    else:
        _absent(ax, "no graph break in any submission\n(or none reached the graph-break check)")
    ax.set(title="graph-break causes in the cohort")
    fig.tight_layout()
    png = _png(fig)
    plt.close(fig)
    return png


def _cached_figure(report_dir: str, assignment: str, d: dict) -> bytes:
    """:func:`_figure`, drawn again only when what it plots changed since the last run (a
    regrade with nothing new draws nothing: matplotlib takes ~0.4 s a figure)."""
    import hashlib
    import json

    plotted = {"scores": d["scores"], "max": d["max"], "causes": sorted(d["causes"].items()),
               "speedups": [tuple(p) for p in d["speedups"]]}
    key = hashlib.sha256(json.dumps([assignment, plotted], default=str).encode()).hexdigest()
    path = os.path.join(report_dir, f"{assignment}.png")
    drawn = os.path.join(report_dir, FIGURE_KEYS)
    keys = files.read_json_dict(drawn)
    if keys.get(assignment) == key and os.path.exists(path):
        with open(path, "rb") as png:
            return png.read()
    png = _figure(assignment, d)
    with open(path, "wb") as fh:
        fh.write(png)
    keys[assignment] = key
    files.write_json_atomic(drawn, keys)
    return png


FIGURE_KEYS = ".figures.json"   # in reports/: what each figure was drawn from


def _absent(ax, text: str) -> None:
    """A panel with nothing to plot says so, instead of drawing empty 0..1 axes."""
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=9, color="#555555",
            transform=ax.transAxes, wrap=True)


def feedback_page(course: str, student: str, assignment: str) -> str | None:
    """The student's feedback page for a set, relative to ``reports/`` (None when there is none):
    nbgrader's feedback HTML, or the page that says why the submission was not graded."""
    folder = files.feedback_dir(course, student, assignment)
    if not os.path.isdir(folder):
        return None
    pages = sorted(n for n in os.listdir(folder) if n.endswith(".html"))
    page = next((n for n in pages if n != files.NOT_GRADED_PAGE), None) or (pages[0] if pages else None)
    return f"../feedback/{student}/{assignment}/{page}" if page else None


def score_table(course: str, outcomes) -> str:
    """Students x problem sets, each score linked to that student's feedback, and beside it the
    seconds grading it took (so the slow ones show): what an instructor looks for first."""
    assignments = sorted({o.submission.assignment for o in outcomes})
    by_cell = {(o.submission.student, o.submission.assignment): o for o in outcomes}
    rows = ["<table class='scores'><tr><th>student</th>"
            + "".join(f"<th>{html.escape(a)}</th>" for a in assignments) + "</tr>"]
    for student in sorted({o.submission.student for o in outcomes}):
        cells = []
        for a in assignments:
            o = by_cell.get((student, a))
            if o is None:
                cells.append("<td class='none'>&ndash;</td>")
                continue
            text = f"{o.score:g} / {o.max_score:g}" if not o.reason else "not graded"
            link = feedback_page(course, student, a)
            title = html.escape(o.reason.splitlines()[0], quote=True) if o.reason else ""
            inner = f"<a href='{html.escape(link, quote=True)}'>{text}</a>" if link else text
            if o.seconds:
                inner += f" <span class='seconds'>{o.seconds:.0f} s</span>"
            cells.append(f"<td class='{'failed' if o.reason else 'graded'}' title='{title}'>"
                         f"{inner}</td>")
        rows.append(f"<tr><th>{html.escape(student)}</th>{''.join(cells)}</tr>")
    return "\n".join(rows) + "</table>"


STYLE = """<style>
body { font-family: sans-serif; max-width: 1200px; margin: 1em auto; }
table.scores { border-collapse: collapse; margin: 1em 0; }
table.scores th, table.scores td { border: 1px solid #ccc; padding: 0.3em 0.8em; text-align: right; }
table.scores th { background: #f4f4f4; text-align: left; }
td.failed { background: #fbe9e9; } td.none { color: #999; text-align: center; }
span.seconds { color: #777; font-size: 85%; }
img { max-width: 100%; }
</style>"""


def write_report(course: str, outcomes, report_dir: str) -> str:
    """Write ``report.html`` (and one PNG per assignment) into ``report_dir``; return its path."""
    os.makedirs(report_dir, exist_ok=True)
    data = collect(course, outcomes)
    parts = ["<html><head><meta charset='utf-8'><title>Grading report</title>", STYLE,
             "</head><body>", "<h1>Grading report</h1>",
             "<h2>Scores</h2><p>Each score links to that student's feedback; beside it, the "
             "seconds grading that submission took.</p>",
             score_table(course, outcomes)]
    for assignment in sorted(data):
        d = data[assignment]
        png = _cached_figure(report_dir, assignment, d)
        mean = sum(d["scores"]) / len(d["scores"]) if d["scores"] else 0
        parts.append(f"<h2>{html.escape(assignment)}</h2><p>{len(d['scores'])} submissions, "
                     f"mean {mean:.1f} of {d['max']:g} points.</p>")
        parts.append(f"<img src='data:image/png;base64,{base64.b64encode(png).decode()}'/>")
        for key, figures in sorted(d["yardsticks"].items()):
            parts.append(f"<p>{html.escape(key)}: the hidden jobs were judged on figures the "
                         f"grader measured once: {html.escape(yardstick(key, figures))}. "
                         f"A job whose verdict changes within that spread is held for review.</p>")
        if d["causes"]:
            parts.append("<p>Most common graph-break causes: " + ", ".join(
                f"{html.escape(c)} ({n})" for c, n in d["causes"].most_common()) + "</p>")
        if d["review"]:
            parts.append("<p>Flagged for review, scored 0 until a person looks (nbgrader: needs "
                         "manual grade). An inconclusive speed verdict means the machine was too "
                         "noisy to decide, and a regrade on a quieter machine usually decides "
                         "it; a grader error is the grader's, never the student's:</p><ul>"
                         + "".join(f"<li>{html.escape(s)}: {html.escape(g)} ({html.escape(why)})"
                                   f"</li>" for s, g, why in d["review"]) + "</ul>")
        if d["not_graded"]:
            parts.append("<p>Not graded (scored 0):</p><ul>" + "".join(
                f"<li>{html.escape(s)}: {html.escape(r)}</li>" for s, r in d["not_graded"]) + "</ul>")
    parts.append("</body></html>")
    path = os.path.join(report_dir, files.REPORT_HTML)
    with open(path, "w") as fh:
        fh.write("\n".join(parts))
    return path
