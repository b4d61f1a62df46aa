"""``make gpu-check``: one offline command that fills every GPU table of the course.

    python3 -m grader.cli gpu-check --out bench-results/gpu-check        # make gpu-check OFFLINE=1

It runs with the Python it is started with (a GPU machine's own torch, 2.8 or newer) and needs
no Jupyter, nbclient or nbgrader and no network: the chapters' code cells are executed in a
fresh Python per chapter, in order, in one namespace each (what a kernel would do, less the
display), and the problem sets are graded through the judge as ``make grade`` grades them. What
the machine lacks travels as a bundle made here by ``make gpu-bundle``
(:mod:`grader.tools.gpu_bundle`: torchvision's Python part, for chapter 5's CNN).

Its parts (:data:`PLAN`), each a process of its own with a time limit, under one deadline
(``--deadline-s``, 450 s by default: 7.5 minutes, so that one run and a rerun fit in a 15-minute
lease with the machine's start):

1. ``exclusive``, one at a time, alone on the device (the figures the seed's claims are set
   beside): the judge's bound on a spawned child's device memory (``bound``), chapter 5 (the
   CNN, transformer and big-batch speedups) and chapter 3 (reduce-overhead, max-autotune);
2. ``shared``, ``--jobs`` at a time (4 on a GPU: 16 cores): every other chapter (its GPU-only
   cells, each marked ran, skipped or failed with its error), and one graded submission per
   problem set through the judge on the device (the instructor's solution notebook from
   ``source/``: every test cell's verdict, the reference solution's speedup, the floor this
   device class gets). The report says which parts shared the device with which.

Whatever happens, it writes what it has to ``--out`` (at most 8 files; these 4):

- ``gpu-check.md``: the tables for people to read and commit (claims beside figures, GPU-only
  cells, the sets' verdicts, speedups and floors, the judge's bound, every part's seconds);
- ``gpu-check.json``: the same as data;
- ``floors.json``: every set's shipped floors (``grader/problems/psN/floors.json``) in one
  mapping, with this device class's set from the reference speedups measured here (to ship
  them: ``python -m grader.cli ship-floors floors.json``);
- ``gpu-check.log``: every part's output, each cut to its last :data:`LOG_BYTES_PER_PART`.

Why one module: the parent and its parts are the same program (a part is this module run again
with ``--part``, so that a GPU machine needs nothing beyond the working tree), and the report reads
exactly what the parts write; split, the two halves of each file format would live apart.

``--device cpu --size ci`` is its dry run on a CPU (the suite runs it in a Python without
Jupyter: ``tests/test_gpu_check.py``). The exit status is 0 when every part ran to its end, 1
when some part failed, ran out of time or was not reached (the files say which).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import io
import json
import linecache
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback

from grader import _environment as environment
from grader import _files as files
from grader._paths import REPO_ROOT
from grader.common.tables import markdown_table

# Its floors.json: every set's floors in one mapping (`grader.cli ship-floors` splits it by set).
OUT_FILES = ("gpu-check.md", "gpu-check.json", files.SET_FLOORS, "gpu-check.log")
LOG_BYTES_PER_PART = 512 * 1024
DEFAULT_DEADLINE_S = 450.0
BUNDLE_DIR = "gpu-bundle"
# Where the seed's claims are (these chapters run alone on the device, first).
CLAIMS_CHAPTERS = ("05", "03")


@dataclasses.dataclass
class Part:
    """One part of the run: ``kind`` is 'bound', 'chapter' or 'set'; ``size`` the chapters'
    ``COURSE_SIZE`` on a GPU (``--size`` sets every part's); ``budget_s`` its own time limit on
    an H100; ``phase`` 'exclusive' (alone on the device) or 'shared'."""

    kind: str
    name: str
    size: str
    budget_s: float
    phase: str


def _chapter(prefix: str) -> str:
    paths = glob.glob(os.path.join(REPO_ROOT, files.NOTEBOOKS, f"{prefix}_*.ipynb"))
    return os.path.basename(paths[0])[:-len(".ipynb")] if paths else prefix


# The plan on an H100: a first estimate (nothing of it has run on a GPU yet); each part's seconds
# in gpu-check.md say how to change it. Chapters 8 to 10 start fresh processes (cold caches, a
# minifier, two distributed ranks) and run at small size; the others at full.
PLAN_SHARED_CHAPTERS = (("10", "small", 240), ("09", "small", 240), ("08", "small", 200),
                        ("11", "full", 180), ("07", "full", 150), ("06", "full", 150),
                        ("02", "full", 120), ("01", "full", 90), ("04", "full", 90))
PLAN_SET_S = {"ps3": 240, "ps5": 200, "ps8": 200, "ps6": 200, "ps4": 180, "ps7": 180, "ps2": 150,
              "ps1": 150}
# A set with no estimate yet (a new one, found by its folder) gets this many seconds.
PLAN_NEW_SET_S = 180


def plan() -> list[Part]:
    """Every part, in the order it starts (exclusive first; then the longest first)."""
    from grader.problems import sets

    parts = [Part("bound", "bound", "-", 60, "exclusive"),
             Part("chapter", _chapter("05"), "full", 150, "exclusive"),
             Part("chapter", _chapter("03"), "full", 150, "exclusive")]
    shared = [Part("chapter", _chapter(p), size, budget, "shared")
              for p, size, budget in PLAN_SHARED_CHAPTERS]
    shared += [Part("set", ps, "-", PLAN_SET_S.get(ps, PLAN_NEW_SET_S), "shared")
               for ps in sets.names()]
    return parts + sorted(shared, key=lambda p: -p.budget_s)


# ---------------------------------------------------------------------------------------------
# A chapter, cell by cell, without Jupyter

# A cell that takes a GPU-only path, or asks which device it is on.
_GPU_CELL = re.compile(r"gpu_only|cuda|DEVICE\s*[!=]=")


class _Tee(io.TextIOBase):
    """Writes to this process's stream and keeps a copy of what one cell printed."""

    def __init__(self, stream):
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.kept.write(text)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _cell_title(cells: list[dict], index: int) -> str:
    """The nearest markdown heading above cell ``index`` (its section)."""
    for cell in reversed(cells[:index]):
        if cell.get("cell_type") == "markdown":
            for line in _source(cell).splitlines():
                if line.startswith("#"):
                    return line.lstrip("#").strip()
    return ""


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def run_chapter(path: str, cells_out: str) -> int:
    """Execute the code cells of the notebook at ``path`` in this process, in order, in one
    namespace; one JSON line per cell to ``cells_out`` as it starts and as it ends (so that a
    part killed at its time limit leaves every finished cell, and the one it was in). A cell
    that raises is recorded with its error and the next cell runs (its failure may follow from
    the first: the file says which failed first). Returns the number of cells that failed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(path, encoding="utf-8") as fh:
        cells = json.load(fh)["cells"]
    namespace = {"__name__": "__main__"}
    failed = 0
    os.chdir(os.path.dirname(os.path.abspath(path)))
    with open(cells_out, "a") as log:
        def line(data: dict) -> None:
            log.write(json.dumps(data) + "\n")
            log.flush()

        for index, cell in enumerate(cells):
            if cell.get("cell_type") != "code":
                continue
            source = _source(cell)
            name = f"<{os.path.basename(path)} cell {index}>"
            # As IPython does: the cell's source is where inspect and Dynamo look for it.
            linecache.cache[name] = (len(source), None, source.splitlines(True), name)
            info = {"cell": index, "section": _cell_title(cells, index),
                    "gpu": bool(_GPU_CELL.search(source)), "first_line": source.strip()
                    .splitlines()[0][:120] if source.strip() else ""}
            line({**info, "event": "start"})
            out, err = _Tee(sys.stdout), _Tee(sys.stderr)
            started = time.monotonic()
            status, error = "ran", ""
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    exec(compile(source, name, "exec"), namespace)   # noqa: S102 (the course's own cells)
            except BaseException as exc:  # noqa: BLE001 (every failure is recorded, then on)
                if isinstance(exc, KeyboardInterrupt):
                    raise
                failed += 1
                status = "failed"
                error = f"{type(exc).__name__}: {str(exc).strip()[:600]}"
                sys.stderr.write(traceback.format_exc())
            printed = out.kept.getvalue()
            if status == "ran" and "GPU-only:" in printed:
                status = "skipped"   # its GPU-only path printed why it did not run here
            figures = len(plt.get_fignums())
            plt.close("all")
            line({**info, "event": "end", "status": status, "error": error,
                  "seconds": round(time.monotonic() - started, 2), "figures": figures,
                  "output": printed[-1500:], "stderr": err.kept.getvalue()[-800:]})
    return failed


# ---------------------------------------------------------------------------------------------
# A problem set, graded through the judge

def run_set(assignment: str, device: str, out_path: str, sandbox: str = "auto") -> int:
    """Grade ``source/ASSIGNMENT/ASSIGNMENT.ipynb`` (the instructor's solutions, as a submission)
    through the judge on ``device``, as ``make grade`` grades one submission; write its verdicts,
    the reference speedups and the floors they give to ``out_path`` (after every solution cell,
    so a part stopped at its limit keeps what it graded). Where no problem could be graded with
    the sandbox it found (its subject never answered), it is graded again with ``sandbox='off'``
    and both are written. Returns 0 when every problem was graded (status ok)."""
    from grader.checks.results import Status
    from grader.cohort.scoring import grade_notebook
    from grader.isolation.judge.judge_process import JudgeProcess
    from grader.tools.bench import floor_for, speedup_of

    notebook = os.path.join(REPO_ROOT, files.SOURCE, assignment, f"{assignment}.ipynb")
    report: dict = {"assignment": assignment, "attempts": []}

    def save() -> None:
        tmp = out_path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(report, fh, default=str)
        os.replace(tmp, out_path)

    def attempt(mode: str) -> dict:
        entry: dict = {"sandbox": mode, "started": time.time()}
        report["attempts"].append(entry)

        def progress(scores) -> None:
            entry.update(_scored(scores, floor_for, speedup_of))
            save()

        judge = JudgeProcess()
        try:
            scores = grade_notebook(notebook, assignment, REPO_ROOT, sandbox=mode, device=device,
                                    judge=judge, progress=progress)
        finally:
            judge.close()
        entry.update(_scored(scores, floor_for, speedup_of))
        entry["seconds"] = round(time.time() - entry.pop("started"), 1)
        save()
        return entry

    first = attempt(sandbox)
    graded = [k for k, r in first["problems"].items() if r["status"] == Status.OK]
    if not graded and sandbox == "auto":
        report["note"] = ("no problem was graded with the sandbox this machine offered: graded "
                          "again with sandbox='off' (make grade SANDBOX=off)")
        first = attempt("off")
        graded = [k for k, r in first["problems"].items() if r["status"] == Status.OK]
    save()
    return 0 if len(graded) == len(first["problems"]) else 1


def _scored(scores, floor_for, speedup_of) -> dict:
    """What gpu-check reports of a set's judged scores: each test cell's points and verdict
    text, each problem's status, check verdicts, reference speedup, floor, graph child."""
    problems = {}
    for key, result in scores.problems.items():
        checks = result.get("checks") or {}
        speed = checks.get("speed") or {}
        median = speedup_of(speed) if speed else None
        learner = (speed.get("speedups") or {}).get("learner") or {}
        problems[key] = {
            "status": str(result.get("status")), "message": str(result.get("message") or "")[:500],
            "checks": {name: {"verdict": c.get("verdict") or ("pass" if c.get("ok") else "fail"),
                              "message": str(c.get("message") or "")[:300]}
                       for name, c in checks.items()},
            "reference_speedup": median,
            "speedup_interval": [learner.get("low"), learner.get("high")] if median else None,
            "floor": floor_for(median) if median else None,
            "device_class": result.get("device_class"),
            "graph_child": result.get("graph_child"), "sandbox": result.get("sandbox"),
            "output_tail": str(result.get("output_tail") or "")[-600:]
            if str(result.get("status")) != "ok" else "",
            "traceback": str(result.get("traceback") or "")[-1500:]}
    return {"problems": problems, "sandbox_used": scores.sandbox,
            "cells": {g: {"points": c.get("points"), "max_points": c.get("max_points"),
                          "passed": c.get("passed"), "review": c.get("review"),
                          "text": str(c.get("text") or "")[:400]}
                      for g, c in scores.cells.items()}}


# ---------------------------------------------------------------------------------------------
# The judge's bound on a spawned child's device memory, confirmed on this device

BOUND_ALLOWANCE = 256 * 1024 ** 2


def bound_probe(request: dict, blob: bytes):
    """(In a spawned child, before its bound.) Returns the work: hold ``request['bytes']`` on
    the device (a CUDA tensor on a GPU; host memory on a CPU) and say how much it held."""
    import torch

    device = request["device"]
    if device.startswith("cuda"):
        torch.ones(1, device=device)   # the CUDA context, before the bound

    def work():
        held = torch.empty(int(request["bytes"]), dtype=torch.uint8, device=device)
        held.fill_(1)
        return {"held_bytes": held.numel()}
    return work


def run_bound(device: str, out_path: str) -> int:
    """The judge's spawned child on ``device`` (:mod:`grader.isolation.judge.spawned_child`): work
    within its allowance ends 'done', work past it ends 'memory' with the reason, and the bound
    and peak it reports. Writes the rows to ``out_path``; returns how many were not as expected."""
    from grader.isolation.judge import spawned_child

    rows = []
    cases = (("within the allowance (128 MiB of 256 MiB)", BOUND_ALLOWANCE // 2, "done"),
             ("past the allowance (1 GiB of 256 MiB)", 4 * BOUND_ALLOWANCE, "memory"))
    if not device.startswith("cuda"):   # a CPU's address-space limit: the allowance and more
        cases = (cases[0], ("past the allowance (3 GiB of 256 MiB)", 12 * BOUND_ALLOWANCE,
                            "memory"))
    for label, size, expected in cases:
        got = spawned_child.run("grader.tools.gpu_check:bound_probe",
                                {"bytes": size, "device": device}, b"", seconds=120,
                                memory_bytes=BOUND_ALLOWANCE, device=device)
        rows.append({"case": label, "expected": expected, "ended": got.kind,
                     "why": got.why[:300], "seconds": round(got.seconds, 1),
                     "device_memory": got.device_memory,
                     "bound": "CUDA caching allocator" if spawned_child.spawns(device)
                     else "address space (RLIMIT_AS)"})
        with open(out_path, "w") as fh:
            json.dump(rows, fh)
    return sum(r["ended"] != r["expected"] for r in rows)


# ---------------------------------------------------------------------------------------------
# The parent: parts in processes, one deadline, the files

def torchvision_bundle(bundle_dir: str, work: str) -> tuple[str | None, str]:
    """``(folder, what)``: where this run's parts find torchvision: installed here (``None``), or
    the bundle's package (``make gpu-bundle``) unpacked into ``work``; and a line saying which
    (and, where the bundle's torchvision does not import with this torch, why)."""
    try:
        import torchvision   # noqa: F401

        return None, f"torchvision {torchvision.__version__} (installed)"
    except ImportError:
        pass
    found = sorted(glob.glob(os.path.join(bundle_dir, "torchvision-*.zip")))
    if not found:
        return None, (f"torchvision is not installed and no bundle is in {bundle_dir}/ (make "
                      f"gpu-bundle): chapter 5's CNN cell will fail")
    import torch

    from grader.tools.gpu_bundle import bundle_python, bundle_torch, python_tag, unpack

    mine = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    # This torch and this Python first; then this torch; then the newest.
    best = next((p for p in found if bundle_torch(p) == mine and bundle_python(p) in
                 (python_tag(), "")), next((p for p in found if bundle_torch(p) == mine),
                                           found[-1]))
    folder = unpack(best, os.path.join(work, "site"))
    what = f"torchvision from the bundle {os.path.basename(best)}" + (
        "" if bundle_torch(best) == mine else f" (made for torch {bundle_torch(best)}, this is "
                                              f"{torch.__version__})")
    tried = subprocess.run([sys.executable, "-c", "import torchvision; "
                            "print(torchvision.__version__)"], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=folder), timeout=120)
    if tried.returncode != 0:
        last = (tried.stderr.strip().splitlines() or ["?"])[-1]
        return folder, f"{what}: its import fails here ({last[:200]})"
    return folder, what


def _part_command(part: Part, work: str, device: str, size: str | None,
                  sandbox: str = "auto") -> list[str]:
    base = [sys.executable, "-m", "grader.tools.gpu_check", "--part", part.kind, part.name,
            "--work", work, "--device", device]
    return base + (["--sandbox", sandbox] if part.kind == "set" else [])


def _part_env(part: Part, work: str, device: str, size: str | None, extra_path: str | None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT, *([extra_path] if extra_path else []),
                                         *[p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                           if p]])
    env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    env.pop(environment.PIP_SOURCE, None)   # never pip-install from a chapter's first cell
    env.pop(environment.LONG, None)
    if part.kind == "chapter":
        env[environment.SIZE] = size or part.size
        env[environment.RECORD] = os.path.join(work, f"{part.name}.records.json")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""   # the dry run: the device class forced to CPU
    return env


@dataclasses.dataclass
class Running:
    part: Part
    proc: subprocess.Popen
    started: float
    log: str
    alongside: set = dataclasses.field(default_factory=set)


def run_parts(parts: list[Part], work: str, *, device: str, size: str | None, jobs: int,
              deadline: float, extra_path: str | None, sandbox: str = "auto",
              on_change=None) -> dict:
    """Run ``parts`` (exclusive ones alone, then the shared ones ``jobs`` at a time), each killed
    at its own budget or the deadline; their endings by name."""
    endings: dict[str, dict] = {p.name: {"ended": "not reached", "seconds": 0.0,
                                         "phase": p.phase, "kind": p.kind,
                                         "size": (size or p.size) if p.kind == "chapter" else "-",
                                         "budget_s": p.budget_s, "alongside": []}
                                for p in parts}
    queue = list(parts)
    running: list[Running] = []
    try:
        _run_queue(queue, running, endings, work, device=device, size=size, jobs=jobs,
                   deadline=deadline, extra_path=extra_path, sandbox=sandbox, on_change=on_change)
    except KeyboardInterrupt:   # stopped from outside (SIGTERM, Ctrl-C): stop every part, keep what there is
        for r in running:
            _stop(r.proc)
            endings[r.part.name].update(ended="stopped from outside", code=r.proc.poll(),
                                        seconds=round(time.monotonic() - r.started, 1),
                                        alongside=sorted(r.alongside))
        endings["(the run)"] = {"ended": "stopped from outside", "seconds": 0.0, "phase": "-",
                                "kind": "-", "size": "-", "budget_s": 0.0, "alongside": []}
    return endings


def _run_queue(queue: list[Part], running: list, endings: dict, work: str, *, device: str,
               size: str | None, jobs: int, deadline: float, extra_path: str | None,
               sandbox: str, on_change) -> None:
    """:func:`run_parts`'s loop: start what may start, reap what ended, until all have ended."""
    while queue or running:
        now = time.monotonic()
        for r in list(running):
            limit = min(r.started + r.part.budget_s, deadline)
            code = r.proc.poll()
            if code is None and now < limit:
                continue
            if code is None:
                _stop(r.proc)
                code = r.proc.wait()
                ended = "deadline" if now >= deadline else "timed out"
            else:
                ended = "done" if code == 0 else ("failed" if code > 0 else f"killed ({-code})")
            running.remove(r)
            endings[r.part.name].update(ended=ended, code=code,
                                        seconds=round(now - r.started, 1),
                                        alongside=sorted(r.alongside))
            if on_change:
                on_change(endings)
        exclusive_running = any(r.part.phase == "exclusive" for r in running)
        while queue and now < deadline and not exclusive_running:
            nxt = queue[0]
            if nxt.phase == "exclusive" and running:
                break
            if nxt.phase == "shared" and len(running) >= jobs:
                break
            queue.pop(0)
            log = os.path.join(work, f"{nxt.name}.log")
            with open(log, "wb") as fh:
                proc = subprocess.Popen(_part_command(nxt, work, device, size, sandbox), stdout=fh,
                                        stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                        env=_part_env(nxt, work, device, size, extra_path),
                                        start_new_session=True)
            print(f"gpu-check: started {nxt.name} ({nxt.phase}, limit {nxt.budget_s:.0f} s)",
                  flush=True)
            entry = Running(nxt, proc, time.monotonic(), log)
            for other in running:
                other.alongside.add(nxt.name)
                entry.alongside.add(other.part.name)
            running.append(entry)
            endings[nxt.name]["ended"] = "running"
            if nxt.phase == "exclusive":
                break
            exclusive_running = False
        if not running and (not queue or now >= deadline):
            break
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    """Stop a part and everything it started (its own session)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


# -- the files ----------------------------------------------------------------------------------

def _read_json(path: str, default):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def _chapter_cells(path: str) -> list[dict]:
    """A chapter part's cells: each ended cell, and the one it was in when it was stopped."""
    cells: dict[int, dict] = {}
    try:
        with open(path) as fh:
            for raw in fh:
                try:
                    data = json.loads(raw)
                except ValueError:
                    continue
                if data.get("event") == "start":
                    cells[data["cell"]] = {**data, "status": "stopped (the part's time ran out "
                                                             "in this cell)"}
                else:
                    cells[data["cell"]] = data
    except OSError:
        pass
    return [cells[k] for k in sorted(cells)]


def collect(work: str, parts: list[Part], endings: dict, meta: dict) -> dict:
    """Everything the parts left in ``work``, as one dict (``gpu-check.json``)."""
    from grader.course.chapters.records import load_records

    data = {"meta": meta, "parts": endings, "chapters": {}, "records": [], "sets": {},
            "bound": _read_json(os.path.join(work, "bound.json"), [])}
    for part in parts:
        if part.kind == "chapter":
            data["chapters"][part.name] = _chapter_cells(os.path.join(work,
                                                                      f"{part.name}.cells.jsonl"))
            data["records"] += load_records(os.path.join(work, f"{part.name}.records.json"))
        elif part.kind == "set":
            data["sets"][part.name] = _read_json(os.path.join(work, f"{part.name}.json"), {})
    return data


def proposed_floors(data: dict, device_class: str, floors_file: str | None) -> dict:
    """``floors_file``'s floors (default: every set's shipped ones) with ``device_class``'s set
    from this run's reference speedups (the last graded attempt of each set); the other classes'
    kept."""
    from grader.problems import sets

    floors = _read_json(floors_file, {}) if floors_file else sets.all_floors()
    for report in data["sets"].values():
        attempts = report.get("attempts") or []
        if not attempts:
            continue
        for key, problem in (attempts[-1].get("problems") or {}).items():
            if problem.get("floor"):
                floors.setdefault(key, {})[device_class] = problem["floor"]
    return {k: dict(sorted(v.items())) for k, v in sorted(floors.items())}


def _fmt_records(rows: list[dict]) -> str:
    from grader.course.chapters.records import claims_table

    return claims_table(rows) if rows else "(nothing recorded)"


def report(data: dict) -> str:
    """``gpu-check.md``: the tables."""
    meta = data["meta"]
    out = [f"# gpu-check: {meta['device_name']} ({meta['device_class']})", "",
           f"torch {meta['torch']} (CUDA {meta['cuda']}), Python {meta['python']}, "
           f"{meta['cores']} cores; {meta['date']}; {meta['torchvision']}.", "",
           f"Command: `{meta['command']}`; deadline {meta['deadline_s']:.0f} s, took "
           f"{meta.get('seconds', 0):.0f} s; shared parts {meta['jobs']} at a time. "
           f"Every figure below was measured by this run.", ""]
    claims = [r for r in data["records"] if r["chapter"] in ("ch3", "ch5") and r.get("claim")]
    out += ["## The seed's claims beside this device's figures", "",
            "Chapters 5 and 3, each run alone on the device (exclusive phase).", "",
            _fmt_records(claims), ""]
    out += ["## Every chapter's recorded figures", "", _fmt_records(data["records"]), ""]
    rows = []
    for name, cells in data["chapters"].items():
        for c in cells:
            if c.get("gpu") or c.get("status") not in ("ran",):
                first = (c.get("output") or "").strip().splitlines()
                rows.append([name[:2], c["cell"], (c.get("section") or "")[:50],
                             c.get("status", "?"), f"{c.get('seconds', '-')}",
                             (c.get("error") or (first[-1] if first else ""))[:160]])
    out += ["## GPU cells, and every cell that did not run", "",
            "A GPU cell takes a GPU-only path or asks which device it is on; *skipped*: its "
            "GPU-only path printed why it did not run here.", "",
            markdown_table(["ch", "cell", "section", "status", "s", "error, or last line"],
                           rows) if rows else "(no chapter ran)", ""]
    set_rows, cell_rows = [], []
    for ps, rep in data["sets"].items():
        attempts = rep.get("attempts") or []
        if not attempts:
            set_rows.append([ps, "-", "not graded", "", "", "", ""])
            continue
        last = attempts[-1]
        for key, p in (last.get("problems") or {}).items():
            verdicts = ", ".join(f"{n}: {c['verdict']}" for n, c in p["checks"].items())
            child = p.get("graph_child") or {}
            mem = child.get("device_memory") or {}
            child_text = (f"{child.get('ended')} in {child.get('forked_from')}"
                          + (f", peak {mem['peak_bytes'] / 2 ** 20:.0f} of "
                             f"{mem['bound_bytes'] / 2 ** 20:.0f} MiB" if 'peak_bytes' in mem
                             and 'bound_bytes' in mem else "")) if child else ""
            sp = p.get("reference_speedup")
            set_rows.append([key, last.get("sandbox_used") or last["sandbox"], p["status"],
                             verdicts or p.get("message", "")[:120],
                             f"{sp:.2f}x" if sp else "-",
                             f"{p['floor']:.2f}x" if p.get("floor") else "-", child_text])
        for grade_id, c in (last.get("cells") or {}).items():
            cell_rows.append([ps, grade_id, f"{c['points']:g} / {c['max_points']:g}",
                              "review" if c.get("review") else ("pass" if c.get("passed")
                                                                else "fail")])
    out += ["## Problem sets: the instructor's solutions graded through the judge on this device",
            "", "Floor: 80% of the reference speedup measured here, at least 1.0x "
            "(`floors.json` beside this file holds them: `python -m grader.cli ship-floors "
            "floors.json` writes them into the sets' folders).", "",
            markdown_table(["problem", "sandbox", "status", "verdicts", "reference speedup",
                            "floor", "graph child"], set_rows) if set_rows else "(no set ran)",
            "", markdown_table(["set", "test cell", "points", "verdict"], cell_rows)
            if cell_rows else "", ""]
    notes = [f"- {ps}: {rep['note']}" for ps, rep in data["sets"].items() if rep.get("note")]
    out += notes + ([""] if notes else [])
    out += ["## The judge's bound on a spawned child's memory", "",
            markdown_table(["case", "bound", "expected", "ended", "s", "bound / peak, MiB", "why"],
                           [[b["case"], b["bound"], b["expected"], b["ended"], b["seconds"],
                             _mib(b.get("device_memory") or {}), b["why"][:120]]
                            for b in data["bound"]]) if data["bound"] else "(not run)", ""]
    out += ["## Parts", "", markdown_table(
        ["part", "phase", "size", "limit s", "seconds", "ended", "shared the device with"],
        [[n, e["phase"], e["size"], f"{e['budget_s']:.0f}", e["seconds"], e["ended"],
          ", ".join(e.get("alongside") or []) or "-"] for n, e in data["parts"].items()]), ""]
    return "\n".join(out)


def _mib(told: dict) -> str:
    if "bound_bytes" not in told:
        return "-"
    peak = told.get("peak_bytes")
    return f"{told['bound_bytes'] / 2 ** 20:.0f} / " + (f"{peak / 2 ** 20:.0f}" if peak else "-")


def write_files(out: str, work: str, parts: list[Part], endings: dict, meta: dict,
                floors_file: str | None) -> dict:
    """The files of :data:`OUT_FILES` in ``out``, from what ``work`` holds now."""
    os.makedirs(out, exist_ok=True)
    data = collect(work, parts, endings, meta)
    floors = proposed_floors(data, meta["device_class"], floors_file)
    texts = {"gpu-check.md": report(data),
             "gpu-check.json": json.dumps(data, indent=1, default=str),
             files.SET_FLOORS: json.dumps(floors, indent=2, sort_keys=True) + "\n"}
    logs = []
    for part in parts:
        try:
            with open(os.path.join(work, f"{part.name}.log"), "rb") as fh:
                fh.seek(0, os.SEEK_END)
                size = fh.tell()
                fh.seek(max(0, size - LOG_BYTES_PER_PART))
                tail = fh.read().decode(errors="replace")
        except OSError:
            continue
        cut = f"(the first {size - LOG_BYTES_PER_PART} bytes left out)\n" \
            if size > LOG_BYTES_PER_PART else ""
        logs.append(f"===== {part.name} =====\n{cut}{tail}\n")
    texts["gpu-check.log"] = "".join(logs)
    for name, text in texts.items():
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, os.path.join(out, name))
    return data


