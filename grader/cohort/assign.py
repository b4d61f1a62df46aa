"""Problem sets: regenerate the student versions in ``release/`` from ``source/``.

``make release`` (``python -m grader.cli release``) runs nbgrader's generate_assignment for each
``source/ps*`` folder, in the course root, without touching the gradebook (``--no-db``), and
overwrites ``release/<assignment>/`` (``--force``), in this process (:func:`generate_assignment`).
``release/`` is committed; the test suite calls :func:`is_release_stale` to fail when someone
edited ``source/`` and forgot ``make release``.

nbgrader shells out to ``alembic`` (and must find ``jupyter``): the interpreter's ``bin/`` is put
first on ``PATH`` for every call (a venv run without activating it otherwise fails there).
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from typing import Iterable
from grader._paths import REPO_ROOT
from grader import _files as files
from grader import _environment as environment

COURSE_ROOT = REPO_ROOT


def nbgrader_env() -> dict:
    """The environment nbgrader runs in: this interpreter's ``bin/`` first on PATH (nbgrader
    shells out to ``alembic``), and no ``COURSE_ROOT`` (each nbgrader run names its course)."""
    env = dict(os.environ)
    bin_dir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    env.pop(environment.ROOT, None)
    return env


def assignments(course_root: str = COURSE_ROOT) -> list[str]:
    """Every problem set in ``source/`` (folders named ps*), sorted."""
    folder = os.path.join(course_root, files.SOURCE)
    if not os.path.isdir(folder):
        return []
    return sorted(name for name in os.listdir(folder)
                  if name.startswith("ps") and os.path.isdir(os.path.join(folder, name)))


def nbgrader(*args: str, cwd: str = COURSE_ROOT, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course folder ``cwd`` (:func:`nbgrader_env`); with ``check``,
    a failure raises with nbgrader's output. The one wrapper of nbgrader's command line
    (``make grade``'s generate_assignment, autograde, feedback and grades CSV run nbgrader's
    converters and plugin in its own process instead: :func:`generate_assignment`,
    :mod:`grader.cohort.judged_autograde`, :mod:`grader.cohort.feedback`)."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, cwd=cwd, env=nbgrader_env(), capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def course_config(course: str):
    """The course's nbgrader configuration (its ``nbgrader_config.py``; empty without one), as
    nbgrader's own apps read it: for the steps that run nbgrader in this process."""
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    if not os.path.exists(os.path.join(course, files.NBGRADER_CONFIG)):
        return Config()
    return PyFileConfigLoader(files.NBGRADER_CONFIG, course).load_config()


GENERATED = ".generated-assignments.json"   # in the course folder: what was generated, from what


def source_digest(assignment: str, course: str) -> str:
    """A digest of what ``generate_assignment`` makes ``assignment`` from: its ``source/`` folder
    and the course's nbgrader configuration."""
    import hashlib

    h = hashlib.sha256()
    folder = os.path.join(course, files.SOURCE, assignment)
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, folder).encode() + b"\0")
            with open(path, "rb") as fh:
                h.update(fh.read() + b"\0")
    config = os.path.join(course, files.NBGRADER_CONFIG)
    if os.path.exists(config):
        with open(config, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def nbgrader_schema_head() -> str:
    """The revision of nbgrader's gradebook schema (its alembic migrations' head), read in this
    process: what nbgrader stamps a new gradebook with."""
    import nbgrader
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", os.path.join(os.path.dirname(nbgrader.__file__),
                                                           "alembic"))
    heads = ScriptDirectory.from_config(config).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"nbgrader's gradebook schema has {len(heads)} heads: {heads}")
    return heads[0]


def new_gradebook(course: str) -> None:
    """Start ``course``'s gradebook where there is none: stamped with nbgrader's schema revision,
    as nbgrader stamps one (its tables come when nbgrader first opens it). nbgrader finds the
    revision by running ``alembic heads`` in a process of its own each time it makes a gradebook
    (2.6 s here: a Python start and its imports); read here once per process."""
    import sqlite3

    path = os.path.join(course, files.GRADEBOOK)
    if os.path.exists(path):
        return
    os.makedirs(course, exist_ok=True)
    made = f"{path}.new-{os.getpid()}"
    with contextlib.closing(sqlite3.connect(made)) as db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        db.execute("INSERT INTO alembic_version (version_num) VALUES (?)",
                   (nbgrader_schema_head(),))
        db.commit()
    try:
        os.link(made, path)    # never over a gradebook made meanwhile (os.replace would be)
    except FileExistsError:
        pass
    finally:
        os.remove(made)


def generate_once(assignment: str, course: str) -> bool:
    """``nbgrader generate_assignment ASSIGNMENT --force`` in ``course`` (its cells into the
    gradebook, the release notebook), unless it was done from the same source into the same
    gradebook before (a file of digests beside it, checked against the gradebook itself).
    Returns whether it ran (:func:`generate_assignment`: 0.1-0.2 s, once nbgrader is imported)."""
    marker = os.path.join(course, GENERATED)
    done = files.read_json_dict(marker)
    digest = source_digest(assignment, course)
    release_folder = os.path.join(course, files.RELEASE, assignment)
    if done.get(assignment) == digest and os.path.isdir(release_folder) \
            and _in_gradebook(assignment, course):
        return False
    new_gradebook(course)
    generate_assignment(assignment, course)
    done[assignment] = digest
    files.write_json_atomic(marker, done)
    return True


