"""``make grade EXECUTOR=ray``: a two-node Ray cluster on this machine (``ray.cluster_utils``)
grades a small cohort to the scores local workers give (the demo cohort's written-down ones),
with the driver as the only writer of the gradebook, and a Ray worker killed mid-run loses
nothing: Ray runs that task again and its grade is merged once.
"""
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from ray.cluster_utils import Cluster

from grader.cohort import distributed, ray_address
from grader.isolation.sandbox import process
from grader.cohort.demo import build_demo_course, expected_scores
from grader.cohort.grade import grade

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPECTED = expected_scores()
# Three personas of ps2: the full solution (timed), a wrong one (not timed), an empty one.
COHORT = {"ada_full": "ada_full", "eve_wrong": "eve_wrong", "cy_blank": "cy_blank"}


def _grading_task_pids() -> list[int]:
    """Ray worker processes running a grading task (Ray names them after the function)."""
    out = subprocess.run(["pgrep", "-f", "ray::grade_task"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def test_stage_holds_only_what_one_submission_needs(tmp_path):
    course = build_demo_course(REPO, ["ps2"], folder=str(tmp_path / "course"),
                               cohort={"ada_full": "ada_full", "cy_blank": "cy_blank"})
    open(os.path.join(course, "gradebook.db"), "w").close()
    folder = tmp_path / "staged"
    process.unpack_folder(distributed.stage(course, "ps2", "ada_full"), str(folder))
    found = sorted(os.path.relpath(os.path.join(r, f), folder)
                   for r, _, files in os.walk(folder) for f in files)
    assert "gradebook.db" not in found       # only the driver reads and writes the gradebook
    assert any(p.startswith("source/ps2/") for p in found)
    assert any(p.startswith("submitted/ada_full/ps2/") for p in found)
    assert not any(p.startswith("submitted/cy_blank") for p in found)  # no one else's work


def test_a_two_node_cluster_grades_like_local_workers_and_a_killed_worker_loses_nothing(tmp_path):
    course = build_demo_course(REPO, ["ps2"], folder=str(tmp_path / "course"), cohort=COHORT)
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "object_store_memory": 150 * 1024 ** 2})
    cluster.add_node(num_cpus=1, object_store_memory=150 * 1024 ** 2)
    cluster.wait_for_nodes()
    killed: list[int] = []
    stop = threading.Event()

    def kill_one_worker_mid_task():
        started = {}
        while not stop.is_set() and not killed:
            for pid in _grading_task_pids():
                started.setdefault(pid, time.monotonic())
                if time.monotonic() - started[pid] > 4:   # well into its submission
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.5)

    # Ray ends a worker with SIGKILL: nothing of it runs after. What it had on disk (the killed
    # worker's course copy and judge; every worker's judge when the cluster stops) is removed
    # by the next worker that starts on the node, or by the driver of a local instance.
    worker_folders = _worker_folders()
    killer = threading.Thread(target=kill_one_worker_mid_task, daemon=True)
    killer.start()
    try:
        run = grade(course, ["ps2"], executor="ray", ray_address=cluster.address, sandbox="auto")
    finally:
        stop.set()
        killer.join(5)
        cluster.shutdown()
    assert killed, "no grading task was seen running, so none was killed"
    left = _worker_folders() - worker_folders
    assert left, "the workers' folders (their judges) were not kept in WORKER_FOLDERS"
    distributed.sweep_worker_folders(wait_s=distributed.LOCAL_WORKERS_END_S)
    assert not _worker_folders() & left, "a folder of an ended Ray worker is still there"
    assert not any(name.startswith(f"{killed[0]}-") for name in _worker_folders())
    scores = {o.submission.student: o.score for o in run.outcomes}
    assert scores == {s: EXPECTED["ps2"][p] for s, p in COHORT.items()}, \
        [(o.submission.student, o.status, o.reason[:200]) for o in run.outcomes]
    assert all(o.status == "graded" and o.node for o in run.outcomes)
    # The driver merged each submission once: one row per student in the gradebook.
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + os.path.join(course, "gradebook.db")) as gb:
        rows = [(s.student.id, s.assignment.name) for s in gb.assignment_submissions("ps2")]
        totals = {s.student.id: s.score for s in gb.assignment_submissions("ps2")}
    assert sorted(rows) == sorted((s, "ps2") for s in COHORT)
    assert totals == scores


