"""Grade a cohort: the run and its steps. Autograde every submission in isolation, one writer to
the gradebook, feedback, a grades CSV, Canvas's CSV and a report.

    python -m grader.cli grade [--assignment ps1] [--workers 2]  # what `make grade` runs

A run is an ordered list of small steps (:data:`STEPS`), each reading and adding to one
:class:`Run`; the order matters where noted. Each step hands its work to the module that does it:

    find_submissions   grader.cohort.collect (LMS downloads, submitted/); grader.cohort.demo when
                       submitted/ is empty (graded in build/demo-course, and the output says so)
    choose_isolation   grader.isolation.sandbox (tried for real before anyone is graded)
    prepare_gradebook  nbgrader generate_assignment (grader.cohort.assign)
    start_judges       grader.isolation.judge, grader.cohort.scoring.build_references
    autograde_all      grader.cohort.attempt: one submission's attempt, on local worker threads
                       or on Ray (grader.cohort.distributed); grader.cohort.merge: each finished
                       attempt into the gradebook, from this process only
    generate_feedback  grader.cohort.feedback
    export_grades      nbgrader export: reports/grades.csv
    export_canvas      grader.cohort.export: reports/canvas.csv
    write_report       grader.cohort.report: reports/report.html
    summarize          what was graded, and where everything is

Every file name is in :mod:`grader.cohort.files`.

Trust: a submission's autograded points are decided by processes that never run learner code:
the judged scoring (:mod:`grader.cohort.scoring`) in this process reads the solution cells from
the submitted notebook, screens them, and has a judge process (:mod:`grader.isolation.judge`, one
per worker) grade each problem — the learner's code runs in a sandboxed subject process that only
answers the judge — then scores every test cell from the problem set's ``TEST_CELLS``. nbgrader then
runs the notebook (for the feedback) in a temporary course copy, with the kernel — the only part
that runs learner code — in the sandbox (:mod:`grader.cohort.kernel`), and its
``ApplyJudgedScores`` step puts the judged points on the test cells. Learner code sees
neither the course nor the gradebook nor ``source/``.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import time

from grader.cohort import assign, files
from grader.cohort.attempt import AttemptSettings, device_for, gpu_count, local_attempts
from grader.cohort.collect import Submission, scan, zip_collect
from grader.cohort.merge import Graded, Outcome, already_graded, merge, merge_attempt, unreadable_reason
from grader.cohort.settings import DEFAULTS, add_arguments, from_arguments
from grader.isolation import sandbox


@dataclasses.dataclass
class Run:
    """Everything one grading run knows; each step reads and adds to it."""

    course: str
    assignments: list[str]
    # The options of grader.cohort.settings.GradeSettings (defaults and help declared there).
    workers: int = DEFAULTS.workers
    timeout_s: float = DEFAULTS.timeout_s
    memory_bytes: int = DEFAULTS.memory_bytes
    cell_timeout_s: int = DEFAULTS.cell_timeout_s
    sandbox: str = DEFAULTS.sandbox
    regrade: bool = DEFAULTS.regrade
    demo: bool = False
    demo_students: list[str] | None = None  # the demo personas to grade (default: the first run's)
    subject_timeout_s: float | None = None  # per judge job (default: the problem's own)
    isolation: sandbox.Isolation | None = None
    submissions: list[Submission] = dataclasses.field(default_factory=list)
    # Ray: assignment -> what each task's judge starts from (compiler cache, measured figures)
    built_references: dict = dataclasses.field(default_factory=dict)
    judges: list = dataclasses.field(default_factory=list)    # one JudgeProcess per worker
    judge_dir: str = ""                                        # their logs and compiler cache
    references_seconds: float = 0.0   # building the references, once per run
    executor: str = DEFAULTS.executor  # 'local' (worker threads) or 'ray' (cohort.distributed)
    ray_address: str = DEFAULTS.ray_address  # empty: RAY_ADDRESS, else a local instance
    ray: object = None       # the RayExecutor, once started
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    report_dir: str = ""
    report_path: str = ""
    csv_path: str = ""
    roster: str = ""         # Canvas's gradebook export: names, sections, assignment ids
    canvas_assignments: str = ""   # nbgrader -> Canvas assignment names (default: the course's
                                   # canvas-assignments.csv, when there is one)
    canvas_per_question: bool = DEFAULTS.canvas_per_question  # per-question columns
    canvas_path: str = ""
    started: float = dataclasses.field(default_factory=time.monotonic)

    def log(self, text: str) -> None:
        print(text, flush=True)


# ---------------------------------------------------------------------------------------------
# Steps

def find_submissions(run: Run) -> None:
    """submitted/STUDENT/ASSIGNMENT/ (nbgrader's layout); LMS downloads in
    downloads/ASSIGNMENT/archive/ are collected into it first (:mod:`grader.cohort.collect`).
    With nothing submitted, switch to the bundled demo cohort."""
    for assignment in run.assignments:
        zip_collect(run.course, assignment, run.log)
    subs = scan(run.course, run.assignments)
    if not subs:
        from grader.cohort.demo import (DEMO_CELL_TIMEOUT_S, DEMO_SUBJECT_TIMEOUT_S,
                                        build_demo_course, choose_demo_cohort)

        run.demo = True
        cohort, first_run, message = choose_demo_cohort(run.demo_students or [])
        run.log(message)
        run.course = build_demo_course(run.course, run.assignments, cohort=cohort,
                                       first_run=first_run)
        # The endless-loop student costs one cell timeout and one subject timeout: keep them
        # short for the demo.
        run.cell_timeout_s = min(run.cell_timeout_s, DEMO_CELL_TIMEOUT_S)
        run.subject_timeout_s = min(run.subject_timeout_s or DEMO_SUBJECT_TIMEOUT_S,
                                    DEMO_SUBJECT_TIMEOUT_S)
        subs = scan(run.course, run.assignments)
    run.submissions = subs
    run.log(f"{len(subs)} submissions: {len({s.student for s in subs})} students, "
            f"{', '.join(sorted({s.assignment for s in subs}))}")


def choose_isolation(run: Run) -> None:
    """Try the sandbox for real before anyone is graded (:func:`grader.isolation.sandbox.probe`).

    Where it cannot run, real submissions are not graded at all (every score would be a
    sandbox failure, not the learner's): the run stops with the reason, unless the instructor
    said ``--sandbox off``. The bundled demo cohort (made-up students) runs without it, saying
    so."""
    try:
        run.isolation = sandbox.probe("bwrap" if run.sandbox == "auto" else run.sandbox)
    except sandbox.SandboxUnavailable as exc:
        if not run.demo:
            raise SystemExit(
                f"make grade: stopped before grading anyone: the sandbox for learner code cannot "
                f"run here: {exc}.\nFix that, or grade without a sandbox (learner code can then "
                f"read this machine's files, such as source/ and the gradebook, and print them "
                f"into its feedback): make grade SANDBOX=off  (python -m grader.cli grade --sandbox off)"
                + (f"\n{SANDBOX_SETUP_HINT}" if shutil.which("bwrap") is None else ""))
        run.isolation = sandbox.Isolation("none", str(exc))
    run.log(f"isolation of learner code: {run.isolation.describe()}")
    if not run.isolation.sandboxed and shutil.which("bwrap") is None and run.sandbox != "off":
        run.log(SANDBOX_SETUP_HINT)
    for note in sandbox.limit_notes(sandbox.Limits(memory_bytes=run.memory_bytes)):
        run.log(f"limit for learner code lowered to this shell's: {note}")


SANDBOX_SETUP_HINT = ("bubblewrap (the sandbox) is not installed: `make setup-sandbox` installs it "
                      "(as root or through sudo), or prints the command for an administrator")


def prepare_gradebook(run: Run) -> None:
    """Every assignment's cells in the gradebook (generate_assignment) and every student
    registered. Must come before autograding: nbgrader restores hidden tests from here. Stops
    when a notebook's test cells and its problem set's TEST_CELLS disagree (points would be
    scored from a declaration the notebook does not have)."""
    from nbgrader.api import Gradebook

    from grader.cohort.scoring import declared_test_cells_problems

    for assignment in sorted({s.assignment for s in run.submissions}):
        folder = os.path.join(run.course, files.SOURCE, assignment)
        for name in sorted(n for n in os.listdir(folder) if n.endswith(".ipynb")):
            problems = declared_test_cells_problems(os.path.join(folder, name), assignment)
            if problems:
                raise SystemExit("make grade: stopped: " + "; ".join(problems))
    for assignment in sorted({s.assignment for s in run.submissions}):
        assign.nbgrader("generate_assignment", assignment, "--force", cwd=run.course)
    with Gradebook(files.db_url(run.course)) as gb:
        for student in sorted({s.student for s in run.submissions}):
            gb.update_or_create_student(student)


def start_judges(run: Run) -> None:
    """One judge process per worker (:mod:`grader.isolation.judge`: it never runs learner code,
    decides every point, and keeps each problem's baseline and reference compiled for every
    submission it grades), each given the problem sets' references now, before the first
    submission. Judges share one compiler cache, so the second compiles nothing the first did;
    the first one's measured figures (ps3 q1) are handed to the others, so every submission of
    the run is judged on the same ones."""
    from grader.cohort.scoring import build_references, yardstick
    from grader.isolation.judge_process import JudgeProcess

    todo = sorted({s.assignment for s in run.submissions
                   if run.regrade or not already_graded(run.course, s)})
    if run.executor == "ray":
        for assignment in todo:  # built on a grading node: the cache suits its machine type
            started = time.monotonic()
            run.built_references[assignment] = _ray(run).build_references(run.course, assignment)
            run.references_seconds += time.monotonic() - started
        return
    if not todo:
        return
    run.judge_dir = tempfile.mkdtemp(prefix="judges-")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(run.judge_dir, "inductor"),
               TRITON_CACHE_DIR=os.path.join(run.judge_dir, "triton"))
    gpus = gpu_count()
    for slot in range(max(1, run.workers)):
        run.judges.append(JudgeProcess(env=env, log_path=os.path.join(run.judge_dir,
                                                                       f"judge-{slot}.log")))
    for assignment in todo:
        started = time.monotonic()
        measured: dict = {}
        for slot, judge in enumerate(run.judges):
            built = build_references(assignment, run.course, judge,
                                     device=device_for(slot, gpus), measured_jobs=measured)
            measured = measured or built.measured_jobs
            if slot == 0 and built.error:
                run.log(f"{assignment}: the judge could not build the references ({built.error}); "
                        f"each submission will report it")
            elif slot == 0 and built.seconds:
                run.log(f"{assignment}: baseline and reference compiled once for the run "
                        f"({', '.join(sorted(built.seconds))}) in "
                        f"{time.monotonic() - started:.0f} s")
            if slot == 0:
                for key, figures in sorted(built.measured_jobs.items()):
                    run.log(f"{key}: {yardstick(key, figures)}")
        run.references_seconds += time.monotonic() - started


def _ray(run: Run):
    if run.ray is None:
        from grader.cohort.distributed import RayExecutor

        run.ray = RayExecutor(run.ray_address or None)
        run.log(run.ray.describe())
    return run.ray


def autograde_all(run: Run) -> None:
    """Autograde each submission in isolation (:mod:`grader.cohort.attempt`, ``run.workers`` at
    once, or on Ray); merge each finished one into the gradebook from this process only, and
    mark it done (:mod:`grader.cohort.merge`)."""
    todo, done = [], []
    for sub in run.submissions:
        digest = sub.digest()
        prev = None if run.regrade else already_graded(run.course, sub, digest)
        if prev is not None:
            done.append(Outcome(sub, Graded.SKIPPED, prev.get("reason", ""), prev.get("score", 0.0),
                                prev.get("max_score", 0.0)))
        elif unreadable_reason(sub):
            # Nothing to run: record the zero and the reason at once (no kernel, no sandbox).
            run.outcomes.append(merge(run.course, sub, None, unreadable_reason(sub), digest))
        else:
            todo.append((sub, digest))
    if done:
        run.log(f"{len(done)} submissions already graded (unchanged since): skipped")
    run.outcomes.extend(done)
    if not todo:
        return
    progress = _Progress(len(todo))
    settings = AttemptSettings(sandbox=run.isolation.mode if run.isolation.sandboxed else "off",
                               timeout_s=run.timeout_s, memory_bytes=run.memory_bytes,
                               cell_timeout_s=run.cell_timeout_s,
                               subject_timeout_s=run.subject_timeout_s)
    if run.executor == "ray":
        from grader.cohort.distributed import ray_attempts

        attempts = ray_attempts(_ray(run), run.course, todo, settings, run.built_references)
    else:
        attempts = local_attempts(todo, run.course, settings, isolation=run.isolation,
                                  judges=run.judges, workers=run.workers)
    try:
        for sub, digest, attempt in attempts:
            outcome = merge_attempt(run.course, sub, attempt, digest)  # the single writer
            run.outcomes.append(outcome)
            progress.step(f"{sub.name}{f' on {outcome.node}' if outcome.node else ''}: "
                          f"{outcome.status} {outcome.score:g}/{outcome.max_score:g}"
                          + (f" ({outcome.reason.splitlines()[0][:70]})" if outcome.reason else ""))
    except KeyboardInterrupt:
        run.log("interrupted: submissions merged so far are saved; run again to resume")
        raise
    finally:
        attempts.close()  # stopped early: cancels the submissions not started (else: nothing)


class _Progress:
    def __init__(self, total: int):
        self.total, self.count, self.t0 = total, 0, time.monotonic()

    def step(self, text: str) -> None:
        self.count += 1
        spent = time.monotonic() - self.t0
        eta = spent / self.count * (self.total - self.count)
        width = 24
        bar = "#" * int(width * self.count / self.total)
        print(f"[{bar:<{width}}] {self.count}/{self.total} ETA {int(eta // 60)}m{int(eta % 60):02d}s  {text}",
              flush=True)


def generate_feedback(run: Run) -> None:
    """Feedback HTML per graded submission (nbgrader), and a page with the reason for the rest
    (:mod:`grader.cohort.feedback`). Runs no learner code."""
    from grader.cohort.feedback import generate_feedback as generate

    generate(run.course, {s.assignment for s in run.submissions}, run.outcomes)


def export_grades(run: Run) -> None:
    """nbgrader's grades CSV (one row per student and assignment)."""
    run.report_dir = os.path.join(run.course, files.REPORTS)
    os.makedirs(run.report_dir, exist_ok=True)
    run.csv_path = os.path.join(run.report_dir, files.GRADES_CSV)
    assign.nbgrader("export", f"--CsvExportPlugin.to={run.csv_path}", cwd=run.course)


def export_canvas(run: Run) -> None:
    """The gradebook as Canvas imports it (``reports/canvas.csv``, :mod:`grader.cohort.export`):
    students by Canvas user id, one column per assignment, with a Points Possible row. The
    roster is ``run.roster``, else ``canvas-roster.csv`` in the course folder when there is one
    (the demo cohort has one); assignment names are mapped by ``run.canvas_assignments``, else
    ``canvas-assignments.csv`` in the course folder when there is one."""
    from grader.cohort.export import write_canvas_csv

    roster = run.roster or os.path.join(run.course, files.ROSTER)
    export = write_canvas_csv(run.course, os.path.join(run.report_dir, files.CANVAS_CSV),
                              roster=roster if os.path.exists(roster) else None,
                              assignment_map=run.canvas_assignments or None,
                              per_question=run.canvas_per_question)
    run.canvas_path = export.path
    for warning in export.warnings:
        run.log(f"canvas.csv: {warning}")


def write_report(run: Run) -> None:
    from grader.cohort.report import write_report as _write

    run.report_path = _write(run.course, run.outcomes, run.report_dir)


def summarize(run: Run) -> None:
    graded = [o for o in run.outcomes if o.status in (Graded.GRADED, Graded.SKIPPED) and not o.reason]
    failed = [o for o in run.outcomes if o not in graded]
    run.log("")
    run.log(f"graded {len(graded)} of {len(run.outcomes)} submissions in "
            f"{time.monotonic() - run.started:.0f} s" + (" (demo cohort)" if run.demo else ""))
    if run.executor == "ray":
        nodes: dict[str, int] = {}
        for o in run.outcomes:
            if o.node:
                nodes[o.node] = nodes.get(o.node, 0) + 1
        run.log("graded on Ray: " + (", ".join(f"{n} {c}" for n, c in sorted(nodes.items()))
                                     or "nothing this run"))
    for o in failed:
        run.log(f"  NOT GRADED (scored 0): {o.submission.name}: {o.reason.splitlines()[0] if o.reason else ''}")
    run.log(f"gradebook: {os.path.join(run.course, files.GRADEBOOK)}")
    run.log(f"feedback:  {os.path.join(run.course, files.FEEDBACK)}/STUDENT/ASSIGNMENT/")
    run.log(f"grades:    {run.csv_path}")
    run.log(f"canvas:    {run.canvas_path}  (Canvas: Grades > Import)")
    run.log(f"report:    {run.report_path}")
    run.log(f"isolation: {run.isolation.describe()}")


STEPS = [
    find_submissions,
    choose_isolation,    # after find_submissions: the demo cohort may run without a sandbox
    prepare_gradebook,   # before autograding: hidden tests are restored from the gradebook
    start_judges,        # after choose_isolation: the judges start the sandboxed subjects
    autograde_all,
    generate_feedback,   # after autograding: renders the autograded notebooks
    export_grades,
    export_canvas,       # after export: the same final scores, in Canvas's layout
    write_report,        # after export: reads the gradebook's final scores
    summarize,
]


def grade(course: str = ".", assignments: list[str] | None = None, **options) -> Run:
    """Run :data:`STEPS` on a course folder and return the run (outcomes, paths)."""
    course = os.path.abspath(course)
    if not assignments:
        assignments = sorted(d for d in os.listdir(os.path.join(course, files.SOURCE))
                             if os.path.isdir(os.path.join(course, files.SOURCE, d)))
    run = Run(course=course, assignments=assignments, **options)
    try:
        for step in STEPS:
            step(run)
    finally:
        for judge in run.judges:
            judge.close()
        if run.judge_dir:
            shutil.rmtree(run.judge_dir, ignore_errors=True)
        if run.ray is not None:  # disconnects; stops the local instance if this run started it
            run.ray.shutdown()
    return run


def exit_status(run: Run) -> int:
    """0 when every submission has a grade from its own notebook; 2 when some scored zero
    because they could not be graded (the summary says which). For the demo cohort, 0 when the
    scores are the written-down ones."""
    if run.demo:
        from grader.cohort.demo import check_expected

        mismatches = check_expected(run)
        for line in mismatches:
            print(f"demo: unexpected score: {line}")
        return 1 if mismatches else 0
    return 2 if any(o.status == Graded.FAILED for o in run.outcomes) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)   # every option from grader.cohort.settings.GradeSettings
    settings = from_arguments(parser.parse_args(argv))
    run = grade(settings.course, list(settings.assignments), **settings.run_options())
    return exit_status(run)


if __name__ == "__main__":
    sys.exit(main())
