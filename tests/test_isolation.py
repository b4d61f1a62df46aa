"""The judge and its subject: honest solutions pass, wrong ones fail with reasons, and what the
learner's process does (crash, hang, leave processes, tamper) changes nothing the judge decides.

Uses the small problem in tests/fixture_problems.py ("fx.q1": remove an `.item()` break; speed
timed with the `eager` backend so that these tests stay quick).
"""
import dataclasses
import os
import signal
import subprocess
import textwrap

import pytest

from grader.isolation.check import CheckFailed, evaluate
from grader.isolation.judge.judging import job_for
from grader.isolation.judge.steps import Judge
from grader.isolation.cells.source import Cell

TESTS_DIR = os.path.dirname(__file__)

GOOD = """
class Fixed(Original):
    def forward(self, x):
        y = torch.sin(x) * self.scale
        m = y.abs().max()
        return torch.cos(y / (m + 1.0)).exp()
"""


def run(source: str, checks=None, timeout_s: float = 180, **kw):
    """Through the public API: a judge process of its own, which starts the subject."""
    return evaluate("fx.q1", cells=[Cell("cell 5", textwrap.dedent(source))],
                    problem_module="fixture_problems", course_root=TESTS_DIR,
                    timeout_s=timeout_s, checks=checks, **kw)


def judge(source: str, checks=("correctness",), timeout_s: float = 120, screen: bool = False,
          sandbox: str = "auto", course_root: str = TESTS_DIR) -> dict:
    """The judge in this (trusted) test process, its subject running ``source`` *unscreened*:
    the screen off, as only the grader's own tests can, to test what stands behind it."""
    job = job_for(["fx.q1"], [Cell("cell 5", textwrap.dedent(source))],
                  problem_module="fixture_problems", course_root=course_root, sandbox=sandbox,
                  timeout_s=timeout_s, checks={"fx.q1": list(checks)}, screen=screen)
    return Judge().grade(job).to_dict()["results"]["fx.q1"]


def test_honest_solution_passes_every_check():
    ev = run(GOOD)
    assert ev.status == "ok", ev.result
    for name in ("correctness", "fullgraph", "breaks"):
        assert ev.ok(name), ev.message(name)
    assert ev.verdict("speed") in ("pass", "inconclusive")
    speed = ev.outcome("speed")
    assert speed.details["trials"] >= 11 and speed.details["with_reference"] is False
    assert "checked by the grader" in ev.message("fullgraph")


@pytest.fixture
def course_with_reference(tmp_path):
    """A course root whose source/ holds the reference solution cell of "fx.q1"."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(GOOD)
    cell.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "fx-q1-solution",
                                 "schema_version": 3, "locked": False}
    nb.cells = [cell]
    (tmp_path / "source" / "fx").mkdir(parents=True)
    nbformat.write(nb, str(tmp_path / "source" / "fx" / "fx.ipynb"))
    return str(tmp_path)


def test_reference_is_measured_in_the_same_run(course_with_reference):
    ev = evaluate("fx.q1", cells=[Cell("cell 5", GOOD)], problem_module="fixture_problems",
                  course_root=course_with_reference, checks=["correctness", "speed"])
    assert ev.status == "ok", ev.result
    speed = ev.outcome("speed")
    assert speed.details["with_reference"] is True
    names = [c["name"] for c in speed.details["conditions"]]
    assert "speedup relative to reference" in names
    assert set(speed.details["ms_per_call"]) == {"baseline", "learner", "reference"}


# Learner code that looks for the reference where it could be: files, the interpreter's modules
# and line cache. It raises (a learner error, shown in the result) if it finds any.
SNOOP_REFERENCE = """
import glob, linecache, os, sys
_marker = "REFERENCE-" + "MARKER-41c7"
_found = [m for m in sys.modules if m.startswith("__reference")]
_found += [f for f, entry in linecache.cache.items() if _marker in "".join(entry[2] or [])]
for _root in ("/tmp", "/work", "/home", "/root", "/srv", os.environ.get("TMPDIR") or "/tmp"):
    for _p in glob.glob(os.path.join(_root, "**", "*.ipynb"), recursive=True)[:2000]:
        try:
            if _marker in open(_p, errors="replace").read():
                _found.append(_p)
        except OSError:
            pass