def _worker_folders() -> set[str]:
    try:
        return set(os.listdir(distributed.WORKER_FOLDERS))
    except FileNotFoundError:
        return set()


FOLDER = """
import sys, time
from grader.cohort import distributed
print(distributed.worker_folder(sys.argv[1]), flush=True)
time.sleep(60)
"""


def test_the_folders_of_a_worker_that_ended_are_removed_by_the_next_one(tmp_path):
    import sys

    root = str(tmp_path / "workers")
    workers = [subprocess.Popen([sys.executable, "-c", FOLDER, root], stdout=subprocess.PIPE,
                                text=True, cwd=REPO) for _ in range(2)]
    try:
        killed, running = [p.stdout.readline().strip() for p in workers]
        with open(os.path.join(killed, "judge-cache"), "w") as fh:
            fh.write("what a killed worker leaves")
        # and a subject's folder chain deeper than the interpreter's stack (an attack of
        # tests/test_platforms.py; shutil.rmtree raised RecursionError on it)
        fd = os.open(killed, os.O_RDONLY)
        for _ in range(1200):
            os.mkdir("d", dir_fd=fd)
            fd, parent = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(parent)
        os.close(fd)
        workers[0].kill()
        workers[0].wait()
        assert os.path.isdir(killed)                         # nothing of it ran after SIGKILL
        own = distributed.worker_folder(root)                # the next worker's first folder
        assert not os.path.exists(killed)
        assert os.path.isdir(running) and os.path.isdir(own)  # a live process keeps its own
        assert distributed.worker_folder(root) == own
    finally:
        for p in workers:
            p.kill()
            p.wait()
    assert distributed.sweep_worker_folders(root, wait_s=5) == [running]


def test_the_driver_keeps_its_own_print_and_leaves_no_worker_folder():
    # Ray can replace the driver's print() for good (tqdm_ray); a grading run must leave the
    # process as it found it (the test suite runs make grade in-process).
    import builtins

    before = builtins.print
    executor = distributed.RayExecutor()
    try:
        from ray.experimental import tqdm_ray

        tqdm_ray.instance()            # what a task's progress output triggers on the driver
        # A worker's folder, which Ray's SIGKILL at shutdown leaves: the driver of the local
        # instance removes it once the instance has stopped.
        folder = executor.ray.get(executor.ray.remote(distributed.worker_folder).remote())
        assert os.path.isdir(folder)
    finally:
        executor.shutdown()
    assert builtins.print is before
    assert not os.path.exists(folder)


