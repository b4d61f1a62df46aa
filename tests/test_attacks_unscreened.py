"""Attacks that got past the screen: attacker code runs *unscreened* inside the subject, for every
kind of problem (inference, fusion, recompiles, the job choice, a training step, a decode loop),
and earns nothing above what the same model earns honestly.

The screen is defence in depth: here it is off (the judge's ``screen`` option, which only the
grader's own tests set: a submission cannot reach it), and the learner's process is the
attacker's. In one cell, before the honest model, it

- replaces the clock, torch.compile, the grader's timing, correctness and graph code in its own
  process;
- starts a thread and a detached process that spin, to slow whatever runs beside them;
- forges its replies to the judge: it claims one compile, no graph breaks, and sends a graph that
  lies (another function where Dynamo refused one; a forbidden operator in the one it captured);
- reads the environment and files into an error message.

The judge checks every answer itself, times only its own compile of the graph after the subject
is gone, and decides every point. Each check's outcome must be no better than the honest run's,
with one documented exception (docs/trust.md, "What remains"): a Python-side counter that makes
Dynamo recompile is visible only inside the subject, so a forged compile count of a model whose
one graph serves every call is believed. The last test pins what that can reach.
"""
from __future__ import annotations

import json
import os
import random
import subprocess

import pytest
import torch

import synthetic_jobs
from grader.cohort.demo import demo_solutions
from grader.isolation.judge.judging import job_for
from grader.isolation.judge.reference_cells import reference_cells
from grader.isolation.judge.steps import Judge
from grader.isolation.cells.source import Cell
from grader.problems import get_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PERSONAS = demo_solutions(ROOT)
# Unique to this run: several checkouts' suites may run at once on one machine.
SPIN_TAG = f"{random.randint(10 ** 6, 10 ** 7)}.25"

ATTACK = f'''
import os, sys, threading, time, json
import grader.checks.timing, grader.checks.correctness, grader.checks.graph_artifact as ga
import grader.isolation.sandbox.channel as channel
from grader.common.wire import Packer
time.perf_counter = lambda: 0.0
grader.checks.timing.compare = lambda *a, **k: None
grader.checks.correctness.compare_output = lambda *a, **k: None
_real_compile = torch.compile
torch.compile = lambda m, **k: _real_compile(m, **k)
def _spin():                 # a core kept busy (not memory: a list grown here once reached
    while True:              # the subject's limit first, under load, and Dynamo failed)
        pass
threading.Thread(target=_spin, daemon=True).start()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{SPIN_TAG}"])
    os._exit(0)
_secrets = dict(os.environ)
_write = channel.write_message

class _Other(torch.nn.Module):
    def forward(self, *args):
        return args[0].float() * 0.0

def _lie(header, blob):
    if "compiles" in header:                       # "I compiled once, nothing raised"
        header = {{**header, "compiles": 1, "hit_limit": False, "failed_call": None,
                   "failure": ""}}
    if "breaks" in header:                         # "no break anywhere"
        header = {{**header, "breaks": [], "graph_count": 1}}
    if "error" in header and "graph_count" in header:   # Dynamo refused: send another function
        other = _Other()
        packer = Packer()
        captured = ga.capture(other, (torch.zeros(4, dtype=torch.long),), model=other)
        header, blob = {{"graph": ga.to_wire(captured, packer)}}, packer.blob()
    elif "graph" in header:                         # the real graph, with a forbidden operator
        graph = json.loads(json.dumps(header["graph"]))
        for node in graph["nodes"]:
            if node.get("op") == "call_function" and node["target"].startswith("aten.add"):
                node["target"] = "aten.as_strided.default"
                break
        header = {{"graph": graph}}
    return header, blob

def _forging(fd, header, blob=b""):
    header, blob = _lie(header, blob)
    _write(fd, header, blob)

channel.write_message = _forging
'''

# Only the compile count, forged (the graph left as captured).
FORGE_COUNT = """
import grader.isolation.sandbox.channel as channel
_write = channel.write_message
channel.write_message = lambda fd, header, blob=b"": _write(
    fd, {**header, "compiles": 1, "hit_limit": False, "failed_call": None, "failure": ""}
    if "compiles" in header else header, blob)
"""

