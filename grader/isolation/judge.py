"""The judge: decides every point, and never runs learner code.

One submission's problems are graded in three roles, each a process of its own (docs/trust.md):

- the **subject** (:mod:`grader.isolation.subject`, sandboxed) runs the learner's code and answers
  the judge's requests; it holds nothing of value, and whatever it says is data to check;
- the **judge** (this module, a process that never executes learner code) chooses every input,
  checks every output, rebuilds the graph the subject captured from data and checks it
  (:mod:`grader.checks.graph_artifact`), compiles it with Inductor itself, counts its kernels,
  times it, and computes every verdict;
- the **reference side** (:mod:`grader.isolation.reference_side`, kept by the judge process that
  never runs learner code either) holds the problem's baseline model and the instructor's reference
  solution, compiled once per judge process and shared by every submission it grades (for a
  planning question, ps3 q1, the figures its hidden jobs are judged on, measured once per run).

The subject as the judge sees it is :mod:`grader.isolation.subject_session`; the judge as the
driver sees it, a process to send jobs to, is :mod:`grader.isolation.judge_process`.

The order, for one group of problems that share the learner's cells (:meth:`Judge.grade`):

1. screen the learner's cells (:mod:`grader.isolation.screen`: defence in depth, no point
   depends on it); start the subject;
2. ask the subject for what only it can give: the outputs of the learner's model on inputs the
   judge drew from fresh seeds, the graph of its traced call, its compile count over the
   problem's inputs (and, for the learner, why a graph broke); for a planning question, the
   rule's choice for each job size the judge drew;
3. stop the subject and everything it started (its sandbox's processes are killed and checked
   gone), so nothing of the learner's runs while anything is timed;
4. check and decide: outputs against the baseline's; the graph against the baseline on fresh
   inputs and on every shape and step the problem uses; kernels in the judge's own compile;
   speed of the judge's own compile of that graph against the baseline and the reference,
   interleaved (:mod:`grader.checks.timing`); a planning question's choices against the totals
   the judge's own figures give each way of running the job. On a CPU the checks that compile
   or run the learner's graph run in a child with its own memory and time limits
   (:mod:`grader.isolation.graph_child`), and this process checks what it sends: for an
   inference problem a child forked from this process, for a training problem (whose checks
   run backward, which a child forked from here could not) a child of this judge's zygote, a
   fresh Python that never ran backward. On a GPU they run here under a time limit.

``python -m grader.isolation.judge --serve --reply-fd N`` grades jobs from stdin until it closes
(``make grade`` keeps one per worker slot: :class:`grader.isolation.judge_process.JudgeProcess`);
``--once`` grades one (self-check). A job is read off the pipe and checked once, whole
(:class:`grader.isolation.judge_job.JudgeJob`: a malformed one is refused, a grader error); the
reply is a :class:`grader.isolation.judge_job.JudgeReply`.

Each check is decided by its declaration (:mod:`grader.checks.declared`, one module a check):
the judge gathers the evidence the wanted checks declare they need and decides them in the
declared order (:meth:`Judge._decide`); it names no check itself.

Why this module is long: :class:`Judge` is the steps of one job in the order they
run, and the helpers below it gather and check the evidence (the graph above all); split
further, a reader would follow one submission across several files to see what was asked of the
subject and checked.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import math
import os
import random
import signal
import sys
import threading
import time
import traceback

import torch

from grader.checks import _torch_internals as ti
from grader.checks import correctness, custom_ops, declared, graph_artifact, targets
from grader.checks.declared.correctness import CHECK as CORRECTNESS
from grader.common.phases import Phases
from grader.checks.results import CheckOutcome, Need, ProblemResult, Status
from grader.common.wire import Packer, ProtocolError, decode
from grader.isolation import channel, graph_child, sandbox, screen
from grader.checks.jobs import JobFigures
from grader.isolation.judge_job import BUILD_REFERENCES, JudgeJob, JudgeReply, MalformedJob
from grader.isolation.reference_side import ReferenceSide, timed_version, traced_inputs
from grader.isolation.source import Cell
from grader.isolation.subject_session import (GraderFailed, LearnerRaised, SubjectGone,
                                              SubjectSession, learner_text)
from grader.problems import NO_COMPILE, Problem, get_problem, public_names, seeded_generator

# What the learner reads when the grader itself failed (the traceback goes to the instructor).
GRADER_FAILED = ("the grader itself failed while checking this problem ({what}): this is not a "
                 "verdict on your code; it is flagged for your instructor, who will grade it "
                 "by hand")


# ---------------------------------------------------------------------------------------------
# What the subject said about one problem

NOT_DATA = {"travels": "in its own form"}   # dataclass field metadata (Evidence)


@dataclasses.dataclass
class Evidence:
    """Everything the subject sent about one problem (data, checked before anything is used)."""

    status: str = "ok"
    message: str = ""
    choice: dict = dataclasses.field(default_factory=dict)
    # Fields marked NOT_DATA are sent to a child of the zygote in their own form, or made again
    # there from others (_evidence_to_wire); every other field travels as it is.
    correctness: CheckOutcome | None = dataclasses.field(default=None, metadata=NOT_DATA)
    graph: tuple | None = dataclasses.field(default=None, metadata=NOT_DATA)  # (header, blob)
    capture_error: str = ""
    compiled: bool = False                  # the subject says Dynamo took it (feedback only)
    breaks: list = dataclasses.field(default_factory=list)
    graph_count: int | None = None
    recompiles: dict | None = None
    plan: dict | None = None                # a planning question: {"sizes", "modes", "hidden"}
    classes: dict = dataclasses.field(default_factory=dict,  # every input class: name -> inputs
                                      metadata=NOT_DATA)
    class_graphs: dict = dataclasses.field(default_factory=dict,  # name -> graph or why not
                                           metadata=NOT_DATA)
    traceback: str = ""                     # the grader's own failure, for the instructor
    # A problem's custom operator (ps8), rebuilt by the judge from the learner's registration
    # data around the problem's own kernel, and the graph name the learner's graphs call it by.
    custom_op: custom_ops.Rebuilt | None = dataclasses.field(default=None, metadata=NOT_DATA)
    operators: dict = dataclasses.field(default_factory=dict, metadata=NOT_DATA)
    # What the classes and the custom operator were made from, so that a child of the judge's
    # zygote can make them again (a training problem's checks: _evidence_to_wire).
    classes_seed: int | None = None
    custom_op_wire: tuple | None = dataclasses.field(  # (reply, blob) of the registration
        default=None, metadata=NOT_DATA)


def _plain_evidence_fields() -> tuple[str, ...]:
    """The :class:`Evidence` fields that travel to a zygote's child as they are (JSON)."""
    return tuple(f.name for f in dataclasses.fields(Evidence) if f.metadata != NOT_DATA)


@dataclasses.dataclass
class GraphCheck:
    """The judge's verdict on the captured graph, and the model rebuilt from it."""

    ok: bool
    message: str
    module: graph_artifact.ArtifactModule | None = None
    operators: int = 0
    refused: bool = False
    general: str = ""       # why the graph does not serve every call the problem makes ('' : it does)
    by_class: dict = dataclasses.field(default_factory=dict)  # input class -> the graph run there

    @property
    def headline(self) -> str:
        """The verdict's first line without its subject ("does not compile with ...")."""
        first = self.message.splitlines()[0] if self.message else ""
        return first.replace("the graph your code compiles to ", "compiles to a graph that ", 1)