def _meta(device: str, args, torchvision_line: str) -> dict:
    import torch

    from grader.checks.targets import device_class

    cuda = device.startswith("cuda")
    return {"device": device, "device_class": device_class(device),
            "device_name": torch.cuda.get_device_name(0) if cuda else
            (platform.processor() or platform.machine()),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(), "cores": os.cpu_count(),
            "date": time.strftime("%Y-%m-%d %H:%M"), "torchvision": torchvision_line,
            "command": " ".join(["python3 -m grader.cli gpu-check", *(args.argv or [])]),
            "deadline_s": args.deadline_s, "jobs": args.jobs}


def select(parts: list[Part], chapters: str | None, sets: str | None,
           skip_bound: bool) -> list[Part]:
    """The parts ``--chapters``/``--sets`` keep (comma lists of prefixes; 'none': none)."""
    def keep(value: str | None, name: str) -> bool:
        if value is None:
            return True
        wanted = [v.strip() for v in value.split(",") if v.strip() and v.strip() != "none"]
        return any(name.startswith(v) for v in wanted)

    return [p for p in parts if (p.kind == "bound" and not skip_bound)
            or (p.kind == "chapter" and keep(chapters, p.name))
            or (p.kind == "set" and keep(sets, p.name))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench-results/gpu-check",
                        help="the folder for the files (at most 8)")
    parser.add_argument("--device", default=None, choices=("cuda", "cpu"),
                        help="default: cuda where torch sees one; cpu: the dry run")
    parser.add_argument("--size", default=None, choices=("full", "small", "ci"),
                        help="every chapter's COURSE_SIZE (default: the plan's, per chapter)")
    parser.add_argument("--deadline-s", type=float, default=DEFAULT_DEADLINE_S,
                        help="the whole run's time; past it every part is stopped and the files "
                             "written with what there is")
    parser.add_argument("--jobs", type=int, default=None,
                        help="shared parts at a time (default: 4 on a GPU, 1 on a CPU)")
    parser.add_argument("--chapters", default=None, help="comma list of chapter prefixes "
                                                         "(default: all; none: none)")
    parser.add_argument("--sets", default=None, help="comma list of problem sets (default: "
                                                     "all; none: none)")
    parser.add_argument("--no-bound", action="store_true", help="leave out the bound's part")
    parser.add_argument("--sandbox", default="auto", choices=("auto", "bwrap", "off"),
                        help="the subjects' sandbox for the sets (auto: as make grade finds)")
    parser.add_argument("--floors-file", default=None,
                        help="the floors to update (default: every set's, "
                             "grader/problems/psN/floors.json)")
    parser.add_argument("--bundle", default=os.path.join(REPO_ROOT, BUNDLE_DIR),
                        help="where make gpu-bundle put what this machine lacks")
    parser.add_argument("--part", nargs=2, metavar=("KIND", "NAME"), help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.part:
        return _run_part(args)

    import tempfile

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu-check: --device cuda, but torch sees no CUDA device", file=sys.stderr)
        return 2
    if not torch_supported(torch.__version__):
        print(f"gpu-check: torch {torch.__version__} is older than the course supports (2.8)",
              file=sys.stderr)
        return 2
    args.jobs = args.jobs or (4 if device == "cuda" else 1)
    started = time.monotonic()
    deadline = started + args.deadline_s
    work = tempfile.mkdtemp(prefix="gpu-check-")
    extra_path, torchvision_line = torchvision_bundle(args.bundle, work)
    meta = _meta(device, args, torchvision_line)
    parts = select(plan(), args.chapters, args.sets, args.no_bound)
    floors_file = args.floors_file
    out = os.path.abspath(args.out)
    print(f"gpu-check: {len(parts)} parts on {meta['device_name']} ({meta['device_class']}), "
          f"torch {meta['torch']}; {torchvision_line}; files in {out}", flush=True)

    def written(endings: dict) -> None:
        meta["seconds"] = round(time.monotonic() - started, 1)
        write_files(out, work, parts, endings, meta, floors_file)

    def stop_here(signum, frame):   # noqa: ARG001 (a signal from outside: write, then go)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_here)
    try:
        endings = run_parts(parts, work, device=device, size=args.size, jobs=args.jobs,
                            deadline=deadline, extra_path=extra_path, sandbox=args.sandbox,
                            on_change=written)
        if "(the run)" in endings:
            print("gpu-check: stopped from outside; writing what there is", flush=True)
        written(endings)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bad = [n for n, e in endings.items() if e["ended"] != "done"]
    print(f"gpu-check: {len(parts) - len(bad)} of {len(parts)} parts ran to their end in "
          f"{time.monotonic() - started:.0f} s; files in {out}"
          + (f"; not: {', '.join(bad)}" if bad else ""), flush=True)
    return 1 if bad else 0


def torch_supported(version: str) -> bool:
    """Is ``version`` (``torch.__version__``) a release the course supports (2.8 and newer)?"""
    major, minor = (int(re.match(r"\d+", p).group()) for p in version.split(".")[:2])
    return (major, minor) >= (2, 8)


def _run_part(args) -> int:
    kind, name = args.part
    work = args.work
    if kind == "chapter":
        path = os.path.join(REPO_ROOT, files.NOTEBOOKS, f"{name}.ipynb")
        failed = run_chapter(path, os.path.join(work, f"{name}.cells.jsonl"))
        return 1 if failed else 0
    if kind == "set":
        return run_set(name, args.device, os.path.join(work, f"{name}.json"), args.sandbox)
    if kind == "bound":
        return 1 if run_bound(args.device, os.path.join(work, "bound.json")) else 0
    raise SystemExit(f"unknown part {kind}")


if __name__ == "__main__":
    sys.exit(main())