assert not _found, f"found the reference: {_found[:3]}"
"""


def test_nothing_of_the_reference_reaches_the_subject(course_with_reference, monkeypatch):
    import nbformat

    from grader.isolation.judge.subject_session import SubjectSession

    path = os.path.join(course_with_reference, "source", "fx", "fx.ipynb")
    nb = nbformat.read(path, 4)
    nb.cells[0].source = "# REFERENCE-MARKER-41c7\n" + nb.cells[0].source
    nbformat.write(nb, path)
    sent = []
    real = SubjectSession.request

    def recording(self, header, blob=b""):
        sent.append(repr(header).encode() + blob)
        return real(self, header, blob)

    monkeypatch.setattr(SubjectSession, "request", recording)
    result = judge(SNOOP_REFERENCE + GOOD, checks=["correctness", "speed"],
                   course_root=course_with_reference)
    assert result["status"] == "ok", result
    assert result["checks"]["speed"]["with_reference"] is True  # the judge had it ...
    assert sent and not any(b"REFERENCE-MARKER-41c7" in m for m in sent)  # ... the subject never


def test_graph_break_feedback_names_the_learners_cell_line_and_fix():
    ev = run("""
    class Fixed(Original):
        def forward(self, x):
            y = torch.sin(x) * self.scale
            print("debug", y.shape)
            return torch.cos(y / (y.abs().max() + 1.0)).exp()
    """, checks=["fullgraph"])
    assert not ev.ok("fullgraph")
    with pytest.raises(CheckFailed) as info:
        ev.require("fullgraph")
    text = str(info.value)
    assert "cell 5, line 5" in text and 'print("debug", y.shape)' in text
    assert "move the `print`" in text
    assert "hint: replace `.item()`" in text  # the problem's own hint is added


def test_wrong_outputs_fail_correctness_are_not_timed_and_earn_no_structural_point():
    ev = run("""
    class Fixed(Original):
        def forward(self, x):
            return torch.cos(torch.sin(x) * self.scale).exp()
    """, checks=["correctness", "fullgraph", "breaks", "speed"])
    assert not ev.ok("correctness")
    assert "differs from the reference" in ev.message("correctness")
    assert not ev.ok("fullgraph") and not ev.ok("breaks")  # one graph, but of the wrong thing
    assert "see the correctness check" in ev.message("fullgraph")   # the gate, named
    assert ev.verdict("speed") == "fail" and "see the correctness check" in ev.message("speed")
    assert ev.points("speed", 3) == 0.0


def test_a_do_nothing_forward_earns_no_structural_point():
    result = judge("class Fixed(Original):\n    def forward(self, x):\n        return x\n",
                   checks=["correctness", "fullgraph", "breaks"])
    assert result["status"] == "ok", result
    assert not any(c["ok"] for c in result["checks"].values()), result["checks"]


def test_the_timed_graph_holds_no_python_side_caching():
    # Correct for the first calls (the correctness check), then replays a cached answer: the
    # judge times the graph Dynamo captured, which computes every call; the subject's Python
    # cache is not in it.
    result = judge("""
    class Fixed(Original):
        calls = [0]
        store = {}
        def forward(self, x):
            self.calls[0] += 1
            if self.calls[0] > 3 and "last" in self.store:
                return self.store["last"]
            y = torch.sin(x) * self.scale
            self.store["last"] = torch.cos(y / (y.abs().max() + 1.0)).exp()
            return self.store["last"]
    """, checks=["correctness", "fullgraph", "speed"])
    assert result["checks"]["correctness"]["ok"], result
    # By the time the graph is captured, forward returns its cache: a graph of no work, which
    # is not one graph of the computation. Nothing is timed and nothing is credited.
    assert not result["checks"]["fullgraph"]["ok"]
    speed = result["checks"]["speed"]
    assert not speed["ok"] and "samples" not in speed


def test_wrong_shape_is_reported_plainly():
    ev = run("""
    class Fixed(Original):
        def forward(self, x):
            return x[:, :10]
    """, checks=["correctness"])
    assert "shape (64, 10), expected (64, 256)" in ev.message("correctness")


# What a cheat would replace, were it the process that decides. The subject decides nothing:
# each is run there unscreened, and the judge's verdicts are those of the honest solution.
CHEATS = [
    "import time\ntime.perf_counter = lambda: 0.0",
    "torch.cuda.synchronize = lambda *a, **k: None",
    "_real = torch.compile\ntorch.compile = lambda m, **k: m",
    "import grader.checks.timing\ngrader.checks.timing.compare = lambda *a, **k: None",
    "import grader.checks.correctness as c\nc.compare_output = lambda *a, **k: None",
    "import sys\nsys.setprofile(lambda *a: None)",
    "import json\n_d = json.dumps\njson.dumps = lambda *a, **k: _d({'status': 'ok'})",
    "torch._dynamo.config.suppress_errors = True",
    "import builtins\nbuiltins.print = lambda *a, **k: None",
]


@pytest.mark.parametrize("cheat", CHEATS)
def test_the_screen_refuses_each_cheat_before_anything_runs(cheat):
    result = judge(cheat + "\n" + GOOD, screen=True)
    assert result["status"] == "refused", result
    assert "cell 5, line " in result["message"]


def test_cheats_that_get_past_the_screen_change_no_verdict():
    honest = judge(GOOD, checks=["correctness", "fullgraph", "breaks"])
    assert honest["status"] == "ok", honest
    cheating = judge("\n".join(CHEATS) + "\n" + GOOD, checks=["correctness", "fullgraph", "breaks"])
    assert cheating["status"] in ("ok", "rejected"), cheating
    for name in ("correctness", "fullgraph", "breaks"):
        got = cheating.get("checks", {}).get(name, {}).get("ok", False)
        assert got <= honest["checks"][name]["ok"], name


def test_a_crash_is_contained_and_reported():
    ev = run("import os\nos._exit(3)\n", timeout_s=60)
    assert ev.status == "refused" and "cell 5, line 1" in ev.result["message"]
    result = judge("import os\nos._exit(3)\n", timeout_s=60)
    assert result["status"] == "crashed"
    assert "exit status 3" in result["message"]


def test_an_endless_loop_is_stopped_by_the_timeout():
    ev = run("""
    class Fixed(Original):
        def forward(self, x):
            while True:
                pass
    """, timeout_s=15)
    assert ev.status == "timeout"
    assert "did not finish in time" in ev.result["message"]


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_nothing_the_subject_started_runs_while_the_judge_decides(mode):
    # A double-forked, setsid child with an empty environment and a thread that would spin on
    # (to slow what the judge times): the subject and everything it started is gone before the
    # judge times anything, with bubblewrap ('auto' here) and without ('off': kernel
    # confinement); the launcher found the child (it stays below it, a child subreaper, whatever
    # its session or environment), killed it and counted it.
    import random

    tag = f"{random.randint(10 ** 6, 10 ** 7)}.5"
    source = (f"import os, threading\n"
              f"def _spin():\n"      # a core kept busy, memory left alone
              f"    while True:\n"
              f"        pass\n"
              f"threading.Thread(target=_spin, daemon=True).start()\n"
              f"if os.fork() == 0:\n"
              f"    os.setsid()\n"
              f"    if os.fork() == 0:\n"
              f"        os.execve('/bin/sleep', ['sleep', {tag!r}], {{}})\n"
              f"    os._exit(0)\n")
    result = judge(source + GOOD, checks=["correctness", "speed"], sandbox=mode)
    assert result["status"] == "ok", result
    assert result["sandbox"] == {"auto": "bwrap", "off": "kernel"}[mode]
    assert result["subject_leftovers"] == 1
    left = subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"a process of the submission kept running ({mode})"


def test_memory_blowup_is_contained():
    # 8 GiB against the default 6 GiB address-space limit of the subject.
    result = judge("big = torch.empty(2 * 1024**3, dtype=torch.float32)\n" + GOOD)
    assert result["status"] in ("learner_error", "crashed"), result
    assert "memory" in result["message"].lower() or "MemoryError" in result["message"]


def test_learner_exception_names_the_cell_and_line():
    ev = run("class Fixed(Original):\n    def __init__(self):\n        raise ValueError('boom')\n")
    assert ev.status == "learner_error"
    assert "ValueError: boom" in ev.result["message"] and "cell 5, line 3" in ev.result["message"]


def test_missing_entry_is_a_plain_message():
    ev = run("class Wrong(Original):\n    pass\n")
    assert ev.status == "learner_error"
    assert "must define `Fixed`" in ev.result["message"]


def test_evaluate_writes_nothing_to_stderr(capfd):
    # nbgrader scores a test cell zero when anything reaches stderr.
    ev = run(GOOD, checks=["correctness", "fullgraph"])
    ev.require("correctness")
    ev.require("fullgraph")
    assert capfd.readouterr().err == ""


def _judged(key: str, source: str, checks: tuple) -> dict:
    job = job_for([key], [Cell("cell 5", textwrap.dedent(source))],
                  problem_module="fixture_problems", course_root=TESTS_DIR, timeout_s=120,
                  checks={key: list(checks)}, screen=False)
    return Judge().grade(job).to_dict()["results"][key]


def test_a_grader_failure_is_the_graders_and_a_learner_crash_is_the_learners():
    """Told apart by where it happened: an exception raised in the grader's own code in the
    subject (no learner cell on its way) is a grader error, flagged for a person with its
    traceback, never "your code crashed"; the learner's own exception stays the learner's."""
    from grader.isolation.cell_scores import Evaluation, score_cell
    from grader.problems import TestCell, get_problem

    broken = _judged("fx.grader_bug", GOOD, ("correctness", "fullgraph"))
    assert broken["status"] == "grader_error", broken
    assert "not a verdict on your code" in broken["message"]
    assert "crash" not in broken["message"] and "your code raised" not in broken["message"]
    assert "a bug in the grader's own code" in broken["traceback"]     # the instructor's log
    cell = TestCell("fx-grader-bug-fullgraph", 3, requires=(("fx.grader_bug", "fullgraph"),))
    score = score_cell(cell, {"fx.grader_bug": Evaluation(get_problem(
        "fx.grader_bug", "fixture_problems"), broken)})
    assert score.review and score.points == 0 and "[REVIEW]" in score.text  # for a person

    raising = GOOD.replace("m = y.abs().max()", "m = y.abs().max()\n        raise ValueError('mine')")
    learner = _judged("fx.q1", raising, ("correctness", "fullgraph"))
    assert learner["status"] == "ok", learner
    message = learner["checks"]["correctness"]["message"]
    assert "ValueError: mine" in message and "cell 5" in message, message
    assert "grader" not in learner["checks"]["fullgraph"]["message"].split("(")[0]



def _graph_job() -> dict:
    return job_for(["fx.q1"], [Cell("cell 5", GOOD)], problem_module="fixture_problems",
                   course_root=TESTS_DIR, timeout_s=120,
                   checks={"fx.q1": ["correctness", "fullgraph", "speed"]})


def _still_serves(the_judge: Judge) -> None:
    """The judge process that met a bad graph grades the next submission as before."""
    after = the_judge.grade(_graph_job()).to_dict()["results"]["fx.q1"]
    assert after["checks"]["correctness"]["ok"] and after["checks"]["fullgraph"]["ok"], after
    assert after["graph_child"]["ended"] == "done"


def test_the_judges_own_work_on_a_graph_has_a_time_limit(monkeypatch):
    """Past its time limit the judge's child that checks the learner's graph is killed: no
    structural point, the reason said, the correctness verdict kept; the judge itself ran none of
    it, so it grades the next submission as before."""
    from grader.isolation.judge import judge_child

    monkeypatch.setattr(judge_child, "work_limit_s", lambda problem, side: 0.05)
    the_judge = Judge()
    result = the_judge.grade(_graph_job()).to_dict()["results"]["fx.q1"]
    assert result["checks"]["correctness"]["ok"]
    for name in ("fullgraph", "speed"):
        assert not result["checks"][name]["ok"]
        assert "stopped checking the graph" in result["checks"][name]["message"]
    assert result["graph_child"]["ended"] == "time" and not the_judge.tainted
    monkeypatch.undo()
    _still_serves(the_judge)


# One graph, correct, with a 192 MiB tensor of zeros alive in it (under the graph budget).
HEAVY = GOOD.replace("return torch.cos(y / (m + 1.0)).exp()",
                     "pad = torch.zeros(48 * 1024 * 1024, device=x.device)\n"
                     "        return torch.cos(y / (m + 1.0)).exp() + pad.sum()")


def test_the_judges_own_work_on_a_graph_has_a_memory_limit(monkeypatch):
    """The child that compiles and runs the learner's graph has an address-space limit of its
    own (here 64 MiB more than it was forked with): a graph that needs more scores no structural
    point, the reason said (the child's own report, or the judge's run of the graph failing to
    allocate: a check that catches the graph's exceptions reports it as the graph's);
    the judge is untouched and grades the next submission as before."""
    from grader.isolation.judge import judge_child

    monkeypatch.setattr(judge_child, "child_memory_bytes", lambda side: 64 * 1024 ** 2)
    the_judge = Judge()
    job = dataclasses.replace(_graph_job(), learner_cells=(Cell("cell 5", HEAVY),))
    result = the_judge.grade(job).to_dict()["results"]["fx.q1"]
    assert result["status"] == "ok" and result["checks"]["correctness"]["ok"], result
    assert result["graph_child"]["ended"] in ("memory", "done"), result["graph_child"]
    said = result["checks"]["fullgraph"]["message"]
    assert "GiB of memory this problem allows" in said or "allocate memory" in said, said
    assert not result["checks"]["fullgraph"]["ok"] and not result["checks"]["speed"]["ok"]
    monkeypatch.undo()
    _still_serves(the_judge)


def test_the_judges_child_dying_otherwise_is_the_graders_failure(monkeypatch):
    """Killed for a reason that is not the graph's limits (here SIGKILL from outside, as the
    machine's OOM killer would): a grader error held for a person, never the learner's 0."""
    from grader.isolation.judge import deciding

    monkeypatch.setattr(deciding, "decide",
                        lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL))
    result = Judge().grade(_graph_job()).to_dict()["results"]["fx.q1"]
    assert result["status"] == "grader_error", result
    assert "not a verdict on your code" in result["message"]
    assert "SIGKILL" in result["message"] and result["graph_child"]["ended"] == "failed"


def test_make_grades_memory_setting_is_the_subjects_own_limit():
    """MEMORY_GB (--memory-gb) reaches the process that runs learner code: the subject reads its
    own address-space limit, as the run's settings hand it down (make grade -> attempt -> job;
    8 GiB, not the judge's default of 6 GiB)."""
    from grader.cohort.attempt import AttemptSettings
    from grader.cohort.settings import GradeSettings, add_arguments, from_arguments
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = from_arguments(parser.parse_args(["--memory-gb", "8"]))
    attempt = AttemptSettings(settings.probed("off"))   # what run_attempt hands grade_notebook
    assert attempt.grade.memory_bytes == 8 * 2 ** 30
    job = job_for(["fx.q1"], [Cell("cell 5", "import resource\n"
                                             "raise ValueError(f'limit={resource.getrlimit("
                                             "resource.RLIMIT_AS)[0]}')\n")],
                  problem_module="fixture_problems", course_root=TESTS_DIR, timeout_s=120,
                  checks={"fx.q1": ["correctness"]}, screen=False, memory_bytes=attempt.grade.memory_bytes)
    result = Judge().grade(job).to_dict()["results"]["fx.q1"]
    assert f"limit={8 * 2 ** 30}" in result["message"], result
