"""Self-check's saved measurements: a planning question's figures (ps3 q1: every compile mode's
cold first call and time per call, about 50 s to measure on a CPU) kept on this machine, so that
checking a rule again does not measure again.

Only self-check reads them (:func:`grader.isolation.check.evaluate`); ``make grade`` and
Gradescope measure in their own judge every run and never look here. The figures are the judge's
own (checked again by :meth:`grader.isolation.reference_side.JobFigures.from_dict` when read),
measured on this machine; a file is used only by the same torch, device, Python and grader code,
and for :data:`MAX_AGE_S` after it was measured (a busy hour should not stay in the figures).
Delete the folder to measure again.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
import time

from grader import _paths

MAX_AGE_S = 12 * 3600


def folder() -> str:
    """``$XDG_CACHE_HOME/torch-compile-course/figures`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch-compile-course", "figures")


def _machine(device: str) -> str:
    import torch

    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"{platform.machine()} {platform.processor()} {os.cpu_count()} cores"


def path_for(key: str, device: str) -> str:
    """The file of ``key``'s figures on ``device`` for this torch, machine and grader code."""
    import torch

    identity = json.dumps([key, device, _machine(device), torch.__version__,
                           sys.version.split()[0], _paths.grader_fingerprint()])
    digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
    return os.path.join(folder(), f"{key}-{digest}.json")


def load(key: str, device: str) -> dict | None:
    """The saved figures (:meth:`JobFigures.to_dict`, with ``measured_at``), or ``None`` when
    there are none, they are older than :data:`MAX_AGE_S`, or the file is not readable."""
    try:
        with open(path_for(key, device)) as fh:
            figures = json.load(fh)
        if not isinstance(figures, dict) or \
                time.time() - float(figures.get("measured_at", 0)) > MAX_AGE_S:
            return None
        return figures
    except (OSError, ValueError, TypeError):
        return None


def save(key: str, device: str, figures: dict) -> str | None:
    """Keep ``figures`` (as the judge reported them) for the next self-check; the file's path,
    or ``None`` when it could not be written (a read-only home: self-check measures each time)."""
    path = path_for(key, device)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump({**figures, "measured_at": time.time()}, fh)
        os.replace(tmp, path)   # whole or not at all, even with two kernels at once
        return path
    except OSError:
        return None