# ps1: the given model answers every call (right on both sides of the `if`); the graph it ships
# is a one-sided rewrite's (one graph, fast, right only on inputs with a positive mean); and it
# claims that the calls as used compiled once and never raised.
ONE_SIDED_GRAPH = """
import grader.checks.graph_artifact as ga
import grader.isolation.sandbox.channel as channel

class _OneSided(Original):
    def forward(self, x):
        h = torch.tanh(self.fc1(x)) * 1.5
        scale = h.abs().max()
        h = h / (scale + 1e-6)
        pos = h > 0
        pos_mean = torch.where(pos, h, 0.0).sum() / pos.sum()
        h = torch.sin(h - pos_mean) * torch.cos(h + pos_mean)
        return torch.tanh(self.fc2(h).exp())

_one_sided, _real_capture = _OneSided().eval(), ga.capture

def _capture(fn, args, *, model, dynamic=None):
    def call(*a):
        with torch.no_grad():
            return _one_sided(*a)
    return _real_capture(call, args, model=_one_sided, dynamic=dynamic)

ga.capture = _capture
_write = channel.write_message
channel.write_message = lambda fd, header, blob=b"": _write(
    fd, {**header, "compiles": 1, "hit_limit": False, "failed_call": None, "failure": "",
         "calls": 201} if "compiles" in header else header, blob)

class FixedModel(Original):
    pass
"""

# problem keys graded together, the solution cell, the honest model (a demo persona), checks
KINDS = {
    "inference": (["ps1.q1"], "ps1-q1-solution", ("ps1", "partial"),
                  ["correctness", "fullgraph", "breaks", "speed"]),
    "fusion": (["ps2.q1"], "ps2-q1-solution", ("ps2", "partial"),
               ["correctness", "fullgraph", "fusion"]),
    "recompiles": (["ps3.q2"], "ps3-q2-solution", None, ["correctness", "fullgraph", "recompiles"]),
    "job": (["ps3.q1"], "ps3-q1-solution", ("ps3", "slow"), ["rule", "job"]),
    "training": (["ps5.q1"], "ps5-q1-solution", ("ps5", "wrong"),
                 ["correctness", "fullgraph", "breaks", "recompiles"]),
    "decode": (["ps6.q1"], "ps6-q1-solution", ("ps6", "partial"),
               ["correctness", "fullgraph", "breaks", "recompiles"]),
}
# Honest models for the kinds the demo has no persona for: a per-sample loop (recompiles for
# every batch size). The job rule is the demo's "slow" one: it never compiles, so the long
# jobs are wrong.
OWN = {
    "recompiles": "class BatchScorer(PerSampleScorer):\n    pass\n",
}


@pytest.fixture(scope="module")
def judge():
    return Judge()   # one for the module: each problem's reference side is built once


