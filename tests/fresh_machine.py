"""Run a command as on a fresh machine of the kind CI and containers give a new instructor:
bubblewrap not available, root without CAP_SYS_RESOURCE (so no child may raise a limit above its
parent's), or an ordinary user; nothing installed by hand. And as on the platforms courses run
on (:data:`PLATFORMS`): a pod's /proc, masked as container runtimes mask it; Docker's default
seccomp profile; a kernel without Landlock; an older kernel's Landlock (``COURSE_LANDLOCK_ABI``).

bubblewrap is *hidden*, not uninstalled: the command runs in a mount namespace of its own where
``/dev/null`` is bound over the ``bwrap`` binary (it is no longer executable there, so nothing
finds it); the machine itself keeps it. CAP_SYS_RESOURCE is dropped from the bounding set with
``setpriv``, so even root's children cannot get it back. Building this needs root (``unshare`` of
a mount namespace): the tests that use it run as root, as CI does.
"""
from __future__ import annotations

import os
import shutil
import subprocess

NOBODY = 65534  # an ordinary user with no home and no login on Debian and Ubuntu


def available() -> str:
    """'' when fresh-machine commands can be built here, else why not."""
    if os.geteuid() != 0:
        return "building a fresh-machine environment needs root (a mount namespace)"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    return ""


def _closed_folders(path: str) -> list[tuple[str, str]]:
    """``(folder, child)`` for each folder on the way to ``path`` that other users may not
    enter (pyenv under /root, say), with the child of it that leads to ``path``."""
    out, parts = [], os.path.realpath(path).strip("/").split("/")
    for i in range(1, len(parts)):
        folder = "/" + "/".join(parts[:i])
        if not os.stat(folder).st_mode & 0o001:
            out.append((folder, parts[i]))
    return out


def _open_the_way(path: str) -> str:
    """Shell lines (run as root inside the mount namespace) that let an ordinary user reach
    ``path``: a closed folder is replaced there by an open, empty one holding only the way on.
    This machine's Python lives under /root (a developer's pyenv); an ordinary user's own Python
    is readable by that user on a fresh machine, and nothing else is opened."""
    closed = _closed_folders(path)
    # Staging mounts live on a tmpfs over /mnt, inside the namespace: nothing is left on the host.
    lines = ["mount -t tmpfs tmpfs /mnt"] if closed else []
    for n, (folder, child) in enumerate(closed):
        stage = f"/mnt/stage-{n}"
        lines += [f"mkdir -p {stage}", f"mount --bind {folder}/{child} {stage}",
                  f"mount -t tmpfs -o mode=0755 tmpfs {folder}", f"mkdir -p {folder}/{child}",
                  f"mount --bind {stage} {folder}/{child}"]
    return "; ".join(lines)


# What container runtimes do to /proc (runc's default masked and read-only paths): files bound
# over with /dev/null, folders with an empty read-only tmpfs, others made read-only. An
# unprivileged process may then not mount a proc filesystem of its own (the kernel refuses one
# where part of /proc is covered), which is why bubblewrap fails in a pod.
MASKED_PROC_FILES = ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/latency_stats")
MASKED_PROC_FOLDERS = ("/proc/acpi", "/proc/scsi")
READ_ONLY_PROC = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")


def _mask_proc() -> str:
    lines = [f"[ -e {p} ] && mount --bind /dev/null {p}" for p in MASKED_PROC_FILES]
    lines += [f"[ -d {p} ] && mount -t tmpfs -o ro tmpfs {p}" for p in MASKED_PROC_FOLDERS]
    lines += [f"[ -e {p} ] && mount --bind {p} {p} && mount -o remount,bind,ro {p}"
              for p in READ_ONLY_PROC]
    return "; ".join(f"{{ {line}; }}" for line in lines)


# The platforms of the suite's matrix: what each simulates beyond a fresh machine.
PLATFORMS = {
    "pod": "a Kubernetes pod: /proc masked as container runtimes mask it, Docker's default "
           "seccomp profile (no user namespace), an ordinary user",
    "docker": "Docker's default seccomp profile (no user namespace, no mount, no keyring)",
    "no-landlock": "a kernel without Landlock (its system calls refused, as an older kernel or "
                   "a strict container profile does)",
}


def command(argv: list[str], *, user: int | None = None, open_python: bool = False,
            mask_proc: bool = False, seccomp: str = "", hide_bwrap: bool = True) -> list[str]:
    """``argv`` with bubblewrap hidden and CAP_SYS_RESOURCE dropped; as ``user`` when given.
    ``open_python``: let other users run this Python (always so for ``user``), as a container's
    image does where the grader drops learner code to an unprivileged user id. ``mask_proc``:
    /proc masked as a pod's is. ``seccomp``: 'docker' (Docker's default profile, as far as the
    grader meets it) or 'no-landlock' (Landlock's calls refused), a filter put on the command by
    tests/platform_seccomp.py before it starts. ``hide_bwrap=False``: bubblewrap stays, to fail
    as it fails on the platform simulated."""
    import sys

    who = [f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
    # The system's bubblewrap (not one a test unpacked on the command's own PATH).
    setup = ('b=$(PATH=/usr/local/bin:/usr/bin:/bin command -v bwrap) && '
             'mount --bind /dev/null "$b"') if hide_bwrap else "true"
    if mask_proc:
        setup += "; " + _mask_proc()
    if user is not None or open_python or seccomp:
        way = _open_the_way(sys.executable)
        setup += f"; {way}" if way else ""
    if seccomp:
        here = os.path.dirname(os.path.abspath(__file__))
        argv = [sys.executable, os.path.join(here, "platform_seccomp.py"), seccomp, "--", *argv]
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            setup + '; exec "$@"', "sh",
            "setpriv", "--bounding-set=-sys_resource", "--inh-caps=-sys_resource", *who, "--",
            *argv]


def give_to(path: str, user: int) -> None:
    """Make ``path`` (a folder) and everything in it belong to ``user``."""
    for root, dirs, files in os.walk(path):
        os.chown(root, user, user)
        for name in files:
            os.chown(os.path.join(root, name), user, user, follow_symlinks=False)
