"""Grade a cohort: autograde every submission in isolation, one writer to the gradebook,
feedback, a grades CSV and a report.

    python -m grader.cli grade [--assignment ps1] [--workers 2]  # what `make grade` runs

The pipeline is an ordered list of small steps (:data:`STEPS`); the order matters where noted.
When ``submitted/`` is empty, the bundled demo cohort (:mod:`grader.cohort.demo`) is graded in a
separate course folder (``build/demo-course``), and the output says so.

Trust: a submission's autograded points are decided by processes that never run learner code:
the grading pipeline (:mod:`grader.cohort.pipeline`) in this process reads the solution cells from
the submitted notebook, screens them, and has a judge process (:mod:`grader.isolation.judge`, one
per worker) grade each problem — the learner's code runs in a sandboxed subject process that only
answers the judge — then scores every test cell from the problem set's ``TEST_CELLS``. nbgrader then runs the
notebook (for the feedback) in a temporary course copy, with the kernel — the only part that runs
learner code — in the sandbox (:mod:`grader.cohort.kernel`), and its ``ApplyPipelineScores`` step puts
the pipeline's points on the test cells. Learner code sees neither the course nor the gradebook
nor ``source/``.

Only the main process writes the real gradebook, merging one finished submission at a time
inside a transaction, then marking it done: a killed run loses nothing that was merged, and the
next run resumes where it stopped. Re-grading updates a submission's automatic grades in place:
nothing is counted twice, and a grader's manual scores and comments are kept (as nbgrader's own
autograde keeps them).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings

from grader.cohort import assign
from grader.isolation import sandbox
from grader.cohort.kernel import kernel_settings, short_runtime_dir

MARKER = ".graded.json"
RESULTS_FILE = "grader-results.json"   # the pipeline's result, kept beside the graded notebook
DISAGREEMENTS_FILE = "grader-disagreements.json"  # test cells where the kernel showed otherwise
DEFAULT_TIMEOUT_S = 20 * 60
DEFAULT_MEMORY_BYTES = 10 * 1024 ** 3
DEFAULT_ROSTER = "canvas-roster.csv"   # Canvas's gradebook export, if the instructor put it there
UNSCREENED_FOR_TESTS_ENV = "COURSE_UNSCREENED_FOR_TESTS"  # tests only: students not screened


@dataclasses.dataclass
class Submission:
    student: str
    assignment: str
    folder: str

    @property
    def name(self) -> str:
        return f"{self.student}/{self.assignment}"

    def digest(self) -> str:
        h = hashlib.sha256()
        for root, _, files in sorted(os.walk(self.folder)):
            for f in sorted(files):
                h.update(f.encode())
                with open(os.path.join(root, f), "rb") as fh:
                    h.update(fh.read())
        return h.hexdigest()


@dataclasses.dataclass
class Outcome:
    submission: Submission
    status: str              # 'graded', 'failed' (zero, with reason), 'skipped' (already graded)
    reason: str = ""
    score: float = 0.0
    max_score: float = 0.0
    seconds: float = 0.0
    phases: dict = dataclasses.field(default_factory=dict)  # seconds by step (bench-grade)
    node: str = ""           # where it was graded (Ray), empty for local workers


@dataclasses.dataclass
class Run:
    """Everything one grading run knows; each step reads and adds to it."""

    course: str
    assignments: list[str]
    workers: int = 1
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    cell_timeout_s: int = 600
    sandbox: str = "auto"
    regrade: bool = False
    demo: bool = False
    demo_students: list[str] | None = None  # the demo personas to grade (default: the first run's)
    subject_timeout_s: float | None = None  # per judge job (default: the problem's own)
    isolation: sandbox.Isolation | None = None
    submissions: list[Submission] = dataclasses.field(default_factory=list)
    prepared: dict = dataclasses.field(default_factory=dict)  # Ray: assignment -> judge cache
    judges: list = dataclasses.field(default_factory=list)    # one JudgeProcess per worker
    judge_dir: str = ""                                        # their logs and compiler cache
    prepare_seconds: float = 0.0
    executor: str = "local"  # 'local' (worker threads here) or 'ray' (grader.cohort.distributed)
    ray_address: str = ""    # a running Ray cluster; empty: RAY_ADDRESS, else a local instance
    ray: object = None       # the RayExecutor, once started
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    report_dir: str = ""
    report_path: str = ""
    csv_path: str = ""
    roster: str = ""         # Canvas's gradebook export: names, sections, assignment ids
    canvas_assignments: str = ""   # nbgrader -> Canvas assignment names (default: the course's
                                   # canvas-assignments.csv, when there is one)
    canvas_per_question: bool = False   # read-only per-question columns in reports/canvas.csv
    canvas_path: str = ""
    started: float = dataclasses.field(default_factory=time.monotonic)

    def log(self, text: str) -> None:
        print(text, flush=True)


# ---------------------------------------------------------------------------------------------
# Steps

def find_submissions(run: Run) -> None:
    """submitted/STUDENT/ASSIGNMENT/ (nbgrader's layout); LMS downloads in
    downloads/ASSIGNMENT/archive/ are collected into it first (:func:`_zip_collect`). With
    nothing submitted, switch to the bundled demo cohort."""
    for assignment in run.assignments:
        _zip_collect(run, assignment)
    subs = _scan(run.course, run.assignments)
    if not subs:
        from grader.cohort.demo import DEMO_CELL_TIMEOUT_S, DEMO_SUBJECT_TIMEOUT_S, build_demo_course

        run.demo = True
        from grader.cohort.demo import FIRST_SET_ALL, OTHER_SETS, PERSONAS

        wanted = run.demo_students or []
        unknown = sorted(set(wanted) - set(PERSONAS) - {"all"})
        if unknown:
            raise SystemExit(f"make grade: unknown demo students {unknown}; the demo cohort is "
                             f"{', '.join(PERSONAS)} (or all)")
        if wanted == ["all"]:
            cohort, first_run = None, False
            run.log("submitted/ is empty: grading the whole bundled demo cohort (8 made-up "
                    "students per problem set) in build/demo-course/")
        elif wanted:
            cohort, first_run = {s: s for s in wanted}, False
            run.log(f"submitted/ is empty: grading the demo students {', '.join(wanted)} in "
                    f"build/demo-course/")
        else:
            cohort, first_run = None, True
            run.log(f"submitted/ is empty: grading the bundled demo cohort in build/demo-course/: "
                    f"all 8 made-up students in {FIRST_SET_ALL} (every way a submission can fail), "
                    f"{', '.join(OTHER_SETS)} in the other sets (--demo-students all: everyone)")
        run.course = build_demo_course(run.course, run.assignments, cohort=cohort,
                                       first_run=first_run)
        # The endless-loop student costs one cell timeout and one subject timeout: keep them
        # short for the demo.
        run.cell_timeout_s = min(run.cell_timeout_s, DEMO_CELL_TIMEOUT_S)
        run.subject_timeout_s = min(run.subject_timeout_s or DEMO_SUBJECT_TIMEOUT_S,
                                    DEMO_SUBJECT_TIMEOUT_S)
        subs = _scan(run.course, run.assignments)
    run.submissions = subs
    run.log(f"{len(subs)} submissions: {len({s.student for s in subs})} students, "
            f"{', '.join(sorted({s.assignment for s in subs}))}")


ZIP_COLLECT_HELP = ("the file names are matched by c.FileNameCollectorPlugin.named_regexp in "
                    "nbgrader_config.py (written for Canvas downloads; its comment says how to adapt it)")


def _zip_collect(run: Run, assignment: str) -> None:
    """``nbgrader zip_collect ASSIGNMENT --force`` when downloads/ASSIGNMENT/ exists: the zip
    files (or loose files) in downloads/ASSIGNMENT/archive/ are extracted to .../extracted/ and
    each notebook copied to submitted/STUDENT/ASSIGNMENT/, the student taken from the file name.

    nbgrader only warns about a notebook whose name the regexp does not match and leaves it
    out, so that student would silently get no grade: this stops with the list instead. A
    failing zip_collect raises RuntimeError with nbgrader's output (:func:`_nbgrader`)."""
    folder = os.path.join(run.course, "downloads", assignment)
    if not os.path.isdir(folder):
        return
    where = os.path.join("downloads", assignment)
    stray = sorted(n for n in os.listdir(folder)
                   if n not in ("archive", "extracted") and not n.startswith("."))
    if stray:
        raise RuntimeError(f"{where}/ holds {', '.join(stray[:5])}{' ...' if len(stray) > 5 else ''}: "
                           f"LMS downloads (zip files or loose files) go in {where}/archive/")
    archive = os.path.join(folder, "archive")
    if not any(files for _, _, files in os.walk(archive)):
        run.log(f"{where}/archive/ is empty: no LMS downloads to collect for {assignment}")
        return
    proc = assign.nbgrader("zip_collect", assignment, "--force", cwd=run.course)
    output = proc.stdout + proc.stderr
    skipped = "Skipped submission with no match information provided: "  # the regexp's misses
    unmatched = [line.split(skipped, 1)[1].strip() for line in output.splitlines() if skipped in line]
    unmatched = [path for path in unmatched if path.endswith(".ipynb")  # other files: not graded
                 and not os.path.basename(path).startswith(".") and "__MACOSX" not in path]
    if unmatched:
        names = "\n  ".join(os.path.relpath(path, run.course) for path in unmatched)
        raise RuntimeError(f"nbgrader zip_collect {assignment}: {len(unmatched)} notebook(s) in "
                           f"{where}/archive/ could not be given to a student, so they would not "
                           f"be graded:\n  {names}\n{ZIP_COLLECT_HELP}; rename or remove these files "
                           f"and run again")
    for line in output.splitlines():
        if "Invalid submission notebook name" in line:
            run.log(f"warning: {where}/archive/: {line.split('] ', 1)[-1]} (release/{assignment}/ "
                    f"has no notebook of that name: check that student's file)")
    collected = [line.split("] ", 1)[-1] for line in output.splitlines() if "files collected" in line]
    run.log(f"{where}/archive/: nbgrader zip_collect: {collected[-1] if collected else 'nothing collected'}")


def _scan(course: str, assignments: list[str]) -> list[Submission]:
    root = os.path.join(course, "submitted")
    subs = []
    if not os.path.isdir(root):
        return subs
    for student in sorted(os.listdir(root)):
        for assignment in assignments:
            folder = os.path.join(root, student, assignment)
            if os.path.isdir(folder):
                subs.append(Submission(student, assignment, folder))
    return subs


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

    from grader.cohort.pipeline import declared_test_cells_problems

    for assignment in sorted({s.assignment for s in run.submissions}):
        folder = os.path.join(run.course, "source", assignment)
        for name in sorted(n for n in os.listdir(folder) if n.endswith(".ipynb")):
            problems = declared_test_cells_problems(os.path.join(folder, name), assignment)
            if problems:
                raise SystemExit("make grade: stopped: " + "; ".join(problems))
    for assignment in sorted({s.assignment for s in run.submissions}):
        assign.nbgrader("generate_assignment", assignment, "--force", cwd=run.course)
    with Gradebook(_db_url(run.course)) as gb:
        for student in sorted({s.student for s in run.submissions}):
            gb.update_or_create_student(student)


def _db_url(course: str) -> str:
    return "sqlite:///" + os.path.join(os.path.abspath(course), "gradebook.db")


def start_judges(run: Run) -> None:
    """One judge process per worker (:mod:`grader.isolation.judge`: it never runs learner code,
    decides every point, and keeps each problem's baseline and reference compiled for every
    submission it grades), each given the problem sets' references now, before the first
    submission. Judges share one compiler cache, so the second compiles nothing the first did."""
    from grader.cohort.pipeline import prepare_references as prepare
    from grader.isolation.judge import JudgeProcess

    todo = sorted({s.assignment for s in run.submissions
                   if run.regrade or not _already_graded(run, s)})
    if run.executor == "ray":
        for assignment in todo:  # built on a grading node: the cache suits its machine type
            started = time.monotonic()
            run.prepared[assignment] = _ray(run).prepare(run.course, assignment, _task_options(run))
            run.prepare_seconds += time.monotonic() - started
        return
    if not todo:
        return
    run.judge_dir = tempfile.mkdtemp(prefix="judges-")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(run.judge_dir, "inductor"),
               TRITON_CACHE_DIR=os.path.join(run.judge_dir, "triton"))
    gpus = _gpu_count()
    for slot in range(max(1, run.workers)):
        run.judges.append(JudgeProcess(env=env, log_path=os.path.join(run.judge_dir,
                                                                       f"judge-{slot}.log")))
    for assignment in todo:
        started = time.monotonic()
        for slot, judge in enumerate(run.judges):
            device = f"cuda:{slot % gpus}" if gpus else None
            built = prepare(assignment, run.course, judge, device=device)
            if slot == 0 and built:
                run.log(f"{assignment}: baseline and reference compiled once for the run "
                        f"({', '.join(sorted(built))}) in {time.monotonic() - started:.0f} s")
        run.prepare_seconds += time.monotonic() - started


