"""Grading on a Ray cluster: ``make grade EXECUTOR=ray`` (``RAY_ADDRESS=...`` for a running
cluster; without it a local Ray instance starts).

Each submission is one Ray task with declared resources (:data:`CPUS_PER_SUBMISSION` CPUs, and
on GPU nodes one whole GPU, so two timed runs never share a GPU). Nodes share no filesystem: a
task carries its submission's folder (:func:`stage_submission`); what every task of a set reads
goes once per node through Ray's object store (the set's ``source/``, :func:`stage_source`, and
the run's built references: the judges' compiler cache and measured figures, built from the
node's own compiler cache, kept from one run to the next: :func:`node_cache`); the task returns
the judged result as data (:func:`grade_task`: the judged scores). Each Ray worker process keeps
its judge from one task of the run to the next, as a local worker does (:class:`WorkerJudge`): the
references are built once per worker, not once per submission. A task judges through the same
:func:`grader.cohort.attempt.run_attempt` as a local worker; :func:`ray_attempts` unpacks each finished task into a local folder as an
:class:`~grader.cohort.attempt.Attempt`, and the driver (:func:`grader.cohort.grade.autograde_all`)
has nbgrader record it and merges it like a local one: it stays the only writer of
``gradebook.db``, so resuming, reruns, ``--regrade`` and manual grades behave as with local
workers.

A task whose worker process or node dies is run again by Ray (``max_retries``); its grade is
merged once, when a try finishes. A submission that fails on every try is recorded with the
reason, like a local failure.

Where ``make grade`` runs, and the address it is given (``ray.init``'s ``address``):

- on a node of the cluster (the head, usually): ``RAY_ADDRESS=HEAD:6379`` (the GCS address that
  ``ray start --head`` prints); the driver uses that node's raylet;
- anywhere else (a laptop, a CI machine): ``RAY_ADDRESS=ray://HEAD:10001``, Ray Client, whose
  server ``ray start --head`` starts on port 10001 (``--ray-client-server-port``). A ``HOST:PORT``
  address from a machine that is not a node fails, and the error says to use ``ray://``.

Every node must run the same Ray, Python, torch and grader code as the driver (Ray itself refuses
a driver or node whose Ray or Python version differs; torch and the grader it does not check):
nodes start Ray from this course's venv (``.venv/bin/ray start``, after ``make setup`` at the same
commit), and :meth:`RayExecutor.check_nodes` runs a tiny task on every node before grading and
stops with the differences when one does not match.

``num_cpus=1`` is only a scheduling label (Ray hands out no core ids): a worker process pins
itself, and so its judge and the subjects that judge starts, to one core of its node that no
other grading process on the node holds (:func:`claim_core`: a lock file per core under ``/tmp``,
released with the worker's judge, or when the process ends, even by a crash).

Why one module: what runs on a node (the task bodies, the worker's judge, the core it holds)
and what the driver does with them (the executor, the staging, the unpacking) are two halves of
one protocol; split, a change to what a task carries would touch both files anyway.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
import uuid
from typing import Callable, Iterator

from grader._paths import grader_fingerprint
from grader import _files as files
from grader.cohort import process_folders, ray_address
from grader.cohort.attempt import Attempt, AttemptSettings, device_for, gpu_count, run_attempt
from grader.cohort.collect import Submission
from grader.isolation.sandbox.process import pack_folder, unpack_folder

CPUS_PER_SUBMISSION = 1   # the timed runs use one thread (grader.isolation.judge.steps)
MAX_RETRIES = 2           # tries after a lost worker process or node, before the submission fails
CLIENT_CONNECT_TRIES = 3  # Ray Client connections, when the server dies starting up (_init_ray)
CLIENT_RETRY_PAUSE_S = 2.0
LOCAL_WORKERS_END_S = 10.0  # how long the driver waits for a local instance's workers to end
# What a task sends back from its grading copy (grader.cohort.attempt.run_attempt's folder).
RESULT_PATHS = (files.JUDGED_SCORES_FILE,)


CORE_LOCKS = os.path.join(tempfile.gettempdir(), "course-grader-cores")
# Where a Ray worker process keeps its folders on its node (its judge's compiler cache, a task's
# course copy, a references build): one folder per process, ``PID-STARTTIME``. Ray ends its
# worker processes with SIGKILL (no atexit handler, no ``finally`` runs), so the folder of a
# process that has ended is removed by the next worker process that makes one on the node, and
# by the driver once a local Ray instance it started has stopped (:func:`sweep_worker_folders`).
WORKER_FOLDERS = os.path.join(tempfile.gettempdir(), "course-grader-ray")
NODE_CHECK_TIMEOUT_S = 120
_claimed: list = []   # this process's core lock (kept open: the lock lives as long as the fd)


def claim_core(lock_dir: str = CORE_LOCKS) -> int | None:
    """Pin this process (and what it starts from now on) to one core of those it may run on that
    no other process holds, and hold it until the process ends: a lock file per core in
    ``lock_dir``, taken with ``flock`` (the kernel releases it when the process dies, however it
    dies). Returns the core, or None (and pins nothing) when every allowed core is held: more
    tasks than cores on this node (its ``--num-cpus`` above its cores)."""
    if _claimed:
        return _claimed[0][0]
    os.makedirs(lock_dir, mode=0o777, exist_ok=True)
    allowed = os.sched_getaffinity(0)
    for core in sorted(allowed):
        fd = os.open(os.path.join(lock_dir, f"core-{core}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        os.sched_setaffinity(0, {core})
        _claimed.append((core, fd, allowed))
        return core
    return None


def release_core() -> None:
    """Give back the core :func:`claim_core` took (a Ray worker process runs many tasks)."""
    while _claimed:
        _, fd, allowed = _claimed.pop()
        os.sched_setaffinity(0, allowed)
        os.close(fd)


def worker_folder(root: str | None = None) -> str:
    """This process's folder under ``root`` (default :data:`WORKER_FOLDERS`; made on first use,
    after removing those of processes that have ended): every temporary folder of a Ray worker
    lies in it (:mod:`grader.cohort.process_folders`)."""
    return process_folders.own_folder(root or WORKER_FOLDERS, mode=0o755)


def sweep_worker_folders(root: str | None = None, wait_s: float = 0.0) -> list[str]:
    """Remove the folders under ``root`` (default :data:`WORKER_FOLDERS`) of worker processes
    that have ended, after waiting up to ``wait_s`` seconds for those still running to end (the
    driver, as a local instance stops). Returns the folders removed."""
    return process_folders.sweep(root or WORKER_FOLDERS, wait_s)


def node_report() -> dict:
    """What must match between the driver and every node (and what helps to tell them apart)."""
    import ray
    import torch

    return {"node": socket.gethostname(), "ray": ray.__version__,
            "python": platform.python_version(), "torch": torch.__version__,
            "grader": grader_fingerprint(), "python_executable": sys.executable,
            "bwrap": bool(shutil.which("bwrap")), "cores": len(os.sched_getaffinity(0))}


MUST_MATCH = ("ray", "python", "torch", "grader")


def mismatches(driver: dict, nodes: list[dict]) -> list[str]:
    """One line per node whose Ray, Python, torch or grader code differs from the driver's."""
    out = []
    for report in nodes:
        diff = [f"{k} {report.get(k)} (driver: {driver.get(k)})" for k in MUST_MATCH
                if report.get(k) != driver.get(k)]
        if diff:
            out.append(f"node {report.get('node')} ({report.get('python_executable')}): "
                       + ", ".join(diff))
    return out


