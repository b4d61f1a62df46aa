"""The bundled demo cohort: nine made-up students per problem set, one per way a submission can
go, so a newcomer's ``make grade`` shows the whole flow (and a test checks every score).

Submissions are built at grading time, on the instructor's side only, from the release notebook
of each problem set and the reference solution in ``source/`` (so they follow the problem sets as
they change); the personas that need problem-specific code take it from each set's
``source/psN/demo_cohort.py`` (``DEMO_SOLUTIONS = {persona: {solution grade_id: code}}``:
"partial", half done; "slow", correct and one graph with wasted work; "wrong", fast and wrong).
They are the reference solutions with small changes, so they live beside the set's notebook,
which students never get: nothing of them is in the ``grader`` package, and nbgrader never
copies them into ``release/`` (``nbgrader_config.py``). Expected scores are written down in each set's
``grader/problems/psN/demo_expected.json`` (:func:`grader.problems.sets.expected_scores`).
"""
from __future__ import annotations

import json
import os
import re
import shutil

from grader import _files as files

PERSONAS = {
    "ada_full": "full solution",
    "ben_partial": "half done: some breaks or questions fixed, not all",
    "cy_blank": "nothing written",
    "dee_slow": "correct and compiles, but no faster than the baseline",
    "eve_wrong": "fast, but the outputs are wrong",
    "fay_crash": "the first solution cell exits its process (os._exit)",
    "gus_loop": "the first solution's model is never built (an endless loop in its __init__)",
    "hal_corrupt": "the .ipynb file is corrupted (truncated JSON)",
    "ivy_given": "the given model unchanged (each solution class only subclasses it): earns 0",
}
# A newcomer's first `make grade`: every persona, so every kind of failure, in the first set, and
# in the others the ones whose scores depend on the set (``--demo-students all``: all of them).
FIRST_SET_ALL = "ps1"
OTHER_SETS = ("ada_full", "ben_partial", "dee_slow", "eve_wrong")


def first_run_cohort(assignment: str, assignments: list[str]) -> dict[str, str]:
    """{student: persona} of the demo for ``assignment`` on a first run (see above)."""
    first = FIRST_SET_ALL if FIRST_SET_ALL in assignments else sorted(assignments)[0]
    return {p: p for p in (PERSONAS if assignment == first else OTHER_SETS)}


def choose_demo_cohort(wanted: list[str]) -> tuple[dict[str, str] | None, bool, str]:
    """The demo students ``make grade`` grades when submitted/ is empty: ``wanted``
    (``--demo-students``), ``["all"]`` or, by default, the :func:`first_run_cohort`. Returns the ``cohort`` and
    ``first_run`` arguments of :func:`build_demo_course` and the line that says what is graded."""
    unknown = sorted(set(wanted) - set(PERSONAS) - {"all"})
    if unknown:
        raise SystemExit(f"make grade: unknown demo students {unknown}; the demo cohort is "
                         f"{', '.join(PERSONAS)} (or all)")
    if wanted == ["all"]:
        return None, False, ("submitted/ is empty: grading the whole bundled demo cohort (9 made-up "
                             "students per problem set) in build/demo-course/")
    if wanted:
        return {s: s for s in wanted}, False, (f"submitted/ is empty: grading the demo students "
                                               f"{', '.join(wanted)} in build/demo-course/")
    return None, True, (f"submitted/ is empty: grading the bundled demo cohort in build/demo-course/: "
                        f"all 9 made-up students in {FIRST_SET_ALL} (every way a submission can fail), "
                        f"{', '.join(OTHER_SETS)} in the other sets (--demo-students all: everyone)")


_SOLUTION = re.compile(r"^[ \t]*### BEGIN SOLUTION[ \t]*\n|^[ \t]*### END SOLUTION[ \t]*\n?", re.M)


def _strip_markers(source: str) -> str:
    return _SOLUTION.sub("", source)


def _solution_ids(nb) -> list[str]:
    return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"]


# gus_loop's first solution: the reference, its entry's __init__ made to never return (a
# planning question's rule is never built: its static method is what never returns). The loop
# is in code the subject runs, not at the top of the cell, which the screen would refuse before
# anything ran: so the demo shows what an endless loop costs (the subject's deadline).
ENDLESS = ("\n\nclass {entry}({entry}):\n    def __init__(self, *args, **kwargs):\n"
           "        while True:\n            pass\n")
