"""The judge: decides every point, and never runs learner code.

One submission's problems are graded in three roles, each a process of its own (docs/trust.md):

- the **subject** (:mod:`grader.isolation.sandbox.subject`, sandboxed) runs the learner's code and
  answers the judge's requests; it holds nothing of value, and whatever it says is data to check;
- the **judge** (this module, a process that never executes learner code) chooses every input,
  checks every output, rebuilds the graph the subject captured from data and checks it
  (:mod:`grader.checks.graph_artifact`), compiles it with Inductor itself, counts its kernels,
  times it, and computes every verdict;
- the **reference side** (:mod:`grader.isolation.judge.reference_side`, kept by the judge process
  that never runs learner code either) holds the problem's baseline model and the instructor's
  reference solution, compiled once per judge process and shared by every submission it grades (for
  a planning question, the figures its hidden jobs are judged on, measured once per machine).

The subject as the judge sees it is :mod:`grader.isolation.judge.subject_session`; the judge as the
driver sees it, a process to send jobs to, is :mod:`grader.isolation.judge.judge_process`.

The order, for one group of problems that share the learner's cells (:meth:`Judge.grade`):

1. screen the learner's cells (:mod:`grader.isolation.cells.screen`: defence in depth, no point
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
   (:mod:`grader.isolation.judge.graph_child`), and this process checks what it sends: on a CPU, for
   an inference problem a child forked from this process, for a training problem (whose checks
   run backward, which a child forked from here could not) a child of this judge's zygote, a
   fresh Python that never ran backward; on a GPU a spawned child with a bound on its CUDA
   memory (:mod:`grader.isolation.judge.spawned_child`: a CUDA context does not survive a fork).

``python -m grader.isolation.judge.steps --serve --reply-fd N`` grades jobs from stdin until it
closes (``make grade`` keeps one per worker slot:
:class:`grader.isolation.judge.judge_process.JudgeProcess`); ``--once`` grades one (self-check). A
job is read off the pipe and checked once, whole
(:class:`grader.isolation.judge.judge_job.JudgeJob`: a malformed one is refused, a grader error);
the reply is a :class:`grader.isolation.judge.judge_job.JudgeReply`.

This module is the list of those steps (:meth:`Judge._grade`); each step is a module of its own:
the evidence, one part per kind, each its request to the subject, the judge's validation and its
fields (:mod:`grader.isolation.judge.evidence`: :mod:`~grader.isolation.judge.evidence.gather` asks
for them); the decision, each check by its declaration (:mod:`grader.checks.declared`) in the
declared order (:mod:`grader.isolation.judge.deciding`); where and under what limits it runs
(:mod:`grader.isolation.judge.judge_child`). What a problem set teaches beyond one graph is declared
by the set (``Problem.lessons``, a planning question's check): the judge names no check and no
problem set.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import traceback

import torch

from grader.checks import _torch_internals, graph_artifact, targets
from grader.checks.declared import job as job_check
from grader.checks.jobs import JobFigures
from grader.checks.results import Need, ProblemResult, Status
from grader.common.phases import Phases
from grader.isolation.sandbox import channel, process
from grader.isolation.judge import deciding, graph_child, judge_child, spawned_child, timing_gate
from grader.isolation.cells import screen
from grader.isolation.judge.evidence.gather import gather
from grader.isolation.judge.evidence.record import Evidence
from grader.isolation.judge.judge_job import BUILD_REFERENCES, JudgeJob, JudgeReply, MalformedJob
from grader.isolation.judge.reference_side import ReferenceSide
from grader.isolation.cells.source import Cell
from grader.isolation.judge.subject_session import (GraderFailed, NextSubject, SubjectGone,
                                                    SubjectSession)
from grader.problems import Problem, get_problem, public_names


class Judge:
    """Grades jobs; keeps each problem's :class:`ReferenceSide` for the next one."""

    def __init__(self, start_ahead: bool = False) -> None:
        self.sides: dict[tuple, ReferenceSide] = {}
        # The next job's subject, started as this job's starts, where the judge has a core for
        # its imports besides the one this job's learner code runs on (NextSubject).
        self.start_ahead = start_ahead
        self.next_subject = NextSubject()
        # Forks the children that check a training problem's graph (started when first needed).
        self.zygote = graph_child.Zygote(judge_child.TRAINING_WORKER,
                                         preload=judge_child.PRELOAD_COMPILER)
        # Set when a job overran the judge's own time limit in this process (a planning
        # question's checks, decided here): torch may have been stopped half way, so the process
        # serves no further job
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
            if judge_child.in_the_zygotes_child(problem, device):
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
                job_check.fit_figures(side)
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
        wanted = {k: deciding.with_the_gate(p, job.wanted(k, p.checks)) for k, p in problems.items()}
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
                deciding.stop(r, Status.REFUSED, screen.describe(refusals))
            return self._finish(results, phases)
        # 2. The subject.
        isolation = job.isolation or process.probe(job.sandbox)
        deadline = time.monotonic() + job.timeout_s
        evidence = {k: Evidence() for k in problems}
        subject = None
        kind = dict(isolation=isolation, device=device, problem_module=module,
                    memory_bytes=job.memory_bytes)
        try:
            subject = self.next_subject.take(deadline, **kind) \
                or SubjectSession(**kind, deadline=deadline)
            if self.start_ahead:
                self.next_subject.start(job.subjects_ahead, **kind)
            gather(subject, problems, sides, wanted, learner_cells, device, module, evidence, lap)
        except SubjectGone as gone:
            for k, r in results.items():
                if evidence[k].status == "ok":
                    evidence[k].status, evidence[k].message = gone.status, gone.message
        except GraderFailed as failed:
            for k, r in results.items():
                if evidence[k].status == "ok":
                    evidence[k].status = Status.GRADER_ERROR
                    evidence[k].message = deciding.GRADER_FAILED.format(
                        what="in the grader's own code, in the process that ran yours")
                    evidence[k].traceback = failed.traceback_text
        except OSError as exc:
            for r in results.values():
                deciding.stop(r, Status.GRADER_ERROR, f"could not start the process for your code: {exc}")
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
        # Where the judge times what follows, the next subject finishes its imports first; a
        # child forked from the judge checks the graph meanwhile, and waits only to time.
        gate = timing_gate.Gate(self.next_subject.ready) \
            if any(Need.TIMINGS in p.needs(wanted[k]) for k, p in problems.items()) else None
        try:
            self._decide(problems, sides, evidence, results, wanted, device, job, phases, gate)
        finally:
            if gate is not None:
                gate.close()
        return self._finish(results, phases)

    def _decide(self, problems, sides, evidence, results, wanted, device, job, phases,
                gate) -> None:
        """4. Decide each problem from its evidence (in a child where it compiles or runs the
        learner's graph)."""
        lap = phases.lap
        for key, problem in problems.items():
            ev, result = evidence[key], results[key]
            if ev.status != "ok":
                status = {"learner_error": Status.LEARNER_ERROR}.get(ev.status, ev.status)
                deciding.stop(result, status, ev.message)
                if ev.traceback:
                    result.extra["traceback"] = ev.traceback
                continue
            limit = judge_child.work_limit_s(problem, sides[key])
            # A training problem's checks run backward, which a child forked from this process
            # cannot once this process has (autograd's threads do not survive a fork): they run
            # in a child of the judge's zygote, which never ran backward (_in_the_zygotes_child).
            if problem.plan is None and (graph_child.can_fork(device)
                                         or judge_child.in_the_zygotes_child(problem, device)
                                         or spawned_child.spawns(device)):
                with graph_artifact.extra_operators(ev.operators):
                    judge_child.decide_in_a_child(self.zygote, problem, sides[key], ev, wanted[key],
                                                  device, job, phases, result, limit, gate)
                continue
            if gate is not None and gate.open():
                lap("next subject")
            try:   # in this process (a planning question), under the time limit only
                with judge_child.time_limit(limit), graph_artifact.extra_operators(ev.operators), \
                        torch.enable_grad():   # as it was, whatever the graph turned off
                    result.checks = deciding.decide(problem, sides[key], ev, wanted[key], device,
                                                   job, lap)
            except judge_child.JudgeOverrun:
                # The learner's graph held the judge past what the problem needs: it scores
                # nothing structural, with the reason; the next submission gets a fresh judge.
                self.tainted = True
                result.checks = judge_child.not_credited(wanted[key], ev, (
                    f"the grader stopped checking the graph your code compiles to after "
                    f"{limit:.0f} s, several times what this problem's reference needs"))
            except Exception as exc:  # the grader's own failure: reported, never a lost grade
                deciding.stop(result, Status.GRADER_ERROR,
                      deciding.GRADER_FAILED.format(what=f"{type(exc).__name__} in the judge"))
                result.extra["traceback"] = traceback.format_exc()

    @staticmethod
    def _finish(results: dict[str, ProblemResult], phases: Phases) -> JudgeReply:
        # The job's phases go with its first problem only: they are the whole group's seconds.
        if results:
            next(iter(results.values())).extra["phases"] = dict(phases.seconds)
        return JudgeReply(results=dict(results), phases=dict(phases.seconds))


