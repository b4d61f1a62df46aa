"""Grade a cohort: the run and its steps. Autograde every submission in isolation, one writer to
the gradebook, feedback, a grades CSV, Canvas's CSV and a report.

    python -m grader.cli grade [--assignment ps1] [--workers 2]  # what `make grade` runs

A run is an ordered list of small steps (:data:`STEPS`), each reading and adding to one
:class:`Run`; the order matters where noted. Each step hands its work to the module that does it:

    connect_ray        grader.cohort.distributed (EXECUTOR=ray only: the cluster, every node checked)
    find_submissions   grader.cohort.collect (LMS downloads, submitted/); grader.cohort.demo when
                       submitted/ and downloads/ hold no file (graded in build/demo-course, saying so)
    choose_isolation   grader.isolation.sandbox.process (tried for real before anyone is graded)
    prepare_gradebook  nbgrader generate_assignment (grader.cohort.assign)
    start_judges       grader.isolation.judge.steps, grader.cohort.scoring.build_references
    autograde_all      grader.cohort.attempt: one submission's judged points, on local worker
                       threads or on Ray (grader.cohort.distributed); then, in this process, one
                       at a time: nbgrader's autograde of it (grader.cohort.judged_autograde) and
                       its merge into the gradebook (grader.cohort.merge)
    generate_feedback  grader.cohort.feedback
    export_grades      nbgrader's CSV export: reports/grades.csv
    export_canvas      grader.cohort.export: reports/canvas.csv
    write_report       grader.cohort.report: reports/report.html
    summarize          what was graded, and where everything is

Every file name is in :mod:`grader._files`.

Trust: points are decided by processes that never run learner code: the judged scoring
(:mod:`grader.cohort.scoring`) reads and screens the solution cells, a judge process
(:mod:`grader.isolation.judge.steps`, one per worker) grades each problem, and the test cells are
scored from ``TEST_CELLS``. The learner's code runs only in the judge's sandboxed subject, which
sees neither the course nor the gradebook nor ``source/``; nbgrader runs no cell of the notebook.

Why one module: it is the run itself, its steps in the order they run, each handing
its work to another module; split, a reader would follow one run across files to see what
happens before what.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import os
import shutil
import sys
import tempfile
import time
import warnings

from grader import _files as files
from grader.cohort import assign, process_folders
from grader.cohort.attempt import (AttemptSettings, default_workers, default_workers_rule,
                                   device_for, gpu_count, idle_cores, local_attempts,
                                   worker_cores)
from grader.cohort.collect import (LAYOUT, Submission, course_assignments, holds_files, misplaced,
                                   scan, zip_collect)
from grader.cohort.judge_cache import JudgeCache
from grader.cohort.judged_autograde import autograde_attempt
from grader.cohort.merge import Graded, Outcome, already_graded, merge, merge_attempt, unreadable_reason
from grader.cohort.settings import (DEFAULTS, GradeSettings, add_arguments, from_arguments,
                                    problems)
from grader.isolation.sandbox import process


@dataclasses.dataclass
class Run:
    """Everything one grading run knows; each step reads and adds to it."""

    course: str               # the folder graded (the demo's own, once find_submissions chose it)
    assignments: list[str]    # what is graded (default: every folder of source/)
    # The run's options, declared once with their defaults and help (every step reads them here).
    settings: GradeSettings = DEFAULTS
    demo: bool = False
    subject_timeout_s: float | None = None  # per judge job (default: measured, reference_s)
    isolation: process.Isolation | None = None
    submissions: list[Submission] = dataclasses.field(default_factory=list)
    # Ray: assignment -> what each task's judge starts from (compiler cache, measured figures)
    built_references: dict = dataclasses.field(default_factory=dict)
    judges: list = dataclasses.field(default_factory=list)    # one JudgeProcess per worker
    judge_dir: str = ""                                        # their logs and compiler cache
    subjects_dir: str = ""                                     # their temporary files
    temporary_dir: str = ""         # the run's own folder: the two above, each grading copy
    references_seconds: float = 0.0   # building the references, once per run
    reference_s: dict = dataclasses.field(default_factory=dict)  # assignment -> BuiltReferences.reference_s
    # assignment -> its planning questions' figures, measured once for the run (or kept)
    measured_jobs: dict = dataclasses.field(default_factory=dict)
    # worker slot -> the sets whose references its judge has built (the others: before its
    # first submission of each, grader.cohort.attempt.local_attempts)
    built_by: dict = dataclasses.field(default_factory=dict)
    ray: object = None       # the RayExecutor, once started
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    report_dir: str = ""
    report_path: str = ""
    csv_path: str = ""
    canvas_path: str = ""
    started: float = dataclasses.field(default_factory=time.monotonic)

    def log(self, text: str) -> None:
        print(text, flush=True)


# ---------------------------------------------------------------------------------------------
# Steps

def find_submissions(run: Run) -> None:
    """submitted/STUDENT/ASSIGNMENT/ (nbgrader's layout); LMS downloads in
    downloads/ASSIGNMENT/archive/ are collected into it first (:mod:`grader.cohort.collect`).
    Stops before grading anyone when a path there is not where that layout puts it, or when
    nothing of ``run.assignments`` was handed in; only when submitted/ and downloads/ hold no
    file at all, switch to the bundled demo cohort."""
    wrong = misplaced(run.course, course_assignments(run.course))
    if wrong:
        shown = wrong[:MAX_LISTED] + ([f"... and {len(wrong) - MAX_LISTED} more"]
                                      if len(wrong) > MAX_LISTED else [])
        raise SystemExit(f"make grade: stopped before grading: {len(wrong)} path(s) in "
                         f"{files.SUBMITTED}/ or {files.DOWNLOADS}/ are not where grading reads "
                         f"them:\n  " + "\n  ".join(shown) + f"\nThe layout: {LAYOUT}. Move "
                         f"(or remove) these and run make grade again.")
    if not holds_files(run.course):
        from grader.cohort.demo import build_demo_course, choose_demo_cohort

        run.demo = True
        cohort, first_run, message = choose_demo_cohort(run.settings.demo_student_names)
        run.log(message)
        run.course = build_demo_course(run.course, run.assignments, cohort=cohort,
                                       first_run=first_run)
        subs = scan(run.course, run.assignments)
    else:
        for assignment in run.assignments:
            try:
                zip_collect(run.course, assignment, run.log)
            except RuntimeError as exc:
                raise SystemExit(f"make grade: stopped before grading: {exc}") from None
        subs = scan(run.course, run.assignments)
        if not subs:
            present = sorted({s.assignment for s in scan(run.course,
                                                         course_assignments(run.course))})
            raise SystemExit(
                f"make grade: nothing to grade: no submission of {', '.join(run.assignments)} "
                f"in {files.SUBMITTED}/ (it holds "
                f"{', '.join(present) if present else 'no STUDENT/ASSIGNMENT folder'}). The "
                f"layout: {LAYOUT}. (The demo cohort is graded only when {files.SUBMITTED}/ and "
                f"{files.DOWNLOADS}/ hold no file at all.)")
    run.submissions = subs
    run.log(f"{len(subs)} submissions: {len({s.student for s in subs})} students, "
            f"{', '.join(sorted({s.assignment for s in subs}))}")


MAX_LISTED = 20   # misplaced paths named one by one before "... and N more"


def choose_isolation(run: Run) -> None:
    """Bubblewrap, else kernel confinement, each tried for real (:func:`process.probe`). Real
    submissions only where learner code is confined (it runs only in the judge's subject), unless
    ``--sandbox off``; the log says what it can do then. The demo runs anyway."""
    try:
        run.isolation = process.probe(run.settings.sandbox)
    except process.SandboxUnavailable as exc:
        if not run.demo:
            raise SystemExit(_refusal(str(exc)))
        run.isolation = process.Isolation("none", str(exc))
    if run.settings.sandbox == "auto" and not run.demo and run.isolation.mode == "none":
        raise SystemExit(_refusal(run.isolation.reason))
    run.log(f"isolation of learner code: {run.isolation.describe()}")
    if not run.isolation.sandboxed:
        run.log(run.isolation.warning())
        if shutil.which("bwrap") is None and run.settings.sandbox != "off":
            run.log(SANDBOX_SETUP_HINT)
    for note in process.limit_notes(process.Limits(memory_bytes=run.settings.memory_bytes)):
        run.log(f"limit for learner code lowered to this shell's: {note}")


def _refusal(why: str) -> str:
    return (f"make grade: stopped before grading anyone: learner code cannot be confined here: "
            f"{why}.\nFix that, or grade knowingly without bubblewrap (learner code then gets "
            f"what this machine offers, printed at the start of the run): make grade SANDBOX=off"
            f"  (python -m grader.cli grade --sandbox off)"
            + (f"\n{SANDBOX_SETUP_HINT}" if shutil.which("bwrap") is None else ""))


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
        assign.generate_once(assignment, run.course)    # (once per source)
    with Gradebook(files.db_url(run.course)) as gb:
        for student in sorted({s.student for s in run.submissions}):
            gb.update_or_create_student(student)


def run_folders_root() -> str:
    """Where each ``make grade`` process keeps its temporary folders, one folder per process."""
    return os.path.join(tempfile.gettempdir(), "course-grader-runs")


def start_judges(run: Run) -> None:
    """One judge process per worker (:mod:`grader.isolation.judge.steps`: it never runs learner
    code, decides every point, and keeps each problem's baseline and reference compiled for every
    submission it grades), each given the problem sets' references now, before the first
    submission (:func:`_build_references`). No more judges start than there are submissions to
    grade."""
    from grader.cohort.scoring import BuiltReferences, yardstick
    from grader.isolation.judge.judge_process import JudgeProcess

    pending = [s for s in run.submissions
               if run.settings.regrade or not already_graded(run.course, s)]
    todo = sorted({s.assignment for s in pending})
    if run.settings.executor == "ray":
        for assignment in todo:  # built on a grading node: the cache suits its machine type
            started = time.monotonic()
            built = _ray(run).build_references(run.course, assignment, run.settings.sandbox)
            run.built_references[assignment] = built
            made = BuiltReferences(built.get("seconds") or {}, built.get("measured_jobs") or {})
            run.measured_jobs[assignment] = dict(made.measured_jobs)   # carried by every job
            # The node's first, cold, build's figure: its cache may have made this one faster.
            run.reference_s[assignment] = built.get("reference_s", made.reference_s)
            _say_built(run, assignment, made, time.monotonic() - started,
                       run.reference_s[assignment])
            for key, figures in sorted(made.measured_jobs.items()):
                run.log(f"{key}: " + yardstick(key, figures, kept=bool(built.get("kept")),
                                               where="the grading node"))
            run.references_seconds += time.monotonic() - started
        return
    if not todo:
        return
    # The run's temporary folders lie in one of its own, inside the process's (two runs of one
    # process never share one), which the next run removes where this one was killed
    # (grader/cohort/process_folders.py).
    run.temporary_dir = tempfile.mkdtemp(
        prefix="run-", dir=process_folders.own_folder(run_folders_root(), mode=0o711))
    os.chmod(run.temporary_dir, 0o711)
    run.judge_dir = tempfile.mkdtemp(prefix="judges-", dir=run.temporary_dir)
    cache = JudgeCache.of(run.course)
    # The judges' temporary files, the subjects' folders among them, in a folder of the run's
    # own, removed at the end whatever a judge left there (a judge killed mid-grading removes
    # nothing): other users may pass through it (a subject's user id reaches its own folder
    # inside) but not list it. The judges' own folder, with their compiler cache, stays closed.
    run.subjects_dir = tempfile.mkdtemp(prefix="subjects-", dir=run.temporary_dir)
    os.chmod(run.subjects_dir, 0o711)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache.folder, "inductor"),
               TRITON_CACHE_DIR=os.path.join(cache.folder, "triton"), TMPDIR=run.subjects_dir)
    gpus = gpu_count()
    # No more judges than submissions to grade: each builds the references first, so a run that
    # adds one submission to a graded course builds them once.
    chosen = run.settings.workers
    # The workers left to choose, and whether one worker has the cores to itself (its judge
    # then starts each next submission's subject ahead), depend on the cores idle now: looked
    # at once, where there is more than one submission to grade (one: no subject ahead, so
    # none is counted idle for it).
    idle = 0 if len(pending) < 2 else idle_cores() if chosen in (0, 1) else None
    if chosen:
        count = max(1, min(chosen, len(pending)))
        why = "" if count == chosen else \
            f"{len(pending)} submission{'s' if len(pending) > 1 else ''} to grade"
    else:
        count = default_workers(run.settings.memory_bytes, len(pending), max(1, idle))
        why = default_workers_rule(run.settings.memory_gb)
    groups = worker_cores(count, idle)
    run.log(f"workers: {len(groups)}, each with a judge "
            + ("on cores of its own" if groups[0] is not None else "(sharing the cores)")
            + (f" ({why})" if why else ""))
    for slot, cores in enumerate(groups):
        run.judges.append(JudgeProcess(env=env, cores=cores,
                                       log_path=os.path.join(run.judge_dir, f"judge-{slot}.log")))
    _build_references(run, todo, cache, gpus)


def _plans(assignment: str) -> bool:
    """Has the set a planning question, whose figures the judge measures as it builds (ps3)?"""
    from grader.cohort.scoring import problems_of
    from grader.problems import get_problem

    return any(get_problem(key).plan is not None for key in problems_of(assignment))


def _build_references(run: Run, todo: list[str], cache: "JudgeCache", gpus: int) -> None:
    """Every set of ``todo`` is built once, cold, before the first submission. Judges share one
    compiler cache. Each set is built cold by one judge, whose build sets the set's deadlines
    (what it took: :attr:`grader.cohort.scoring.BuiltReferences.reference_s`) and measures its
    planning questions' figures (ps3 q1); every other judge builds it from the cache, with those
    figures (``run.measured_jobs``), before its own first submission of the set
    (:func:`grader.cohort.attempt.local_attempts`), so every submission of the run is judged on
    the same ones and no worker waits while another builds a set it grades later. The
    cold builds run at once, each judge taking the next set not yet built. A set with a planning
    question is built first by the first judge: its figures are measured on one core (one
    thread, one compile worker: :mod:`grader.checks.jobs`), so where every judge has cores of
    its own the others build the other sets beside it; where they share cores, nothing else
    runs while its figures are measured. Those figures are kept with the cache
    (:meth:`JudgeCache.keep_figures`): a later run on this machine, a regrade included, judges on
    the same ones, and builds that set with the others."""
    import collections
    import threading

    from grader.cohort.scoring import build_references, yardstick

    slots = range(len(run.judges))
    kept = {a: cache.kept_figures(a) for a in todo}
    measured = [a for a in todo if _plans(a) and not kept[a]]
    waiting = collections.deque(a for a in todo if a not in measured)
    beside = len(slots) > 1 and all(getattr(j, "cores", None) for j in run.judges)
    built, took = {}, {}
    lock = threading.Lock()

    def build(slot: int, assignments: list[str]) -> None:
        for assignment in assignments:
            started = time.monotonic()
            made = build_references(assignment, run.course, run.judges[slot],
                                    device=device_for(slot, gpus),
                                    measured_jobs=kept[assignment] or None)
            built[assignment], took[assignment] = made, time.monotonic() - started
            run.built_by.setdefault(slot, set()).add(assignment)

    def build_cold(slot: int, first: list[str]) -> None:
        build(slot, first)
        while True:
            with lock:
                if not waiting:
                    return
                assignment = waiting.popleft()
            build(slot, [assignment])

    def at_once(work: list[tuple]) -> None:
        with cf.ThreadPoolExecutor(max_workers=len(work)) as pool:
            list(pool.map(lambda w: w[0](*w[1:]), work))

    started = time.monotonic()
    if beside:
        at_once([(build_cold, slot, measured if slot == 0 else []) for slot in slots])
    else:
        build(0, measured)              # alone: the machine is its timings' only work
        at_once([(build_cold, slot, []) for slot in slots])
    for assignment in todo:             # said in the sets' order
        made = built[assignment]
        run.reference_s[assignment] = cache.cold_reference_s(assignment, made)
        run.measured_jobs[assignment] = dict(made.measured_jobs)
        cache.keep_figures(assignment, made)
        _say_built(run, assignment, made, took[assignment], run.reference_s[assignment])
        for key, figures in sorted(made.measured_jobs.items()):
            run.log(f"{key}: {yardstick(key, figures, kept=bool(kept[assignment]))}")
    run.references_seconds += time.monotonic() - started


def connect_ray(run: Run) -> None:
    """``--executor ray``: join the cluster (or start a local Ray instance) and check every node
    first, so that a wrong ``RAY_ADDRESS`` or a node that differs stops the run at once."""
    if run.settings.executor == "ray":
        _ray(run)


def _say_built(run: Run, assignment: str, built, seconds: float,
               reference_s: float | None = None) -> None:
    """What building ``assignment``'s references gave: how long, and the subjects' deadlines
    (from ``reference_s``, the cold build's figure, when the cache made this one faster)."""
    from grader.cohort.scoring import subject_deadlines

    if built.error:
        run.log(f"{assignment}: the judge could not build the references ({built.error}); "
                f"each submission will report it")
    elif built.seconds:
        reference_s = built.reference_s if reference_s is None else reference_s
        deadlines = sorted({round(d) for d in subject_deadlines(assignment,
                                                                reference_s).values()})
        warm = (f" (from the compiler cache of an earlier run; the first build, cold, took "
                f"{reference_s:.0f} s)" if reference_s and built.reference_s is not None
                and reference_s > built.reference_s + 1 else "")
        run.log(f"{assignment}: baseline and reference compiled once for the run "
                f"({', '.join(sorted(built.seconds))}) in {seconds:.0f} s{warm}; learner code may "
                f"run {' or '.join(map(str, deadlines))} s per solution cell")


def _ray(run: Run):
    if run.ray is None:
        from grader.cohort.distributed import RayExecutor

        try:
            run.ray = RayExecutor(run.settings.ray_address or None)
        except RuntimeError as exc:   # the address, or the nodes: said in the message
            raise SystemExit(f"make grade: stopped before grading: {exc}") from None
        run.log(run.ray.describe())
    return run.ray


def autograde_all(run: Run) -> None:
    """Judge each submission (:mod:`grader.cohort.attempt`, one per judge at once, or on Ray);
    then, in this process, one at a time as they finish: nbgrader's autograde of it
    (:mod:`grader.cohort.judged_autograde`) and its merge into the gradebook, marked done
    (:mod:`grader.cohort.merge`)."""
    todo, done = [], []
    for sub in run.submissions:
        digest = sub.digest()
        prev = None if run.settings.regrade else already_graded(run.course, sub, digest)
        if prev is not None:
            done.append(Outcome(sub, Graded.SKIPPED, prev.get("reason", ""), prev.get("score", 0.0),
                                prev.get("max_score", 0.0), prev.get("seconds", 0.0)))
        elif unreadable_reason(sub):
            # Nothing to run: record the zero and the reason at once (no judge, no subject).
            run.outcomes.append(merge(run.course, sub, None, unreadable_reason(sub), digest))
        else:
            todo.append((sub, digest))
    if done:
        run.log(f"{len(done)} submissions already graded (unchanged since): skipped")
    run.outcomes.extend(done)
    if not todo:
        return
    # Set by set (submissions come student by student): the workers grade one set's
    # submissions in a row, and a student late in the alphabet is not the run's last work. In
    # the demo cohort gus_loop's endless ps1 loop, which runs to its deadline (about a minute),
    # was graded last, one worker on it while the other had nothing left.
    order = {a: i for i, a in enumerate(run.assignments)}
    todo.sort(key=lambda pair: (order.get(pair[0].assignment, len(order)), pair[0].assignment,
                                pair[0].student))
    progress = _Progress(len(todo))
    settings = AttemptSettings(run.settings.probed(run.isolation.setting()),
                               subject_timeout_s=run.subject_timeout_s,
                               reference_s=dict(run.reference_s),
                               measured_jobs=dict(run.measured_jobs))
    if run.settings.executor == "ray":
        from grader.cohort.distributed import ray_attempts

        attempts = ray_attempts(_ray(run), run.course, todo, settings, run.built_references)
    else:
        attempts = local_attempts(todo, run.course, settings, isolation=run.isolation,
                                  judges=run.judges, workers=len(run.judges) or 1,
                                  folder_in=run.temporary_dir or None, built_by=run.built_by)
    try:
        for sub, digest, attempt in attempts:
            attempt = autograde_attempt(run.course, sub, attempt)
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

    # Only what was graded in this run: the others' pages are there already.
    generate(run.course, run.outcomes, log=run.log)


def export_grades(run: Run) -> None:
    """nbgrader's grades CSV (one row per student and assignment)."""
    run.report_dir = os.path.join(run.course, files.REPORTS)
    os.makedirs(run.report_dir, exist_ok=True)
    run.csv_path = os.path.join(run.report_dir, files.GRADES_CSV)
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.plugins import CsvExportPlugin

    # ``nbgrader export``'s work, as its app does it, in this process (nbgrader is imported here
    # already: its own process would spend seconds importing it).
    coursedir = CourseDirectory(config=assign.course_config(run.course), root=run.course)
    with Gradebook(coursedir.db_url, coursedir.course_id) as gb:
        CsvExportPlugin(to=run.csv_path).export(gb)


def export_canvas(run: Run) -> None:
    """The gradebook as Canvas imports it (``reports/canvas.csv``, :mod:`grader.cohort.export`):
    students by Canvas user id, one column per assignment, with a Points Possible row. The
    roster is ``run.settings.roster``, else ``canvas-roster.csv`` in the course folder when there
    is one (the demo cohort has one); assignment names are mapped by
    ``run.settings.canvas_assignments``, else
    ``canvas-assignments.csv`` in the course folder when there is one."""
    from grader.cohort.export import write_canvas_csv

    roster = run.settings.roster or os.path.join(run.course, files.ROSTER)
    export = write_canvas_csv(run.course, os.path.join(run.report_dir, files.CANVAS_CSV),
                              roster=roster if os.path.exists(roster) else None,
                              assignment_map=run.settings.canvas_assignments or None,
                              per_question=run.settings.canvas_per_question)
    run.canvas_path = export.path
    for warning in export.warnings:
        run.log(f"canvas.csv: {warning}")


def write_report(run: Run) -> None:
    from grader.cohort.report import write_report as _write

    run.report_path = _write(run.course, run.outcomes, run.report_dir)


def summarize(run: Run) -> None:
    graded = [o for o in run.outcomes if o.status in (Graded.GRADED, Graded.SKIPPED) and not o.reason]
    failed = [o for o in run.outcomes if o not in graded]
    now = [o for o in graded if o.status == Graded.GRADED]
    before = len(graded) - len(now)
    run.log("")
    run.log(f"graded {len(now)} of {len(run.outcomes)} submissions in "
            f"{time.monotonic() - run.started:.0f} s"
            + (f" ({before} graded before and unchanged since)" if before else "")
            + (" (demo cohort)" if run.demo else "")
            + (": nothing new to grade" if not now and not failed else ""))
    if run.settings.executor == "ray":
        nodes: dict[str, int] = {}
        for o in run.outcomes:
            if o.node:
                nodes[o.node] = nodes.get(o.node, 0) + 1
        run.log("graded on Ray: " + (", ".join(f"{n} {c}" for n, c in sorted(nodes.items()))
                                     or "nothing this run"))
    for o in failed:
        run.log(f"  NOT GRADED (scored 0): {o.submission.name}: {o.reason.splitlines()[0] if o.reason else ''}")
    held = held_this_run(run)
    if held:
        run.log(f"{len(held)} graded submission(s) have cells HELD FOR A PERSON (a grader error, "
                f"or a verdict this machine's noise left undecided), scored 0 or a share until "
                f"graded by hand in Formgrader (needs manual grade), or regraded on a quieter "
                f"machine (REGRADE=1):")
        for o, cells in held:
            run.log(f"  HELD: {o.submission.name}: {', '.join(cells)}")
    run.log(f"gradebook: {os.path.join(run.course, files.GRADEBOOK)}")
    run.log(f"feedback:  {os.path.join(run.course, files.FEEDBACK)}/STUDENT/ASSIGNMENT/")
    run.log(f"grades:    {run.csv_path}")
    run.log(f"canvas:    {run.canvas_path}  (Canvas: Grades > Import)")
    run.log(f"report:    {run.report_path}")
    run.log(f"isolation: {run.isolation.describe()}")


STEPS = [
    connect_ray,         # first: a wrong RAY_ADDRESS stops the run before anything is done
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


def grade(course: str = ".", assignments: list[str] | None = None,
          settings: GradeSettings | None = None, **options) -> Run:
    """Run :data:`STEPS` on a course folder and return the run (outcomes, paths). ``settings``
    (default: :data:`DEFAULTS`) with ``options`` replacing some of its fields
    (``grade(course, ["ps2"], workers=2)``); an option that is no setting is the run's own
    (``subject_timeout_s``). Stops (``SystemExit``) before anything runs when an assignment
    asked for is not in ``source/``."""
    course = os.path.abspath(course)
    names = {f.name for f in dataclasses.fields(GradeSettings)}
    settings = dataclasses.replace(settings or DEFAULTS,
                                   **{k: v for k, v in options.items() if k in names})
    settings = dataclasses.replace(settings, course=course,
                                   assignments=tuple(assignments or ())).resolved()
    options = {k: v for k, v in options.items() if k not in names}
    known = course_assignments(course)
    unknown = [a for a in assignments or [] if a not in known]
    if unknown:
        raise SystemExit(f"make grade: no problem set {', '.join(unknown)} in this course: "
                         f"ASSIGNMENT takes one of {', '.join(known)} (the folders of "
                         f"{files.SOURCE}/), or nothing to grade them all")
    run = Run(course=course, assignments=list(assignments or known), settings=settings, **options)
    # nbgrader's gradebook adds each submission through SQLAlchemy's autoflush, which warns
    # ("Object of type <SubmittedNotebook> not in session", three times per submission;
    # nbgrader's own autograde prints the same): it buried the run's progress lines.
    warnings.filterwarnings("ignore", message=r"Object of type <Submitted\w*> not in session")
    try:
        for step in STEPS:
            step(run)
    finally:
        for judge in run.judges:
            judge.close()
        from grader.isolation.sandbox.usage import remove_tree

        if run.temporary_dir:   # the judges' and subjects' folders and the grading copies
            try:    # without recursion: a subject's folder may hold a chain of any depth
                remove_tree(run.temporary_dir)
            except OSError as exc:
                run.log(f"could not remove {run.temporary_dir}: {exc}")
            try:    # the process's own folder, where no other run of this process uses it
                os.rmdir(os.path.dirname(run.temporary_dir))
            except OSError:
                pass
        if run.ray is not None:  # disconnects; stops the local instance if this run started it
            run.ray.shutdown()
    return run


def exit_status(run: Run) -> int:
    """0 when every submission has a grade from its own notebook; 2 when some scored zero
    because they could not be graded, or some graded now have cells held for a person (the
    summary says which). For the demo cohort, 0 when the scores are the written-down ones."""
    if run.demo:
        from grader.cohort.demo import check_expected

        mismatches = check_expected(run)
        for line in mismatches:
            print(f"demo: unexpected score: {line}")
        if not mismatches:
            from grader.cohort.demo import expected_scores

            expected = expected_scores()
            checked = sum(1 for o in run.outcomes if o.submission.student
                          in expected.get(o.submission.assignment, {}))
            print(f"demo check passed: all {checked} demo scores are the ones written down in "
                  f"each set's grader/problems/SET/demo_expected.json")
        return 1 if mismatches else 0
    if any(o.status == Graded.FAILED for o in run.outcomes) or held_this_run(run):
        return 2
    return 0


def held_this_run(run: Run) -> list[tuple]:
    """(outcome, held cells) of every submission graded in this run with cells held for a person
    (:func:`grader.cohort.scoring.held_for_review`)."""
    from grader.cohort.scoring import held_for_review

    held = []
    for o in run.outcomes:
        if o.status == Graded.GRADED:
            cells = held_for_review(run.course, o.submission)
            if cells:
                held.append((o, cells))
    return held


class _OneLineErrors(argparse.ArgumentParser):
    """An unknown option or a value that is not a number is said in one line (argparse would
    print the whole usage, a screenful with every option, first)."""

    def error(self, message: str):
        self.exit(2, f"make grade: {message} (make help, or --help, lists the options)\n")


def main(argv: list[str] | None = None) -> int:
    parser = _OneLineErrors(description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)   # every option from grader.cohort.settings.GradeSettings
    settings = from_arguments(parser.parse_args(argv))
    wrong = problems(settings)
    if wrong:
        print("\n".join(f"make grade: {line}" for line in wrong), file=sys.stderr)
        return 2
    run = grade(settings.course, list(settings.assignments), settings=settings)
    return exit_status(run)


if __name__ == "__main__":
    sys.exit(main())
