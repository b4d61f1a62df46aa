"""Benchmark of ``make grade``: seconds per submission for each problem set, first submission
vs later ones, where a submission's seconds go, and throughput with 1 and 2 local workers and
on a local Ray instance with as many CPUs (``EXECUTOR=ray``: Ray's overhead per task).

    python -m grader.cli bench-grade --out bench-results/bench-grade.md     # make bench-grade

Each run grades a fresh cohort of full solutions (``ada_full`` copies from the demo cohort) in
its own course folder under ``build/``, through the same steps as ``make grade``: in bubblewrap's
sandbox where it can run, else without it, as ``make grade`` grades the demo there (the output says
which). Figures only; nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time

from grader.cohort.assign import assignments
from grader.cohort.demo import build_demo_course
from grader.cohort.grade import grade
from grader.cohort.merge import Graded
from grader import _environment as environment
from grader._paths import REPO_ROOT
from grader.common.tables import markdown_table

REPO = REPO_ROOT


def _cohort(students: int) -> dict[str, str]:
    return {f"s{i:02d}": "ada_full" for i in range(1, students + 1)}


def sandbox_modes(asked: str = "bwrap,kernel") -> list[tuple[str, str]]:
    """The confinements to measure (``asked``: a comma list of ``bwrap``, ``kernel``, ``off``),
    each as the ``--sandbox`` value to grade with and the words that name what the run really
    used (:meth:`grader.isolation.sandbox.process.Isolation.describe`, probed for real); a
    confinement this machine cannot give is left out, and so is a duplicate (``off`` where kernel
    confinement works grades as ``kernel``)."""
    from grader.isolation.sandbox import process

    modes, seen = [], set()
    for mode in asked.split(","):
        try:
            isolation = process.probe(mode)
        except process.SandboxUnavailable as exc:
            print(f"bench-grade: {mode} left out: {exc}", flush=True)
            continue
        if isolation.mode not in seen:
            seen.add(isolation.mode)
            modes.append((isolation.setting(), isolation.describe()))
    return modes


def grade_cohort(assignment: str, students: int, workers: int, folder: str,
                 executor: str = "local", sandbox: str = "bwrap"):
    """Grade ``students`` full solutions of ``assignment`` with ``workers`` (local threads, or
    the CPUs of a local Ray instance) and ``sandbox``; the run, its seconds, and the seconds
    the local Ray instance took to start before it (0 for local workers: a cluster is started
    once, not per run)."""
    shutil.rmtree(folder, ignore_errors=True)
    build_demo_course(REPO, [assignment], folder=folder, cohort=_cohort(students))
    started = 0.0
    if executor == "ray":
        import ray

        t0 = time.monotonic()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 object_store_memory=200 * 1024 ** 2)
        started = time.monotonic() - t0
    t0 = time.monotonic()
    try:
        run = grade(folder, [assignment], workers=workers, executor=executor, sandbox=sandbox)
    finally:
        if executor == "ray":
            ray.shutdown()
    return run, time.monotonic() - t0, started


# The breakdown's columns: name -> the outcome phases they add up (the judge's phases,
# grader.isolation.judge.steps.Judge.grade, and grader.cohort.attempt.run_attempt's); "other checks"
# takes every other phase the judge timed ("check ..."), "outside the judge" the rest of the total.
PARTS = {
    "subject start": ("subject start",),
    "next subject": ("next subject",),
    "learner cells": ("learner cells",),
    "subject's answers": ("correctness", "capture", "calls as used", "custom operator", "plan",
                          "subject stop"),
    "reference side": ("reference side",),
    "judge's graph checks": ("graph checks", "check fusion", "graph child"),
    "speed and job timing": ("check speed", "check job"),
    "other checks": (),
    "nbgrader's autograde": ("nbgrader autograde",),
    "outside the judge": (),
}
# Phases that sum others (a judge job's whole seconds; the attempt's lap around all its jobs).
SUMS = ("judge ", "judged scores")
PARTS_HELP = ("subject start = sandbox, interpreter and imports of the process that runs the "
              "learner's code (about 0 where the judge started it during the job before); next "
              "subject = waiting, before the judge times anything, until the next job's subject "
              "(started beside this one where the judge has two cores of its own) has done its "
              "imports (the judge's untimed graph checks run meanwhile); learner cells = running "
              "them (definitions: the models are built by the requests that follow); subject's "
              "answers = its outputs on the judge's inputs, the graph it captured, the problem's "
              "calls as used and their compile count, a custom operator's registration, a "
              "planning rule's answers, and stopping it; reference side = the baseline and "
              "reference the judge keeps (built once per judge, before its first submission of "
              "the set: in that submission's seconds where another judge built the set first); "
              "judge's graph checks = rebuilding the graph and checking it against the baseline, "
              "counting kernels, and starting and waiting for the judge's child that does it on a"
              " CPU; speed and job timing include the judge's compile of the learner's graph; "
              "other checks = the judge's other declared checks; nbgrader's autograde = recording"
              " the judged points and building the graded notebook (no cell runs); outside the "
              "judge = the rest of the total (the grading copy, the screen, the merge); total = "
              "the whole submission.")


def _part(outcome, part: str) -> float:
    phases = {k: v for k, v in outcome.phases.items() if not k.startswith(SUMS)}
    named = {name for names in PARTS.values() for name in names}
    if part == "other checks":
        return sum(v for k, v in phases.items() if k not in named)
    if part == "outside the judge":
        return max(0.0, outcome.seconds - sum(phases.values()))
    return sum(phases.get(name, 0.0) for name in PARTS[part])


COURSE_STUDENTS = 500


def run_plan(modes: list[str], sets: list[str], executors: list[str], worker_counts: list[int],
             compare: list[str]) -> list[tuple[str, str, str, int]]:
    """The runs to make, as (confinement, set, executor, workers): every set in every confinement
    with the first executor and worker count (the seconds per submission and where they go);
    the other executors and worker counts (throughput, Ray's overhead) in the first confinement
    only, on the sets of ``compare``: what they measure is the executor's, not the set's."""
    first = (executors[0], worker_counts[0])
    plan = [(m, a, *first) for m in modes for a in sets]
    plan += [(modes[0], a, e, w) for a in sets if a in compare for e in executors
             for w in worker_counts if (e, w) != first]
    return plan


def _estimate(rows: list, worker_counts: list[int], course_sets: int, mode: str) -> str:
    """The wall time of grading a whole course (:data:`COURSE_STUDENTS` x the ``course_sets``
    measured), from this run's figures under confinement ``mode``."""
    local = {(r[0], r[2]): r for r in rows if r[1] == "local"}
    sets = sorted({r[0] for r in rows})
    per_submission = [float(local[(a, worker_counts[0])][5]) for a in sets
                      if (a, worker_counts[0]) in local and local[(a, worker_counts[0])][5] != "-"]
    if not per_submission:
        return ""
    mean_s = statistics.mean(per_submission)
    best = max(worker_counts)
    rates = [float(local[(a, best)][8]) / float(local[(a, worker_counts[0])][8]) for a in sets
             if (a, best) in local and (a, worker_counts[0]) in local]
    gain = statistics.mean(rates) if rates else 1.0
    total = COURSE_STUDENTS * course_sets
    per_node_hour = 3600 / mean_s * gain
    lines = [f"\n## Estimate: {COURSE_STUDENTS} students x {course_sets} problem sets ({mode})\n",
             f"{total:,} submissions; measured here: {mean_s:.1f} s per later submission with "
             f"{worker_counts[0]} worker (mean over {', '.join(sets)}), and {best} workers on this "
             f"{os.cpu_count()}-core machine grade {gain:.2f}x as many per minute, so one such "
             f"machine grades {per_node_hour:.0f} submissions an hour. Wall time = "
             f"{total:,} / (nodes x {per_node_hour:.0f}) hours, plus the once-per-run "
             f"building of the references (the 'references s' column of the set's first run, cold) and Ray's overhead per submission "
             f"(its column) divided by the tasks running at once:\n"]
    hours = {nodes: total / (nodes * per_node_hour) for nodes in (1, 10, 50)}
    lines.append(markdown_table(["nodes like this one", "wall time"],
                                [[n, f"{h:.1f} h ({h * 60:.0f} min)"] for n, h in hours.items()]))
    lines.append("\nOn GPU nodes each task holds one whole GPU: the wall time is the submissions "
                 "times the seconds per submission there, divided by the number of GPUs; this "
                 "file has no GPU figure until `make bench-grade` runs on one.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assignment", action="append", default=None,
                        help="problem set to measure (repeatable; default: all in source/)")
    parser.add_argument("--students", type=int, default=3,
                        help="submissions per cohort (full solutions)")
    parser.add_argument("--workers", default="1,2", help="comma list of worker counts to compare")
    parser.add_argument("--executors", default="local,ray",
                        help="comma list: local (worker threads) and/or ray (a local Ray instance)")
    parser.add_argument("--sandbox", default="bwrap,kernel",
                        help="comma list of the confinements to measure (bwrap, kernel, off); "
                             "each one this machine can give is measured and named as probed")
    parser.add_argument("--compare", default="ps1,ps2",
                        help="comma list of the sets on which the other executors and worker "
                             "counts are measured (in the first confinement only)")
    parser.add_argument("--out", default="bench-results/bench-grade.md", help="markdown file to write")
    args = parser.parse_args(argv)
    bench_started = time.monotonic()
    chosen = args.assignment or assignments(REPO)
    worker_counts = [int(w) for w in args.workers.split(",")]
    executors = args.executors.split(",")
    modes = sandbox_modes(args.sandbox)
    if not modes:
        print("bench-grade: none of the confinements asked for runs here", file=sys.stderr)
        return 2
    for mode, words in modes:
        print(f"bench-grade: {mode}: {words}", flush=True)
    # One compiler cache for every run: each set's references are built cold in its first run
    # (that figure sets the subjects' deadlines of all its runs) and from the cache after.
    cache = os.path.join(REPO, "build", "bench-grade-cache")
    shutil.rmtree(cache, ignore_errors=True)
    os.environ[environment.JUDGE_CACHE] = cache
    rows, breakdown, totals, outside = [], [], {}, {}
    plan = run_plan([m for m, _ in modes], chosen, executors, worker_counts,
                    args.compare.split(","))
    for mode, assignment, executor, workers in sorted(
            plan, key=lambda r: (r[0] != modes[0][0], r[1], r[2] != executors[0], r[3])):
                folder = os.path.join(REPO, "build",
                                      f"bench-grade-{assignment}-{mode}-{executor}{workers}")
                run, total, ray_start = grade_cohort(assignment, args.students, workers, folder,
                                                     executor, mode)
                totals[(mode, assignment, executor, workers)] = total
                graded = sorted((o for o in run.outcomes if o.status == Graded.GRADED),
                                key=lambda o: o.submission.student)
                seconds = [o.seconds for o in graded]
                scores = sorted({f"{o.score:g}/{o.max_score:g}" for o in run.outcomes})
                if executor == executors[0] and workers == worker_counts[0]:
                    later = graded[1:] or graded
                    breakdown.append([mode, assignment, f"{run.references_seconds:.1f}"]
                                     + [f"{statistics.median(_part(o, part) for o in later):.1f}"
                                        if later else "-" for part in PARTS]
                                     + [f"{statistics.median(o.seconds for o in later):.1f}"
                                        if later else "-"])
                # The run's wall time outside the submissions' own seconds (and the references),
                # per submission: what the executor adds. Ray's overhead is its figure less the
                # local workers' (the submissions' own seconds vary with the machine's load; this
                # difference much less). The instance's start, once per cluster, is its own column.
                outside[(mode, assignment, executor, workers)] = (
                    total - run.references_seconds
                    - sum(o.seconds for o in run.outcomes) / workers) / max(1, len(run.outcomes))
                overhead = "-"
                if executor == "ray" and (mode, assignment, "local", workers) in outside:
                    extra = (outside[(mode, assignment, "ray", workers)]
                             - outside[(mode, assignment, "local", workers)])
                    overhead = f"{extra:.1f}"
                rows.append([mode, assignment, executor, workers, len(run.outcomes),
                             f"{seconds[0]:.0f}" if seconds else "-",
                             f"{statistics.median(seconds[1:]):.0f}" if len(seconds) > 1 else "-",
                             f"{run.references_seconds:.0f}", f"{total:.0f}",
                             f"{60 * len(run.outcomes) / total:.2f}", overhead,
                             f"{ray_start:.0f}" if executor == "ray" else "-", ", ".join(scores)])
                shutil.rmtree(folder, ignore_errors=True)
    header = ["confinement", "problem set", "executor", "workers / Ray CPUs", "submissions", "first s/submission",
              "later s/submission (median)", "references s", "total s", "submissions/min",
              "Ray overhead s/submission", "Ray start s (once)", "scores"]
    table = markdown_table(header, rows)
    parts_header = ["confinement", "problem set", "references, once per run"] + list(PARTS) + ["total"]
    parts_table = markdown_table(parts_header, breakdown)
    means = []
    for mode, _ in modes:
        later = [float(row[-1]) for row in breakdown if row[0] == mode and row[-1] != "-"]
        if later:
            means.append(f"{mode}: mean over {len(later)} sets: **{statistics.mean(later):.1f} s "
                         f"per later submission** ({executors[0]}, {worker_counts[0]} "
                         f"worker(s)).")
    mean = "".join(f"- {line}\n" for line in means) + "\n"
    isolation = "".join(f"\n- {mode}: {words}" for mode, words in modes)
    text = (f"# make grade benchmark: {platform.node() or 'this machine'}, {os.cpu_count()} cores, "
            f"{time.strftime('%Y-%m-%d %H:%M')}\n\nConfinements measured (as probed here):"
            f"{isolation}\n\n{mean}"
            f"Each submission is graded in its own course copy "
            f"and the learner's code runs in a subject process of its own; what later "
            f"submissions share is the judge (one per worker), which keeps the baseline and the "
            f"reference compiled from before the first submission. Ray rows: "
            f"a local Ray instance with that many CPUs, one task per submission; its overhead is "
            f"the run's wall time outside the submissions' own seconds and the references, per "
            f"submission, less the same figure of local workers (a worker's first submission "
            f"also compiles its judge's references, from the run's cache: in its seconds; the "
            f"instance's own start, once per cluster, is its own column). Every run shares one "
            f"compiler cache: 'references s' is a cold build in a set's first run (its first "
            f"row), from the cache in the others. The other executors and worker counts are "
            f"measured in the first confinement, on {args.compare.replace(',', ', ')}. This "
            f"benchmark took {(time.monotonic() - bench_started) / 60:.1f} min."
            f"\n\n{table}\n\n"
            f"## Where a submission's seconds go\n\nMedian seconds per later submission "
            f"({executors[0]}, {worker_counts[0]} worker(s)), summed over the set's problems (one "
            f"subject per solution cell): {PARTS_HELP}\n\n{parts_table}\n")
    text += _estimate([row[1:] for row in rows if row[0] == modes[0][0]], worker_counts,
                      len(chosen), modes[0][0])
    print("\n" + text)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