def _sandbox_mode(run: Run) -> str:
    return run.isolation.mode if run.isolation.sandboxed else "off"


def _ray(run: Run):
    if run.ray is None:
        from grader.cohort.distributed import RayExecutor

        run.ray = RayExecutor(run.ray_address or None)
        run.log(run.ray.describe())
    return run.ray


def _task_options(run: Run) -> dict:
    """What a Ray task needs to grade as this run does (plain data)."""
    return {"sandbox": _sandbox_mode(run), "timeout_s": run.timeout_s,
            "memory_bytes": run.memory_bytes, "cell_timeout_s": run.cell_timeout_s,
            "subject_timeout_s": run.subject_timeout_s}


def autograde_all(run: Run) -> None:
    """Autograde each submission in isolation (``run.workers`` at once); merge each finished one
    into the gradebook from this process only, and mark it done."""
    todo, done = [], []
    for sub in run.submissions:
        digest = sub.digest()
        prev = None if run.regrade else _already_graded(run, sub, digest)
        if prev is not None:
            done.append(Outcome(sub, "skipped", prev.get("reason", ""), prev.get("score", 0.0),
                                prev.get("max_score", 0.0)))
        elif _unreadable_reason(sub):
            # Nothing to run: record the zero and the reason at once (no kernel, no sandbox).
            run.outcomes.append(_merge(run, sub, None, _unreadable_reason(sub), digest))
        else:
            todo.append((sub, digest))
    if done:
        run.log(f"{len(done)} submissions already graded (unchanged since): skipped")
    run.outcomes.extend(done)
    if not todo:
        return
    progress = _Progress(len(todo))
    if run.executor == "ray":
        _autograde_on_ray(run, todo, progress)
        return
    gpus = _gpu_count()
    with cf.ThreadPoolExecutor(max_workers=max(1, run.workers)) as pool:
        futures = {pool.submit(_grade_one, run, sub, slot % max(1, run.workers), gpus): (sub, digest)
                   for slot, (sub, digest) in enumerate(todo)}
        try:
            for future in cf.as_completed(futures):
                sub, digest = futures[future]
                tmp, failure, seconds, phases = future.result()
                try:
                    outcome = _merge(run, sub, tmp, failure, digest)  # the single writer
                finally:
                    if tmp:
                        shutil.rmtree(tmp, ignore_errors=True)
                outcome.seconds = seconds
                outcome.phases = phases
                run.outcomes.append(outcome)
                progress.step(f"{sub.name}: {outcome.status} {outcome.score:g}/{outcome.max_score:g}"
                              + (f" ({outcome.reason.splitlines()[0][:70]})" if outcome.reason else ""))
        except KeyboardInterrupt:
            run.log("interrupted: submissions merged so far are saved; run again to resume")
            for f in futures:
                f.cancel()
            raise