ENDLESS_RULE = ("\n\nclass {entry}({entry}):\n    @staticmethod\n    def {method}(*args, **kwargs):\n"
                "        while True:\n            pass\n")


def _endless(assignment: str, grade_id: str, source: str) -> str:
    """``source`` (the solution cell ``grade_id``) with the entry of each problem graded from it
    made to loop forever when it is built."""
    from grader.cohort.scoring import groups_of
    from grader.problems import get_problem

    problems = {get_problem(k).entry: get_problem(k) for keys in groups_of(assignment)
                for k in keys if get_problem(k).solution_grade_id == grade_id}
    return source + "".join(
        ENDLESS_RULE.format(entry=entry, method=problem.plan.method) if problem.plan is not None
        else ENDLESS.format(entry=entry) for entry, problem in sorted(problems.items()))


def _fill(release_nb, source_nb, grade_ids: set[str], replacements: dict[str, str] | None = None):
    """A copy of the release notebook with the given solution cells filled from the source."""
    import copy

    nb = copy.deepcopy(release_nb)
    answers = {c.metadata["nbgrader"]["grade_id"]: _strip_markers(c.source)
               for c in source_nb.cells if c.metadata.get("nbgrader", {}).get("solution")}
    answers.update(replacements or {})
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution") and gid in grade_ids:
            cell.source = answers[gid]
    return nb


_STUB = re.compile(r"^([ \t]*)# YOUR CODE HERE[ \t]*\n[ \t]*raise NotImplementedError\(\)[ \t]*\n?",
                   re.M)


def _given_unchanged(release_nb):
    """The release notebook with each code solution cell's stub replaced by ``pass``: every
    class the learner is asked to write is the given one, unchanged."""
    import copy

    nb = copy.deepcopy(release_nb)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = _STUB.sub(lambda m: f"{m[1]}pass\n", cell.source)
    return nb


def demo_solutions(course: str) -> dict:
    """``{assignment: {persona: {grade_id: code}}}`` from each set's
    ``source/ASSIGNMENT/demo_cohort.py`` in ``course`` (a set without one: the personas that
    need none)."""
    import runpy

    from grader.cohort.assign import assignments

    found = {}
    for assignment in assignments(course):
        path = os.path.join(course, files.SOURCE, assignment, files.DEMO_SOLUTIONS_FILE)
        if os.path.exists(path):
            found[assignment] = runpy.run_path(path)["DEMO_SOLUTIONS"]
    return found


def personas_for(assignment: str, release_nb, source_nb, solutions: dict | None = None) -> dict:
    """{student: notebook or raw text} for one problem set; ``solutions`` are the persona code
    of :func:`demo_solutions` for this set."""
    ids = _solution_ids(source_nb)
    code_ids = set(ids)
    first = ids[0]
    extra = solutions or {}
    reference_first = next(_strip_markers(c.source) for c in source_nb.cells
                           if c.metadata.get("nbgrader", {}).get("grade_id") == first)
    out = {
        "ada_full": _fill(release_nb, source_nb, code_ids),
        # With one question, "partial" is a problem-specific half-done answer.
        "ben_partial": _fill(release_nb, source_nb, code_ids, extra["partial"]) if "partial" in extra
        else _fill(release_nb, source_nb, {first}),
        "cy_blank": release_nb,
        "fay_crash": _fill(release_nb, source_nb, code_ids,
                           {first: "import os\nos._exit(1)\n"}),
        "gus_loop": _fill(release_nb, source_nb, code_ids,
                          {first: _endless(assignment, first, reference_first)}),
        "ivy_given": _given_unchanged(release_nb),
    }
    for persona, student in (("slow", "dee_slow"), ("wrong", "eve_wrong")):
        if persona in extra:
            out[student] = _fill(release_nb, source_nb, code_ids, extra[persona])
    return out