@dataclasses.dataclass
class Case:
    """One problem as a declared check's ``decide`` reads it (the protocol is
    :class:`grader.checks.results.Case`): the subject's evidence, the judge's verdict on the
    rebuilt graph (where a wanted check needs it), the reference side, and the outcomes decided
    so far."""

    problem: Problem
    side: ReferenceSide
    evidence: Evidence
    device: str
    budget_s: float
    graph: GraphCheck | None = None
    outcomes: dict = dataclasses.field(default_factory=dict)

    def compile_options(self, compiling: bool = False) -> dict:
        """The problem's compile options with the learner's choice; ``compiling``: without a mode
        that means not compiling (the check compiles all the same)."""
        options = {**self.problem.learner_compile, **self.evidence.choice}
        if compiling and options.get("mode") == NO_COMPILE:
            options = {k: v for k, v in options.items() if k != "mode"}
        return options

    def timed(self, module, options: dict):
        """``module`` as a timed measurement calls it (:func:`timed_version`)."""
        return timed_version(module, self.problem, options)

    def traced_inputs(self, seed: int) -> tuple:
        return traced_inputs(self.problem, self.device, seed)

    def on_every_class(self, classes: dict, candidate, tolerance=None) -> list:
        """``candidate`` against the original run eagerly, on fresh inputs of each class."""
        return _on_every_class(classes, candidate, self.side.base_eager, self.problem,
                               self.device, tolerance=tolerance)

    @staticmethod
    def class_lines(reports: list) -> str:
        return _class_lines(reports)

    @staticmethod
    def learner_text(text: str) -> str:
        return learner_text(text)

    def breaks(self) -> list[dict]:
        """The graph breaks the subject reported (its words: feedback only)."""
        return _breaks(self.evidence)

    def graph_operators(self) -> tuple | None:
        return _graph_operators(self.graph, self.evidence, self.problem)

    def pool(self) -> tuple[list, list]:
        """Inputs from fresh seeds for timing, and the original's eager outputs on them."""
        seeds = correctness.fresh_seeds(self.problem.pool_size)
        pool = [self.problem.make_inputs(seeded_generator(s), self.device) for s in seeds]
        with ti.quiet_torch_logs():
            expected = [self.side.base_eager(*args) for args in pool]
        return pool, expected


# ---------------------------------------------------------------------------------------------
# The judge