def _autograde_on_ray(run: Run, todo: list, progress: "_Progress") -> None:
    """Each submission a Ray task (:mod:`grader.cohort.distributed`); each finished one merged here,
    the only writer, exactly once."""
    from grader.cohort.distributed import unpack_result

    executor = _ray(run)
    options = _task_options(run)
    prepared = {a: executor.put(p) for a, p in run.prepared.items()}  # sent once per node
    for index, (sub, digest) in enumerate(todo):
        executor.submit(index, run.course, sub.student, sub.assignment, options,
                        prepared.get(sub.assignment))
    try:
        for index, result in executor.finished():
            sub, digest = todo[index]
            if isinstance(result, Exception):
                tmp, node, seconds, phases = None, "?", 0.0, {}
                failure = (f"the grading task failed on Ray in every try "
                           f"({type(result).__name__}: {str(result).strip().splitlines()[-1:]})")
            else:
                tmp, node = unpack_result(result), result["node"]
                failure, seconds, phases = result["failure"], result["seconds"], result["phases"]
            try:
                outcome = _merge(run, sub, tmp, failure, digest)
            finally:
                if tmp:
                    shutil.rmtree(tmp, ignore_errors=True)
            outcome.seconds, outcome.phases, outcome.node = seconds, phases, node
            run.outcomes.append(outcome)
            progress.step(f"{sub.name} on {node}: {outcome.status} "
                          f"{outcome.score:g}/{outcome.max_score:g}"
                          + (f" ({outcome.reason.splitlines()[0][:70]})" if outcome.reason else ""))
    except KeyboardInterrupt:
        run.log("interrupted: submissions merged so far are saved; run again to resume")
        executor.cancel()
        raise


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


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


