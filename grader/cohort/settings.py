"""What ``make grade`` can be told: every setting declared once, with its default and its help.

:class:`GradeSettings` is the one declaration; the command line of ``python -m grader.cli grade``
is built from its fields (:func:`add_arguments`), and the settings travel as this one object: a
run holds it (:class:`grader.cohort.grade.Run`), each submission's attempt holds it with the
sandbox the run probed (:class:`grader.cohort.attempt.AttemptSettings`), and whatever needs a
setting in another form reads a derived view (:attr:`GradeSettings.memory_bytes`,
:attr:`GradeSettings.demo_student_names`, :meth:`GradeSettings.resolved`) rather than a copy of
the field. The Makefile passes only what the user set (``make grade WORKERS=2``), so a default
lives here alone.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from grader import _files as files
from grader.isolation.sandbox.process import DEFAULT_MEMORY_BYTES


def setting(default: Any, help: str, *, make: str, flag: str | None = None,
            choices: tuple | None = None, repeat: bool = False, minimum: float | None = None,
            existing_file: bool = False) -> Any:
    """A field of :class:`GradeSettings`: its default, the help of its command-line option, the
    ``make grade`` variable that sets it (``make``), the option's name when it is not the
    field's (``--assignment`` for ``assignments``), and what a value must be: at least ``minimum``,
    or a file that exists (``existing_file``; empty: none given)."""
    return dataclasses.field(default=default, metadata={
        "help": help, "flag": flag, "choices": choices, "repeat": repeat, "make": make,
        "minimum": minimum, "existing_file": existing_file})


@dataclasses.dataclass(frozen=True)
class GradeSettings:
    """The options of one ``make grade`` run."""

    course: str = setting(".", "the nbgrader course folder", make="COURSE")
    assignments: tuple = setting((), "grade only this assignment (default: every folder of "
                                     "source/); repeatable", flag="--assignment", repeat=True,
                                 make="ASSIGNMENT")
    workers: int = setting(0, "submissions graded at once, each by a worker with a judge and "
                              "cores of its own; 0: one per idle core, no more than the available "
                              "memory holds at MEMORY_GB plus 2 GiB each, nor than the GPUs, "
                              "nor than one per 4 submissions to grade (the run says how many)",
                           make="WORKERS", minimum=0)
    memory_gb: float = setting(DEFAULT_MEMORY_BYTES / 2 ** 30,
                               "address-space limit of the process that runs a submission's code "
                               "for the judge (its subject), on CPU, in GiB (the self-check's "
                               "too)",
                               make="MEMORY_GB", minimum=1)
    sandbox: str = setting("auto", "confine learner code, each way tried for real first. auto: "
                                   "bubblewrap, else kernel confinement (Landlock, seccomp, a user "
                                   "id of its own); where learner code cannot be confined, "
                                   "real submissions are not graded (the demo "
                                   "cohort runs anyway); bwrap, kernel: that one, required; off: "
                                   "no bubblewrap, and grade whatever this machine offers "
                                   "(printed at the start)",
                           choices=("auto", "bwrap", "kernel", "off"), make="SANDBOX")
    roster: str = setting("", "Canvas's gradebook export (Grades > Export), for names, sections "
                              "and assignment ids in reports/canvas.csv (default: "
                              f"{files.ROSTER} in the course folder, when there is one)",
                          make="ROSTER", existing_file=True)
    canvas_assignments: str = setting("", "CSV nbgrader,canvas mapping nbgrader's assignment "
                                          "names to Canvas's (default: "
                                          f"{files.ASSIGNMENT_MAP} in the course folder, when "
                                          "there is one)", make="CANVAS_ASSIGNMENTS",
                                      existing_file=True)
    canvas_per_question: bool = setting(False, "add a read-only column per graded cell to "
                                               "reports/canvas.csv", make="CANVAS_PER_QUESTION")
    executor: str = setting("local", "local: --workers submissions at once on this machine; ray: "
                                     "each submission a Ray task (one CPU, and one whole GPU on "
                                     "GPU nodes), on --ray-address or a local Ray instance",
                            choices=("local", "ray"), make="EXECUTOR")
    ray_address: str = setting("", "a running Ray cluster (ray start --head prints it; default: "
                                   "the RAY_ADDRESS variable, else a local instance is started)",
                               make="RAY_ADDRESS")
    demo_students: str = setting("", "when submitted/ and downloads/ hold no files: grade only "
                                     "these demo students (comma-separated, e.g. "
                                     "ada_full,fay_crash), or all of them (all); default: all 9 "
                                     "in ps1, four in each other set", make="DEMO")
    regrade: bool = setting(False, "grade every submission again, even those already graded and "
                                   "unchanged (e.g. after fixing a test); grades are replaced, "
                                   "not added", make="REGRADE")

    def resolved(self) -> "GradeSettings":
        """These settings with every path absolute (read once, where the run starts: nbgrader's
        converter changes the working folder while it works)."""
        def path(p: str) -> str:
            return os.path.abspath(p) if p else ""

        return dataclasses.replace(self, course=path(self.course) or os.path.abspath("."),
                                   roster=path(self.roster),
                                   canvas_assignments=path(self.canvas_assignments))

    @property
    def memory_bytes(self) -> int:
        """``memory_gb`` in bytes: the subject's address-space limit on CPU, as the judge's job
        carries it (:attr:`grader.isolation.judge.judge_job.JudgeJob.memory_bytes`)."""
        return int(self.memory_gb * 2 ** 30)

    def probed(self, sandbox: str) -> "GradeSettings":
        """These settings with the sandbox the run probed (``'bwrap'``, ``'kernel'`` or
        ``'off'``, :meth:`grader.isolation.sandbox.process.Isolation.setting`): what each
        submission's attempt is graded with, here or on a Ray node that probes it again."""
        return dataclasses.replace(self, sandbox=sandbox)

    @property
    def demo_student_names(self) -> list[str]:
        """``demo_students`` as names (empty: the demo's default cohort)."""
        return [x for x in self.demo_students.split(",") if x]


