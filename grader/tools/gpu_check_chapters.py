"""Run every chapter notebook and tabulate its measured figures beside the seed's claims.

``make gpu-check`` calls this on a CUDA box at full size::

    python -m grader.cli gpu-check-chapters --size full --out bench-results/gpu-check-chapters.md

The tests call :func:`execute_chapter` at ``--size ci`` on CPU. Notebooks are executed in memory
(the committed files stay output-free); ``--keep DIR`` saves the executed copies.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from grader._paths import REPO_ROOT
from grader import _environment as environment
from grader import _files as files
from grader.common.tables import markdown_table

REPO = REPO_ROOT
NOTEBOOKS = os.path.join(REPO, files.NOTEBOOKS)


def chapter_paths(folder: str = NOTEBOOKS) -> list[str]:
    """The chapter notebooks, in order (``NN_name.ipynb``)."""
    return sorted(glob.glob(os.path.join(folder, "[0-9][0-9]_*.ipynb")))


def execute_chapter(path: str, *, size: str = "ci", record: str | None = None,
                    timeout: int = 600, kernel_name: str = "python3", extra_env: dict | None = None):
    """Execute one notebook in a fresh kernel with ``COURSE_SIZE=size`` (and ``COURSE_RECORD``).

    Returns ``(executed_notebook, seconds)``. Raises ``nbclient.exceptions.CellExecutionError``
    when a cell fails.
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ)
    env[environment.SIZE] = size
    # The kernel must import this checkout's grader and the venv's torch.
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop(environment.PIP_SOURCE, None)  # never pip-install from inside a test run
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    if record:
        env[environment.RECORD] = record
    else:
        env.pop(environment.RECORD, None)
    env.update(extra_env or {})
    client = NotebookClient(nb, timeout=timeout, kernel_name=kernel_name,
                            resources={"metadata": {"path": os.path.dirname(path)}})
    start = time.monotonic()
    client.execute(env=env)
    return nb, time.monotonic() - start


def run_all(out: str, *, size: str = "full", notebooks: list[str] | None = None,
            keep: str | None = None, timeout: int = 600) -> str:
    """Execute every chapter, write the claims table (markdown) to ``out`` and return it."""
    import nbformat

    from grader.course.chapters import claims_table, load_records

    notebooks = notebooks or chapter_paths()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fd, record = tempfile.mkstemp(prefix="course-record-", suffix=".json")
    os.close(fd)
    timings, failures = [], []
    try:
        for path in notebooks:
            name = os.path.basename(path)
            print(f"running {name} at size {size} ...", flush=True)
            try:
                nb, seconds = execute_chapter(path, size=size, record=record, timeout=timeout)
                timings.append((name, seconds, "ok"))
                if keep:
                    os.makedirs(keep, exist_ok=True)
                    nbformat.write(nb, os.path.join(keep, name))
            except Exception as exc:  # keep going: one failing chapter must not hide the rest
                first = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
                timings.append((name, float("nan"), f"FAILED: {first[0][:200]}"))
                failures.append(name)
            print(f"  {timings[-1][2]} ({timings[-1][1]:.0f} s)", flush=True)
        rows = load_records(record)
    finally:
        os.unlink(record)
    text = "\n".join([
        f"# Chapters at size {size}: measured figures beside the seed chapter's claims", "",
        "The seed's speedups (claims 4 and 10) are GPU claims; every measured figure comes "
        "from this run.", "",
        claims_table(rows), "",
        markdown_table(["chapter", "seconds", "status"],
                       [[n, f"{s:.0f}", st] for n, s, st in timings]), ""])
    with open(out, "w") as fh:
        fh.write(text)
    with open(os.path.splitext(out)[0] + ".json", "w") as fh:
        json.dump({"rows": rows, "timings": timings}, fh, indent=1)
    if failures:
        raise SystemExit(f"chapters failed: {', '.join(failures)} (table written to {out})")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-results/gpu-check-chapters.md")
    parser.add_argument("--size", default="full", choices=("full", "small", "ci"))
    parser.add_argument("--keep", default=None, help="folder for the executed notebooks")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("notebooks", nargs="*", help="default: every notebooks/NN_*.ipynb")
    args = parser.parse_args(argv)
    text = run_all(args.out, size=args.size, notebooks=args.notebooks or None, keep=args.keep,
                   timeout=args.timeout)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