class Judge:
    """Grades jobs; keeps each problem's :class:`ReferenceSide` for the next one."""

    def __init__(self) -> None:
        self.sides: dict[tuple, ReferenceSide] = {}
        # Forks the children that check a training problem's graph (started when first needed).
        self.zygote = graph_child.Zygote(TRAINING_WORKER, preload=PRELOAD_COMPILER)
        # Set when a job overran the judge's own time limit in this process (a GPU: no forked
        # child): torch may have been stopped half way, so the process serves no further job
        # (JudgeProcess starts a fresh one).
        self.tainted = False

    def side(self, problem: Problem, reference_cells: list[Cell] | None, device: str,
             problem_module: str | None, measured_jobs: dict | None = None) -> ReferenceSide:
        digest = hashlib.sha256(json.dumps([c.to_dict() for c in reference_cells or []],
                                           sort_keys=True).encode()).hexdigest()
        key = (problem.key, problem_module, digest, device)
        if key not in self.sides:
            given = (measured_jobs or {}).get(problem.key)
            jobs = JobFigures.from_dict(given, problem.plan.modes) \
                if given is not None and problem.plan is not None else None
            if _in_the_zygotes_child(problem, device):
                self.zygote.start()   # its imports overlap the build below
            self.sides[key] = ReferenceSide.build(problem, reference_cells, device,
                                                  problem_module, jobs=jobs)
        return self.sides[key]

    def build_references(self, job: JudgeJob) -> JudgeReply:
        """Build the reference side of each problem of ``job`` now (the first submission then
        does not pay for it). ``job.measured_jobs``: planning questions' figures another
        judge of the run measured (:class:`JobFigures` as dicts, by problem), used instead of
        measuring again. Replies how long each problem took, and the figures this judge uses."""
        module, device = job.problem_module, job.device
        if device == "cpu":
            torch.set_num_threads(1)
        seconds, measured = {}, {}
        for key in job.problems:
            cells = list(job.reference_cells.get(key, ()))
            problem = get_problem(key, module)
            side = self.side(problem, cells or None, device, module, job.measured_jobs)
            if problem.plan is not None:   # measured now, before the first submission
                _fit_figures(side)
                measured[key] = side.job_figures().to_dict()
            seconds[key] = round(side.seconds, 2)
        return JudgeReply(built=seconds, measured_jobs=measured)

    # -- one job --------------------------------------------------------------------------------
    def grade(self, job: JudgeJob) -> JudgeReply:
        """Grade ``job`` (one group of problems sharing the learner's cells): each problem's
        result and the seconds of each step."""
        # Autograd's switch is this thread's state, and a shipped graph may turn it off
        # (``_set_grad_enabled(False)`` with no ``True`` after it) where it runs in this process
        # (a GPU): every job starts with it on, as a fresh process does, or the next training
        # problem's reference could not run backward.
        with torch.enable_grad():
            return self._grade(job)

    def _grade(self, job: JudgeJob) -> JudgeReply:
        phases = Phases()
        lap = phases.lap

        module, device = job.problem_module, job.device
        if device == "cpu":
            torch.set_num_threads(1)  # one thread per timed CPU measurement (docs/design.md)
        problems = {k: get_problem(k, module) for k in job.problems}
        wanted = {k: _with_the_gate(p, job.wanted(k, p.checks)) for k, p in problems.items()}
        learner_cells = list(job.learner_cells)
        refs = {k: list(cells) for k, cells in job.reference_cells.items() if cells}
        results = {k: ProblemResult(Status.OK, k, device=device,
                                    device_class=targets.device_class(device))
                   for k in problems}
        sides = {k: self.side(p, refs.get(k), device, module, job.measured_jobs)
                 for k, p in problems.items()}
        for k, p in problems.items():   # measured before any learner code runs, if not given
            if p.plan is not None and Need.JOB_FIGURES in p.needs(wanted[k]):
                sides[k].job_figures()
        lap("reference side")

        # 1. The screen (defence in depth).
        first = next(iter(problems.values()))
        refusals = screen.screen_cells(learner_cells, first.allowed_config,
                                       public_names(first, module)) \
            if job.screen else []
        if refusals:
            for r in results.values():
                _stop(r, Status.REFUSED, screen.describe(refusals))
            return self._finish(results, phases)
        # 2. The subject.
        isolation = job.isolation or sandbox.probe(job.sandbox)
        deadline = time.monotonic() + job.timeout_s
        evidence = {k: Evidence() for k in problems}
        subject = None
        try:
            subject = SubjectSession(isolation=isolation, device=device, problem_module=module,
                                     deadline=deadline,
                                     memory_bytes=job.memory_bytes)
            self._ask(subject, problems, sides, wanted, learner_cells, device, module, evidence, lap)
        except SubjectGone as gone:
            for k, r in results.items():
                if evidence[k].status == "ok":
                    evidence[k].status, evidence[k].message = gone.status, gone.message
        except GraderFailed as failed:
            for k, r in results.items():
                if evidence[k].status == "ok":
                    evidence[k].status = Status.GRADER_ERROR
                    evidence[k].message = GRADER_FAILED.format(
                        what="in the grader's own code, in the process that ran yours")
                    evidence[k].traceback = failed.traceback_text
        except OSError as exc:
            for r in results.values():
                _stop(r, Status.GRADER_ERROR, f"could not start the process for your code: {exc}")
            return self._finish(results, phases)
        finally:
            # 3. Nothing of the learner's runs from here on.
            if subject is not None:
                finished = subject.stop()
                for r in results.values():
                    r.extra["output_tail"] = finished.output.decode(errors="replace")[-2000:]
                    r.extra["subject_leftovers"] = len(subject.running.leftovers)
            lap("subject stop")
        for r in results.values():
            r.extra["sandbox"] = isolation.mode
        # 4. Decide.
        for key, problem in problems.items():
            ev, result = evidence[key], results[key]
            if ev.status != "ok":
                status = {"learner_error": Status.LEARNER_ERROR}.get(ev.status, ev.status)
                _stop(result, status, ev.message)
                if ev.traceback:
                    result.extra["traceback"] = ev.traceback
                continue
            limit = _work_limit_s(problem, sides[key])
            # A training problem's checks run backward, which a child forked from this process
            # cannot once this process has (autograd's threads do not survive a fork): they run
            # in a child of the judge's zygote, which never ran backward (_in_the_zygotes_child).
            if problem.plan is None and (graph_child.can_fork(device)
                                         or _in_the_zygotes_child(problem, device)):
                with graph_artifact.extra_operators(ev.operators):
                    self._decide_in_a_child(problem, sides[key], ev, wanted[key], device, job,
                                            phases, result, limit)
                continue
            try:   # in this process (a GPU, a training step), under the time limit only
                with _time_limit(limit), graph_artifact.extra_operators(ev.operators), \
                        torch.enable_grad():   # as it was, whatever the graph turned off
                    result.checks = self._decide(problem, sides[key], ev, wanted[key], device,
                                                 job, lap)
            except JudgeOverrun:
                # The learner's graph held the judge past what the problem needs: it scores
                # nothing structural, with the reason; the next submission gets a fresh judge.
                self.tainted = True
                result.checks = {name: CheckOutcome(False, (
                    f"not credited: the grader stopped checking the graph your code compiles to "
                    f"after {limit:.0f} s, several times what this problem's reference needs"),
                    "fail") for name in wanted[key] if name != CORRECTNESS.name}
                if ev.correctness is not None:
                    result.checks = {CORRECTNESS.name: ev.correctness, **result.checks}
            except Exception as exc:  # the grader's own failure: reported, never a lost grade
                _stop(result, Status.GRADER_ERROR,
                      GRADER_FAILED.format(what=f"{type(exc).__name__} in the judge"))
                result.extra["traceback"] = traceback.format_exc()
        return self._finish(results, phases)

    def _decide_in_a_child(self, problem: Problem, side: ReferenceSide, ev: Evidence,
                           wanted: list[str], device: str, job: JudgeJob, phases: Phases,
                           result: ProblemResult, limit: float) -> None:
        """:meth:`_decide` in a child of this process with its own memory and time limits
        (:mod:`grader.isolation.graph_child`): the checks that compile and run the learner's
        graph. A graph past either limit scores no structural point, with the reason; the
        child's own failure is the grader's, held for a person. This process stays as it was.

        An inference problem's child is forked from this process and inherits its reference
        side; a training problem's is forked from the judge's zygote (it could not run backward
        if forked from here) and builds the reference side again itself (:func:`training_worker`)
        from the evidence, sent to it as data."""
        allowance = _child_memory_bytes(side)
        if _in_the_zygotes_child(problem, device):
            header, blob = _evidence_to_wire(ev)
            bounded = self.zygote.run(
                {"problem": problem.key, "problem_module": job.problem_module,
                 "device": device, "wanted": list(wanted), "judge_job": _job_for_the_child(job),
                 "reference_cells": [c.to_dict() for c in job.reference_cells.get(problem.key, ())],
                 "evidence": header}, blob, seconds=limit, memory_bytes=allowance)
        else:
            def work() -> dict:
                return _decided(self, problem, side, ev, wanted, device, job)

            bounded = graph_child.run_bounded(work, seconds=limit, memory_bytes=allowance)
        result.extra["graph_child"] = {"ended": bounded.kind, "seconds": round(bounded.seconds, 2),
                                       "limit_s": round(limit), "memory_bytes": allowance,
                                       "forked_from": "zygote" if _in_the_zygotes_child(
                                           problem, device) else "judge"}
        checks = _checks_from_child(bounded.value, wanted) if bounded.kind == "done" else None
        if bounded.kind == "done" and checks is not None:
            result.checks = checks
            for name, seconds in bounded.value["phases"].items():
                phases.record(name, seconds)
            phases.record("graph child", max(0.0, bounded.seconds
                                             - sum(bounded.value["phases"].values())))
            phases.resume()
            return
        phases.lap("graph checks")
        if bounded.kind in ("time", "memory"):
            # The learner's graph needed more than the problem allows: nothing structural, the
            # reason said; the correctness verdict (the subject's outputs) stays.
            why = (f"the grader stopped checking the graph your code compiles to after "
                   f"{limit:.0f} s, several times what this problem's reference needs"
                   if bounded.kind == "time" else
                   f"the grader's checks of the graph your code compiles to needed more than the "
                   f"{allowance / 2 ** 30:.1f} GiB of memory this problem allows them "
                   f"({bounded.why})")
            result.checks = {name: CheckOutcome(False, f"not credited: {why}", "fail")
                             for name in wanted if name != CORRECTNESS.name}
            if ev.correctness is not None:
                result.checks = {CORRECTNESS.name: ev.correctness, **result.checks}
            return
        _stop(result, Status.GRADER_ERROR, GRADER_FAILED.format(
            what="in the judge's child process that checks your graph: " + (
                bounded.why if bounded.kind == "failed" else "it sent a malformed answer")))
        result.extra["traceback"] = bounded.traceback or bounded.why

    @staticmethod
    def _finish(results: dict[str, ProblemResult], phases: Phases) -> JudgeReply:
        # The job's phases go with its first problem only: they are the whole group's seconds.
        if results:
            next(iter(results.values())).extra["phases"] = dict(phases.seconds)
        return JudgeReply(results=dict(results), phases=dict(phases.seconds))

    # -- 2. what only the subject can give ------------------------------------------------------
    def _ask(self, subject: SubjectSession, problems: dict, sides: dict, wanted: dict,
             cells: list[Cell], device: str, module: str | None, evidence: dict, lap) -> None:
        subject.request({"op": "hello"})
        lap("subject start")
        reply, _ = subject.request({"op": "load", "problems": list(problems), "device": device,
                                    "problem_module": module,
                                    "cells": [c.to_dict() for c in cells]})
        loaded = reply.get("problems")
        if not isinstance(loaded, dict):
            raise SubjectGone(Status.REJECTED, "the process that ran your code answered nonsense")
        lap("learner cells")
        for key, problem in problems.items():
            # Only the evidence the wanted checks are decided on is asked for.
            needs = problem.needs(wanted[key])
            ev, info = evidence[key], loaded.get(key)
            if not isinstance(info, dict) or info.get("status") != "ok":
                ev.status = "learner_error"
                ev.message = learner_text((info or {}).get("message") if isinstance(info, dict)
                                      else "the process that ran your code did not build it")
                continue
            try:
                ev.choice = _validated_choice(problem, info.get("choice"))
            except ValueError as exc:
                ev.status, ev.message = "learner_error", str(exc)
                continue
            if problem.plan is not None:
                self._ask_plan(subject, problem, sides[key], device, ev,
                               Need.JOB_FIGURES in needs)
                lap("plan")
                continue
            # Every class of inputs the problem tests, shapes drawn for this job only.
            ev.classes_seed = correctness.fresh_seeds(1)[0]
            ev.classes = problem.input_classes(random.Random(ev.classes_seed))
            if Need.OUTPUTS in needs:
                ev.correctness = self._correctness(subject, problem, sides[key], device,
                                                   ev.classes)
                lap(CORRECTNESS.name)
            # The learner's graphs call the custom operator: its registration comes first.
            if problem.custom_op is not None and needs & {Need.CUSTOM_OP, Need.GRAPH}:
                self._ask_custom_op(subject, problem, ev)
                lap("custom operator")
            if Need.GRAPH in needs:
                with graph_artifact.extra_operators(ev.operators):
                    self._ask_graphs(subject, problem, sides[key], ev, device)
                lap("capture")
            # The graph's own check reads the calls as used (one graph on every call).
            if needs & {Need.GRAPH, Need.COMPILE_COUNT}:
                self._ask_usage(subject, problem, ev, device)
                lap("calls as used")

    @staticmethod
    def _ask_custom_op(subject: SubjectSession, problem: Problem, ev: Evidence) -> None:
        """The learner's registration of the problem's custom operator, as graphs (never code),
        rebuilt into the judge's own operator around the problem's kernel: the learner's graphs
        call that one (:mod:`grader.checks.custom_ops`)."""
        reply, blob = subject.request({"op": "custom_op", "problem": problem.key})
        ev.custom_op_wire = (reply, blob)
        ev.custom_op = custom_ops.rebuild(problem.custom_op, reply, blob)
        if ev.custom_op.op is not None:
            ev.operators = {problem.custom_op.graph_name: ev.custom_op.op}

    def _ask_graphs(self, subject: SubjectSession, problem: Problem, side: ReferenceSide,
                    ev: Evidence, device: str) -> None:
        """The graph of a fresh model's first call on the first class of inputs; and, for each
        other class whose inputs have other shapes, the graph captured on one of them (Dynamo
        would compile such a call again: that graph is the one that would run there)."""
        options = {**problem.learner_compile, **ev.choice}
        inputs = traced_inputs(problem, device, correctness.fresh_seeds(1)[0])
        header, blob = self._capture(subject, problem, inputs, options)
        if isinstance(header.get("graph"), dict):
            ev.graph = (header["graph"], blob)
            if self._refused(problem, side, ev, device):
                # Say where the breaks are, in the learner's lines (feedback only).
                packer = Packer()
                report, _ = subject.request({"op": "breaks", "problem": problem.key,
                                             "inputs": packer.value(inputs)}, packer.blob())
                ev.breaks = report.get("breaks") if isinstance(report.get("breaks"), list) else []
                count = report.get("graph_count")
                ev.graph_count = count if isinstance(count, int) else None
        else:
            ev.capture_error = learner_text(header.get("error", "no graph was sent"))
            ev.compiled = header.get("compiled") is True
            ev.breaks = header.get("breaks") if isinstance(header.get("breaks"), list) else []
            count = header.get("graph_count")
            ev.graph_count = count if isinstance(count, int) else None
            return
        if problem.step_inputs is not None:  # a step of the problem's loop: one shape for all
            return
        for name, make in list(ev.classes.items())[1:]:
            class_inputs = make(seeded_generator(correctness.fresh_seeds(1)[0]), device)
            if _signature(class_inputs) == _signature(inputs):
                continue   # the same shapes: the first graph is the one that runs there
            header, blob = self._capture(subject, problem, class_inputs, options)
            ev.class_graphs[name] = (header["graph"], blob) if isinstance(header.get("graph"),
                                                                          dict) \
                else learner_text(str(header.get("error", "no graph was sent")).splitlines()[0])

    @staticmethod
    def _capture(subject: SubjectSession, problem: Problem, inputs: tuple,
                 options: dict) -> tuple[dict, bytes]:
        packer = Packer()
        return subject.request({"op": "capture", "problem": problem.key,
                                "inputs": packer.value(inputs),
                                "dynamic": options.get("dynamic")}, packer.blob())

    @staticmethod
    def _ask_usage(subject: SubjectSession, problem: Problem, ev: Evidence, device: str) -> None:
        """The problem as it is used: a fresh model compiled with ``fullgraph=True`` and called
        ``problem.usage_calls`` times (its recompile inputs in order, again and again, or inputs
        of its first class): how often it compiled, and whether any call raised."""
        options = {**problem.learner_compile, **ev.choice}
        calls = problem.recompile_inputs(device) if problem.recompile_inputs is not None else \
            [traced_inputs(problem, device, seed) for seed in correctness.fresh_seeds(4)]
        packer = Packer()
        reply, _ = subject.request({"op": "recompiles", "problem": problem.key,
                                    "calls": packer.value(calls), "total": problem.usage_calls,
                                    "dynamic": options.get("dynamic"),
                                    "max_compiles": problem.max_compiles}, packer.blob())
        ev.recompiles = reply

    @staticmethod
    def _refused(problem: Problem, side: ReferenceSide, ev: Evidence, device: str) -> bool:
        """A quick look at the graph while the subject is still there (data checks only: the
        full check comes later): would the judge refuse it?"""
        header, blob = ev.graph
        try:
            loaded = graph_artifact.load(header, blob, baseline=side.base_model, device=device)
            if _over_budget(side, len(loaded.operators), 0):
                return True   # not even its fake run: refused by its size alone
            graph_artifact.check_on(loaded, loaded.module(side.base_model, device,
                                                          training=problem.training),
                                    traced_inputs(problem, device, 0))
        except graph_artifact.GraphRefused:
            return True
        return False

    def _correctness(self, subject: SubjectSession, problem: Problem, side: ReferenceSide,
                     device: str, classes: dict) -> CheckOutcome:
        """The learner's outputs (eager, in the subject) against the baseline's, on fresh
        inputs of every class the problem tests."""
        def learner_call(*args):
            packer = Packer()
            header, blob = subject.request({"op": "call", "problem": problem.key,
                                            "inputs": packer.value(args)}, packer.blob())
            if "error" in header:
                exc = LearnerRaised(learner_text(header["error"]))
                exc.learner_message = learner_text(header["error"])
                raise exc
            try:
                outputs = decode(header["outputs"], blob, device)
                after = decode(header["inputs_after"], blob, device)
            except (KeyError, ProtocolError) as exc:
                raise SubjectGone(Status.REJECTED, f"the process that ran your code sent a "
                                                   f"malformed answer ({exc})") from None
            # What the learner's call did to its inputs, on the judge's copies: the check below
            # then sees it as it would in-process.
            for mine, theirs in zip(args, after if isinstance(after, (list, tuple)) else ()):
                if isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor) \
                        and theirs.shape == mine.shape and theirs.dtype == mine.dtype:
                    with torch.no_grad():
                        mine.copy_(theirs)
            return outputs

        reports = _on_every_class(classes, learner_call, side.base_eager, problem, device)
        return CheckOutcome(all(r.ok for _, r in reports), _class_lines(reports),
                            details={"checked": sum(r.checked for _, r in reports),
                                     "classes": list(classes)})

    # -- 4. the judge's own checks --------------------------------------------------------------
    def _check_graph(self, problem: Problem, side: ReferenceSide, ev: Evidence,
                     device: str) -> GraphCheck:
        if ev.graph is None:
            first = ev.capture_error.splitlines()[0] if ev.capture_error else ""
            said = ("compiles with fullgraph=True, but is not one graph as the grader defines it"
                    if ev.compiled else "does not compile with fullgraph=True")
            return GraphCheck(False, "\n".join([f"{said}: {first}",
                                                *_break_lines(ev)]))
        header, blob = ev.graph
        try:
            loaded = graph_artifact.load(header, blob, baseline=side.base_model, device=device)
            # Its size first: an oversized graph is refused before it is even built.
            peak = 0
            if not _over_budget(side, len(loaded.operators), peak):
                module = loaded.module(side.base_model, device, training=problem.training)
                peak = graph_artifact.check_on(loaded, module, traced_inputs(problem, device, 0))
        except graph_artifact.GraphRefused as exc:
            return GraphCheck(False, "\n".join([f"compiles with fullgraph=True, but is not one "
                                                f"graph as the grader defines it: {exc}",
                                                *_break_lines(ev)]), refused=True)
        too_big = _over_budget(side, len(loaded.operators), peak)
        if too_big:
            return GraphCheck(False, f"compiles with fullgraph=True, but the grader will not "
                                     f"compile or run it: {too_big}", refused=True)
        for name in loaded.operators:
            packet = ".".join(name.split(".")[:2])
            if packet in problem.refused_operators:
                return GraphCheck(False, f"compiles to one graph, but it uses {packet}: "
                                         f"{problem.refused_operators[packet]}", refused=True)
        # The graph must compute what the original computes, on inputs nobody saw before, of
        # every class the problem tests (where a class's shapes differ, on the graph captured
        # there) ...
        classes = ev.classes or {problem.inputs_name: problem.make_inputs}
        by_class = {}
        for name, make in classes.items():
            got = ev.class_graphs.get(name)
            if got is None:
                graph_here = module
            elif isinstance(got, str):
                return GraphCheck(False, f"does not compile with fullgraph=True on {name}: {got}")
            else:
                try:
                    other = graph_artifact.load(got[0], got[1], baseline=side.base_model,
                                                device=device)
                    peak = 0
                    if not _over_budget(side, len(other.operators), peak):
                        graph_here = other.module(side.base_model, device,
                                                  training=problem.training)
                        peak = graph_artifact.check_on(other, graph_here,
                                                       make(seeded_generator(0), device))
                except graph_artifact.GraphRefused as exc:
                    return GraphCheck(False, f"compiles with fullgraph=True, but on {name} it is "
                                             f"not one graph as the grader defines it: {exc}",
                                      refused=True)
                too_big = _over_budget(side, len(other.operators), peak)
                if too_big:
                    return GraphCheck(False, f"compiles with fullgraph=True, but on {name} the "
                                             f"grader will not compile or run it: {too_big}",
                                      refused=True)
            by_class[name] = graph_here
            [(_, rep)] = _on_every_class({name: make}, problem.graded_call(graph_here),
                                         side.base_eager, problem, device)
            if not rep.ok:
                where = f" on {name}" if len(classes) > 1 else ""
                return GraphCheck(False, f"the graph your code compiles to does not compute what "
                                         f"the original computes{where}: {rep}")
        # ... and it must be the one graph of every call the problem makes, from the first.
        used = _usage_failure(problem, ev)
        if used:
            return GraphCheck(False, used)
        # ... and, for the recompile check, on every shape and step the problem uses (a graph
        # specialised to one batch size or one position fails there).
        general = ""
        if problem.recompile_inputs is not None:
            why = _same_over(problem, module, side.base_model, problem.recompile_inputs(device))
            if why:
                general = (f"the graph your code compiles to is right for the shapes it was "
                           f"captured with, not for every call the problem makes: {why}")
        ops = len(loaded.operators)
        on = (f"on fresh inputs of every kind the problem uses ({', '.join(classes)})"
              if len(classes) > 1 else "on fresh inputs")
        return GraphCheck(True, f"compiles with fullgraph=True: one graph of {ops} operators, "
                                f"checked by the grader (it computes what the original computes "
                                f"{on}; no break in the {_calls_made(ev)} calls the problem "
                                f"makes)", module, ops, general=general, by_class=by_class)

    def _decide(self, problem: Problem, side: ReferenceSide, ev: Evidence, wanted: list[str],
                device: str, job: JudgeJob, lap) -> dict[str, CheckOutcome]:
        """Decide the wanted checks, each by its declaration (:mod:`grader.checks.declared`), in
        the declared order: a check whose requirement failed is not decided (it fails with the
        requirement's reason); the rebuilt graph is checked once, when the first check that
        needs it comes."""
        case = Case(problem, side, ev, device,
                    budget_s=float(job.budget_s or problem.budget_s))
        graph_checked = False
        for check in problem.parts:
            if check.name not in wanted:
                continue
            failed = next((c for c in problem.parts if c.name in check.requires
                           and c.name in case.outcomes and not case.outcomes[c.name].ok), None)
            if failed is not None:
                # The gate (docs/design.md, "A score means learned it"): nothing is credited,
                # or measured, past a requirement that failed.
                case.outcomes[check.name] = failed.gated()
                continue
            if Need.GRAPH in check.needs and not graph_checked:
                case.graph, graph_checked = self._checked_graph(problem, side, ev, device), True
                lap("graph checks")
            outcome = check.decide(case)
            if outcome is not None:
                case.outcomes[check.name] = outcome
            if check.phase:
                lap(check.phase)
        return case.outcomes

    def _checked_graph(self, problem: Problem, side: ReferenceSide, ev: Evidence,
                       device: str) -> GraphCheck:
        """The judge's verdict on the learner's rebuilt graph (:meth:`_check_graph`), failed
        where it is one graph but not the problem set's lesson: no structural point either."""
        graph = self._check_graph(problem, side, ev, device)
        if graph.ok:
            lesson = _work_check(problem, side, graph) or _op_lesson(problem, graph, ev)
            if lesson:
                graph = dataclasses.replace(graph, ok=False, message=(
                    f"compiles to one graph, but not one that does what this problem teaches: "
                    f"{lesson}"))
        return graph

    # -- a planning question (grader.problems.JobPlan) ----------------------------------------
    @staticmethod
    def _ask_plan(subject: SubjectSession, problem: Problem, side: ReferenceSide, device: str,
                  ev: Evidence, judge_jobs: bool) -> None:
        """Ask the learner's rule about the examples, a grid of sizes and, when the hidden jobs
        are judged (``judge_jobs``), the hidden jobs and the decoys, all shuffled; keep its
        answers, each checked against the plan's modes."""
        plan = problem.plan
        rng = random.Random(correctness.fresh_seeds(1)[0])
        hidden, decoys = [], []
        if judge_jobs:
            _fit_figures(side)
            figures = side.job_figures()
            break_even = figures.break_even
            hidden = hidden_job_sizes(plan, break_even, rng, figures.spread())
            decoys = decoy_job_sizes(plan, break_even, rng)
        sizes = list(dict.fromkeys([*plan.examples, *PROBE_SIZES, *(n for _, n in hidden),
                                    *decoys]))
        rng.shuffle(sizes)
        kind = torch.device(device).type
        reply, _ = subject.request({"op": "plan", "problem": problem.key, "sizes": sizes,
                                    "device": kind})
        if "error" in reply:
            ev.status, ev.message = "learner_error", learner_text(reply["error"])
            return
        modes, types = reply.get("modes"), reply.get("types")
        if not isinstance(modes, list) or not isinstance(types, list) \
                or len(modes) != len(sizes) or len(types) != len(sizes):
            raise SubjectGone(Status.REJECTED, "the process that ran your code sent a malformed "
                                               "answer to the job sizes")
        for calls, mode, kind_of in zip(sizes, modes, types):
            if mode not in plan.modes:
                got = repr(mode)[:60] if isinstance(mode, str) else f"a {str(kind_of)[:40]}"
                ev.status, ev.message = "learner_error", (
                    f"{problem.entry}.{plan.method}({calls:,}, {kind!r}) returned {got}: it must "
                    f"return one of {plan.modes} for every number of calls")
                return
        answers = dict(zip(sizes, modes))
        ev.plan = {"device": kind, "examples": {n: answers[n] for n in plan.examples},
                   "answers": sorted(answers.items()),
                   "hidden": [(part, n, answers[n]) for part, n in hidden]}