def build_demo_course(course: str, assignments: list[str], folder: str | None = None,
                      cohort: dict[str, str] | None = None, first_run: bool = False) -> str:
    """Create ``build/demo-course`` (or ``folder``): a fresh nbgrader course with the demo
    submissions, and return its path. Grades already there are kept, so a second run resumes.

    ``cohort`` maps student names to personas (default: one student per persona; the
    benchmark uses several copies of ``ada_full``); ``first_run``: per set, the
    :func:`first_run_cohort`."""
    import nbformat

    from grader.cohort.assign import generate_once

    demo = folder or os.path.join(course, "build", "demo-course")
    os.makedirs(demo, exist_ok=True)
    shutil.copy(os.path.join(course, files.NBGRADER_CONFIG), os.path.join(demo, files.NBGRADER_CONFIG))
    for assignment in assignments:
        src = os.path.join(course, files.SOURCE, assignment)
        dst = os.path.join(demo, files.SOURCE, assignment)
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)
        generate_once(assignment, demo)      # (unchanged since the last run: nothing to do)
        name = next(n for n in sorted(os.listdir(src)) if n.endswith(".ipynb"))
        source_nb = nbformat.read(os.path.join(src, name), as_version=4)
        release_nb = nbformat.read(os.path.join(demo, files.RELEASE, assignment, name), as_version=4)
        raw = json.dumps(nbformat.from_dict(release_nb), indent=1)
        made = {**personas_for(assignment, release_nb, source_nb,
                               demo_solutions(course).get(assignment)),
                "hal_corrupt": raw[: len(raw) // 2]}
        chosen = cohort if cohort is not None else first_run_cohort(assignment, assignments) \
            if first_run else {p: p for p in PERSONAS}
        for student, persona in chosen.items():
            _write(demo, student, assignment, name, made[persona])
    write_demo_roster(demo, list(cohort) if cohort is not None else list(PERSONAS))
    return demo


def write_demo_roster(demo: str, students: list[str]) -> str:
    """A made-up Canvas gradebook export for the demo students (``canvas-roster.csv``: Canvas
    user ids from 100001, the student folder as SIS Login ID), so that the demo's
    ``reports/canvas.csv`` shows what a real course's does. Returns its path."""
    import csv

    path = os.path.join(demo, files.ROSTER)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section"])
        writer.writerow(["    Points Possible", "", "", "", ""])
        for number, student in enumerate(sorted(students), start=1):
            first, _, last = student.partition("_")
            writer.writerow([f"{last.title() or 'Student'}, {first.title()}", str(100000 + number),
                             f"DEMO{number:03d}", student, "Demo section"])
    return path


def _write(demo: str, student: str, assignment: str, name: str, nb) -> None:
    import nbformat

    folder = os.path.join(demo, files.SUBMITTED, student, assignment)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    text = nb if isinstance(nb, str) else nbformat.writes(nb)
    if os.path.exists(path) and open(path).read() == text:
        return  # unchanged: keeps the submission's digest, so graded ones are not regraded
    with open(path, "w") as fh:
        fh.write(text)
    with open(os.path.join(folder, "timestamp.txt"), "w") as fh:
        fh.write("2026-12-01 12:00:00.000000 UTC\n")


def expected_scores() -> dict:
    """{assignment: {student: points}}: each set's ``demo_expected.json`` (its ``_why`` says
    why)."""
    from grader.problems import sets

    return sets.expected_scores()


def check_expected(run) -> list[str]:
    """Lines describing every demo score that differs from its set's ``demo_expected.json``."""
    expected = expected_scores()
    problems = []
    for o in run.outcomes:
        want = expected.get(o.submission.assignment, {}).get(o.submission.student)
        if want is None:
            continue
        if abs(o.score - want) > 1e-6 and not (o.score < want and _held_for_review(run, o)):
            problems.append(f"{o.submission.name}: {o.score:g} (expected {want:g}) {o.reason[:100]}")
    return problems


def _held_for_review(run, outcome) -> bool:
    """Whether some of the submission's cells are held for a person (an undecided verdict: a
    noisy machine's inconclusive speed, or a ps3 job within the measured spread): it scores less
    until then, which is the grader doing its job, not a wrong score. make grade says so."""
    from grader.cohort.scoring import held_for_review

    sub = outcome.submission
    held = held_for_review(run.course, sub)
    if held:
        print(f"demo: {sub.name}: {outcome.score:g} until a person looks at the cells held for "
              f"review (written down: {expected_scores()[sub.assignment][sub.student]:g})")
    return held
