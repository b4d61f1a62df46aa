"""Shared fixtures for the grader's tests.

Every test starts from a clean Dynamo state (``torch._dynamo.reset()``) and runs torch with one
thread: faster and more deterministic on the 2-core box, and what the grader itself uses for
timed CPU measurements. Tests assert structure (graph counts, break causes, kernel counts,
verdicts), never wall-clock time.

Expensive runs are shared, not repeated (``make test`` must stay within 30 minutes on 2 cores):

- ``graded_demo``: ps2's demo cohort graded once per session by ``grade()``; a test that needs
  a graded demo course (its gradebook, report, feedback, CSV) reads this one and grades nothing.
  A test that needs only the pipeline grades one or two submissions of its own, never a cohort.
- ``at_once(fn, items)``: independent runs that each wait on processes of their own (a
  notebook's kernel, an nbgrader or ``make grade`` process, a run_autograder) are computed two at
  a time from one module-scoped fixture, which the parametrized tests read (test_chapters,
  test_problem_sets, test_gradescope, test_fresh_machine); such a fixture runs only what the
  session selected (``request.session.items``), so ``-k`` stays quick.
- The judges' compiler cache is one for the session (``COURSE_JUDGE_CACHE``, set below): each
  set's references compile cold once, whatever number of course folders grade it.
- Full-size runs belong to ``make bench``, ``make bench-grade`` and ``make gpu-check``.
- ``make test`` runs the suite on two parallel workers (pytest-xdist, ``--dist loadfile``): most
  of the suite's time is spent waiting on processes, not computing. Each test file runs on one
  worker, so its module-scoped fixtures are computed once; files that share a session fixture
  (``graded_demo``) are one unit (``SAME_WORKER``), so it is computed once too.
"""
from __future__ import annotations

import inspect
import math
import os
import random
import sys

import pytest
import torch

from grader.checks.timing import Clock

# ``tests/models.py`` is imported as ``models`` by the test files.
sys.path.insert(0, os.path.dirname(__file__))

torch.set_num_threads(1)


def pytest_configure(config):
    # One compiler cache for the judges of every course folder the suite grades (the same sets,
    # many copies): each set's references compile cold once per session, then from cache hits.
    # The fresh-machine and platform tests run make grade with an environment of their own: cold.
    from grader import _environment

    os.environ.setdefault(_environment.JUDGE_CACHE,
                          os.path.join(os.path.dirname(__file__), "artifacts", "judge-cache"))
    # Dynamo logs every step at DEBUG on its structured-trace logger; keep pytest's
    # "Captured log" sections of failing tests readable.
    if config.getoption("log_level", None) is None:
        config.option.log_level = "WARNING"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Forget every compiled function before (and after) each test."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def counting_backend():
    """A Dynamo backend that counts the graphs it is given and runs them eagerly
    (what ``torch._dynamo.testing.CompileCounter`` does)."""
    from torch._dynamo.testing import CompileCounter

    return CompileCounter()


@pytest.fixture
def seeded():
    """A fixed torch seed for tests that need reproducible random inputs."""
    torch.manual_seed(0)
    return 0


# ---------------------------------------------------------------------------------------------
# A deterministic clock for timing tests (``from conftest import FakeClock, pool``)


class FakeClock(Clock):
    """``now()`` reads virtual time; ``sync()`` is recorded in ``log`` as ``("sync", device)``.

    Functions made by :meth:`fn` advance the virtual time by their cost (times a seeded
    log-normal noise factor when ``sigma > 0``) and log ``("call", name, args)``.
    """

    def __init__(self, seed: int = 0, sigma: float = 0.0):
        self.t = 0.0
        self.rng = random.Random(seed)
        self.sigma = sigma
        self.log: list[tuple] = []

    def now(self) -> float:
        return self.t

    def sync(self, device: str) -> None:
        self.log.append(("sync", device))

    def fn(self, name: str, cost: float, output=None):
        """A fake callable named ``name`` costing ``cost`` virtual seconds per call.

        ``output(*args)`` computes its return value (default: None).
        """
        def fake(*args):
            factor = math.exp(self.rng.gauss(0.0, self.sigma)) if self.sigma else 1.0
            self.t += cost * factor
            self.log.append(("call", name, args))
            return output(*args) if output else None

        fake.__name__ = name
        return fake

    def blocks(self) -> list[list[tuple]]:
        """The calls between each pair of syncs (one timed block each), in order."""
        out, current, inside = [], [], False
        for entry in self.log:
            if entry[0] == "sync":
                if inside:
                    out.append(current)
                    current = []
                inside = not inside
            elif inside:
                current.append(entry)
        return out


# The subject deadline of the cohorts the tests grade (graded_demo, the attack and escape
# cohorts), whose verdicts they compare exactly. Not the measured one (60 s for ps2, three times
# its 20 s references): beside the other pytest worker and other load (load average 7 on the
# 2-core box), dee_slow's honest subject, which is slow on purpose, once took 65 s (start 6 s,
# capture 12 s, the rest its slow model, then a chain of 120 wasted functions called 201 times
# eagerly for the recompile count) and lost its 7 points, and so did the attack cohort's
# patch_cell_scores (the same slow code) in a clean-clone `make test`. With a chain of 30 (the
# demo's persona since 2026-12-05) the same subjects took 13-15 s alone and 18-27 s beside the
# other pytest worker. gus_loop's endless loop keeps a core busy for the whole deadline. The
# measured deadline is tested on its own (tests/test_judged_autograde.py).
COHORT_SUBJECT_TIMEOUT_S = 90