class JudgeOverrun(BaseException):
    """The judge's own checks of one learner graph ran past their time limit (a BaseException,
    as KeyboardInterrupt is: the checks' own ``except Exception`` must not swallow it)."""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise :class:`JudgeOverrun` in this thread after ``seconds`` (the main thread only: a
    signal cannot reach another; elsewhere the driver's deadline on the whole job remains)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def overrun(signum, frame):  # noqa: ARG001 (signal handler)
        raise JudgeOverrun()

    previous = signal.signal(signal.SIGALRM, overrun)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _work_limit_s(problem: Problem, side: ReferenceSide) -> float:
    """How long the judge may spend on its own checks of one learner's graph (compiles, runs,
    timing): a few times what the problem's baseline and reference took to build (their
    compiles) plus its timing budget, never less than five minutes (a slow, busy machine)."""
    return max(300.0, 6 * side.seconds + 4 * problem.budget_s)


def _over_budget(side: ReferenceSide, operators: int, peak_bytes: int) -> str:
    """Why a learner's graph is more than the judge will compile and run ('' : it is not)."""
    max_nodes, max_bytes = side.graph_budget()
    if operators > max_nodes:
        return (f"it has {operators:,} operators, more than the {max_nodes:,} this problem allows "
                f"(its reference has {side.reference_nodes or 'far fewer'})")
    if peak_bytes > max_bytes:
        return (f"its tensors hold {peak_bytes / 2**20:,.0f} MiB at once, more than the "
                f"{max_bytes / 2**20:,.0f} MiB this problem allows")
    return ""


# Memory the judge's child may add to what it holds when forked, for the checks of one graph:
# room for compiling and timing (the baseline's and the reference's calls too), plus a few times
# the most bytes the problem lets a graph's tensors hold at once (ReferenceSide.graph_budget).
CHILD_MEMORY_BASE = 2 * 1024 ** 3
CHILD_MEMORY_FACTOR = 4


def _child_memory_bytes(side: ReferenceSide) -> int:
    """How much the judge's child may add to its address space while it checks a learner's
    graph: :data:`CHILD_MEMORY_BASE` plus :data:`CHILD_MEMORY_FACTOR` x the graph budget's
    bytes."""
    return CHILD_MEMORY_BASE + CHILD_MEMORY_FACTOR * side.graph_budget()[1]


# What the judge's zygote calls in each child it forks for a training problem's checks.
TRAINING_WORKER = "grader.isolation.judge:training_worker"
PRELOAD_COMPILER = "grader.checks._torch_internals:preload_compiler"


def _in_the_zygotes_child(problem: Problem, device: str) -> bool:
    """Whether ``problem``'s checks run in a child of the judge's zygote: a training problem
    (its checks run backward) on a CPU. On a GPU they run in the judge's own process under its
    time limit (a CUDA context does not survive a fork either; that path is not built)."""
    return problem.training and problem.plan is None and device == "cpu"


def _decided(judge: "Judge", problem: Problem, side: ReferenceSide, ev: Evidence,
             wanted: list[str], device: str, job: JudgeJob) -> dict:
    """:meth:`Judge._decide`, in a child, as the data it sends back."""
    laps = Phases()
    with ti.inductor_config_patch(compile_threads=1), \
            graph_artifact.extra_operators(ev.operators):
        checks = judge._decide(problem, side, ev, wanted, device, job, laps.lap)
    return {"checks": {name: c.to_dict() for name, c in checks.items()},
            "phases": laps.seconds}


def _job_for_the_child(job: JudgeJob) -> dict:
    """What of the job :meth:`Judge._decide` reads, as data (the cells are not sent)."""
    return dataclasses.replace(job, learner_cells=(), reference_cells={}).to_dict()


def _evidence_to_wire(ev: Evidence) -> tuple[dict, bytes]:
    """The evidence of a problem the judge checked, as data for a child of its zygote: every
    field but those made from others (the input classes, from their seed; the custom operator,
    from the learner's registration data), graphs as their (header, blob)."""
    blobs: list[bytes] = []

    def part(data: bytes) -> list[int]:
        start = sum(len(b) for b in blobs)
        blobs.append(bytes(data))
        return [start, len(data)]

    header = {name: getattr(ev, name) for name in _plain_evidence_fields()}
    header["outputs_verdict"] = ev.correctness.to_dict() if ev.correctness is not None else None
    header["graph"] = [ev.graph[0], part(ev.graph[1])] if ev.graph is not None else None
    header["class_graphs"] = {name: got if isinstance(got, str) else [got[0], part(got[1])]
                              for name, got in ev.class_graphs.items()}
    header["custom_op_wire"] = [ev.custom_op_wire[0], part(ev.custom_op_wire[1])] \
        if ev.custom_op_wire is not None else None
    return json.loads(json.dumps(header)), b"".join(blobs)


def _evidence_from_wire(problem: Problem, header: dict, blob: bytes) -> Evidence:
    """:func:`_evidence_to_wire`'s data as the :class:`Evidence` it came from (in the child)."""
    def part(where: list) -> bytes:
        return blob[where[0]:where[0] + where[1]]

    ev = Evidence(**{name: header[name] for name in _plain_evidence_fields()})
    if header["outputs_verdict"] is not None:
        ev.correctness = CheckOutcome.from_dict(header["outputs_verdict"])
    if header["graph"] is not None:
        ev.graph = (header["graph"][0], part(header["graph"][1]))
    ev.class_graphs = {name: got if isinstance(got, str) else (got[0], part(got[1]))
                       for name, got in header["class_graphs"].items()}
    if ev.classes_seed is not None:
        ev.classes = problem.input_classes(random.Random(ev.classes_seed))
    if header["custom_op_wire"] is not None and problem.custom_op is not None:
        ev.custom_op_wire = (header["custom_op_wire"][0], part(header["custom_op_wire"][1]))
        ev.custom_op = custom_ops.rebuild(problem.custom_op, *ev.custom_op_wire)
        if ev.custom_op.op is not None:
            ev.operators = {problem.custom_op.graph_name: ev.custom_op.op}
    return ev


def training_worker(request: dict, blob: bytes):
    """(In a child of the judge's zygote, before its memory limit is set.) A training problem's
    reference side, built as the judge built it (the instructor's code and the judge's own, no
    learner code; Inductor's caches make the compiles quick; what only the speed check times is
    left out where the job does not ask for it), and the evidence rebuilt from its data; returns
    the checks to run under the limits."""
    module = request.get("problem_module")
    device = request["device"]
    torch.set_num_threads(1)
    problem = get_problem(request["problem"], module)
    cells = [Cell.from_dict(c) for c in request.get("reference_cells") or []]
    side = ReferenceSide.build(problem, cells or None, device, module,
                               timed=Need.TIMINGS in problem.needs(request["wanted"]))
    ev = _evidence_from_wire(problem, request["evidence"], blob)
    return lambda: _decided(Judge(), problem, side, ev, request["wanted"], device,
                            JudgeJob.from_dict(request["judge_job"]))


def _checks_from_child(value, wanted: list[str]) -> dict[str, CheckOutcome] | None:
    """The child's outcomes, each checked to be a check this job wanted, in the form a
    :class:`CheckOutcome` has; ``None`` when anything is off (the grader's failure)."""
    if not isinstance(value, dict) or not isinstance(value.get("checks"), dict) \
            or not isinstance(value.get("phases"), dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, (int, float)) and v >= 0
               for k, v in value["phases"].items()):
        return None
    out = {}
    for name, outcome in value["checks"].items():
        if name not in wanted or not isinstance(outcome, dict) \
                or not isinstance(outcome.get("ok"), bool) \
                or not isinstance(outcome.get("message"), str) \
                or outcome.get("verdict", "pass") not in ("pass", "fail", "inconclusive"):
            return None
        out[name] = CheckOutcome.from_dict(outcome)
    return out


