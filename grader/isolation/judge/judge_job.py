"""What travels between a judge and the process that drives it: a :class:`JudgeJob` one way, a
:class:`JudgeReply` the other, each a frozen dataclass with one conversion to JSON
(``to_dict``) and one from it (``from_dict``, which checks every field once).

The judge reads a job off its pipe with :meth:`JudgeJob.from_dict` before it does anything: a
job that is not well formed is refused there, whole, with a :class:`MalformedJob` that names what
is wrong (the driver's bug, reported as a grader error, never as the learner's); past that point
the judge reads typed fields and no field has a fallback. The driver reads the reply with
:meth:`JudgeReply.from_dict` likewise. The job is built by
:func:`grader.isolation.judge.judging.job_for`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from grader.checks.results import ProblemResult
from grader.isolation.sandbox.process import DEFAULT_MEMORY_BYTES, Isolation
from grader.isolation.cells.source import Cell

GRADE = "grade"
BUILD_REFERENCES = "build references"
OPERATIONS = (GRADE, BUILD_REFERENCES)
# Subjects waiting for the next jobs hold about 0.7 GB each (grader.cohort.attempt's
# WORKER_OVERHEAD_BYTES counts two): no job asks for more.
MAX_SUBJECTS_AHEAD = 2
# grader.isolation.sandbox.process.probe's modes
SANDBOX_SETTINGS = ("auto", "bwrap", "kernel", "off")
ISOLATION_MODES = ("bwrap", "kernel", "none")            # what process.probe found
DEFAULT_TIMEOUT_S = 300.0   # the subject's deadline where no one measured one


class MalformedJob(ValueError):
    """A job (or a reply) that is not what the other side must send: the grader's own bug."""


