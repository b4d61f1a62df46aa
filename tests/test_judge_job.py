"""The judge's job and reply are typed and checked once, where they cross the pipe
(grader.isolation.judge.judge_job): a malformed job is refused whole, with the field named, and the
driver reports it as a grader error for each problem, never as the learner's."""
from __future__ import annotations

import dataclasses

import pytest

from grader.checks.results import CheckOutcome, ProblemResult, Status
from grader.isolation.judge import judging
from grader.isolation.judge.judge_job import (BUILD_REFERENCES, JudgeJob, JudgeReply, MalformedJob)
from grader.isolation.judge.judge_process import JudgeProcess
from grader.isolation.sandbox.process import Isolation
from grader.isolation.cells.source import Cell

ROOT = "."


def _job() -> JudgeJob:
    return judging.job_for(["ps2.q1"], [Cell("cell 7", "x = 1\n")], course_root=ROOT,
                        device="cpu", timeout_s=90, isolation=Isolation("kernel", "no bwrap"),
                        checks={"ps2.q1": ["correctness", "speed"]}, memory_bytes=2 ** 30)


def test_a_job_reads_back_as_itself_from_the_json_the_pipe_carries():
    job = _job()
    assert job.reference_cells["ps2.q1"], "source/ is at hand here: the reference goes along"
    again = JudgeJob.from_dict(job.to_dict())
    assert again == job
    assert again.wanted("ps2.q1", ("correctness", "fullgraph", "speed")) == ["correctness", "speed"]
    assert again.wanted("ps9.q9", ("correctness", "speed")) == ["correctness", "speed"]
    built = judging.build_references_job(["ps2.q1"], ROOT, device="cpu",
                                      measured_jobs={"ps3.q1": {"break_even": 1.0}})
    assert JudgeJob.from_dict(built.to_dict()) == built and built.op == BUILD_REFERENCES


@pytest.mark.parametrize("change, field", [
    ({"problems": []}, "problems"),
    ({"problems": "ps2.q1"}, "problems"),
    ({"device": ""}, "device"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"timeout_s": "90"}, "timeout_s"),
    ({"budget_s": -1}, "budget_s"),
    ({"learner_cells": [{"label": "cell 7"}]}, "cells"),
    ({"reference_cells": {"ps2.q1": "print(1)"}}, "reference_cells"),
    ({"sandbox": "none"}, "sandbox"),
    ({"isolation": {"mode": "chroot", "reason": ""}}, "isolation"),
    ({"screen": "yes"}, "screen"),
    ({"checks": {"ps2.q1": "speed"}}, "checks"),
    ({"memory_bytes": 1.5}, "memory_bytes"),
    ({"memory_bytes": None}, "memory_bytes"),
    ({"op": "grade everything"}, "op"),
    ({"measured_jobs": []}, "measured_jobs"),
    ({"timeout": 90}, "timeout"),            # a field no judge reads: a typo is not ignored
])
def test_a_malformed_job_is_refused_whole_naming_the_field(change, field):
    data = dict(_job().to_dict(), **change)
    with pytest.raises(MalformedJob, match=field):
        JudgeJob.from_dict(data)


def test_the_judge_process_refuses_a_malformed_job_and_the_driver_calls_it_a_grader_error():
    class Forged:   # what a driver with a bug would send: the job's JSON with a field wrong
        problems, problem_module, timeout_s = ("ps2.q1",), None, 90.0

        def to_dict(self):
            return dict(_job().to_dict(), learner_cells="import os")

    judge = JudgeProcess()
    try:
        reply = judge.grade(Forged(), timeout_s=120)
        assert reply.error.startswith(
            "the judge refused a malformed job: learner_cells must be a list"), reply
        assert not reply.results
        # The judge refused the job and lives on: the next one is answered by the same process.
        results = judging.run_job(Forged(), judge)
    finally:
        judge.close()
    assert results["ps2.q1"]["status"] == Status.GRADER_ERROR
    assert "the judge failed: the judge refused a malformed job" in results["ps2.q1"]["message"]