def _with_the_gate(problem: Problem, wanted: list[str]) -> list[str]:
    """``wanted``, with every check a wanted one requires added (a structural or speed point
    needs correct outputs on every class of inputs: :attr:`grader.checks.results.Check.requires`)."""
    return declared.with_requirements(problem.parts, wanted)


def _signature(inputs: tuple) -> tuple:
    """What makes Dynamo compile a call again when it changes: each tensor's shape and dtype,
    and any other argument's value."""
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else repr(a)
                 for a in inputs)


def _on_every_class(classes: dict, candidate, reference, problem: Problem, device: str,
                    tolerance: tuple[float, float] | None = None) -> list:
    """``[(class name, CorrectnessReport)]``: ``candidate`` against ``reference`` on fresh
    inputs of each class (three of the problem's own inputs, two of each other class)."""
    out = []
    for name, make in classes.items():
        first = name == problem.inputs_name
        out.append((name, correctness.check_outputs(
            candidate, reference, lambda seed, make=make: make(seeded_generator(seed), device),
            seeds=correctness.fresh_seeds(3 if first else 2), grad=problem.training,
            tolerance=tolerance)))
    return out


def _class_lines(reports: list) -> str:
    if len(reports) == 1:
        return str(reports[0][1])
    return "\n".join(f"on {name}: {rep}" for name, rep in reports)


