"""Measure the chapters' long demonstrations once, for the figures their cells show by default.

    python -m grader.cli record-long-demos            # every one; writes grader/course/chapters/recorded.json

A demonstration that takes minutes is opt-in in its chapter (a switch in its cell, or
``COURSE_LONG=1`` for all), so that every chapter runs top to bottom in a few minutes on a
2-core CPU; when it does not run, the cell prints the figures recorded here, with the torch, the
machine and the date they were measured on. Today there is one: chapter 9's minifier on a
failure inside Inductor (each of the minifier's tries compiles C++ in a fresh process).
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time

import torch

from grader.course import chapters as ch

# name -> (what it measures, the function that measures it and returns its figures)
INDUCTOR_MINIFIER = "ch9 inductor minifier"
_KEPT = ("child_status", "child_error", "ops_before", "minify_status", "minify_s", "ops_after",
         "repro_status", "repro_error", "error")


def inductor_minifier(timeout: float = 1800) -> dict:
    """Chapter 9's Inductor-level minifier (``ch.minify_in_fresh_process("inductor", ...)``):
    the failing compile's error, the operators before and after, the minifier's seconds, and
    what ``python repro.py`` did."""
    work = ch.scratch_dir("course-record-minifier-")
    try:
        result = ch.minify_in_fresh_process("inductor", work, timeout=timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {k: result[k] for k in _KEPT if k in result}


DEMOS = {INDUCTOR_MINIFIER: inductor_minifier}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"default: every one ({', '.join(DEMOS)})")
    parser.add_argument("--out", default=ch.RECORDED_FILE)
    args = parser.parse_args(argv)
    for name in args.names or list(DEMOS):
        start = time.monotonic()
        figures = DEMOS[name]()
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        entry = ch.save_recorded_run(
            name, figures, path=args.out, command="python -m grader.cli record-long-demos",
            machine=f"CPU {platform.machine()}, {os.cpu_count()} cores, torch on "
                    f"{torch.get_num_threads()} threads; load average {load} when it ended")
        print(f"{name}: {time.monotonic() - start:.0f} s; {entry}", flush=True)
        if "error" in figures:
            print(f"{name} did not finish: {figures['error']}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