DEFAULTS = GradeSettings()


def option_name(field: dataclasses.Field) -> str:
    """The command-line option of a :class:`GradeSettings` field (``--workers``)."""
    return field.metadata["flag"] or "--" + field.name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """One option per field of :class:`GradeSettings`, with its default and help."""
    for field in dataclasses.fields(GradeSettings):
        meta = field.metadata
        flag = option_name(field)
        if meta["repeat"]:
            parser.add_argument(flag, dest=field.name, action="append", default=None,
                                help=meta["help"])
        elif isinstance(field.default, bool):
            parser.add_argument(flag, dest=field.name, action="store_true", help=meta["help"])
        else:
            parser.add_argument(flag, dest=field.name, type=type(field.default),
                                default=field.default, choices=meta["choices"],
                                help=f"{meta['help']} (default: {field.default!r})")


def from_arguments(args: argparse.Namespace) -> GradeSettings:
    """The settings an ``argparse`` namespace built by :func:`add_arguments` holds."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(GradeSettings)}
    values["assignments"] = tuple(values["assignments"] or ())
    return GradeSettings(**values)


def problems(settings: GradeSettings) -> list[str]:
    """What is wrong with ``settings``, one line each, naming the ``make grade`` variable and
    the option (empty when nothing is): a number below its minimum, a file that does not exist,
    a Ray address for the local executor."""
    out = []
    for field in dataclasses.fields(GradeSettings):
        meta, value = field.metadata, getattr(settings, field.name)
        name = f"{meta['make']} ({option_name(field)})"
        if meta["minimum"] is not None and not value >= meta["minimum"]:
            out.append(f"{name} must be at least {meta['minimum']:g}, not {value:g}: {meta['help']}")
        if meta["existing_file"] and value and not os.path.isfile(value):
            out.append(f"{name}: no such file: {value}")
    if settings.ray_address and settings.executor != "ray":
        out.append(f"RAY_ADDRESS (--ray-address) is {settings.ray_address} but EXECUTOR "
                   f"(--executor) is {settings.executor}: add EXECUTOR=ray to grade on that "
                   f"cluster, or leave RAY_ADDRESS empty to grade on this machine")
    return out


def make_help(width: int = 100) -> str:
    """The ``make grade`` variables, each as ``VARIABLE=default`` with its help: what ``make
    help`` prints (read from :class:`GradeSettings`, so it cannot disagree with the options)."""
    import textwrap

    lines = []
    for field in dataclasses.fields(GradeSettings):
        meta, default = field.metadata, field.default
        if isinstance(default, bool):
            shown, text = "", "(any value: yes) " + meta["help"]
        else:
            shown = f"{default:g}" if isinstance(default, (int, float)) else str(default or "")
            text = meta["help"] + (f"; several: {meta['make']}=\"ps1 ps2\"" if meta["repeat"] else "")
        lines += textwrap.wrap(text, width, initial_indent=f"  {meta['make']}={shown}".ljust(26),
                               subsequent_indent=" " * 26, break_on_hyphens=False)
    return "\n".join(lines)


if __name__ == "__main__":   # `make help`, with any Python 3 (nothing here needs the venv)
    print(make_help())