def _already_graded(run: Run, sub: Submission, digest: str | None = None) -> dict | None:
    """The record of an earlier grading of this very submission (unchanged since), if any."""
    marker = _marker_path(run.course, sub)
    if not os.path.exists(marker):
        return None
    with open(marker) as fh:
        prev = json.load(fh)
    return prev if prev.get("digest") == (digest or sub.digest()) else None


def _marker_path(course: str, sub: Submission) -> str:
    return os.path.join(course, "autograded", sub.student, sub.assignment, MARKER)


def _submitted_notebook(run: Run, sub: Submission) -> str | None:
    """The submission's copy of the problem set's notebook (named as in source/), if any."""
    folder = os.path.join(run.course, "source", sub.assignment)
    for name in sorted(os.listdir(folder)):
        if name.endswith(".ipynb") and os.path.exists(os.path.join(sub.folder, name)):
            return os.path.join(sub.folder, name)
    return None


def _grade_one(run: Run, sub: Submission, slot: int, gpus: int):
    """Grade one submission: the pipeline's points (no learner code here), then nbgrader in a
    temporary course copy with the kernel sandboxed. Returns (folder, failure, seconds, phases):
    ``phases`` holds the seconds of each step (each group of problems the judge graded, broken
    down by the judge;
    nbgrader's run of the notebook) for ``make bench-grade``."""
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix=f"grade-{sub.student}-{sub.assignment}-")
    uid = runtime_dir = None
    phases: dict = {}
    try:
        # 1. The points, decided here.
        notebook = _submitted_notebook(run, sub)
        if notebook is None:
            return tmp, f"the submission has no {sub.assignment} notebook", time.monotonic() - t0, phases
        from grader.cohort.pipeline import grade_notebook

        device = f"cuda:{slot % gpus}" if gpus else None  # one timed submission per GPU
        judge = run.judges[slot % len(run.judges)] if run.judges else None
        # The grader's own attack tests name students whose code skips the screen (defence in
        # depth) to attack what stands behind it; a submission cannot reach this process's
        # environment.
        screen = sub.student not in os.environ.get(UNSCREENED_FOR_TESTS_ENV, "").split(",")
        result = grade_notebook(notebook, sub.assignment, run.course, sandbox=_sandbox_mode(run),
                                device=device, judge=judge, isolation=run.isolation, screen=screen,
                                timeout_s=run.subject_timeout_s)
        pipeline_file = os.path.join(tmp, "pipeline.json")
        display_file = os.path.join(tmp, "pipeline-display.json")
        result.save(pipeline_file, display_file)
        os.chmod(display_file, 0o644)
        phases.update(result.phases())
        phases["pipeline"] = round(time.monotonic() - t0, 2)
        t_nbgrader = time.monotonic()

        # 2. nbgrader's run of the notebook, for the feedback, in a course copy.
        shutil.copy(os.path.join(run.course, "nbgrader_config.py"), tmp)
        shutil.copy(os.path.join(run.course, "gradebook.db"), os.path.join(tmp, "gradebook.db"))
        shutil.copytree(os.path.join(run.course, "source", sub.assignment),
                        os.path.join(tmp, "source", sub.assignment))
        shutil.copytree(sub.folder, os.path.join(tmp, "submitted", sub.student, sub.assignment))
        # The kernel's working folder: a copy of the learner's own submission, nothing else.
        workdir = os.path.join(tmp, "kernel-work")
        shutil.copytree(sub.folder, workdir)
        for root, dirs, files in os.walk(tmp):
            os.chmod(root, 0o755)
        if run.isolation.sandboxed and sandbox.switches_user():
            uid = sandbox.take_uid()
        runtime_dir = short_runtime_dir()
        env = assign.nbgrader_env()
        env.update(HOME=os.path.join(tmp, "home"), TMPDIR=tmp, PYTHONDONTWRITEBYTECODE="1",
                   MPLBACKEND="Agg", JUPYTER_PLATFORM_DIRS="1", JUPYTER_RUNTIME_DIR=tmp,
                   COURSE_PIPELINE_FILE=pipeline_file,
                   COURSE_KERNEL_SANDBOX=kernel_settings(
                       isolation=run.isolation, uid=uid,
                       runtime_dir=runtime_dir, workdir=workdir,
                       results=display_file, memory_bytes=run.memory_bytes))
        for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_PATH"):
            env.pop(name, None)
        os.makedirs(env["HOME"])
        left = max(60.0, run.timeout_s - (time.monotonic() - t0))
        finished = sandbox.run(
            [sys.executable, "-m", "nbgrader", "autograde", sub.assignment,
             "--student", sub.student, "--force", f"--Execute.timeout={int(run.cell_timeout_s)}",
             f"--CourseDirectory.root={tmp}"],
            isolation=sandbox.Isolation("none", "nbgrader itself runs no learner code"),
            limits=sandbox.Limits(timeout_s=left, memory_bytes=None if gpus else run.memory_bytes),
            env=env, cwd=tmp)
        phases["nbgrader autograde"] = round(time.monotonic() - t_nbgrader, 2)
        with open(os.path.join(tmp, "autograde.log"), "wb") as fh:
            fh.write(finished.output)
        if finished.timed_out:
            return tmp, f"grading stopped after {run.timeout_s:.0f} s (the per-submission limit)", \
                time.monotonic() - t0, phases
        return tmp, None, time.monotonic() - t0, phases
    except Exception as exc:  # our own failure preparing the copy: report, never lose the run
        return tmp, f"could not grade: {type(exc).__name__}: {exc}", time.monotonic() - t0, phases
    finally:
        sandbox.give_back_uid(uid)
        if runtime_dir:
            shutil.rmtree(runtime_dir, ignore_errors=True)