@dataclasses.dataclass(frozen=True)
class JudgeJob:
    """One job for a judge: grade ``problems`` (a group that shares the learner's cells), or
    build their reference side ahead of the first submission (``op`` = ``"build references"``).

    ``checks``: problem -> the checks to decide (a problem not named: all of its own).
    ``isolation``: how the subject is confined, already probed by the driver (``None``: the
    judge probes ``sandbox`` itself). ``measured_jobs``: planning questions' figures another
    judge of the run measured (:class:`grader.checks.jobs.JobFigures` as dicts, by problem).
    ``subjects_ahead``: how many subjects a judge that starts them ahead keeps waiting for the
    next jobs (2 for a set with two solution cells or more, whose jobs come in pairs)."""

    problems: tuple[str, ...]
    device: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    learner_cells: tuple[Cell, ...] = ()
    reference_cells: Mapping[str, tuple[Cell, ...]] = dataclasses.field(default_factory=dict)
    problem_module: str | None = None
    budget_s: float | None = None
    sandbox: str = "auto"
    isolation: Isolation | None = None
    screen: bool = True
    checks: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    op: str = GRADE
    measured_jobs: Mapping[str, dict] = dataclasses.field(default_factory=dict)
    subjects_ahead: int = 1

    def __post_init__(self) -> None:
        _require(self.problems and all(isinstance(k, str) and k for k in self.problems),
                 "problems", "a non-empty list of problem keys", self.problems)
        _require(isinstance(self.device, str) and self.device, "device", "a device name",
                 self.device)
        _require(_positive(self.timeout_s), "timeout_s", "a positive number of seconds",
                 self.timeout_s)
        _require(self.budget_s is None or _positive(self.budget_s), "budget_s",
                 "a positive number of seconds or null", self.budget_s)
        _require(all(isinstance(c, Cell) for c in self.learner_cells), "learner_cells",
                 "cells", self.learner_cells)
        _require(all(isinstance(k, str) and all(isinstance(c, Cell) for c in cells)
                     for k, cells in self.reference_cells.items()), "reference_cells",
                 "problem -> cells", self.reference_cells)
        _require(self.problem_module is None or isinstance(self.problem_module, str),
                 "problem_module", "a module name or null", self.problem_module)
        _require(self.sandbox in SANDBOX_SETTINGS, "sandbox", f"one of {SANDBOX_SETTINGS}",
                 self.sandbox)
        _require(self.isolation is None or (isinstance(self.isolation, Isolation)
                                            and self.isolation.mode in ISOLATION_MODES),
                 "isolation", f"a mode of {ISOLATION_MODES} with its reason, or null",
                 self.isolation)
        _require(isinstance(self.screen, bool), "screen", "true or false", self.screen)
        _require(all(isinstance(k, str) and all(isinstance(c, str) for c in names)
                     for k, names in self.checks.items()), "checks",
                 "problem -> check names", self.checks)
        _require(isinstance(self.memory_bytes, int) and not isinstance(self.memory_bytes, bool)
                 and self.memory_bytes > 0, "memory_bytes", "a positive number of bytes",
                 self.memory_bytes)
        _require(self.op in OPERATIONS, "op", f"one of {OPERATIONS}", self.op)
        _require(all(isinstance(k, str) and isinstance(v, dict)
                     for k, v in self.measured_jobs.items()), "measured_jobs",
                 "problem -> figures", self.measured_jobs)
        _require(isinstance(self.subjects_ahead, int) and not isinstance(self.subjects_ahead, bool)
                 and 1 <= self.subjects_ahead <= MAX_SUBJECTS_AHEAD, "subjects_ahead",
                 f"a whole number from 1 to {MAX_SUBJECTS_AHEAD}", self.subjects_ahead)

    def wanted(self, key: str, declared: tuple | list) -> list[str]:
        """The checks of problem ``key`` this job asks for, in the problem's order
        (``declared``: the problem's own)."""
        asked = self.checks.get(key)
        return [c for c in declared if asked is None or c in asked]

    def to_dict(self) -> dict:
        """The job as JSON (what the pipe carries)."""
        out = {"op": self.op, "problems": list(self.problems), "device": self.device,
               "timeout_s": self.timeout_s,
               "learner_cells": [c.to_dict() for c in self.learner_cells],
               "reference_cells": {k: [c.to_dict() for c in cells]
                                   for k, cells in self.reference_cells.items()},
               "problem_module": self.problem_module, "budget_s": self.budget_s,
               "sandbox": self.sandbox, "screen": self.screen,
               "checks": {k: list(names) for k, names in self.checks.items()},
               "memory_bytes": self.memory_bytes,
               "measured_jobs": dict(self.measured_jobs),
               "subjects_ahead": self.subjects_ahead}
        if self.isolation is not None:
            out["isolation"] = {"mode": self.isolation.mode, "reason": self.isolation.reason}
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "JudgeJob":
        """The job ``data`` (what :meth:`to_dict` wrote) describes; :class:`MalformedJob`, naming
        the field, when it is not one."""
        if not isinstance(data, dict):
            raise MalformedJob(f"a job is a JSON object, not {type(data).__name__}")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise MalformedJob(f"the job has fields no judge reads: {', '.join(unknown)}")
        missing = sorted({"problems", "device"} - set(data))
        if missing:
            raise MalformedJob(f"the job lacks {', '.join(missing)}")
        values = dict(data)
        try:
            values["problems"] = _tuple(data["problems"], "problems")
            values["learner_cells"] = tuple(
                _cell(c) for c in _tuple(data.get("learner_cells", ()), "learner_cells"))
            values["reference_cells"] = {
                k: tuple(_cell(c) for c in _tuple(cells, "reference_cells"))
                for k, cells in _mapping(data.get("reference_cells", {}), "reference_cells")}
            values["checks"] = {k: _tuple(names, "checks")
                                for k, names in _mapping(data.get("checks", {}), "checks")}
            values["measured_jobs"] = dict(_mapping(data.get("measured_jobs", {}),
                                                    "measured_jobs"))
            if data.get("isolation") is not None:
                given = data["isolation"]
                _require(isinstance(given, dict) and set(given) <= {"mode", "reason"}
                         and isinstance(given.get("mode"), str)
                         and isinstance(given.get("reason", ""), str),
                         "isolation", "{mode, reason}", given)
                values["isolation"] = Isolation(given["mode"], given.get("reason", ""))
            for name in ("timeout_s", "budget_s"):
                if isinstance(values.get(name), int) and not isinstance(values[name], bool):
                    values[name] = float(values[name])
        except (TypeError, KeyError, AttributeError) as exc:
            raise MalformedJob(f"the job is not well formed: {exc}") from None
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class JudgeReply:
    """A judge's answer to one :class:`JudgeJob`.

    To a grading job: ``results`` (problem -> :class:`ProblemResult`) and ``phases`` (seconds
    by step, the whole group's). To a "build references" job: ``built`` (problem -> seconds it
    took) and ``measured_jobs`` (the planning questions' figures this judge uses). When the
    judge failed, or the driver heard nothing in time: ``error`` (and the judge's
    ``traceback``), for the instructor; every problem of the job is then a grader error."""

    results: Mapping[str, ProblemResult] = dataclasses.field(default_factory=dict)
    phases: Mapping[str, float] = dataclasses.field(default_factory=dict)
    built: Mapping[str, float] = dataclasses.field(default_factory=dict)
    measured_jobs: Mapping[str, dict] = dataclasses.field(default_factory=dict)
    error: str = ""
    traceback: str = ""

    @classmethod
    def failed(cls, error: str, traceback: str = "") -> "JudgeReply":
        """The reply that says the judge failed (``error``: why, in a line)."""
        return cls(error=error or "the judge failed", traceback=traceback)

    def to_dict(self) -> dict:
        """The reply as JSON (what the pipe carries)."""
        out: dict = {}
        if self.results or (not self.error and not self.built):
            out["results"] = {k: r.to_dict() for k, r in self.results.items()}
            out["phases"] = dict(self.phases)
        if self.built:
            out["built"] = dict(self.built)
            out["measured_jobs"] = dict(self.measured_jobs)
        if self.error:
            out["error"] = self.error
            if self.traceback:
                out["traceback"] = self.traceback
        return out

    @classmethod
    def from_dict(cls, data: Any) -> "JudgeReply":
        """The reply ``data`` (what :meth:`to_dict` wrote) describes; a reply that is not one
        reads as a failed judge, saying so."""
        try:
            if not isinstance(data, dict):
                raise MalformedJob(f"a reply is a JSON object, not {type(data).__name__}")
            if data.get("error"):
                return cls.failed(str(data["error"]), str(data.get("traceback") or ""))
            results = {}
            for key, result in _mapping(data.get("results", {}), "results"):
                _require(isinstance(result, dict) and isinstance(result.get("status"), str),
                         "results", "problem -> a result with a status", result)
                results[key] = ProblemResult.from_dict(result)
            built = {k: float(v) for k, v in _mapping(data.get("built", {}), "built")}
            if not results and not built and "results" not in data:
                raise MalformedJob("the reply holds neither results nor built references")
            return cls(results, dict(_mapping(data.get("phases", {}), "phases")), built,
                       dict(_mapping(data.get("measured_jobs", {}), "measured_jobs")))
        except (MalformedJob, TypeError, ValueError) as exc:
            return cls.failed(f"the judge sent a malformed reply ({exc})")


def _require(ok: Any, field: str, what: str, value: Any) -> None:
    if not ok:
        raise MalformedJob(f"{field} must be {what}, not {value!r:.200}")


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0


def _tuple(value: Any, field: str) -> tuple:
    _require(isinstance(value, (list, tuple)), field, "a list", value)
    return tuple(value)


def _mapping(value: Any, field: str):
    _require(isinstance(value, dict) and all(isinstance(k, str) for k in value), field,
             "an object", value)
    return value.items()


def _cell(value: Any) -> Cell:
    _require(isinstance(value, dict) and set(value) == {"label", "source"}
             and all(isinstance(v, str) for v in value.values()),
             "cells", "{label, source} objects", value)
    return Cell(value["label"], value["source"])
