"""Command line: a thin layer over the Python API, with the same defaults. Every Makefile target
that runs the grader calls one of these verbs; ``VERB --help`` describes each.

    python -m grader.cli release [ASSIGNMENT ...]     regenerate release/ from source/
    python -m grader.cli sync-notebooks               write the Colab setup cell into every notebook
    python -m grader.cli check KEY NOTEBOOK           grade one problem of a notebook in a fresh process
    python -m grader.cli grade [--assignment ps1] ... grade a cohort (make grade)
    python -m grader.cli canvas [--roster R] [--out O] the gradebook as Canvas imports it
    python -m grader.cli gradescope ASSIGNMENT        the Gradescope autograder zip of a problem set
    python -m grader.cli new-set NAME                 a new problem set's two folders, from the template
    python -m grader.cli ship-floors FILE             make gpu-check's floors.json into the sets' folders
    python -m grader.cli bench [--calibrate] ...      grader and workload figures (make bench, gpu-check)
    python -m grader.cli bench-grade ...              seconds per submission, local and Ray (make bench-grade)
    python -m grader.cli bench-gradescope ...         Gradescope's run_autograder: peak memory, wall time
    python -m grader.cli gpu-check-chapters ...       every chapter at full size on CUDA (make gpu-check)
    python -m grader.cli gpu-check ...                every GPU table in one offline run (make gpu-check)
    python -m grader.cli gpu-bundle ...               torchvision packed for it (make gpu-bundle)
"""
from __future__ import annotations

import argparse
import os
import sys


def _release(args) -> int:
    from grader.cohort.assign import release

    release(args.assignments or None)
    return 0


def _sync(args) -> int:
    from grader.course.notebooks import sync_setup_cells

    changed = sync_setup_cells(check_only=args.check)
    for path in changed:
        print(("out of date: " if args.check else "updated: ") + path)
    return 1 if (args.check and changed) else 0


def _check(args) -> int:
    from grader.isolation.check import evaluate
    from grader.problems import get_problem
    from grader.checks.results import Status
    from grader.isolation.cells.source import solution_cells

    problem = get_problem(args.key)
    cells = solution_cells(args.notebook, [problem.solution_grade_id])
    # The instructor's check: a planning question's hidden jobs are judged too (hidden_jobs).
    evaluation = evaluate(args.key, cells=cells, reference="off" if args.no_reference else "auto",
                          hidden_jobs=True)
    print(evaluation)
    return 0 if evaluation.status == Status.OK else 1


def _new_set(args) -> int:
    from grader.tools.new_set import create

    try:
        written = create(args.name)
    except (ValueError, OSError) as exc:
        print(exc, file=sys.stderr)
        return 1
    for path in written:
        print(f"written: {path}")
    return 0


def _ship_floors(args) -> int:
    from grader import _files as files
    from grader.problems import sets

    floors = files.read_json_dict(args.file)
    if not floors:
        print(f"ship-floors: {args.file} holds no floors", file=sys.stderr)
        return 1
    for path in sets.write_floors(floors):
        print(f"written: {path}")
    return 0


def _canvas(args) -> int:
    from grader import _files as files
    from grader.cohort.export import write_canvas_csv

    export = write_canvas_csv(args.course, args.out or os.path.join(args.course, files.REPORTS, files.CANVAS_CSV),
                              roster=args.roster, assignment_map=args.assignments_map,
                              per_question=args.per_question)
    for warning in export.warnings:
        print(f"warning: {warning}")
    print(f"{export.path}: {len(export.rows) - 1} students (Canvas: Grades > Import)")
    return 0


def _gradescope(args) -> int:
    from grader.cohort.gradescope import main as gradescope_main

    return gradescope_main(["build", args.assignment]
                           + (["--out", args.out] if args.out else [])
                           + (["--torch-pins", args.torch_pins] if args.torch_pins else [])
                           + (["--timeout-s", str(args.timeout_s)] if args.timeout_s else [])
                           + (["--require-confinement"] if args.require_confinement else []))