def _unreadable_reason(sub: Submission) -> str | None:
    for name in sorted(os.listdir(sub.folder)):
        if name.endswith(".ipynb"):
            try:
                import nbformat

                nbformat.read(os.path.join(sub.folder, name), as_version=4)
            except Exception as exc:
                return f"{name} is not a readable notebook ({type(exc).__name__}: {str(exc)[:120]})"
    return None


def _merge(run: Run, sub: Submission, tmp: str | None, failure: str | None, digest: str) -> Outcome:
    """Copy one graded submission into the real gradebook and autograded/ (the only writer).

    The automatic part of each grade (score, review flag, automatic comment), the submission's
    timestamp and each notebook's late penalty come from the grading copy; what a grader entered
    by hand (manual scores, extra credit, comments) stays as it is in the real gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    graded_nb = os.path.join(tmp or "", "autograded", sub.student, sub.assignment)
    if failure is None and not os.path.isdir(graded_nb):
        failure = _unreadable_reason(sub) or "nbgrader could not autograde this submission:\n" + \
            _log_tail(tmp)
    auto: dict = {}
    timestamp, penalties = _timestamp(sub), {}
    if failure is None:
        src_gb = Gradebook("sqlite:///" + os.path.join(tmp, "gradebook.db"))
        try:
            src_sub = src_gb.find_submission(sub.assignment, sub.student)
            timestamp = src_sub.timestamp
            for nb in src_sub.notebooks:
                penalties[nb.name] = nb.late_submission_penalty
                auto.update({(nb.name, g.name): (g.auto_score, g.needs_manual_grade)
                             for g in nb.grades})
                auto.update({(nb.name, "comment", c.name): c.auto_comment for c in nb.comments})
        except MissingEntry:
            failure = "nbgrader recorded no grades for this submission:\n" + _log_tail(tmp)
        finally:
            src_gb.close()
    with Gradebook(_db_url(run.course)) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            dst = gb.find_submission(sub.assignment, sub.student)  # a regrade updates in place
        except MissingEntry:
            dst = gb.add_submission(sub.assignment, sub.student)
        dst.timestamp = timestamp
        for nb in dst.notebooks:
            nb.late_submission_penalty = penalties.get(nb.name) if failure is None else None
            for g in nb.grades:
                # A submission that could not be graded scores zero everywhere, written answers too.
                score, review = auto.get((nb.name, g.name), (0.0, False)) if failure is None \
                    else (0.0, False)
                g.auto_score = score
                g.needs_manual_grade = review or g.manual_score is not None
            for c in nb.comments:
                c.auto_comment = auto.get((nb.name, "comment", c.name)) if failure is None \
                    else failure
        gb.db.commit()
        dst = gb.find_submission(sub.assignment, sub.student)
        score, max_score = float(dst.score), float(dst.max_score)
    target = os.path.join(run.course, "autograded", sub.student, sub.assignment)
    shutil.rmtree(target, ignore_errors=True)
    if failure is None:
        shutil.copytree(graded_nb, target)
    else:
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "NOT_GRADED.txt"), "w") as fh:
            fh.write(failure + "\n")
        if tmp and os.path.exists(os.path.join(tmp, "autograde.log")):  # the whole story
            shutil.copy(os.path.join(tmp, "autograde.log"), os.path.join(target, "autograde.log"))
    for name, kept in (("pipeline.json", RESULTS_FILE),
                       ("pipeline.json.disagreements.json", DISAGREEMENTS_FILE)):
        if tmp and os.path.exists(os.path.join(tmp, name)):
            shutil.copy(os.path.join(tmp, name), os.path.join(target, kept))
    outcome = Outcome(sub, "graded" if failure is None else "failed", failure or "", score, max_score)
    with open(_marker_path(run.course, sub), "w") as fh:  # last: marks the merge as complete
        json.dump({"digest": digest, "status": outcome.status, "reason": outcome.reason,
                   "score": score, "max_score": max_score}, fh)
    return outcome


def _timestamp(sub: Submission):
    """The submission's ``timestamp.txt`` (as nbgrader reads it), or None."""
    from nbgrader.utils import parse_utc

    path = os.path.join(sub.folder, "timestamp.txt")
    try:
        with open(path) as fh:
            return parse_utc(fh.read().strip())
    except (OSError, ValueError):
        return None