# ---------------------------------------------------------------------------------------------
# Versions checked on every node, Ray Client (ray://), one core per task

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_every_node_is_checked_and_make_grade_runs_through_ray_client(tmp_path):
    """A two-node cluster with Ray Client's server on the head: make grade from "elsewhere"
    (RAY_ADDRESS=ray://HEAD:PORT) checks every node's Ray, Python, torch and grader code, then
    grades through the client like a driver on a node."""
    port = _free_port()
    course = build_demo_course(REPO, ["ps2"], folder=str(tmp_path / "course"),
                               cohort={"ada_full": "ada_full"})
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "object_store_memory": 150 * 1024 ** 2,
                                      "ray_client_server_port": port})
    cluster.add_node(num_cpus=1, object_store_memory=150 * 1024 ** 2)
    cluster.wait_for_nodes()
    try:
        # Each port given in the other form: which one it is, and the form to use.
        assert ray_address.probe_address(f"ray://{cluster.address}").startswith(
            f"RAY_ADDRESS=ray://{cluster.address} is the cluster's GCS port, not Ray Client's")
        assert ray_address.probe_address(f"127.0.0.1:{port}") == (
            f"RAY_ADDRESS=127.0.0.1:{port} is Ray Client's port: use "
            f"RAY_ADDRESS=ray://127.0.0.1:{port} (or, from a node of the cluster, the GCS port, "
            f"HEAD:6379)")
        executor = distributed.RayExecutor(f"ray://127.0.0.1:{port}")
        try:
            mine = distributed.node_report()
            assert len(executor.nodes) == 2
            for report in executor.nodes:   # nodes started from this venv: all the same
                assert {k: report[k] for k in distributed.MUST_MATCH} == \
                    {k: mine[k] for k in distributed.MUST_MATCH}
            assert f"torch {mine['torch']}" in executor.describe()
        finally:
            executor.shutdown()
        run = grade(course, ["ps2"], executor="ray", ray_address=f"ray://127.0.0.1:{port}",
                    sandbox="auto")
    finally:
        cluster.shutdown()
        # What the next worker on the node would do: the stopped workers' folders go.
        distributed.sweep_worker_folders(wait_s=distributed.LOCAL_WORKERS_END_S)
    assert [(o.submission.student, o.score, o.status) for o in run.outcomes] == \
        [("ada_full", EXPECTED["ps2"]["ada_full"], "graded")]


def test_a_node_that_differs_is_named_with_what_differs():
    mine = distributed.node_report()
    other = dict(mine, node="gpu-7", torch="2.8.0", grader="0123456789abcdef")
    lines = distributed.mismatches(mine, [mine, other])
    assert len(lines) == 1 and lines[0].startswith("node gpu-7")
    assert f"torch 2.8.0 (driver: {mine['torch']})" in lines[0] and "grader 0123" in lines[0]
    assert "ray " not in lines[0] and "python " not in lines[0]


