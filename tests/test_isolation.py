"""The fresh-process grader: honest solutions pass, cheats and crashes are caught with reasons.

Uses the small problem in tests/fixture_problems.py ("fx.q1": remove an `.item()` break).
"""
import os
import subprocess
import textwrap

import pytest

from grader.checks import _torch_internals as ti
from grader.isolation.check import CheckFailed, evaluate
from grader.isolation.source import Cell

TESTS_DIR = os.path.dirname(__file__)

GOOD = """
class Fixed(Original):
    def forward(self, x):
        y = torch.sin(x) * self.scale
        m = y.abs().max()
        return torch.cos(y / (m + 1.0)).exp()
"""


def run(source: str, checks=None, timeout_s: float = 180, **kw):
    return evaluate("fx.q1", cells=[Cell("cell 5", textwrap.dedent(source))],
                    problem_module="fixture_problems", course_root=TESTS_DIR,
                    timeout_s=timeout_s, checks=checks, **kw)


def test_honest_solution_passes_every_check():
    ev = run(GOOD)
    assert ev.status == "ok", ev.result
    for name in ("correctness", "fullgraph", "breaks"):
        assert ev.ok(name), ev.message(name)
    assert ev.verdict("speed") in ("pass", "inconclusive")
    speed = ev.outcome("speed")
    assert speed["trials"] >= 11 and speed["with_reference"] is False


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
    # The worker has the course root on its path: put the fixture problem set there.
    (tmp_path / "fixture_problems.py").write_text(open(os.path.join(TESTS_DIR, "fixture_problems.py")).read())
    return str(tmp_path)


def test_reference_is_measured_in_the_same_run(course_with_reference):
    ev = evaluate("fx.q1", cells=[Cell("cell 5", GOOD)], problem_module="fixture_problems",
                  course_root=course_with_reference, checks=["correctness", "speed"])
    assert ev.status == "ok", ev.result
    speed = ev.outcome("speed")
    assert speed["with_reference"] is True
    names = [c["name"] for c in speed["conditions"]]
    assert "speedup relative to reference" in names
    assert set(speed["ms_per_call"]) == {"baseline", "learner", "reference"}


# Learner code that looks for the compiled reference: it raises (a learner error) if it finds
# the folder the prepared cache was unpacked to, or any generated source of the reference.
SNOOP_REFERENCE = """
import glob, os, tempfile
_tmp = os.environ.get("TMPDIR") or tempfile.gettempdir()
_seen = [p for p in glob.glob(os.path.join(_tmp, "**", "*"), recursive=True)
         if "inductor-reference" in p]
assert not _seen, f"found the reference's compiled code: {_seen[:3]}"
"""


def test_a_prepared_reference_gives_the_same_verdicts_and_is_gone_before_learner_code(
        course_with_reference):
    # make grade compiles the baseline and reference once per run (check.prepare) and sends
    # their compiler cache to each submission's worker, which unpacks it, compiles from it and
    # removes it before any learner code runs.
    from grader import check
    from grader.isolation import isolate, verify
    from grader.problems import get_problem

    prepared = check.prepare("fx.q1", course_root=course_with_reference,
                             problem_module="fixture_problems")
    assert prepared is not None and prepared["reference_first_s"] > 0
    assert len(prepared["cache"]) > 1000   # compiled kernels, packed
    ev = evaluate("fx.q1", cells=[Cell("cell 5", GOOD)], problem_module="fixture_problems",
                  course_root=course_with_reference, checks=["correctness", "speed"],
                  prepared=prepared, cache=False)
    assert ev.status == "ok", ev.result
    assert ev.outcome("speed")["with_reference"] is True
    assert ev.verdict("speed") in ("pass", "inconclusive")
    phases = ev.result["phases"]
    assert phases["reference compile"] < phases["compiler warm-up"] + 5  # a cache hit, not a build
    # The learner's code cannot find the reference's compiled code (static check off, as only
    # the trusted parent can: the folder must be gone, not merely forbidden to name).
    spec = {"problem": "fx.q1", "problem_module": "fixture_problems", "static_check": False,
            "learner_cells": [{"label": "cell 5", "source": SNOOP_REFERENCE + GOOD}],
            "reference_cells": [c.to_dict() for c in check.reference_cells(
                get_problem("fx.q1", "fixture_problems"), course_with_reference)],
            "prepared": prepared, "device": "cpu", "checks": ["correctness", "speed"]}
    result = isolate.run_worker(spec, timeout_s=180)
    result = verify.verify(get_problem("fx.q1", "fixture_problems"), result,
                           checks=spec["checks"], with_reference=True, device_class="cpu")
    assert result["status"] == "ok", result


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