def test_a_judge_given_cores_runs_every_thread_on_them():
    """A local worker's judge is pinned to the worker's cores (``make grade WORKERS=2``) before
    any of its threads starts; the subjects it starts inherit them (the kernel's rule)."""
    import glob
    import os

    class Malformed:   # refused at once: the judge starts and answers, nothing is graded
        problems, problem_module, timeout_s = ("ps2.q1",), None, 90.0

        def to_dict(self):
            return dict(_job().to_dict(), learner_cells="x")

    core = max(os.sched_getaffinity(0))
    judge = JudgeProcess(cores=frozenset({core}))
    try:
        assert judge.grade(Malformed(), timeout_s=120).error
        allowed = set()
        for status in glob.glob(f"/proc/{judge.proc.pid}/task/*/status"):
            with open(status) as fh:
                allowed |= {line.split()[1] for line in fh if line.startswith("Cpus_allowed_list")}
    finally:
        judge.close()
    assert allowed == {str(core)}


def test_a_reply_reads_back_as_itself_and_a_malformed_one_reads_as_a_failed_judge():
    result = ProblemResult(Status.OK, "ps2.q1", device="cpu", device_class="cpu",
                           checks={"correctness": CheckOutcome(True, "match")},
                           extra={"sandbox": "kernel", "phases": {"subject": 1.5}})
    reply = JudgeReply(results={"ps2.q1": result}, phases={"subject": 1.5})
    assert JudgeReply.from_dict(reply.to_dict()) == reply
    built = JudgeReply(built={"ps2.q1": 12.5}, measured_jobs={"ps3.q1": {"break_even": 3.0}})
    assert JudgeReply.from_dict(built.to_dict()) == built
    failed = JudgeReply.failed("the judge stopped", "Traceback ...")
    assert JudgeReply.from_dict(failed.to_dict()) == failed
    for malformed in ([], {}, {"results": {"ps2.q1": "ok"}}, {"built": {"ps2.q1": "fast"}}):
        reply = JudgeReply.from_dict(malformed)
        assert reply.error.startswith("the judge sent a malformed reply"), (malformed, reply)


def test_the_job_carries_the_subjects_memory_limit_it_was_given():
    job = _job()
    assert JudgeJob.from_dict(job.to_dict()).memory_bytes == 2 ** 30
    default = dataclasses.replace(job, memory_bytes=judging.DEFAULT_MEMORY_BYTES)
    assert judging.job_for(["ps2.q1"], [], course_root=ROOT, device="cpu",
                        timeout_s=90).memory_bytes == default.memory_bytes


def test_the_self_check_and_make_grade_run_learner_code_under_one_memory_default():
    """One default (issue 45): the address-space limit a job carries when nothing sets it (the
    self-check's) is make grade's MEMORY_GB default, and the sandbox's own."""
    from grader.cohort.settings import GradeSettings
    from grader.isolation.sandbox import process

    unset = judging.job_for(["ps2.q1"], [Cell("cell 7", "x = 1\n")], course_root=ROOT,
                         device="cpu", timeout_s=90, isolation=Isolation("kernel", "no bwrap"))
    assert unset.memory_bytes == GradeSettings().memory_bytes == JudgeJob(("ps2.q1",), "cpu").memory_bytes \
        == process.Limits().memory_bytes == process.DEFAULT_MEMORY_BYTES


def test_a_jobs_settings_are_one_object_with_one_default_each():
    """``job_for`` and the notebook's ``evaluate`` take one settings object (issue 45), whose
    fields are also keywords: the same job either way, and a name it does not declare is an
    error, never ignored."""
    from grader.isolation.check import EvaluateSettings, evaluate

    settings = judging.JobSettings(device="cpu", timeout_s=90, course_root=ROOT,
                                   isolation=Isolation("kernel", "no bwrap"),
                                   memory_bytes=2 ** 30)
    by_object = judging.job_for(["ps2.q1"], [Cell("cell 7", "x = 1\n")], settings,
                                checks={"ps2.q1": ["correctness", "speed"]})
    assert by_object == _job()
    assert judging.job_for(["ps2.q1"], [], dataclasses.replace(settings, reference="off"),
                           reference="auto") == judging.job_for(["ps2.q1"], [], settings)
    with pytest.raises(TypeError):
        judging.job_for(["ps2.q1"], [], settings, no_such_setting=1)
    with pytest.raises(TypeError):
        evaluate("ps2.q1", cells=[], no_such_setting=1)
    # evaluate's own settings extend the job's, each declared once.
    fields = {f.name for f in dataclasses.fields(EvaluateSettings)}
    assert fields == {f.name for f in dataclasses.fields(judging.JobSettings)} | {
        "checks", "cache", "hidden_jobs"}
    assert EvaluateSettings(checks=["correctness"]).checks == ("correctness",)
    assert EvaluateSettings.made(reference="off").reference == "off"