def _calls_made(ev: Evidence) -> int:
    report = ev.recompiles if isinstance(ev.recompiles, dict) else {}
    calls = report.get("calls")
    return calls if isinstance(calls, int) else 0


def _usage_failure(problem: Problem, ev: Evidence) -> str:
    """Why the learner's model, compiled from a fresh start and called as the problem calls it,
    is not one graph on every call ('' : it is). A recompile is the recompile check's business
    where the problem has one."""
    report = ev.recompiles if isinstance(ev.recompiles, dict) else {}
    if not report:
        return "the calls the problem makes were not checked"
    if "error" in report:
        return (f"your code raised while the problem called it repeatedly: "
                f"{learner_text(report['error'])}")
    failed, hit = report.get("failed_call"), report.get("hit_limit") is True
    if isinstance(failed, int) and not hit:
        first = str(report.get("failure") or "").strip().splitlines()
        return (f"not one graph on every call the problem makes: a fresh model compiled with "
                f"fullgraph=True raised on call {failed + 1} of {problem.usage_calls}: "
                f"{learner_text(first[0] if first else 'no reason was sent')}")
    compiles = report.get("compiles")
    if problem.recompile_inputs is None and (hit or not isinstance(compiles, int)
                                             or compiles > problem.max_compiles):
        return (f"one graph does not serve every call the problem makes (from a fresh model, "
                f"fullgraph=True): {learner_text(report.get('message', 'no count was sent'))}")
    return ""