# Verbs whose module has a command line of its own (options, defaults and --help live there):
# verb -> (module, help).
DELEGATED = {
    "grade": ("grader.cohort.grade", "grade submitted/ (or the demo cohort) into the gradebook"),
    "bench": ("grader.tools.bench", "grader and workload figures for this machine; --calibrate writes "
                              "self-check floors"),
    "bench-grade": ("grader.tools.bench_grade", "where a submission's seconds go, local workers and Ray"),
    "bench-gradescope": ("grader.tools.bench_gradescope", "peak memory and wall time of the Gradescope "
                                                        "run_autograder per problem set"),
    "gpu-check-chapters": ("grader.tools.gpu_check_chapters", "every chapter at full size on CUDA, "
                                                        "with the claims it measured"),
    "gpu-check": ("grader.tools.gpu_check", "every GPU table of the course in one offline run: "
                                            "claims, GPU-only cells, the sets through the judge, "
                                            "floors (make gpu-check)"),
    "gpu-bundle": ("grader.tools.gpu_bundle", "pack what gpu-check needs beyond a GPU machine's "
                                              "torch: torchvision (make gpu-bundle)"),
    "record-long-demos": ("grader.tools.record_long_demos", "measure the chapters' opt-in long "
                                                            "demonstrations once, for the figures "
                                                            "their cells show by default"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course-grader", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("release", help="regenerate release/ from source/ (nbgrader generate_assignment)")
    p.add_argument("assignments", nargs="*", help="assignment names (default: every folder in source/)")
    p.set_defaults(func=_release)
    p = sub.add_parser("sync-notebooks", help="write grader.course.colab.INSTALL_CELL into every notebook")
    p.add_argument("--check", action="store_true", help="only report notebooks that are out of date")
    p.set_defaults(func=_sync)
    p = sub.add_parser("check", help="grade one problem of a notebook in a fresh process")
    p.add_argument("key", help="problem key, e.g. ps1.q1")
    p.add_argument("notebook", help="path to the learner's .ipynb")
    p.add_argument("--no-reference", action="store_true",
                   help="use the shipped floors instead of measuring the reference solution")
    p.set_defaults(func=_check)
    p = sub.add_parser("canvas", help="write the gradebook as Canvas's gradebook import takes it")
    p.add_argument("--course", default=".", help="the nbgrader course folder (with gradebook.db)")
    p.add_argument("--roster", default=None, help="Canvas's gradebook export (Grades > Export)")
    p.add_argument("--out", default=None, help="default: COURSE/reports/canvas.csv")
    p.add_argument("--assignments-map", default=None,
                   help="CSV nbgrader,canvas: nbgrader's assignment names to Canvas's (default: "
                        "COURSE/canvas-assignments.csv, when there is one)")
    p.add_argument("--per-question", action="store_true",
                   help="a read-only column per graded cell after each assignment")
    p.set_defaults(func=_canvas)
    p = sub.add_parser("gradescope", help="build the Gradescope autograder zip of a problem set")
    p.add_argument("assignment", help="e.g. ps2")
    p.add_argument("--out", default=None, help="default: build/gradescope/ASSIGNMENT-autograder.zip")
    p.add_argument("--torch-pins", default=None,
                   help="what the zip's setup.sh installs for torch (default: this environment's)")
    p.add_argument("--timeout-s", type=float, default=None,
                   help="the assignment's time limit on Gradescope (default: the one the "
                        "zip's README recommends for the set)")
    p.add_argument("--require-confinement", action="store_true",
                   help="the zip grades nothing where learner code cannot be confined in "
                        "Gradescope's container (default: it grades under an unprivileged user id "
                        "only there, and says so on the results page)")
    p.set_defaults(func=_gradescope)
    p = sub.add_parser("new-set", help="a new problem set: grader/problems/NAME/ and source/NAME/ "
                                      "from the template (docs/design.md, 'Adding a problem set')")
    p.add_argument("name", help="the set's name, e.g. ps9")
    p.set_defaults(func=_new_set)
    p = sub.add_parser("ship-floors", help="write the floors of a make gpu-check run into each "
                                          "set's grader/problems/SET/floors.json")
    p.add_argument("file", help="the floors.json make gpu-check wrote")
    p.set_defaults(func=_ship_floors)
    for verb, (module, text) in DELEGATED.items():
        # add_help=False: `VERB --help` reaches the module's own parser, which knows the options.
        sub.add_parser(verb, help=f"{text} (`{verb} --help` for the options)", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command in DELEGATED:
        import importlib

        module = importlib.import_module(DELEGATED[args.command][0])
        sys.argv[0] = f"python -m grader.cli {args.command}"  # the usage line argparse prints
        return module.main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