def _log_tail(tmp: str | None) -> str:
    try:
        text = open(os.path.join(tmp, "autograde.log"), errors="replace").read()
    except (OSError, TypeError):
        return ""
    lines = text.splitlines()
    # Why a kernel could not start comes first: a limit its launcher could not set, a dead kernel.
    causes = [ln for ln in lines if "prlimit:" in ln or "Kernel died" in ln or "bwrap:" in ln]
    # The exception each traceback ended with (its last line, unindented), not "Traceback (...":
    ends = [lines[i] for i in range(len(lines))
            if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b", lines[i])]
    errors = ends or [ln for ln in lines if ("ERROR" in ln or "Error" in ln)
                      and "Traceback (most recent call last)" not in ln]
    return "\n".join(list(dict.fromkeys(causes[-3:] + errors[-5:])) or lines[-5:])


def generate_feedback(run: Run) -> None:
    """Feedback HTML per graded submission (nbgrader), and a page with the reason for the rest.
    Runs no learner code."""
    for assignment in sorted({s.assignment for s in run.submissions}):
        assign.nbgrader("generate_feedback", assignment, "--force", cwd=run.course, check=False)
        for o in run.outcomes:
            if o.submission.assignment == assignment:
                wrap_feedback_lines(os.path.join(run.course, "feedback", o.submission.student,
                                                 assignment))
    for o in run.outcomes:
        if o.status == "failed" or (o.status == "skipped" and o.reason):
            folder = os.path.join(run.course, "feedback", o.submission.student, o.submission.assignment)
            os.makedirs(folder, exist_ok=True)
            import html

            with open(os.path.join(folder, "NOT_GRADED.html"), "w") as fh:
                fh.write(f"<html><head><meta charset='utf-8'>{FEEDBACK_STYLE}</head><body>"
                         f"<h1>{o.submission.assignment}: not graded</h1>"
                         f"<p>Your submission scored 0 because it could not be graded:</p>"
                         f"<pre>{html.escape(o.reason)}</pre></body></html>\n")


# nbgrader's feedback shows outputs in <pre> blocks that keep each line on one line: a verdict
# with its figures and hint runs off the side. Wrap them instead.
FEEDBACK_STYLE = ("<style id='course-wrap'>pre { white-space: pre-wrap; overflow-wrap: anywhere; }"
                  "</style>")


def wrap_feedback_lines(folder: str) -> None:
    """Make the feedback pages in ``folder`` wrap long output lines (once per page)."""
    if not os.path.isdir(folder):
        return
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if not name.endswith(".html"):
            continue
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if "id='course-wrap'" in text or "</head>" not in text:
            continue
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text.replace("</head>", FEEDBACK_STYLE + "</head>", 1))