def test_wrong_outputs_fail_correctness_and_are_not_timed():
    ev = run("""
    class Fixed(Original):
        def forward(self, x):
            return torch.cos(torch.sin(x) * self.scale).exp()
    """, checks=["correctness", "speed"])
    assert not ev.ok("correctness")
    assert "differs from the reference" in ev.message("correctness")
    assert ev.verdict("speed") == "fail" and "outputs are wrong" in ev.message("speed")
    assert ev.points("speed", 3) == 0.0


def test_code_that_raises_while_timed_fails_speed_and_keeps_the_other_checks():
    # A call counter: under fullgraph=True (how speed is timed) every call recompiles until
    # Dynamo raises at its recompile limit, and past 12 calls forward raises by itself. The
    # first calls are right: correctness keeps its pass; speed fails with the reason.
    ev = run("""
    class Fixed(Original):
        calls = 0
        def forward(self, x):
            self.calls = self.calls + 1
            if self.calls > 12:
                raise RuntimeError("too many calls")
            y = torch.sin(x) * self.scale
            m = y.abs().max()
            return torch.cos(y / (m + 1.0)).exp()
    """, checks=["correctness", "speed"])
    assert ev.status == "ok", ev.result
    assert ev.ok("correctness")
    assert ev.verdict("speed") == "fail"
    # torch 2.7+ runs the raise and reports it; 2.6 traces it and stops at "Observed exception"
    assert ("your code raised" in ev.message("speed")
            or not ti.torch_at_least(2, 7) and "Observed exception" in ev.message("speed")), \
        ev.message("speed")


def test_wrong_shape_is_reported_plainly():
    ev = run("""
    class Fixed(Original):
        def forward(self, x):
            return x[:, :10]
    """, checks=["correctness"])
    assert "shape (64, 10), expected (64, 256)" in ev.message("correctness")


CHEATS = [
    ("import time\ntime.perf_counter = lambda: 0.0", "time.perf_counter"),
    ("torch.cuda.synchronize = lambda *a, **k: None", "torch.cuda.synchronize"),
    ("_real = torch.compile\ntorch.compile = lambda m, **k: m", "torch.compile"),
    ("import grader.checks.timing\ngrader.checks.timing.compare = lambda *a, **k: None", "grader.checks.timing.compare"),
    ("import torch.nn.functional as F\n_g = F.gelu\nF.gelu = lambda x, **k: _g(x).clone()",
     "torch.nn.functional.gelu"),
    ("import sys\nsys.setprofile(lambda *a: None)", "sys.profile"),
    ("import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()",
     "background thread"),
    ("import json\n_d = json.dumps\njson.dumps = lambda *a, **k: _d({'status': 'ok'})",
     "json.dumps"),
    ("import grader.isolation.check\ngrader.isolation.check.Evaluation.require = lambda self, name: None",
     "grader.isolation.check.Evaluation.require"),
    ("torch._dynamo.config.suppress_errors = True", "config.torch._dynamo.config.suppress_errors"),
    ("import builtins\nbuiltins.print = lambda *a, **k: None", "builtins.print"),
]