CLAIM = """
import os, sys, time
from grader.cohort import distributed
core = distributed.claim_core(sys.argv[1])
print(core, sorted(os.sched_getaffinity(0)), flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_each_task_process_holds_a_core_of_its_own_until_it_ends(tmp_path):
    import sys

    cores = sorted(os.sched_getaffinity(0))
    locks = str(tmp_path / "locks")
    holders = [subprocess.Popen([sys.executable, "-c", CLAIM, locks, "30"], stdout=subprocess.PIPE,
                                text=True, cwd=REPO) for _ in cores]
    try:
        claimed = []
        for p in holders:
            core, affinity = p.stdout.readline().split(" ", 1)
            claimed.append(int(core))
            assert affinity.strip() == f"[{core}]"          # pinned: its children inherit it
        assert sorted(claimed) == cores                     # one core each, none shared
        extra = subprocess.run([sys.executable, "-c", CLAIM, locks, "0"], capture_output=True,
                               text=True, cwd=REPO, timeout=60)
        assert extra.stdout.split(" ", 1)[0] == "None"     # every core held: not pinned
        holders[0].kill()                                   # a crash releases its core
        holders[0].wait()
        again = subprocess.run([sys.executable, "-c", CLAIM, locks, "0"], capture_output=True,
                               text=True, cwd=REPO, timeout=60)
        assert int(again.stdout.split(" ", 1)[0]) == claimed[0]
    finally:
        for p in holders:
            p.kill()
            p.wait()


def test_a_gcs_address_from_outside_the_cluster_fails_with_the_ray_client_hint(monkeypatch):
    """What ray.init raises there (measured on a local cluster, joined under another node IP:
    ConnectionError "Failed to connect to Ray cluster at HOST:PORT", after about 60 s), stood in
    for by a fake ray.init."""
    import pytest
    import ray

    def refuse(address=None, **kwargs):
        raise ConnectionError(f"Failed to connect to Ray cluster at {address}")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(ray_address, "probe_address", lambda address: None)  # a GCS answers
    with pytest.raises(RuntimeError, match=r"from any other machine connect through Ray Client: "
                                           r"RAY_ADDRESS=ray://HEAD:10001"):
        distributed.RayExecutor("127.0.0.1:6379")


def test_an_address_where_ray_does_not_answer_is_refused_in_one_line_before_ray_init(
        monkeypatch, tmp_path):
    """Nothing listening, or something that is not Ray: one line saying so and what the address
    should be, from the probe (seconds), never from ray.init (which keeps trying for minutes)."""
    import socket

    import pytest
    import ray

    def never(*args, **kwargs):
        raise AssertionError("ray.init was called")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", never)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()                                   # nothing listens there now
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)                                 # accepts, says nothing: not Ray
    try:
        for address, says in [
                (f"127.0.0.1:{port}", f"nothing answers at RAY_ADDRESS=127.0.0.1:{port} "
                                      f"(Connection refused)"),
                (f"ray://127.0.0.1:{port}", f"nothing answers at RAY_ADDRESS=ray://127.0.0.1:{port}"),
                (f"127.0.0.1:{silent.getsockname()[1]}", "but it is not a Ray GCS"),
                (f"ray://127.0.0.1:{silent.getsockname()[1]}", "but it is not Ray Client"),
                ("head-6379", "is not HOST:PORT or ray://HOST:PORT")]:
            with pytest.raises(RuntimeError) as err:
                distributed.RayExecutor(address)
            assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
            assert "ray://HEAD:10001 (Ray Client) from any other machine" in str(err.value)
        # make grade says it before anything else, in one line.
        from grader.cohort.grade import main

        with pytest.raises(SystemExit) as stop:
            main(["--course", REPO, "--executor", "ray", "--ray-address", f"127.0.0.1:{port}"])
        assert str(stop.value.code).startswith("make grade: stopped before grading: nothing "
                                               f"answers at RAY_ADDRESS=127.0.0.1:{port}")
    finally:
        silent.close()


def test_a_ray_client_server_that_dies_starting_up_is_connected_to_again(monkeypatch):
    """Ray issue #63202 (failed this project's CI once): Ray Client's per-connection server dies
    while it starts and ray.init raises ConnectionAbortedError; the driver connects again, and
    gives up with Ray's own error after CLIENT_CONNECT_TRIES."""
    import types

    import pytest

    calls = []

    def init_failing(times):
        def init(address=None, **kwargs):
            calls.append(address)
            if len(calls) <= times:
                raise ConnectionAbortedError("Initialization failure from server:\n"
                                             "psutil.ZombieProcess: PID still exists")
        return types.SimpleNamespace(init=init)

    monkeypatch.setattr(distributed, "CLIENT_RETRY_PAUSE_S", 0)
    distributed._init_ray(init_failing(2), "ray://head:10001", client=True)
    assert calls == ["ray://head:10001"] * 3
    calls.clear()
    with pytest.raises(ConnectionAbortedError, match="Initialization failure"):
        distributed._init_ray(init_failing(3), "ray://head:10001", client=True)
    assert len(calls) == distributed.CLIENT_CONNECT_TRIES
    calls.clear()
    with pytest.raises(ConnectionAbortedError):   # not Ray Client: not Ray's race, no retry
        distributed._init_ray(init_failing(1), "10.1.2.3:6379", client=False)
    assert len(calls) == 1


