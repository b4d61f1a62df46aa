"""Records: measured figures beside the seed's claims.

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Sequence

import torch

from grader.checks.targets import device_class
from grader.checks.timing import Estimate
from grader.common.tables import markdown_table
from grader.course.chapters.core import DEVICE, SIZE
from grader import _environment as environment

RECORD_ENV = environment.RECORD
_SESSION: list[dict] = []  # rows recorded in this process, whether or not COURSE_RECORD is set

LONG = os.environ.get(environment.LONG) == "1"
"""Run the chapters' long demonstrations (``COURSE_LONG=1``): each is opt-in, with a switch of
its own in its cell, so that every chapter runs in minutes by default; a cell that does not run
its demonstration shows the figures recorded for it (:func:`recorded_run`)."""
RECORDED_FILE = os.path.join(os.path.dirname(__file__), "recorded.json")
"""The figures of each long demonstration, measured once by ``python -m grader.cli
record-long-demos`` (with the torch, the machine and the date they were measured on)."""


def record(chapter: str, name: str, measured: float, claim: str | float | None = None,
           unit: str = "x", *, device: str = DEVICE, low: float | None = None,
           high: float | None = None, note: str = "") -> None:
    """Record a measured figure beside the seed chapter's claim, and print both.

    The row is appended to the JSON list in the file named by ``$COURSE_RECORD`` when that
    variable is set (``make gpu-check`` and the tests set it); otherwise only printed. Every row
    of this process is also kept for :func:`show_claims`. Returns nothing.
    """
    if isinstance(measured, Estimate):
        low, high, measured = measured.low, measured.high, measured.median
    row = {
        "chapter": chapter, "name": name, "measured": float(measured),
        "low": None if low is None else float(low), "high": None if high is None else float(high),
        "unit": unit, "claim": None if claim is None else str(claim),
        "device": device_class(device), "size": SIZE, "torch": torch.__version__, "note": note,
    }
    print(f"[{chapter}] {name}: measured {_fmt(row)} on {row['device']}"
          + (f"  | seed's claim: {row['claim']}" if row["claim"] else ""))
    _SESSION.append(row)
    path = os.environ.get(RECORD_ENV)
    if path:
        rows = load_records(path)
        rows.append(row)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(rows, fh, indent=1)
        os.replace(tmp, path)


def load_records(path: str | None = None) -> list[dict]:
    """The rows recorded so far in ``path`` (default ``$COURSE_RECORD``); [] when none."""
    path = path or os.environ.get(RECORD_ENV)
    if not path or not os.path.exists(path) or os.path.getsize(path) == 0:
        return []
    with open(path) as fh:
        return list(json.load(fh))


def _fmt(row: dict) -> str:
    value, unit = row["measured"], row["unit"]
    if math.isinf(value):
        text = "never"
    elif unit == "x":
        text = f"{value:.2f}x"
    elif unit == "s":
        text = f"{value:.2f} s"
    elif unit == "ms":
        text = f"{value:.3f} ms"
    else:
        text = f"{value:.4g} {unit}"
    if row.get("low") is not None and row.get("high") is not None:
        text += f" [{row['low']:.2f}, {row['high']:.2f}]"
    return text


def claims_table(rows: Sequence[dict] | None = None) -> str:
    """Markdown table of recorded rows: chapter, measurement, measured figure, seed's claim,
    device, size."""
    rows = load_records() if rows is None else rows
    return markdown_table(
        ["chapter", "measurement", "measured", "seed's claim", "device", "size", "torch"],
        [[r["chapter"], r["name"], _fmt(r), r.get("claim") or "—", r["device"], r["size"],
          r.get("torch", "")] for r in rows])


def show_claims(chapter: str | None = None) -> None:
    """Display the rows recorded in this kernel (optionally one chapter's) as a table."""
    rows = [r for r in _SESSION if chapter is None or r["chapter"] == chapter]
    text = claims_table(rows) if rows else "(nothing recorded yet)"
    try:
        from IPython.display import Markdown, display

        if "ipykernel" in sys.modules:
            display(Markdown(text))
            return
    except ImportError:
        pass
    print(text)


def recorded_run(name: str, path: str = RECORDED_FILE) -> dict:
    """What a long, opt-in demonstration measured when it was recorded: ``{"figures": {...},
    "torch", "machine", "date", "command"}``, or ``{}`` when it was never recorded."""
    try:
        with open(path) as fh:
            return dict(json.load(fh).get(name, {}))
    except FileNotFoundError:
        return {}


def save_recorded_run(name: str, figures: dict, *, machine: str, command: str,
                      path: str = RECORDED_FILE) -> dict:
    """Write the figures a long demonstration measured now (this torch, today's date, the
    ``machine`` and the ``command`` that measured them) under ``name``; returns the entry."""
    import datetime

    try:
        with open(path) as fh:
            recorded = json.load(fh)
    except FileNotFoundError:
        recorded = {}
    entry = {"figures": figures, "torch": torch.__version__, "machine": machine,
             "date": datetime.date.today().isoformat(), "command": command}
    recorded[name] = entry
    with open(path, "w") as fh:
        json.dump(recorded, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return entry