@pytest.fixture(scope="session")
def graded_demo(tmp_path_factory):
    """The demo cohort of ps2 (every persona), graded by ``grade()`` as ``make grade`` does:
    shared by the tests of the run (test_grade) and of its report in a browser (test_browser)."""
    import time

    from grader.cohort import demo
    from grader.cohort.grade import grade

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = str(tmp_path_factory.mktemp("demo") / "course")
    demo.build_demo_course(root, ["ps2"], folder=folder)
    started = time.monotonic()
    # gus_loop's endless loop runs until the subject's deadline: a fixed one here, so the tests
    # know the message it leaves. The measured deadline is tested on its own
    # (tests/test_judged_autograde.py).
    run = grade(folder, ["ps2"], workers=2, subject_timeout_s=COHORT_SUBJECT_TIMEOUT_S)
    print(f"demo cohort ps2: {time.monotonic() - started:.0f} s")
    return run


# ---------------------------------------------------------------------------------------------
# Expensive independent runs, a few at a time (``from conftest import at_once``)

# Most of the suite's slow runs (a chapter's kernel, an nbgrader validate, a make grade process)
# keep one core busy; on the 2-core box two of them at once take about the time of one.
# COURSE_TEST_JOBS=1 runs them one after another (to time each alone).
TEST_JOBS = max(1, int(os.environ.get("COURSE_TEST_JOBS") or min(2, os.cpu_count() or 1)))


# Session fixtures meant to run once in every worker (cheap), whoever uses them.
PER_WORKER = ("_basetemp_made_before_any_thread",)


@pytest.fixture(scope="session", autouse=True)
def _basetemp_made_before_any_thread(tmp_path_factory):
    """pytest makes a worker's base temporary folder on first use, and under xdist (a base folder
    given to each worker) it first deletes what is there: two threads of :func:`at_once` asking
    for their first folder at once deleted the other's (chapter 11's records folder vanished
    mid-write in a clean-clone `make test`). Made here, once, before any fixture starts threads."""
    tmp_path_factory.getbasetemp()


def at_once(fn, items, jobs: int | None = None) -> list:
    """``[fn(item) for item in items]``, computed ``jobs`` (default :data:`TEST_JOBS`) at a time
    in threads: for calls that wait on processes of their own (a notebook's kernel, a grading
    run), so the threads only wait. Items are started in the order given (longest first keeps the
    queues even); an exception in a call is raised here, after the others have finished."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs or TEST_JOBS) as workers:
        return list(workers.map(fn, items))


def pool(n: int, size: int = 3) -> list[tuple]:
    """``n`` distinct input tuples; the first element of input ``i`` is ``i``."""
    return [(torch.full((size,), float(i)),) for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Parallel workers (pytest-xdist, ``make test``: ``-n 2 --dist loadfile``)

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

# Test files that share a session-scoped fixture of this folder, so one worker runs them (a file's
# own module-scoped fixtures are computed once anyway: ``--dist loadfile`` runs each file on one
# worker). pytest_collection_modifyitems refuses a session fixture shared across files not listed.
SAME_WORKER = (
    ("test_grade.py", "test_browser.py"),     # graded_demo
)

# The files that take minutes (measured in a full `make test` on 2 cores, 2026-12-05: the chapters'
# fixture 228 s, the attack cohort 192 s, the problem sets' validations 184 s, ...), longest
# first: a long file started last would leave the other worker idle at the end. Only an order;
# a file not listed starts after these, a stale entry costs only balance.
LONGEST_FIRST = (
    "test_chapters.py", "test_attacks.py", "test_grade.py", "test_browser.py",
    "test_problem_sets.py", "test_fresh_machine.py", "test_platforms.py", "test_ray.py",
    "test_attacks_escape.py", "test_attacks_unscreened.py", "test_gradescope.py",
    "test_judged_autograde.py", "test_limits.py", "test_gpu_check.py",
    "test_colab_runtime.py", "test_problem_design.py", "test_ps7.py", "test_ps8.py",
)


def _worker_unit(file: str) -> str:
    """The scheduling unit of a test file: the first file of its SAME_WORKER row, or itself."""
    for row in SAME_WORKER:
        if file in row:
            return row[0]
    return file


@pytest.hookimpl(optionalhook=True)   # a hook of pytest-xdist: unknown without it (-p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile``, with the files of a SAME_WORKER row sent to one worker as one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            folder, name = os.path.split(file)
            return os.path.join(folder, _worker_unit(name))

    return SharedFixtureScheduling(config, log)


def _session_fixtures_of_this_folder(item) -> set[str]:
    """The session-scoped fixtures defined in tests/ that ``item`` uses (pytest's own, such as
    ``tmp_path_factory``, cost nothing)."""
    names = set()
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        if defs[-1].scope != "session":
            continue
        try:
            source = os.path.abspath(inspect.getsourcefile(defs[-1].func) or "")
        except TypeError:
            continue
        if os.path.dirname(source) == TESTS_DIR and name not in PER_WORKER:
            names.add(name)
    return names


def pytest_collection_modifyitems(config, items):
    """Under xdist: refuse a session fixture of this folder that files of two scheduling units
    share (it would be computed once per worker: add a SAME_WORKER row), and put the files that
    take longest first (with ``--no-loadscope-reorder`` the workers take them in this order)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    units_of: dict[str, set[str]] = {}
    for item in items:
        for name in _session_fixtures_of_this_folder(item):
            units_of.setdefault(name, set()).add(_worker_unit(item.path.name))
    split = {name: sorted(units) for name, units in units_of.items() if len(units) > 1}
    if split:
        raise pytest.UsageError(
            f"session fixtures used by files that run on different workers: {split}; "
            "list the files in one row of SAME_WORKER (tests/conftest.py)")

    def rank(item) -> tuple:
        unit = _worker_unit(item.path.name)
        listed = [LONGEST_FIRST.index(f) for f in LONGEST_FIRST if _worker_unit(f) == unit]
        return (min(listed), "") if listed else (len(LONGEST_FIRST), unit)

    items.sort(key=rank)   # stable: each file's tests keep their order