# ---------------------------------------------------------------------------------------------
# The judge as a process

def serve(reply_fd: int, once: bool = False, start_ahead: bool = False) -> int:
    """Grade jobs read from stdin, one reply each on ``reply_fd``, until stdin closes. Each job is
    checked whole as it is read (:meth:`JudgeJob.from_dict`): a malformed one is refused with the
    reason, which the driver reports as a grader error for each of its problems.
    ``start_ahead``: start each next job's subject while this job's runs (:class:`NextSubject`)."""
    judge = Judge(start_ahead=start_ahead and not once)

    def answer(message: dict, _blob: bytes) -> tuple[dict, bytes]:
        try:
            job = JudgeJob.from_dict(message)
            reply = judge.build_references(job) if job.op == BUILD_REFERENCES else judge.grade(job)
        except MalformedJob as exc:
            reply = JudgeReply.failed(f"the judge refused a malformed job: {exc}")
        except Exception as exc:
            reply = JudgeReply.failed(f"{type(exc).__name__}: {exc}", traceback.format_exc())
        return json.loads(json.dumps(reply.to_dict(), default=str)), b""

    try:
        return channel.serve(reply_fd, answer, done=lambda _message: once or judge.tainted)
    finally:
        judge.next_subject.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the judge: grades jobs, never runs learner code")
    parser.add_argument("--serve", action="store_true", help="grade jobs until stdin closes")
    parser.add_argument("--once", action="store_true", help="grade one job and exit")
    parser.add_argument("--reply-fd", type=int, required=True,
                        help="the file descriptor replies are written to")
    parser.add_argument("--cores", default="",
                        help="comma list of the CPU cores this judge and the subjects it starts "
                             "run on, its own (one worker's): with two or more, the next job's "
                             "subject is started while a job's runs (default: every core it may "
                             "use, shared, and no subject started ahead)")
    args = parser.parse_args(argv)
    cores = {int(c) for c in args.cores.split(",")} if args.cores else set()
    if cores:   # every thread (torch's import starts some) and, by inheritance, every child
        for thread in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(thread), cores)
    # Before any compile: the precompiled header stays with the judges' compiler cache.
    _torch_internals.keep_precompiled_headers_in_cache_dir()
    # A job's learner code runs on one core: where this judge has another of its own, the next
    # job's subject does its imports there meanwhile.
    return serve(args.reply_fd, once=args.once, start_ahead=len(cores) >= 2)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)