def stage(course: str, assignment: str, student: str) -> bytes:
    """Everything judging one submission reads from the course folder, as one archive: the
    set's ``source/`` (the reference) and the submission; not the gradebook, which only the
    driver reads and writes. (A run sends the set's ``source/`` once, :func:`stage_source`, and
    each task only its submission, :func:`stage_submission`.)"""
    return pack_folder(course, [os.path.join(files.SOURCE, assignment),
                                os.path.join(files.SUBMITTED, student, assignment)])


def stage_source(course: str, assignment: str) -> bytes:
    """The set's ``source/`` folder (its reference solution), sent once per run through Ray's
    object store: every task of the set reads the same bytes."""
    return pack_folder(course, [os.path.join(files.SOURCE, assignment)])


def stage_submission(course: str, assignment: str, student: str) -> bytes:
    """One submission's folder: all a grading task carries of its own."""
    return pack_folder(course, [os.path.join(files.SUBMITTED, student, assignment)])


class WorkerJudge:
    """The judge of a Ray worker process, kept from one task to the next as a local worker keeps
    its judge: its reference sides are built once (from the run's compiler cache) and every later
    task of the run only grades. It never runs learner code, as every judge. A task of another
    run, or one given another GPU (Ray sets ``CUDA_VISIBLE_DEVICES`` per task), gets a new
    judge. While it lives the worker process keeps the core it claimed (:func:`claim_core`): the
    judge and the subjects it starts are pinned to that core, so no other task's timing shares
    it; the core is released with the judge (at the process's end, or when replaced)."""

    held: "WorkerJudge | None" = None

    def __init__(self, key: tuple, judge, folder: str):
        self.key, self.judge, self.folder = key, judge, folder

    @property
    def cache(self) -> str:
        """The judge's compiler cache (Inductor's and Triton's), in its folder."""
        return os.path.join(self.folder, "judge-cache")

    @classmethod
    def start(cls, run: str | None, fill: Callable[[str], None]) -> "WorkerJudge":
        """Stop the judge this worker holds, if any, and start the one it holds from now on: for
        the tasks of ``run`` on this task's GPU (``None``: no run to share it with, so no later
        task takes it), pinned to a core of its own, its compiler cache first filled by
        ``fill(cache_folder)``."""
        cls.close_held()
        claim_core()   # before the judge starts: it and its subjects inherit the pinning
        made = cls((object() if run is None else run, os.environ.get("CUDA_VISIBLE_DEVICES")),
                   None, tempfile.mkdtemp(prefix="judge-", dir=worker_folder()))
        try:
            fill(made.cache)
            made.judge = _judge(made.cache)
        except BaseException:
            shutil.rmtree(made.folder, ignore_errors=True)
            raise
        cls.held = made
        return made

    @classmethod
    def for_task(cls, references: dict | None, course: str, assignment: str):
        """This worker's judge for a task of ``references``' run, started (its planning figures
        given, when the run measured some) when the worker has none for that run."""
        key = ((references or {}).get("run"), os.environ.get("CUDA_VISIBLE_DEVICES"))
        held = cls.held
        if held is not None and held.key == key and key[0] is not None:
            return held.judge

        def fill(cache: str) -> None:   # its reference side: from cache hits
            if references and references.get("cache"):
                unpack_folder(references["cache"], cache)

        judge = cls.start(key[0], fill).judge
        if references and references.get("measured_jobs"):
            # The run's figures for planning questions, not measured again on this worker.
            from grader.cohort import scoring

            scoring.build_references(assignment, course, judge, device=device_for(0, gpu_count()),
                                      measured_jobs=references["measured_jobs"])
        return judge

    @classmethod
    def close_held(cls) -> None:
        """Stop this worker's judge, remove its folder and give back its core."""
        held, cls.held = cls.held, None
        if held is not None:
            try:
                held.judge.close()
            finally:
                shutil.rmtree(held.folder, ignore_errors=True)
        release_core()