def _grade(judge, kind: str, attack: bool) -> dict:
    keys, grade_id, persona, checks = KINDS[kind]
    source = OWN.get(kind) or PERSONAS[persona[0]][persona[1]][grade_id]
    cells = [Cell("cell 7", (ATTACK if attack else "") + source)]
    # ps3 q1 is judged on synthetic figures (its measurement is the judge's own, out of the
    # attack's reach, and a minute of cold compiles)
    job = job_for(keys, cells, course_root=ROOT, timeout_s=240,
                  checks={k: checks for k in keys}, screen=False, budget_s=8.0,
                  measured_jobs={"ps3.q1": synthetic_jobs.figures().to_dict()})
    return judge.grade(job).to_dict()["results"][keys[0]]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_unscreened_attack_earns_nothing_above_the_honest_model(judge, kind):
    honest = _grade(judge, kind, attack=False)
    attacked = _grade(judge, kind, attack=True)
    assert honest["status"] == "ok", honest
    assert honest["subject_leftovers"] == 0
    # The detached process: found, killed, counted. Where the subject ends soon after the attack
    # (the job question only asks its rule), the middle process of the double fork may not have
    # exited yet when the launcher sweeps, and is counted too (seen in clean-clone runs on two
    # busy cores: 2).
    assert attacked["subject_leftovers"] in (1, 2), attacked
    left = subprocess.run(["pgrep", "-f", f"sleep {SPIN_TAG}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a process the attack started outlived its subject"
    if attacked["status"] != "ok":     # e.g. rejected: nothing it sent was used
        return
    for name, outcome in honest["checks"].items():
        got = attacked["checks"][name]
        assert got["ok"] <= outcome["ok"], (kind, name, got["message"][:400])
        if kind == "fusion" and name == "fullgraph":  # its real graph, with as_strided in it
            assert not got["ok"] and "as_strided" in got["message"]
    shown = json.dumps(attacked)
    assert "COURSE_SECRET" not in shown and "/work/" not in shown.replace(ROOT, "")


def test_a_job_starts_with_autograd_on_whatever_the_last_one_left():
    """Autograd's switch is the judge's own state. A graph the judge runs in its own process (on
    a GPU) may turn it off and never on again (``_set_grad_enabled(False)`` is an operator a graph
    may hold); the next job, a training problem whose reference runs backward, still grades."""
    fresh = Judge()     # its ps5 reference side is built inside the job below
    torch.set_grad_enabled(False)   # what such a graph leaves behind
    try:
        result = _grade(fresh, "training", attack=False)
    finally:
        torch.set_grad_enabled(True)
        fresh.zygote.close()
    assert result["status"] == "ok", result.get("message", result)
    assert result["checks"]["correctness"]["ok"] is False  # the "wrong" persona, judged as such
    assert "Traceback" not in json.dumps(result)


def test_what_a_forged_compile_count_can_still_reach(judge):
    """The one claim the judge takes from the subject: how many times Dynamo compiled. A graph
    specialised to one shape or position is caught whatever the subject says (the judge runs it
    on every call); a model that recompiles only because of Python state (a counter) has a graph
    that does serve every call, so a forged count is believed for the recompile check (and the
    speed check that needs it). This test pins that bound: if it fails because the forgery no
    longer pays, the risk is closed: update docs/trust.md and this test."""
    counter = PERSONAS["ps5"]["partial"]["ps5-q1-solution"]   # one graph, a Python counter
    for attack, expected in ((False, False), (True, True)):
        cells = [Cell("cell 7", (FORGE_COUNT if attack else "") + counter)]
        job = job_for(["ps5.q1"], cells, course_root=ROOT, timeout_s=240,
                      checks={"ps5.q1": ["correctness", "recompiles"]}, screen=False)
        result = judge.grade(job).to_dict()["results"]["ps5.q1"]
        assert result["checks"]["recompiles"]["ok"] is expected, result["checks"]["recompiles"]


def test_a_graph_right_only_where_it_is_checked_earns_nothing(judge):
    """The judge runs the graph the subject shipped on every class of inputs the problem tests
    (here both sides of ps1's `if`), not only on the first: the subject's eager answers (the given
    model's, right everywhere) earn only what eager answers earn, which is nothing."""
    job = job_for(["ps1.q1"], [Cell("cell 7", ONE_SIDED_GRAPH)], course_root=ROOT,
                  timeout_s=240, checks={"ps1.q1": ["correctness", "fullgraph", "breaks"]},
                  screen=False)
    result = judge.grade(job).to_dict()["results"]["ps1.q1"]
    checks = result["checks"]
    assert checks["correctness"]["ok"], checks["correctness"]["message"]
    for name in ("fullgraph", "breaks"):
        assert not checks[name]["ok"], checks[name]["message"]
        assert "on inputs with a negative mean" in checks[name]["message"], checks[name]["message"]


# The graph a subject ships, made bigger than the problem needs in two ways: operators added up
# to 19,990 nodes in all (under the wire format's own MAX_NODES of 20,000), or eight 512 MiB
# tensors alive at once. Graded through make grade's run, with and without bubblewrap, in
# tests/test_attacks_escape.py's cohort (each scores 0 with the reason in seconds; the next
# submissions keep their exact scores).
SWOLLEN_GRAPH = """
import grader.isolation.sandbox.channel as channel
_write = channel.write_message

def _swell(header):
    graph = json.loads(json.dumps(header["graph"]))
    nodes, last = graph["nodes"], graph["graph_outputs"][0]
    if {how!r} == "nodes":
        for i in range(19_990 - len(nodes)):
            nodes.append({{"op": "call_function", "name": f"x{{i}}", "target": "aten.add.Tensor",
                          "args": [last, last], "kwargs": {{}}}})
            last = {{"n": f"x{{i}}"}}
        graph["graph_outputs"].append(last)
    else:
        for i in range(8):
            nodes.append({{"op": "call_function", "name": f"x{{i}}", "target": "aten.full.default",
                          "args": [[134_217_000], 1.0], "kwargs": {{"dtype": {{"dtype": "float32"}}}}}})
            graph["graph_outputs"].append({{"n": f"x{{i}}"}})
    return {{**header, "graph": graph}}

import json
channel.write_message = lambda fd, header, blob=b"": _write(
    fd, _swell(header) if isinstance(header.get("graph"), dict) else header, blob)
"""
