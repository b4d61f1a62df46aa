"""Benchmark of ``make grade``: seconds per submission for each problem set, first submission
vs later ones, and throughput with 1 and 2 workers.

    python -m grader.bench_grade --out bench-results/bench-grade.md     # make bench-grade

Each run grades a fresh cohort of full solutions (``ada_full`` copies from the demo cohort) in
its own course folder under ``build/``, through the same pipeline as ``make grade``. Figures
only; nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import time

from .demo import build_demo_course
from .grade import grade

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cohort(students: int) -> dict[str, str]:
    return {f"s{i:02d}": "ada_full" for i in range(1, students + 1)}


def grade_cohort(assignment: str, students: int, workers: int, folder: str):
    """Grade ``students`` full solutions of ``assignment`` with ``workers``; the run and seconds."""
    shutil.rmtree(folder, ignore_errors=True)
    build_demo_course(REPO, [assignment], folder=folder, cohort=_cohort(students))
    t0 = time.monotonic()
    run = grade(folder, [assignment], workers=workers)
    return run, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assignment", action="append", default=None,
                        help="problem set to measure (repeatable; default: all in source/)")
    parser.add_argument("--students", type=int, default=3,
                        help="submissions per cohort (full solutions)")
    parser.add_argument("--workers", default="1,2", help="comma list of worker counts to compare")
    parser.add_argument("--out", default="bench-results/bench-grade.md", help="markdown file to write")
    args = parser.parse_args(argv)
    assignments = args.assignment or sorted(
        d for d in os.listdir(os.path.join(REPO, "source"))
        if os.path.isdir(os.path.join(REPO, "source", d)))
    worker_counts = [int(w) for w in args.workers.split(",")]
    rows = []
    for assignment in assignments:
        for workers in worker_counts:
            folder = os.path.join(REPO, "build", f"bench-grade-{assignment}-w{workers}")
            run, total = grade_cohort(assignment, args.students, workers, folder)
            graded = [o for o in run.outcomes if o.status == "graded"]
            seconds = [o.seconds for o in sorted(graded, key=lambda o: o.submission.student)]
            scores = sorted({f"{o.score:g}/{o.max_score:g}" for o in run.outcomes})
            rows.append([assignment, workers, len(run.outcomes), f"{seconds[0]:.0f}" if seconds else "-",
                         f"{statistics.median(seconds[1:]):.0f}" if len(seconds) > 1 else "-",
                         f"{total:.0f}", f"{60 * len(run.outcomes) / total:.2f}", ", ".join(scores)])
            shutil.rmtree(folder, ignore_errors=True)
    header = ["problem set", "workers", "submissions", "first s/submission",
              "later s/submission (median)", "total s", "submissions/min", "scores"]
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                      + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows])
    text = (f"# make grade benchmark: {platform.node() or 'this machine'}, {os.cpu_count()} cores, "
            f"{time.strftime('%Y-%m-%d %H:%M')}\n\nEach submission is graded in its own course copy "
            f"with its own Inductor cache (isolation), so later submissions reuse only what the "
            f"operating system keeps warm (imports, files), not compiled kernels.\n\n{table}\n")
    print("\n" + text)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text)
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