atexit.register(WorkerJudge.close_held)


def grade_task(payload: bytes, student: str, assignment: str, settings: AttemptSettings,
               references: dict | None, source: bytes | None = None) -> dict:
    """Grade one staged submission on this node (the body of the Ray task): the same
    :func:`grader.cohort.attempt.run_attempt` as local grading, in a course folder unpacked from
    ``payload`` (and ``source``, the set's ``source/`` when the payload holds only the
    submission), by this worker's judge (:class:`WorkerJudge`). Returns the result archive (the
    judged scores), the failure (or None), seconds, phases and the node."""
    from grader.isolation.sandbox import process

    course = tempfile.mkdtemp(prefix=f"{student}-{assignment}-", dir=worker_folder())
    tmp = None
    node = socket.gethostname()
    try:
        if source:
            unpack_folder(source, course)
        unpack_folder(payload, course)
        try:
            isolation = process.probe(settings.sandbox)
        except process.SandboxUnavailable as exc:
            return {"archive": b"", "failure": f"node {node} cannot run the sandbox: {exc}",
                    "seconds": 0.0, "phases": {}, "node": node}
        judge = WorkerJudge.for_task(references, course, assignment)
        core = claim_core()
        sub = Submission(student, assignment,
                         os.path.join(course, files.SUBMITTED, student, assignment))
        attempt = run_attempt(sub, course, settings, isolation=isolation, judge=judge,
                              device=device_for(0, gpu_count()), folder_in=worker_folder())
        tmp = attempt.folder
        return {"archive": pack_folder(tmp, RESULT_PATHS), "failure": attempt.failure,
                "seconds": attempt.seconds, "phases": attempt.phases, "node": node, "core": core}
    finally:
        shutil.rmtree(course, ignore_errors=True)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _judge(cache: str):
    """A judge whose compiler cache (Inductor's and Triton's) is the folder ``cache``."""
    from grader.isolation.judge.judge_process import JudgeProcess

    return JudgeProcess(env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                                 TRITON_CACHE_DIR=os.path.join(cache, "triton")))