# ---------------------------------------------------------------------------------------------
# Where the suite's cores go

# The suite is CPU-bound on the 2-core box, so its length follows the CPU its tests use, not their
# wall time (a test beside a busy one takes longer without costing more). Each test's CPU seconds,
# its fixtures' setup and teardown included (a module's shared runs fall to its first test), are
# written per worker to tests/artifacts/cpu/ and summed per file by ``python tests/cpu_by_file.py``:
# - ``cpu_s``: every process of this pytest worker's (cgroup v1's cpuacct, where this user may
#   make a group there, as root can): the processes it started and those they started, whether
#   anyone waited for them or not (a subject stopped by its launcher's kill, Ray's daemons, a
#   browser). A process still running when a test ends (a subject started ahead) counts in the
#   tests during which it runs.
# - ``own_s`` and ``children_s`` (getrusage): this process's, and every process it waited for
#   (a grandchild counts once its parent, waited for, waited for it); everywhere, but blind to
#   what nobody waited for.
_CPU: dict[str, dict] = {}
_CPUACCT = "/sys/fs/cgroup/cpuacct"
_cpu_group: str | None = None    # this worker's cpuacct group, where it joined one


def _join_cpu_group() -> str | None:
    """Move this worker into a cpuacct group of its own, where the machine lets it; its folder.
    Only where cpuacct is a hierarchy of its own: mounted with the cpu controller
    (``cpu,cpuacct``), a group would also get a CPU share of its own, and the scheduling the
    tests measure under would change."""
    if not os.path.exists(os.path.join(_CPUACCT, "cpuacct.usage")) \
            or os.path.exists(os.path.join(_CPUACCT, "cpu.shares")):
        return None
    import glob

    for stale in glob.glob(os.path.join(_CPUACCT, "course-tests-*")):   # a worker's that died
        try:
            os.rmdir(stale)          # refused while a process is in it: still in use
        except OSError:
            pass
    folder = os.path.join(_CPUACCT, f"course-tests-{os.getpid()}")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    except OSError:
        return None
    return folder


def _leave_cpu_group(folder: str) -> None:
    try:
        with open(os.path.join(_CPUACCT, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
        os.rmdir(folder)          # refused while a process of the run is left in it
    except OSError:
        pass


def _cpu_now() -> tuple[float | None, float, float]:
    import resource

    group = None
    if _cpu_group:
        try:
            with open(os.path.join(_cpu_group, "cpuacct.usage")) as fh:
                group = int(fh.read()) / 1e9
        except (OSError, ValueError):
            pass
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                        resource.RUSAGE_CHILDREN))
    return group, own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pytest_sessionstart(session):
    # in each process that runs tests: each xdist worker (a session of its own), not their
    # controller, which runs none
    global _cpu_group
    controller = bool(getattr(session.config.option, "numprocesses", None)) \
        and not hasattr(session.config, "workerinput")
    if not controller:
        _cpu_group = _join_cpu_group()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import time

    before, wall = _cpu_now(), time.monotonic()
    yield
    after = _cpu_now()
    row = {"own_s": round(after[1] - before[1], 2), "children_s": round(after[2] - before[2], 2),
           "wall_s": round(time.monotonic() - wall, 2)}
    if before[0] is not None and after[0] is not None:
        row["cpu_s"] = round(after[0] - before[0], 2)
    _CPU[item.nodeid] = row


def pytest_sessionfinish(session):
    global _cpu_group
    if _cpu_group:
        _leave_cpu_group(_cpu_group)
        _cpu_group = None
    if not _CPU:
        return
    import json

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    folder = os.path.join(os.path.dirname(__file__), "artifacts", "cpu")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{worker}.json"), "w") as fh:
        json.dump(_CPU, fh, indent=0)