def test_a_worker_keeps_its_judge_for_the_tasks_of_a_run_and_no_longer(monkeypatch, tmp_path):
    """The references are built once per worker, not once per task: the worker's judge serves
    every task of the run on the same GPU; another run, or another GPU, gets a fresh judge and
    the old one is stopped and its core given back."""
    cores: list[str] = []
    monkeypatch.setattr(distributed, "claim_core", lambda: cores.append("claimed") or 0)
    monkeypatch.setattr(distributed, "release_core", lambda: cores.append("released"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(distributed, "WORKER_FOLDERS", str(tmp_path / "workers"))
    run_a, run_b = {"run": "a", "cache": b""}, {"run": "b", "cache": b""}
    course = str(tmp_path)
    try:
        first = distributed.WorkerJudge.for_task(run_a, course, "ps2")
        assert distributed.WorkerJudge.for_task(run_a, course, "ps2") is first
        folder = distributed.WorkerJudge.held.folder
        other_run = distributed.WorkerJudge.for_task(run_b, course, "ps2")
        assert other_run is not first and first.proc is None      # the old judge was stopped
        assert not os.path.exists(folder)                          # and its cache removed
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
        assert distributed.WorkerJudge.for_task(run_b, course, "ps2") is not other_run
        # A caller with no run to share with gets a judge of its own each time.
        alone = distributed.WorkerJudge.for_task(None, course, "ps2")
        assert distributed.WorkerJudge.for_task(None, course, "ps2") is not alone
    finally:
        distributed.WorkerJudge.close_held()
    assert distributed.WorkerJudge.held is None
    assert cores.count("claimed") == 5 and cores[-1] == "released"


class _BuildingJudge:
    """A judge as :func:`distributed.references_task` sees one, whose cache folder is known."""

    def __init__(self, cache: str):
        self.cache = cache

    def close(self) -> None:
        pass


def test_a_node_builds_the_references_from_its_own_cache_with_the_first_builds_deadlines(
        monkeypatch, tmp_path):
    """A second run on a node compiles the references from the first one's cache: what the
    tasks are sent is that set's compiled code only, the deadlines stay those of the first, cold,
    build, and the planning figures are the ones the node measured first (not measured again)."""
    from grader.cohort import scoring
    from grader.cohort.scoring import BuiltReferences

    import synthetic_jobs

    monkeypatch.delenv("COURSE_JUDGE_CACHE", raising=False)
    monkeypatch.setattr(distributed, "WORKER_FOLDERS", str(tmp_path / "workers"))
    monkeypatch.setattr(distributed, "claim_core", lambda: 0)
    monkeypatch.setattr(distributed, "release_core", lambda: None)
    monkeypatch.setattr(distributed, "_judge", _BuildingJudge)
    # as kept on disk (JSON)
    measured = json.loads(json.dumps({"ps3.q1": synthetic_jobs.figures().to_dict()}))
    given: list = []

    def build(assignment, course, judge, *, device=None, measured_jobs=None):
        given.append(measured_jobs)
        seconds = {"ps3.q2": 30.0 if not os.path.isdir(judge.cache) else 5.0}
        os.makedirs(os.path.join(judge.cache, "inductor"), exist_ok=True)
        with open(os.path.join(judge.cache, "inductor", assignment), "w") as fh:
            fh.write(f"the compiled code of {assignment}")
        return BuiltReferences(seconds, measured_jobs or measured)

    monkeypatch.setattr(scoring, "build_references", build)
    probed: list = []
    monkeypatch.setattr(process, "probe", probed.append)
    payload = process.pack_folder(REPO, ["nbgrader_config.py"])
    first = distributed.references_task(payload, "ps3", "kernel")
    second = distributed.references_task(payload, "ps3", "kernel")
    other = distributed.references_task(payload, "ps2", "kernel")
    assert probed == ["kernel"] * 3   # the run's confinement, probed before its first task
    assert given[:2] == [None, measured]            # measured by the first run only
    assert (first["kept"], second["kept"]) == (False, True)
    assert second["measured_jobs"] == first["measured_jobs"] == measured
    assert second["seconds"] == {"ps3.q2": 5.0}      # from cache hits ...
    assert first["reference_s"] == second["reference_s"] == 30.0   # ... the cold deadlines
    assert first["run"] != second["run"]

    def sent(built: dict) -> list[str]:
        folder = tmp_path / f"sent-{len(os.listdir(tmp_path))}"
        process.unpack_folder(built["cache"], str(folder))
        return sorted(os.listdir(folder / "inductor"))

    assert sent(second) == ["ps3"] and sent(other) == ["ps2"]   # each set its own
    cache = distributed.node_cache().folder
    assert os.stat(os.path.dirname(cache)).st_mode & 0o077 == 0
    assert os.listdir(os.path.join(cache, "sets", "ps3", "inductor")) == ["ps3"]
    # The judge that built the last references grades the run's first task on this worker.
    held = distributed.WorkerJudge.held
    assert held.key[0] == other["run"]
    monkeypatch.setattr(distributed, "_judge", lambda cache: pytest.fail("a second judge"))
    assert distributed.WorkerJudge.for_task(other, str(tmp_path), "ps2") is held.judge
    # A build that failed keeps no judge.
    monkeypatch.setattr(scoring, "build_references",
                        lambda *a, **k: BuiltReferences(error="the judge died"))
    monkeypatch.setattr(distributed, "_judge", _BuildingJudge)
    distributed.references_task(payload, "ps2")
    assert distributed.WorkerJudge.held is None


def test_a_planted_node_cache_folder_is_never_read(monkeypatch, tmp_path):
    """The node's cache lies in a folder every user may create names in: one that is not the
    grading user's own (a link, another user's folder) is not used, and the references are
    built cold, as on a new node."""
    monkeypatch.delenv("COURSE_JUDGE_CACHE", raising=False)
    workers = tmp_path / "workers"
    monkeypatch.setattr(distributed, "WORKER_FOLDERS", str(workers))
    planted = workers / f"judge-cache-{os.geteuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    workers.mkdir()
    planted.symlink_to(elsewhere)
    assert distributed.node_cache() is None and os.listdir(elsewhere) == []
    if os.geteuid() == 0:
        planted.unlink()
        planted.mkdir()
        os.chown(planted, 65534, 65534)
        assert distributed.node_cache() is None and os.listdir(planted) == []
    planted.unlink() if planted.is_symlink() else planted.rmdir()
    assert distributed.node_cache() is not None     # made by the grading user: used


def test_files_added_to_a_node_cache_are_whole_and_a_half_written_one_is_never_taken(tmp_path):
    source, target = tmp_path / "judge", tmp_path / "node"
    (source / "inductor" / "ab").mkdir(parents=True)
    (source / "inductor" / "ab" / "kernel.so").write_bytes(b"new code")
    (source / "inductor" / "old.so").write_bytes(b"the judge's copy")
    (target / "inductor").mkdir(parents=True)
    (target / "inductor" / "old.so").write_bytes(b"kept")
    (source / "inductor" / f"{distributed.PARTIAL}x").write_bytes(b"half of another")
    distributed._add_new_files(str(source), str(target))
    assert (target / "inductor" / "ab" / "kernel.so").read_bytes() == b"new code"
    assert (target / "inductor" / "old.so").read_bytes() == b"kept"      # never changed in place
    assert sorted(os.listdir(target / "inductor")) == ["ab", "old.so"]   # nothing half-made


def test_the_driver_hands_every_ray_task_the_figures_the_grading_node_measured(
        monkeypatch, tmp_path):
    """With Ray the references are built on a grading node; the driver keeps that build's
    planning figures as the run's, so every task's grading jobs carry them
    (grader.cohort.attempt.AttemptSettings.measured_jobs): a worker whose judge restarted
    judges on them instead of measuring its own."""
    import dataclasses

    from grader.cohort import grade as grade_module
    from grader.cohort.collect import Submission
    from grader.cohort.settings import DEFAULTS

    figures = {"ps3.q1": {"break_even": 123.0}}

    class FakeRay:
        def build_references(self, course, assignment, sandbox):
            return {"seconds": {f"{assignment}.q1": 1.0}, "reference_s": 1.0, "run": "r",
                    "measured_jobs": figures if assignment == "ps3" else {}}

    monkeypatch.setattr(grade_module, "already_graded", lambda course, sub: False)
    from grader.cohort import scoring

    monkeypatch.setattr(scoring, "yardstick", lambda *a, **k: "")
    run = grade_module.Run(course=str(tmp_path), assignments=["ps2", "ps3"],
                           submissions=[Submission("s", a, str(tmp_path / a))
                                        for a in ("ps2", "ps3")],
                           settings=dataclasses.replace(DEFAULTS, executor="ray"))
    run.ray = FakeRay()
    grade_module.start_judges(run)
    assert run.measured_jobs == {"ps2": {}, "ps3": figures}