def node_cache():
    """This node's judge cache (a :class:`grader.cohort.judge_cache.JudgeCache`, as a course keeps
    its own), kept from one run to the next in a folder of the grading user's own under
    :data:`WORKER_FOLDERS` (or ``COURSE_JUDGE_CACHE``): a run's references compile from the
    previous run's cache hits, with the first, cold, build's deadlines and the planning figures
    the node measured first. None where that folder cannot be the user's own (the name taken by
    another user, a link): the references are then built cold, as on a new node."""
    from grader.cohort.judge_cache import JudgeCache

    worker_folder()   # the shared root, made with its sticky mode
    try:
        return JudgeCache.under(os.path.join(WORKER_FOLDERS, f"judge-cache-{os.geteuid()}"))
    except OSError:
        return None


def references_task(payload: bytes, assignment: str, sandbox: str = "auto") -> dict:
    """The run's references for ``assignment``, built on a grading node from its compiler cache
    (:func:`node_cache`): the set's compiler cache (specific to the machine type, so the
    cluster's nodes should be one type), the planning questions' figures
    (:func:`grader.cohort.scoring.build_references`; those the node measured first, when it has
    them: ``kept``), the seconds that set the subjects' deadlines (``reference_s``: the node's
    first, cold, build's), and the run's id. The judge that built them stays this worker's
    (:class:`WorkerJudge`), and the run's confinement ``sandbox`` is probed here (the probe is
    kept for the process), so the run's first task here grades at once, without starting and
    building another judge or probing."""
    from grader.cohort import scoring
    from grader.isolation.sandbox import process

    course = tempfile.mkdtemp(prefix=f"references-{assignment}-", dir=worker_folder())
    kept = node_cache()
    # One folder per set in the node's cache: what the tasks are sent is this set's compiled
    # code, not the node's. The judge works on a copy: it goes on to compile learners' graphs.
    node_set = os.path.join(kept.folder, "sets", assignment) if kept else None

    def fill(cache: str) -> None:
        if node_set and os.path.isdir(node_set):   # not another run's files being added
            shutil.copytree(node_set, cache, ignore=shutil.ignore_patterns(f"{PARTIAL}*"))

    run = uuid.uuid4().hex
    try:
        unpack_folder(payload, course)
        figures = kept.kept_figures(assignment) if kept else {}
        held = WorkerJudge.start(run, fill)
        built = scoring.build_references(assignment, course, held.judge,
                                          device=device_for(0, gpu_count()),
                                          measured_jobs=figures or None)
        if built.error:            # a judge that failed is not kept: a task starts its own
            WorkerJudge.close_held()
        elif kept:
            _add_new_files(held.cache, node_set)
            kept.keep_figures(assignment, built)
        try:
            process.probe(sandbox)
        except process.SandboxUnavailable:   # said by each task, which probes again
            pass
        return {"cache": pack_folder(held.cache), "seconds": built.seconds,
                "measured_jobs": built.measured_jobs, "kept": bool(figures),
                "reference_s": kept.cold_reference_s(assignment, built) if kept
                else built.reference_s,
                "run": run}
    except BaseException:
        WorkerJudge.close_held()
        raise
    finally:
        shutil.rmtree(course, ignore_errors=True)


PARTIAL = ".partial-"   # the name of a file being added to a node's cache, until it is whole


def _add_new_files(source: str, target: str) -> None:
    """Copy into ``target`` each file of ``source`` it lacks (compiled code is never changed in
    place), each whole or not at all: another run's task may read ``target`` meanwhile."""
    for root, _, names in os.walk(source):
        into = os.path.join(target, os.path.relpath(root, source))
        for name in names:
            if name.startswith(PARTIAL) or os.path.exists(os.path.join(into, name)):
                continue
            os.makedirs(into, exist_ok=True)
            fd, part = tempfile.mkstemp(prefix=PARTIAL, dir=into)
            os.close(fd)
            try:
                shutil.copy2(os.path.join(root, name), part)
                os.replace(part, os.path.join(into, name))
            except BaseException:
                os.unlink(part)
                raise