def export_grades(run: Run) -> None:
    """nbgrader's grades CSV (one row per student and assignment)."""
    run.report_dir = os.path.join(run.course, "reports")
    os.makedirs(run.report_dir, exist_ok=True)
    run.csv_path = os.path.join(run.report_dir, "grades.csv")
    assign.nbgrader("export", f"--CsvExportPlugin.to={run.csv_path}", cwd=run.course)


def export_canvas(run: Run) -> None:
    """The gradebook as Canvas imports it (``reports/canvas.csv``, :mod:`grader.cohort.export`):
    students by Canvas user id, one column per assignment, with a Points Possible row. The
    roster is ``run.roster``, else ``canvas-roster.csv`` in the course folder when there is one
    (the demo cohort has one); assignment names are mapped by ``run.canvas_assignments``, else
    ``canvas-assignments.csv`` in the course folder when there is one."""
    from grader.cohort.export import write_canvas_csv

    roster = run.roster or os.path.join(run.course, DEFAULT_ROSTER)
    export = write_canvas_csv(run.course, os.path.join(run.report_dir, "canvas.csv"),
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
    graded = [o for o in run.outcomes if o.status in ("graded", "skipped") and not o.reason]
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
    run.log(f"gradebook: {os.path.join(run.course, 'gradebook.db')}")
    run.log(f"feedback:  {os.path.join(run.course, 'feedback')}/STUDENT/ASSIGNMENT/")
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
        assignments = sorted(d for d in os.listdir(os.path.join(course, "source"))
                             if os.path.isdir(os.path.join(course, "source", d)))
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
    return 2 if any(o.status == "failed" for o in run.outcomes) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", default=".", help="the nbgrader course folder")
    parser.add_argument("--assignment", action="append", default=None,
                        help="grade only this assignment (repeatable; default: all in source/)")
    parser.add_argument("--workers", type=int, default=1,
                        help="submissions graded at once (on a GPU box: one per GPU)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds allowed per submission before it is stopped and scored 0")
    parser.add_argument("--memory-gb", type=float, default=DEFAULT_MEMORY_BYTES / 1024 ** 3,
                        help="address-space limit per submission process on CPU, in GiB")
    parser.add_argument("--cell-timeout", type=int, default=600,
                        help="seconds allowed per notebook cell (nbgrader's Execute.timeout)")
    parser.add_argument("--sandbox", choices=["auto", "bwrap", "off"], default="auto",
                        help="isolate learner code with bubblewrap, tried for real first. auto "
                             "and bwrap: where it cannot run, real submissions are not graded "
                             "(the demo cohort runs without it under auto); off: no sandbox "
                             "(learner code can read this machine's files)")
    parser.add_argument("--roster", default=None,
                        help="Canvas's gradebook export (Grades > Export), for names, sections "
                             "and assignment ids in reports/canvas.csv (default: "
                             f"{DEFAULT_ROSTER} in the course folder, when there is one)")
    parser.add_argument("--canvas-assignments", default=None,
                        help="CSV nbgrader,canvas mapping nbgrader's assignment names to Canvas's "
                             "(default: canvas-assignments.csv in the course folder, when there is one)")
    parser.add_argument("--canvas-per-question", action="store_true",
                        help="add a read-only column per graded cell to reports/canvas.csv")
    parser.add_argument("--executor", choices=["local", "ray"], default="local",
                        help="local: --workers submissions at once on this machine; ray: each "
                             "submission a Ray task (one CPU, and one whole GPU on GPU nodes), "
                             "on --ray-address or a local Ray instance")
    parser.add_argument("--ray-address", default="",
                        help="a running Ray cluster (ray start --head prints it; default: the "
                             "RAY_ADDRESS variable, else a local instance is started)")
    parser.add_argument("--demo-students", default="",
                        help="when submitted/ is empty: grade only these demo students "
                             "(comma-separated, e.g. ada_full,fay_crash), or all of them (all); "
                             "default: all 8 in ps1, four in each other set")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every submission again, even those already graded and "
                             "unchanged (e.g. after fixing a test); grades are replaced, not added")
    args = parser.parse_args(argv)
    roster = args.roster
    run = grade(args.course, args.assignment, workers=args.workers, timeout_s=args.timeout,
                memory_bytes=int(args.memory_gb * 1024 ** 3), cell_timeout_s=args.cell_timeout,
                sandbox=args.sandbox, regrade=args.regrade, executor=args.executor,
                ray_address=args.ray_address,
                demo_students=[x for x in args.demo_students.split(",") if x] or None,
                roster=os.path.abspath(roster) if roster else "",
                canvas_assignments=(os.path.abspath(args.canvas_assignments)
                                    if args.canvas_assignments else ""),
                canvas_per_question=args.canvas_per_question)
    return exit_status(run)


if __name__ == "__main__":
    sys.exit(main())