# nbgrader's converters change the process's working folder while they work (and put back the
# one they found): one at a time in a process (generate_assignment here, autograde, feedback).
CONVERTING = threading.Lock()


def generate_assignment(assignment: str, course: str, *, database: bool = True) -> None:
    """``nbgrader generate_assignment ASSIGNMENT --force`` in ``course``, run as nbgrader's app
    runs it (its ``GenerateAssignment`` converter, with the course's ``nbgrader_config.py``) but
    in this process: a process of its own spent 2.9 s per set on a Python start and nbgrader's
    imports, the conversion 0.1-0.2 s (8 sets, 2026-12-07). ``database=False``: nbgrader's
    ``--no-db`` (the release notebook only). Raises ``RuntimeError`` with nbgrader's log when it
    fails."""
    import io
    import logging

    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory

    course = os.path.abspath(course)
    text = io.StringIO()
    log = logging.getLogger("grader.generate_assignment")
    log.propagate = False
    log.setLevel(logging.INFO)
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    with CONVERTING:
        log.addHandler(handler)
        try:
            config = course_config(course)
            config.CourseDirectory.root = course   # (the file's may be relative: to this folder)
            if not database:                      # nbgrader's --no-db flag, as it sets it
                config.SaveCells.enabled = False
                config.GenerateAssignment.no_database = True
            coursedir = CourseDirectory(config=config, assignment_id=assignment)
            GenerateAssignment(coursedir=coursedir, config=config, log=log, force=True).start()
        except Exception as exc:  # nbgrader's NbGraderException (logged), a bad config or notebook
            raise RuntimeError(f"generate_assignment {assignment} --force failed in {course} "
                               f"({type(exc).__name__}: {exc}):\n{text.getvalue()[-3000:]}"
                               ) from None
        finally:
            log.removeHandler(handler)
            handler.close()


def _in_gradebook(assignment: str, course: str) -> bool:
    db = os.path.join(course, files.GRADEBOOK)
    if not os.path.exists(db):
        return False
    from nbgrader.api import Gradebook, MissingEntry

    try:
        with Gradebook(files.db_url(course)) as gb:
            gb.find_assignment(assignment)
        return True
    except MissingEntry:
        return False


def release(names: Iterable[str] | None = None, course_root: str = COURSE_ROOT) -> list[str]:
    """Regenerate ``release/<name>/`` from ``source/<name>/`` for each name (default: all).
    Returns the release notebooks written."""
    names = list(names) if names else assignments(course_root)
    written = []
    for name in names:
        if not os.path.isdir(os.path.join(course_root, files.SOURCE, name)):
            raise FileNotFoundError(f"no source/{name} in {course_root}")
        generate_assignment(name, course_root, database=False)
        folder = os.path.join(course_root, files.RELEASE, name)
        for fname in sorted(os.listdir(folder)):
            if fname.endswith(".ipynb"):
                path = os.path.join(folder, fname)
                _normalise(path)
                written.append(path)
    return written


def _normalise(path: str) -> None:
    """Committed notebooks carry no outputs and no execution counts."""
    with open(path, encoding="utf-8") as fh:
        nb = json.load(fh)
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(nb, fh, indent=1, ensure_ascii=False)
        fh.write("\n")


def _cells(path: str) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8") as fh:
        nb = json.load(fh)
    out = []
    for cell in nb["cells"]:
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        out.append((cell.get("cell_type", ""), source))
    return out


def stale_notebooks(course_root: str = COURSE_ROOT) -> list[str]:
    """Release notebooks that differ from what ``make release`` would generate now (by cell type
    and source), or are missing or extra. Empty when ``release/`` is up to date."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="release-check-") as tmp:
        shutil.copy(os.path.join(course_root, files.NBGRADER_CONFIG), tmp)
        shutil.copytree(os.path.join(course_root, files.SOURCE), os.path.join(tmp, files.SOURCE))
        release(course_root=tmp)
        fresh_root = os.path.join(tmp, files.RELEASE)
        committed_root = os.path.join(course_root, files.RELEASE)
        for name in assignments(tmp):
            fresh = sorted(f for f in os.listdir(os.path.join(fresh_root, name))
                           if f.endswith(".ipynb"))
            folder = os.path.join(committed_root, name)
            have = sorted(f for f in os.listdir(folder) if f.endswith(".ipynb")) \
                if os.path.isdir(folder) else []
            for fname in sorted(set(fresh) | set(have)):
                rel = f"release/{name}/{fname}"
                if fname not in have:
                    problems.append(f"{rel} (missing)")
                elif fname not in fresh:
                    problems.append(f"{rel} (no longer in source/)")
                elif _cells(os.path.join(fresh_root, name, fname)) != _cells(
                        os.path.join(folder, fname)):
                    problems.append(f"{rel} (differs from source/)")
    return problems


def is_release_stale(course_root: str = COURSE_ROOT) -> bool:
    """True when ``release/`` is not what ``make release`` would generate from ``source/``."""
    return bool(stale_notebooks(course_root))