def _init_ray(ray, address: str | None, client: bool) -> None:
    """``ray.init``; through Ray Client, tried again when the client's server dies starting up.

    Ray Client's proxy starts one server process per connection, and that process sometimes dies
    while it starts (Ray issue #63202, open in Ray 2.60: a race between the proxy's gRPC poller
    and fork); the connection then fails with ``ConnectionAbortedError("Initialization failure
    from server ...")``. Nothing was sent yet, so a second connection is safe.
    """
    kwargs = {} if client else {"include_dashboard": False}
    for attempt in range(1, CLIENT_CONNECT_TRIES + 1):
        try:
            ray.init(address=address, log_to_driver=False, **kwargs)
            return
        except ConnectionAbortedError as exc:
            if not client or attempt == CLIENT_CONNECT_TRIES:
                raise
            print(f"Ray Client: the server for this connection died starting up "
                  f"({str(exc).splitlines()[-1][:200]}); connecting again "
                  f"({attempt + 1}/{CLIENT_CONNECT_TRIES})", file=sys.stderr, flush=True)
            time.sleep(CLIENT_RETRY_PAUSE_S)


class RayExecutor:
    """Submits grading tasks to Ray and hands back finished ones, in the order they finish."""

    def __init__(self, address: str | None = None, gpus_per_submission: float | None = None):
        import builtins

        import ray

        self.ray = ray
        # Ray replaces this process's print() with its own when a task's output reaches the
        # driver (tqdm_ray), for good; keep print as it is, and put it back at shutdown.
        os.environ.setdefault("RAY_TQDM_PATCH_PRINT", "0")
        self._print = builtins.print
        self.local = False
        if not ray.is_initialized():
            # Without an address a local instance starts; RAY_ADDRESS is read by ray.init too.
            address = address or os.environ.get("RAY_ADDRESS") or None
            self.local = address in (None, "local")
            client = bool(address) and address.startswith("ray://")
            why = ray_address.probe_address(address) \
                if address and address not in ("auto", "local") else None
            if why:
                raise RuntimeError(why)
            try:
                _init_ray(ray, address, client)
            except (ConnectionError, RuntimeError) as exc:
                if not address or client or address in ("auto", "local"):
                    raise
                raise RuntimeError(
                    f"could not join the Ray cluster at {address} ({exc}). A HOST:PORT address "
                    f"works only on a machine that is itself a node of the cluster (ray start "
                    f"--address=HOST:PORT); from any other machine connect through Ray Client: "
                    f"RAY_ADDRESS=ray://HEAD:10001") from exc
        cluster_gpus = ray.cluster_resources().get("GPU", 0)
        self.gpus = (1 if cluster_gpus else 0) if gpus_per_submission is None else gpus_per_submission
        self._grade = ray.remote(grade_task).options(
            num_cpus=CPUS_PER_SUBMISSION, num_gpus=self.gpus, max_retries=MAX_RETRIES,
            retry_exceptions=False)
        self._references = ray.remote(references_task).options(
            num_cpus=CPUS_PER_SUBMISSION, num_gpus=self.gpus, max_retries=MAX_RETRIES)
        self.pending: dict = {}
        self.nodes = self.check_nodes()

    def check_nodes(self) -> list[dict]:
        """Run :func:`node_report` once on every alive node with CPUs (pinned to it) and compare
        with this process's: raises ``RuntimeError`` naming each node whose Ray, Python, torch
        or grader code differs. Returns the nodes' reports."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        report = ray.remote(node_report)
        refs = [report.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
                    node_id=n["NodeID"], soft=False)).remote()
                for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU")]
        try:
            reports = ray.get(refs, timeout=NODE_CHECK_TIMEOUT_S)
        except Exception as exc:  # a node that cannot even import the grader fails here
            raise RuntimeError(f"checking the Ray nodes failed ({type(exc).__name__}: "
                               f"{str(exc)[:500]}): every node must start Ray from this course's "
                               f"venv (.venv/bin/ray start ... after make setup)") from exc
        bad = mismatches(node_report(), reports)
        if bad:
            raise RuntimeError(
                "Ray nodes that do not match this machine (start Ray on every node from this "
                "course's venv, .venv/bin/ray start, after make setup at the same commit):\n  "
                + "\n  ".join(bad))
        return reports

    def shutdown(self) -> None:
        """Disconnect (and stop the local instance if this process started it)."""
        import builtins

        self.ray.shutdown()
        builtins.print = self._print
        if self.local:   # its workers were this machine's, ended with the instance
            sweep_worker_folders(wait_s=LOCAL_WORKERS_END_S)

    def describe(self) -> str:
        resources = self.ray.cluster_resources()
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        versions = (f"; every node runs Ray {self.nodes[0]['ray']}, Python "
                    f"{self.nodes[0]['python']}, torch {self.nodes[0]['torch']}" if self.nodes else "")
        return (f"Ray: {len(nodes)} node(s), {resources.get('CPU', 0):g} CPUs, "
                f"{resources.get('GPU', 0):g} GPUs; each submission a task with "
                f"{CPUS_PER_SUBMISSION} CPU" + (f" and {self.gpus:g} GPU" if self.gpus else "")
                + " (pinned to a free core of its node)" + versions)

    def build_references(self, course: str, assignment: str, sandbox: str = "auto") -> dict:
        """:func:`references_task` for ``assignment``, run on a node; what every task starts from
        (``sandbox``: the run's confinement, probed there too)."""
        payload = pack_folder(course, [files.NBGRADER_CONFIG, os.path.join(files.SOURCE, assignment)])
        return self.ray.get(self._references.remote(payload, assignment, sandbox))

    def put(self, value):
        return self.ray.put(value)

    def submit(self, key, course: str, student: str, assignment: str, settings: AttemptSettings,
               references_ref, source_ref=None) -> None:
        """Grade one submission in a task: it carries the submission's folder; the run's
        references and the set's ``source/`` go by reference (sent to a node once)."""
        payload = (stage_submission(course, assignment, student) if source_ref is not None
                   else stage(course, assignment, student))
        ref = self._grade.remote(payload, student, assignment, settings, references_ref,
                                 source_ref)
        self.pending[ref] = key

    def finished(self):
        """Yield (key, result dict or exception) as tasks finish."""
        while self.pending:
            done, _ = self.ray.wait(list(self.pending), num_returns=1)
            for ref in done:
                key = self.pending.pop(ref)
                try:
                    yield key, self.ray.get(ref)
                except Exception as exc:  # every try failed: the caller records the reason
                    yield key, exc

    def cancel(self) -> None:
        for ref in list(self.pending):
            self.ray.cancel(ref, force=True)
        self.pending.clear()


def unpack_result(result: dict) -> str:
    """A finished task's archive unpacked into a new local folder (its grading copy, to merge)."""
    folder = tempfile.mkdtemp(prefix="ray-result-")
    if result.get("archive"):
        unpack_folder(result["archive"], folder)
    return folder


def ray_attempts(executor: RayExecutor, course: str, todo: list[tuple[Submission, str]],
                 settings: AttemptSettings, references: dict
                 ) -> Iterator[tuple[Submission, str, Attempt]]:
    """The Ray executor: each submission a task; yields (submission, digest, attempt) as each
    finishes, the attempt's grading copy unpacked here. A task that failed in every try is an
    attempt with the reason. Interrupted (or closed early), it cancels the tasks left."""
    refs = {a: executor.put(r) for a, r in references.items()}  # sent once per node
    sources = {a: executor.put(stage_source(course, a)) for a in {s.assignment for s, _ in todo}}
    for index, (sub, digest) in enumerate(todo):
        executor.submit(index, course, sub.student, sub.assignment, settings,
                        refs.get(sub.assignment), sources[sub.assignment])
    try:
        for index, result in executor.finished():
            sub, digest = todo[index]
            if isinstance(result, Exception):
                attempt = Attempt(None, f"the grading task failed on Ray in every try "
                                        f"({type(result).__name__}: "
                                        f"{str(result).strip().splitlines()[-1:]})", node="?")
            else:
                attempt = Attempt(unpack_result(result), result["failure"], result["seconds"],
                                  result["phases"], result["node"])
            yield sub, digest, attempt
    except BaseException:  # KeyboardInterrupt here, or GeneratorExit from the caller
        executor.cancel()
        raise
