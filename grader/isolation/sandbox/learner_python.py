"""A Python interpreter that a user id of its own can run: the subject's, where the grader is
root and bubblewrap is not there to bind the environment into a sandbox.

Where this environment's Python, its standard library and its packages are readable by every
user (Gradescope's image: ``setup.sh`` makes its venv so; a system Python), that is the answer.
Where only the *base* interpreter is closed to other users (a developer's pyenv under a home of
mode 0700, with the venv outside it, as on this machine), a copy of the base interpreter and its
standard library is made once inside the venv (hard links where the filesystem allows, so it
costs no disk; ~64 MB of copies otherwise), with the venv's own ``site-packages`` linked in: the
same interpreter, the same packages, reachable by another user. Where the packages themselves are
closed to other users (the whole environment under a private home), no user id of its own can
run the subject, and :class:`Unavailable` says so plainly.

Nothing here is secret: it is the standard library, the packages the learner installs too and the
grader package (which the sandbox shows learner code as well).
"""
from __future__ import annotations

import functools
import os
import shutil
import sys
import sysconfig

COPY_DIR = "learner-python"
# Parts of the standard library the subject never imports (tests, GUIs, installers).
NOT_COPIED = {"site-packages", "dist-packages", "test", "idlelib", "tkinter", "turtledemo",
              "ensurepip", "lib2to3"}
MARKER = ".made-from"
LAYOUT = "with-headers"     # what a copy holds: one made before this changed is made again


class Unavailable(OSError):
    """No Python here that another user id can run; the message says why and what to do."""


def others_can_reach(path: str, *, execute: bool = False) -> bool:
    """Can a user who owns nothing open ``path`` (every folder on the way enterable by others)?"""
    path = os.path.realpath(path)
    parts = path.strip("/").split("/")
    try:
        for i in range(1, len(parts)):
            if not os.stat("/" + "/".join(parts[:i])).st_mode & 0o001:
                return False
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return bool(mode & (0o001 if execute else 0o004))


def _executable() -> str:
    return os.path.abspath(sys.executable)


def _base_executable() -> str:
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _shared_library() -> str | None:
    """The interpreter's libpython, when it is built as a shared library."""
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        return None
    name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    path = os.path.join(sysconfig.get_config_var("LIBDIR") or "", name or "")
    return path if name and os.path.exists(path) else None


def _packages() -> list[str]:
    paths = sysconfig.get_paths()
    return sorted({p for p in (paths["purelib"], paths["platlib"]) if os.path.isdir(p)})


def _stdlib() -> str:
    return sysconfig.get_paths()["stdlib"]


def packages_reachable(grader_dir: str) -> str:
    """'' when another user can read this environment's packages and the grader package, else
    what it cannot read."""
    closed = [p for p in [*_packages(), os.path.join(grader_dir, "__init__.py")]
              if not others_can_reach(p)]
    return ", ".join(closed)


def runs_as_is() -> bool:
    """Can another user start this very interpreter and import its standard library?"""
    needed = [os.path.join(_stdlib(), "os.py")]
    lib = _shared_library()
    if lib:
        needed.append(lib)
    return others_can_reach(_executable(), execute=True) and \
        others_can_reach(os.path.realpath(_executable()), execute=True) and \
        all(others_can_reach(p) for p in needed)


@functools.lru_cache(maxsize=None)
def for_other_users(grader_dir: str) -> tuple[str, dict[str, str]]:
    """The interpreter another user id runs the subject with, and the environment variables it
    needs (``LD_LIBRARY_PATH`` for a copied libpython). Raises :class:`Unavailable`."""
    closed = packages_reachable(grader_dir)
    if closed:
        raise Unavailable(f"other users cannot read {closed} (the environment or the grader "
                          f"lies in a private folder): move the course and its environment to "
                          f"a folder other users can read, or install bubblewrap")
    if runs_as_is():
        return _executable(), {}
    if sys.prefix == sys.base_prefix:
        raise Unavailable(f"other users cannot run {_executable()} and it is not a venv's "
                          f"(whose base interpreter could be copied)")
    if not os.access(sys.prefix, os.W_OK):
        raise Unavailable(f"other users cannot run the base interpreter of {sys.prefix}, and "
                          f"its venv is not writable here to hold a copy they can run")
    home = os.path.join(sys.prefix, COPY_DIR)
    _ensure_copy(home)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    env = {"LD_LIBRARY_PATH": os.path.join(home, "lib")} if _shared_library() else {}
    return os.path.join(home, "bin", version), env


def _identity() -> str:
    """What a copy was made from: the base interpreter and the packages its site-packages link
    names (a venv copied or moved elsewhere has other packages: its copy is made again)."""
    exe = _base_executable()
    st = os.stat(exe)
    return (f"{exe} {st.st_size} {st.st_mtime_ns} {sys.version} "
            f"{sysconfig.get_paths()['purelib']} {LAYOUT}\n")


def _ensure_copy(home: str) -> None:
    try:
        with open(os.path.join(home, MARKER)) as fh:
            if fh.read() == _identity():
                return
    except OSError:
        pass
    staging = f"{home}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    _make_copy(staging)
    try:
        os.rename(staging, home)
    except OSError:                  # an older copy is there, or another process made one
        old = f"{home}.{os.getpid()}.old"
        try:
            os.rename(home, old)
            os.rename(staging, home)
        finally:
            shutil.rmtree(old, ignore_errors=True)
            shutil.rmtree(staging, ignore_errors=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _make_copy(home: str) -> None:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for folder in ("bin", "lib"):
        os.makedirs(os.path.join(home, folder), mode=0o755)
    os.chmod(home, 0o755)
    _link_or_copy(_base_executable(), os.path.join(home, "bin", version))
    lib = _shared_library()
    if lib:
        _link_or_copy(os.path.realpath(lib), os.path.join(home, "lib", os.path.basename(lib)))
    source, target = _stdlib(), os.path.join(home, "lib", version)
    for root, dirs, files in os.walk(source):
        rel = os.path.relpath(root, source)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in NOT_COPIED and not d.startswith("config-")]
        os.makedirs(os.path.join(target, rel), mode=0o755, exist_ok=True)
        for name in files:
            src, dst = os.path.join(root, name), os.path.join(target, rel, name)
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            else:
                _link_or_copy(src, dst)
    # The C headers: Inductor's C++ kernels for the CPU include Python.h from the interpreter's
    # own prefix, which is the copy's.
    headers = sysconfig.get_paths()["include"]
    if os.path.isdir(headers):
        shutil.copytree(headers, os.path.join(home, "include", os.path.basename(headers)),
                        copy_function=_link_or_copy)
        os.chmod(os.path.join(home, "include"), 0o755)
    # The venv's own packages, as they are (the landmark lib/pythonX.Y/os.py makes the copy its
    # own prefix; its site-packages is the venv's).
    os.symlink(sysconfig.get_paths()["purelib"], os.path.join(target, "site-packages"))
    with open(os.path.join(home, MARKER), "w") as fh:
        fh.write(_identity())