def _log_uniform(rng: random.Random, low: float, high: float) -> int:
    return max(1, int(round(math.exp(rng.uniform(math.log(low), math.log(high))))))


# The sizes every rule is asked about besides the hidden jobs: four a decade from 10 to 10^8.
PROBE_SIZES = tuple(int(round(10 ** (k / 4))) for k in range(4, 33))


def hidden_job_sizes(plan, break_even: float | None, rng: random.Random,
                     spread: tuple[float, float] | None = None) -> list[tuple[str, int]]:
    """A planning question's hidden jobs, ``(part, calls)``: ``plan.pairs`` sizes drawn
    log-uniformly in ``[low/far, low/near]`` ("short") and as many in ``[near*high, far*high]``
    ("long"), where ``low`` and ``high`` are the least and the greatest break-even of the
    rounds this machine measured (``spread``; ``B``, the break-even, for both where not given);
    the i-th of each make a pair. Drawn outside the rounds' spread, every job has one right
    answer on every round's figures however busy the machine was while it measured (a job
    within the spread would be undecided for every rule, the reference's too). Where compiling
    never pays (``B`` is ``None``), every size is drawn across ``plan.fallback``, the smaller
    half "short", the larger "long" (not compiling is then right for each)."""
    n = plan.pairs
    if break_even is None:
        sizes = sorted(_log_uniform(rng, *plan.fallback) for _ in range(2 * n))
        return [("short", c) for c in sizes[:n]] + [("long", c) for c in sizes[n:]]
    low, high = spread if spread is not None else (break_even, break_even)
    return ([("short", _log_uniform(rng, low / plan.far, low / plan.near)) for _ in range(n)]
            + [("long", _log_uniform(rng, high * plan.near, high * plan.far))
               for _ in range(n)])


# How many sets of hidden jobs the instructor's rule is tried on before a run's figures judge
# the learners' (each set as one submission's: the pairs the question grades).
YARDSTICK_SETS = 20


def reference_rule_verdict(side: ReferenceSide) -> str:
    """'' when the instructor's rule (``side.reference_rule``) earns a planning question on the
    figures this judge measured, on :data:`YARDSTICK_SETS` sets of hidden jobs drawn as a
    submission's are; else why not, in the instructor's words (no rule: '')."""
    rule, plan = side.reference_rule, side.problem.plan
    if rule is None:
        return ""
    figures = side.job_figures()
    sets = figures.figure_sets()
    kind = torch.device(side.device).type
    rng = random.Random(0)
    missed = []
    for _ in range(YARDSTICK_SETS):
        for _part, calls in hidden_job_sizes(plan, figures.break_even, rng, figures.spread()):
            choice = rule(calls, kind)
            verdict = targets.judge_plan_choice(sets, calls, choice, plan.fraction)[0] \
                if choice in plan.modes else "fail"
            if verdict != "pass":
                missed.append((calls, choice, verdict))
    if not missed:
        return ""
    calls, choice, verdict = missed[0]
    return (f"the reference solution's own rule does not earn {side.problem.key} on the figures "
            f"this machine measured ({figures.summary()}): of "
            f"{YARDSTICK_SETS * 2 * plan.pairs} hidden jobs drawn as a submission's are, it "
            f"gets {len(missed)} wrong or undecided (a job of {calls:,} calls: it chose "
            f"{choice!r}, {verdict}). The machine was busy while it measured, or is unlike the "
            f"one the rule was written for: every submission's question is held for a person "
            f"(regrade it on a quiet machine: make grade ASSIGNMENT={side.problem.assignment} "
            f"REGRADE=1)")