@pytest.mark.parametrize("cheat, replaced", CHEATS)
def test_the_static_check_refuses_each_cheat_before_anything_runs(cheat, replaced):
    ev = run(cheat + "\n" + GOOD, checks=["correctness", "speed"])
    assert ev.status == "refused", ev.result
    assert "cell 5, line " in ev.result["message"]
    assert not ev.ok("speed") and ev.points("speed", 3) == 0.0


@pytest.mark.parametrize("cheat, replaced", CHEATS)
def test_the_snapshot_catches_each_cheat_the_static_check_would_miss(cheat, replaced):
    # The worker itself, with its static check turned off (only the trusted parent can):
    # the snapshot taken before the learner's code and compared after it still catches it.
    from grader.isolation import isolate, verify
    from grader.problems import get_problem

    spec = {"problem": "fx.q1", "problem_module": "fixture_problems", "static_check": False,
            "learner_cells": [{"label": "cell 5", "source": cheat + "\n" + GOOD}],
            "reference_cells": None, "device": "cpu", "checks": ["correctness", "speed"]}
    result = isolate.run_worker(spec, timeout_s=180)
    result = verify.verify(get_problem("fx.q1", "fixture_problems"), result,
                           checks=spec["checks"], with_reference=False, device_class="cpu")
    assert result["status"] == "tampered", result
    assert replaced in result["message"]


def test_a_change_made_while_being_timed_is_caught_after_that_check():
    # The snapshot is compared after every call into learner code, not only after loading.
    from grader.isolation import isolate

    source = GOOD.replace("        y = torch.sin(x) * self.scale",
                          "        torch.Tensor.sum = torch.Tensor.mean\n"
                          "        y = torch.sin(x) * self.scale")
    spec = {"problem": "fx.q1", "problem_module": "fixture_problems", "static_check": False,
            "learner_cells": [{"label": "cell 5", "source": source}], "reference_cells": None,
            "device": "cpu", "checks": ["correctness"]}
    result = isolate.run_worker(spec, timeout_s=180)
    assert result["status"] == "tampered", result
    assert "torch.Tensor.sum" in result["message"]


def test_patching_the_clock_in_the_notebook_does_not_reach_the_measurement():
    # The learner's kernel patched time.perf_counter in another cell: only the solution cell's
    # source travels to the fresh process, so the measurement is honest.
    import time

    real = time.perf_counter
    time.perf_counter = lambda: 0.0
    try:
        ev = run(GOOD, checks=["correctness", "speed"])
    finally:
        time.perf_counter = real
    assert ev.status == "ok"
    assert ev.outcome("speed")["ms_per_call"]["learner"] > 0


def test_memoising_outputs_is_caught_by_fresh_inputs_and_output_rechecks():
    ev = run("""
    class Fixed(Original):
        _cache = {}
        def forward(self, x):
            if "out" not in Fixed._cache:          # cache the first answer, return it forever
                y = torch.sin(x) * self.scale
                Fixed._cache["out"] = torch.cos(y / (y.abs().max() + 1.0)).exp()
            return Fixed._cache["out"]
    """, checks=["correctness", "speed"])
    assert not ev.ok("correctness")
    assert ev.verdict("speed") == "fail"


def test_memoising_only_after_warmup_earns_no_speed():
    # Correct for the first few calls (the correctness check), then replays a cached answer.
    # Timed under fullgraph=True, the Python-side counter recompiles on every call until Dynamo
    # gives up; and were it timed, the outputs of the timed runs are checked again.
    ev = run("""
    class Fixed(Original):
        calls = [0]
        store = {}
        def forward(self, x):
            self.calls[0] += 1
            if self.calls[0] > 12 and "last" in self.store:
                return self.store["last"]
            y = torch.sin(x) * self.scale
            self.store["last"] = torch.cos(y / (y.abs().max() + 1.0)).exp()
            return self.store["last"]
    """, checks=["correctness", "speed"])
    assert ev.ok("correctness"), ev.message("correctness")
    assert ev.verdict("speed") == "fail", ev.message("speed")


