"""Run a command under a seccomp filter that makes this machine behave as another platform
does: ``python tests/platform_seccomp.py KIND -- COMMAND...`` (tests/fresh_machine.py builds it).

- ``docker``: what Docker's default profile (moby's profiles/seccomp/default.json, the same as
  containerd's and Kubernetes' RuntimeDefault) refuses of what the grader would use: new
  namespaces (``unshare``, ``setns``, ``clone`` with a namespace flag; ``clone3`` with ENOSYS so
  that the C library falls back to ``clone``), ``mount`` and ``pivot_root``, kernel keyrings,
  BPF and perf events, ``kcmp``, ``userfaultfd``, ``move_pages``. The Landlock calls are allowed,
  as the profile has allowed them since 2022 (moby/moby#43199). bubblewrap then fails, as in a
  container.
- ``no-landlock``: Landlock's three calls fail with ENOSYS, as on a kernel without it.

Filters stack: the grader's own, installed later by its launcher, comes on top of this one.
"""
from __future__ import annotations

import errno
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from grader.isolation.sandbox import confine  # noqa: E402

NUMBERS = {"x86_64": {"unshare": 272, "setns": 308, "mount": 165, "umount2": 166,
                      "pivot_root": 155, "keyctl": 250, "add_key": 248, "request_key": 249,
                      "bpf": 321, "perf_event_open": 298, "kcmp": 312, "userfaultfd": 323,
                      "move_pages": 279},
           "aarch64": {"unshare": 97, "setns": 268, "mount": 40, "umount2": 39,
                       "pivot_root": 41, "keyctl": 219, "add_key": 217, "request_key": 218,
                       "bpf": 280, "perf_event_open": 241, "kcmp": 272, "userfaultfd": 282,
                       "move_pages": 239}}
LANDLOCK = {"landlock_create_ruleset": 444, "landlock_add_rule": 445,
            "landlock_restrict_self": 446}


def program(kind: str, arch: str) -> list[tuple]:
    LD, JEQ, JSET, RET = confine._LD_W_ABS, confine._JEQ, confine._JSET, confine._RET
    allow, err = confine._RET_ALLOW, confine._RET_ERRNO
    prog = [(LD, 0, 0, confine._NR)]
    if kind == "docker":
        for nr in NUMBERS[arch].values():
            prog += [(JEQ, 0, 1, nr), (RET, 0, 0, err | errno.EPERM)]
        prog += [(JEQ, 0, 1, confine.CLONE3), (RET, 0, 0, err | errno.ENOSYS),
                 (JEQ, 0, 3, confine.CLONE[arch]), (LD, 0, 0, 16),
                 (JSET, 0, 1, confine._CLONE_NEW_NAMESPACES), (RET, 0, 0, err | errno.EPERM)]
    elif kind == "no-landlock":
        for nr in LANDLOCK.values():
            prog += [(JEQ, 0, 1, nr), (RET, 0, 0, err | errno.ENOSYS)]
    else:
        raise SystemExit(f"unknown platform filter {kind!r}")
    return prog + [(RET, 0, 0, allow)]


def main() -> None:
    kind, sep, *argv = sys.argv[1:]
    assert sep == "--" and argv, __doc__
    import ctypes
    import struct

    arch = confine.architecture()
    insns = program(kind, arch)
    raw = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *i) for i in insns))
    fprog = confine._SockFprog(len(insns), ctypes.cast(raw, ctypes.c_void_p))
    confine.set_no_new_privs()
    if confine._syscall(confine._SECCOMP[arch], confine.SECCOMP_SET_MODE_FILTER, 0,
                        ctypes.byref(fprog)) != 0:
        raise SystemExit(f"could not install the {kind} filter: {os.strerror(ctypes.get_errno())}")
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
