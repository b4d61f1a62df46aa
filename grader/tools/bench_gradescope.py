"""What Gradescope's settings must allow: peak memory and wall time of ``run_autograder`` per
problem set, grading the reference solution on a fake ``/autograder`` tree (as
``tests/test_gradescope.py`` builds one: the zip extracted into ``source/``, ``run_autograder``
beside it, the submission in ``submission/``).

    python -m grader.cli bench-gradescope                      # every set, a table
    python -m grader.cli bench-gradescope --assignment ps2 --cpus 1
    python -m grader.cli bench-gradescope --save                # + grader/problems/psN/gradescope_measured.json

Peak memory is the largest sum, over ``run_autograder`` and every process under it (the judge,
the subjects, the compiler's workers), of each process's resident set size, sampled every
``--interval`` seconds from ``/proc``: pages shared between processes count once per process, so
it is an upper bound of what the container holds, short peaks between two samples aside.
Every run starts with an empty compiler cache, as a fresh container has, and runs with the Python
of a venv holding only what the zip's ``setup.sh`` installs (:mod:`grader.tools.clean_venv`), not
the course's own venv.
``--cpus N`` pins the run to N cores (``sched_setaffinity``), as a Gradescope container with N
vCPUs has. ``--save`` writes the figures where ``make gradescope`` reads them for the zip's
README (:func:`grader.cohort.gradescope.build_autograder`). Figures only; nothing is asserted.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

from grader._paths import REPO_ROOT
from grader import _files as files
from grader.cohort.gradescope import build_autograder, installed_torch_pins
from grader import _environment as environment
from grader.common.tables import markdown_table
from grader.isolation.sandbox import confine

PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and every process under it, summed (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for child, (parent, _) in confine.process_table().items():
        children.setdefault(parent, []).append(child)
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/statm") as fh:
                total += int(fh.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def fake_tree(assignment: str, folder: str, torch_pins: str | None = None) -> str:
    """``folder/autograder`` as Gradescope makes it from the zip, with the reference solution
    (the demo cohort's ``ada_full``) as the submission; returns its path."""
    import nbformat

    from grader.cohort.demo import personas_for

    zip_path = build_autograder(assignment, os.path.join(folder, f"{assignment}.zip"),
                                course=REPO_ROOT, torch_pins=torch_pins)
    root = os.path.join(folder, "autograder")
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(os.path.join(root, files.GRADESCOPE_SOURCE))
    shutil.copy(os.path.join(root, files.GRADESCOPE_SOURCE, "run_autograder"), os.path.join(root, "run_autograder"))
    os.makedirs(os.path.join(root, files.GRADESCOPE_SUBMISSION))
    source = nbformat.read(os.path.join(REPO_ROOT, files.SOURCE, assignment, f"{assignment}.ipynb"), 4)
    release = nbformat.read(os.path.join(REPO_ROOT, files.RELEASE, assignment, f"{assignment}.ipynb"), 4)
    nbformat.write(personas_for(assignment, release, source)["ada_full"],
                   os.path.join(root, files.GRADESCOPE_SUBMISSION, f"{assignment}.ipynb"))
    return root


def measure(assignment: str, *, cpus: int | None = None, interval: float = 0.1,
            sandbox: str = "auto", timeout_s: float = 1800) -> dict:
    """Run ``run_autograder`` once on a fake tree of ``assignment``, with setup.sh's venv: its
    wall time, peak memory and what it scored."""
    from grader.tools.clean_venv import gradescope_venv

    folder = tempfile.mkdtemp(prefix=f"bench-gradescope-{assignment}-")
    try:
        root = fake_tree(assignment, folder)
        python = gradescope_venv(os.path.join(folder, "venv"),
                                 os.path.join(root, files.GRADESCOPE_SOURCE, files.GRADESCOPE_COURSE))
        # A cold compiler cache, as in Gradescope's fresh container for every submission (the
        # judge's default cache, /tmp/torchinductor_USER, would be warm from earlier runs here).
        env = dict(os.environ, AUTOGRADER_ROOT=root, COURSE_AUTOGRADER_PYTHON=python,
                   COURSE_AUTOGRADER_SANDBOX=sandbox,
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor-cache"),
                   TRITON_CACHE_DIR=os.path.join(folder, "triton-cache"))
        env.pop("PYTHONPATH", None)
        env.pop(environment.ROOT, None)
        cores = sorted(os.sched_getaffinity(0))[:cpus] if cpus else None
        started = time.monotonic()
        proc = subprocess.Popen(["bash", os.path.join(root, "run_autograder")], cwd=root, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
        peak = 0
        log = []
        import threading

        reader = threading.Thread(target=lambda: log.append(proc.stdout.read()), daemon=True)
        reader.start()
        while proc.poll() is None:
            peak = max(peak, tree_rss(proc.pid))
            if time.monotonic() - started > timeout_s:
                proc.kill()
            time.sleep(interval)
        wall = time.monotonic() - started
        reader.join(10)
        with open(os.path.join(root, files.GRADESCOPE_RESULTS_DIR, files.GRADESCOPE_RESULTS)) as fh:
            results = json.load(fh)
        return {"assignment": assignment, "wall_s": round(wall, 1),
                "peak_rss_mb": round(peak / 2**20), "cpus": len(cores) if cores else os.cpu_count(),
                "score": results["score"],
                "max_score": sum(t["max_score"] for t in results["tests"]),
                "finished": results["extra_data"].get("finished", True),
                "isolation": results["extra_data"].get("isolation", ""),
                "returncode": proc.returncode,
                "log_tail": (log[0] if log else b"").decode(errors="replace")[-1500:]}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def table(rows: list[dict]) -> str:
    return markdown_table(
        ["set", "wall time of run_autograder", "peak memory (process tree RSS)", "score"],
        [[r["assignment"], f"{r['wall_s']:.0f} s", f"{r['peak_rss_mb']} MB",
          f"{r['score']:g} / {r['max_score']:g}"] for r in rows])


def main(argv: list[str] | None = None) -> int:
    from grader.cohort.assign import assignments

    parser = argparse.ArgumentParser(prog="python -m grader.cli bench-gradescope",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assignment", action="append", default=None,
                        help="a problem set (repeat for several; default: every set)")
    parser.add_argument("--cpus", type=int, default=None,
                        help="pin run_autograder to this many cores (default: all of them)")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between samples")
    parser.add_argument("--sandbox", choices=["auto", "bwrap", "kernel", "off"], default="auto")
    parser.add_argument("--save", action="store_true",
                        help=f"write each set's figures to grader/problems/SET/{files.SET_GRADESCOPE_MEASURED} "
                             "for the zip's README")
    args = parser.parse_args(argv)
    chosen = args.assignment or assignments(REPO_ROOT)
    rows = []
    for assignment in chosen:
        row = measure(assignment, cpus=args.cpus, interval=args.interval, sandbox=args.sandbox)
        rows.append(row)
        print(f"{assignment}: {row['wall_s']:.0f} s, peak {row['peak_rss_mb']} MB, "
              f"score {row['score']:g}/{row['max_score']:g}, exit {row['returncode']}", flush=True)
        if row["returncode"] != 0 or not row["finished"]:
            print(row["log_tail"], flush=True)
    import torch

    about = {"date": datetime.date.today().isoformat(),
             "command": "python -m grader.cli bench-gradescope" + "".join(
                 f" --assignment {a}" for a in (args.assignment or []))
             + (f" --cpus {args.cpus}" if args.cpus else ""),
             "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.processor() or ''}".rstrip(", "),
             "cpus": args.cpus or os.cpu_count(),
             "torch": torch.__version__, "torch_pins": installed_torch_pins(),
             "isolation": rows[0]["isolation"] if rows else ""}
    print()
    print(f"{about['date']}, `{about['command']}` ({about['cpus']} of {os.cpu_count()} cores, "
          f"torch {about['torch']}; isolation: {about['isolation']})")
    print(table(rows))
    if args.save:
        from grader.problems import sets

        for r in rows:
            path = sets.save_gradescope_measured(r["assignment"], dict(
                {k: r[k] for k in ("wall_s", "peak_rss_mb", "score", "max_score", "cpus")},
                **{k: about[k] for k in ("date", "command", "machine", "torch")}))
            print(f"saved: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
