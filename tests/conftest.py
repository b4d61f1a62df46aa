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
- Full-size runs belong to ``make bench``, ``make bench-grade`` and ``make gpu-check``.
- ``make test`` runs the suite on parallel workers (pytest-xdist, ``-n 2 --dist loadgroup``):
  most of the suite's time is spent waiting on processes, not computing. A module whose tests
  share a module- or session-scoped fixture of this folder goes to one worker as a whole (modules
  that share a session fixture go together), so no fixture is computed twice; see
  :func:`pytest_collection_modifyitems`. A module marked ``one_worker`` goes as a whole too.
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
    # gus_loop's endless loop runs until the subject's deadline: one shorter than make grade's
    # (measured from the references, with room for slow machines), since the honest subjects of
    # ps2 end in seconds. The measured deadline is tested on its own (tests/test_judged_autograde.py).
    run = grade(folder, ["ps2"], workers=2, subject_timeout_s=60)
    print(f"demo cohort ps2: {time.monotonic() - started:.0f} s")
    return run


# ---------------------------------------------------------------------------------------------
# Expensive independent runs, a few at a time (``from conftest import at_once``)

# Most of the suite's slow runs (a chapter's kernel, an nbgrader validate, a make grade process)
# keep one core busy; on the 2-core box two of them at once take about the time of one.
# COURSE_TEST_JOBS=1 runs them one after another (to time each alone).
TEST_JOBS = max(1, int(os.environ.get("COURSE_TEST_JOBS") or min(2, os.cpu_count() or 1)))


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
# Parallel workers (pytest-xdist): which tests must share one, and which start first

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

# The groups that take minutes (measured in a full `make test` on 2 cores, 2026-12-05: the chapters'
# fixture 228 s, the attack cohort 192 s, the problem sets' validations 184 s, ...), longest
# first: a long group started last would leave the other worker idle at the end. Only an order;
# a group not listed starts after these, a stale entry costs only balance.
LONGEST_FIRST = (
    "test_chapters", "test_attacks", "test_browser", "test_problem_sets", "test_fresh_machine",
    "test_ray", "test_attacks_escape", "test_attacks_unscreened", "test_gradescope",
    "test_judged_autograde", "test_colab_runtime", "test_problem_design", "test_ps7", "test_ps8",
)


def _shared_fixture_keys(item) -> set[str]:
    """What ``item`` shares with other tests: ``module:<file>`` for a module-scoped fixture of
    this folder, ``session:<name>`` for a session-scoped one (pytest's own, such as
    ``tmp_path_factory``, are per worker and cost nothing)."""
    keys = set()
    for name, defs in item._fixtureinfo.name2fixturedefs.items():
        fixturedef = defs[-1]
        if fixturedef.scope not in ("module", "package", "session"):
            continue
        try:
            source = os.path.abspath(inspect.getsourcefile(fixturedef.func) or "")
        except TypeError:
            continue
        if os.path.dirname(source) != TESTS_DIR:
            continue
        keys.add(f"session:{name}" if fixturedef.scope == "session" else f"module:{item.path.name}")
    if item.get_closest_marker("one_worker"):
        keys.add(f"module:{item.path.name}")
    return keys


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Give every test that shares an expensive fixture an ``xdist_group``: a whole module when
    any of its tests uses a module- or session-scoped fixture of this folder (or the module is
    marked ``one_worker``), joined with every other module that uses the same session fixture.
    ``--dist loadgroup`` runs each group on one worker, so such a fixture is computed once; the
    other tests are spread one by one. Under xdist, the groups that take longest run first.
    (tryfirst: before xdist's own hook reads the marks.)"""
    # Union-find over modules and session fixtures.
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    def join(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    for item in items:
        module = f"module:{item.path.name}"
        for key in _shared_fixture_keys(item):
            join(key, module)
    members: dict[str, set[str]] = {}
    for key in parent:
        if key.startswith("module:"):
            members.setdefault(find(key), set()).add(key.removeprefix("module:").removesuffix(".py"))
    group_of = {}
    for modules in members.values():
        name = "+".join(sorted(modules))
        for module in modules:
            group_of[module] = name
    for item in items:
        group = group_of.get(item.path.stem)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return

    def rank(item) -> tuple:
        group = group_of.get(item.path.stem)
        if group is None:
            return (2, 0, "")
        listed = [LONGEST_FIRST.index(m) for m in group.split("+") if m in LONGEST_FIRST]
        return (0, min(listed), "") if listed else (1, 0, group)

    items.sort(key=rank)   # stable: each module's tests keep their order and stay together