def _fit_figures(side: ReferenceSide) -> None:
    """Judge a planning question's figures by the instructor's rule before any submission is:
    measured again once where it misses; where it still does, the figures carry the reason
    (:attr:`JobFigures.unfit`) and every submission's question is held for a person."""
    if side.problem.plan is None or side.reference_rule is None or side.job_figures().unfit:
        return
    why = reference_rule_verdict(side)
    if why:
        side.jobs = None            # measured again: the load that moved them may have gone
        why = reference_rule_verdict(side)
    side.job_figures().unfit = why


def decoy_job_sizes(plan, break_even: float | None, rng: random.Random) -> list[int]:
    """``plan.decoys`` sets of sizes drawn as the hidden jobs are, each around a false
    break-even 3 to 30 times above or below the real one: sizes clustered like the hidden ones,
    so that a rule which sees every size cannot tell which cluster is graded."""
    centre = break_even or math.sqrt(plan.fallback[0] * plan.fallback[1])
    sizes = []
    for _ in range(plan.decoys):
        away = 10 ** rng.uniform(math.log10(3), math.log10(30))
        false = centre * away if rng.random() < 0.5 else centre / away
        sizes += [n for _, n in hidden_job_sizes(plan, false, rng)]
    return sizes


def _stop(result: ProblemResult, status, message: str) -> None:
    result.status, result.message, result.checks = status, message, {}


def _validated_choice(problem: Problem, choice) -> dict:
    """The compile options the learner chose, as data the problem allows (else ValueError)."""
    if not isinstance(choice, dict):
        raise ValueError("the process that ran your code sent no compile options")
    out = {}
    for name, value in choice.items():
        allowed = problem.choices.get(name)
        if allowed is None or value not in allowed:
            raise ValueError(f"{name}={str(value)[:40]!r} is not a choice this problem allows"
                             + (f" (one of {allowed})" if allowed else ""))
        out[name] = value
    return out


def _same_over(problem: Problem, module, baseline, calls: list[tuple]) -> str:
    """'' when ``module``'s traced call gives the baseline's outputs on every call of ``calls``
    (in order, so that a model's state carries over as in the problem's loop), else why not."""
    mine, theirs = problem.traced_call(module), problem.traced_call(baseline)
    for i, args in enumerate(calls):
        try:
            with torch.set_grad_enabled(problem.training):
                got = mine(*args)
                want = theirs(*args)
        except Exception as exc:
            return f"call {i + 1} of {len(calls)} raised {type(exc).__name__}: {str(exc)[:160]}"
        why = correctness.compare_output(got, want, f"the output of call {i + 1} of {len(calls)}")
        if why is not None:
            return why
    return ""


def _break_lines(ev: Evidence) -> list[str]:
    """The graph breaks the learner's process reported, one entry each (its words)."""
    lines = []
    for b in _breaks(ev)[:8]:
        lines.append(f"- {learner_text(b.get('where', ''))}: `{learner_text(b.get('line', ''))}`\n"
                     f"    cause: {learner_text(b.get('explanation', ''))}\n"
                     f"    fix: {learner_text(b.get('fix', ''))}")
    if lines:
        lines.insert(0, "where (as the process that ran your code reports it):")
    return lines


def _flops(problem: Problem, module, args: tuple) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), ti.quiet_torch_logs(), FlopCounterMode(display=False) as counter:
        problem.traced_call(module)(*args)
    return counter.get_total_flops()


def _work_check(problem: Problem, side: ReferenceSide, graph: GraphCheck) -> str:
    """'' when the learner's graph does no more work per call than the problem allows (see
    ``Problem.max_work_ratio``), else why not."""
    if problem.max_work_ratio is None or problem.work_inputs is None:
        return ""
    calls = problem.work_inputs(side.device)
    mine = [_flops(problem, graph.module, args) for args in calls]
    if mine[-1] > 1.1 * max(1, mine[0]):
        return (f"your step does more work later in a generation ({mine[0]:,} FLOPs at the first "
                f"call, {mine[-1]:,} at the last): a cached step computes one position per "
                f"layer, whatever the position")
    if side.reference_module is None:
        return ""
    theirs = max(_flops(problem, side.reference_module, args) for args in calls)
    if max(mine) > problem.max_work_ratio * theirs:
        return (f"your step does {max(mine):,} FLOPs a call, more than "
                f"{problem.max_work_ratio:g}x the reference's {theirs:,}: a cached step computes "
                f"one position per layer and reads the cache, it does not recompute the sequence")
    return ""


def _graph_operators(graph: GraphCheck | None, ev: Evidence, problem: Problem) -> tuple | None:
    """The operators the learner's checked graph calls, by name, the judge's rebuilt custom
    operator under the name the learner's graph sent (None when there is no graph)."""
    if graph is None or graph.module is None:
        return None
    op = ev.custom_op.op if ev.custom_op is not None else None
    return tuple(problem.custom_op.graph_name if op is not None and node.target is op
                 else str(node.target)
                 for node in graph.module.graph_module.graph.nodes if node.op == "call_function")


def _op_lesson(problem: Problem, graph: GraphCheck, ev: Evidence) -> str:
    """'' when the graph calls the problem's custom operator (or the problem has none), else
    why a graph without it is not the lesson: a rewrite of the library in torch operators."""
    spec = problem.custom_op
    if spec is None or spec.graph_name in (_graph_operators(graph, ev, problem) or ()):
        return ""
    return (f"it does not call the library through `{spec.qualname}` (this problem teaches "
            f"wrapping the library's kernel as a custom operator, not rewriting it)")


def _breaks(ev: Evidence) -> list[dict]:
    return [b for b in ev.breaks if isinstance(b, dict)][:20]


# ---------------------------------------------------------------------------------------------
# The judge as a process

def serve(reply_fd: int, once: bool = False) -> int:
    """Grade jobs read from stdin, one reply each on ``reply_fd``, until stdin closes. Each job is
    checked whole as it is read (:meth:`JudgeJob.from_dict`): a malformed one is refused with the
    reason, which the driver reports as a grader error for each of its problems."""
    judge = Judge()

    def answer(message: dict, _blob: bytes) -> tuple[dict, bytes]:
        try:
            job = JudgeJob.from_dict(message)
            reply = judge.build_references(job) if job.op == BUILD_REFERENCES else judge.grade(job)
        except MalformedJob as exc:
            reply = JudgeReply.failed(f"the judge refused a malformed job: {exc}")
        except Exception as exc:
            reply = JudgeReply.failed(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        return json.loads(json.dumps(reply.to_dict(), default=str)), b""

    return channel.serve(reply_fd, answer, done=lambda _message: once or judge.tainted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the judge: grades jobs, never runs learner code")
    parser.add_argument("--serve", action="store_true", help="grade jobs until stdin closes")
    parser.add_argument("--once", action="store_true", help="grade one job and exit")
    parser.add_argument("--reply-fd", type=int, required=True,
                        help="the file descriptor replies are written to")
    args = parser.parse_args(argv)
    return serve(args.reply_fd, once=args.once)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