def _unscreened(source: str, checks=("correctness",), timeout_s: float = 60) -> dict:
    """The worker on ``source`` with its static check off (only the trusted parent can turn
    it off): to test the containment behind the static check."""
    from grader.isolation import isolate

    spec = {"problem": "fx.q1", "problem_module": "fixture_problems", "static_check": False,
            "learner_cells": [{"label": "cell 5", "source": source}], "reference_cells": None,
            "device": "cpu", "checks": list(checks)}
    return isolate.run_worker(spec, timeout_s=timeout_s)


def test_a_crash_is_refused_and_contained():
    ev = run("import os\nos._exit(3)\n", timeout_s=60)
    assert ev.status == "refused" and "cell 5, line 1" in ev.result["message"]
    assert ev.points("speed", 3) == 0.0 and not ev.ok("correctness")
    result = _unscreened("import os\nos._exit(3)\n")
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
    assert "did not finish within 15 s" in ev.result["message"]


def test_a_leftover_process_does_not_outlive_the_submission():
    # A double-forked, setsid child that would sleep on: nothing a submission started may run
    # after its worker ends (sandboxed: the PID namespace; without: the environment token).
    import random

    for mode in ("auto", "off"):
        tag = f"{random.randint(10 ** 6, 10 ** 7)}.5"
        source = (f"import os\n"
                  f"if os.fork() == 0:\n"
                  f"    os.setsid()\n"
                  f"    if os.fork() == 0:\n"
                  f"        os.execv('/bin/sleep', ['sleep', {tag!r}])\n"
                  f"    os._exit(0)\n")
        from grader.isolation import isolate

        spec = {"problem": "fx.q1", "problem_module": "fixture_problems", "static_check": False,
                "learner_cells": [{"label": "cell 5", "source": source + GOOD}],
                "reference_cells": None, "device": "cpu", "checks": ["correctness"]}
        result = isolate.run_worker(spec, timeout_s=60, sandbox_mode=mode)
        assert result["status"] == "ok", result
        left = subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True, text=True)
        assert left.stdout.strip() == "", f"a process of the submission kept running ({mode})"


def test_memory_blowup_is_contained():
    # 8 GiB against the default 6 GiB address-space limit of the grading process.
    ev = evaluate("fx.q1", cells=[Cell("cell 5", "big = torch.empty(2 * 1024**3, dtype=torch.float32)\n")],
                  problem_module="fixture_problems", course_root=TESTS_DIR, timeout_s=120)
    assert ev.status in ("learner_error", "crashed"), ev.result
    assert "memory" in ev.result["message"].lower() or "MemoryError" in ev.result["message"]


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


def test_functions_dynamo_adds_or_removes_are_not_tampering():
    """Dynamo installs ``__compiled_fn_*`` into the globals of the module it compiles from (a
    grader module, for a fusion report) and drops them again: neither is learner tampering.
    (Regression: calibrating ps2 reported its own reference as tampering.)"""
    import threading


    from grader.isolation import worker

    threads = {t.ident for t in threading.enumerate()}
    ti.__dict__["__compiled_fn_1_test"] = lambda: None
    try:
        before = worker.snapshot()
    finally:
        del ti.__dict__["__compiled_fn_1_test"]
    assert worker.tampering(before, threads) == []
    ti.__dict__["__compiled_fn_2_test"] = lambda: None
    try:
        assert worker.tampering(before, threads) == []
    finally:
        del ti.__dict__["__compiled_fn_2_test"]
    ti.__dict__["recompile_limit"], saved = (lambda: 99), ti.recompile_limit
    try:  # a real replacement is still caught
        assert worker.tampering(before, threads) == ["grader.checks._torch_internals.recompile_limit"]
    finally:
        ti.recompile_limit = saved
