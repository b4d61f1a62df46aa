"""The checks, one module each: what each is called, what a learner reads, the evidence it needs,
the checks it requires, and the function that decides it (a :class:`grader.checks.results.Check`
named ``CHECK``). :data:`REGISTRY` lists them in the order the judge decides them; nothing else
in the grader lists check names (tests/test_architecture.py holds it).

A problem set may declare checks of its own (``Problem(checks=(..., MY_CHECK))``, docs/design.md
"Adding a check"): they are decided after the registry's, in the order the problem lists them.
"""
from __future__ import annotations

from grader.checks.declared import (breaks, compiled, correctness, custom_op, fullgraph, fusion,
                                    job, operators, recompiles, rule, speed)
from grader.checks.results import Check, Need

# The order the judge decides them in: correctness first (it gates the rest), speed after the
# structural checks (it is credited to one graph that serves every call), a planning question's
# two last.
REGISTRY: tuple[Check, ...] = tuple(m.CHECK for m in (
    correctness, fullgraph, breaks, recompiles, compiled, custom_op, operators, fusion, speed,
    rule, job))
CHECKS: tuple[str, ...] = tuple(c.name for c in REGISTRY)
CHECK_TITLES: dict[str, str] = {c.name: c.title for c in REGISTRY}
BY_NAME: dict[str, Check] = {c.name: c for c in REGISTRY}
# What a problem that names no checks asks for.
DEFAULT_CHECKS: tuple[str, ...] = (correctness.CHECK.name, fullgraph.CHECK.name, speed.CHECK.name)


def in_order(names, own: tuple[Check, ...] = ()) -> tuple[Check, ...]:
    """The checks ``names`` (of the registry, or of ``own``: a problem's own declarations), in
    the order the judge decides them: the registry's, then ``own``'s."""
    names = set(names)
    return tuple(c for c in (*REGISTRY, *own) if c.name in names)


def needs_of(checks: tuple[Check, ...]) -> frozenset:
    """Every :class:`Need` of ``checks``."""
    return frozenset(n for c in checks for n in c.needs)


def with_requirements(checks: tuple[Check, ...], wanted: list[str]) -> list[str]:
    """``wanted``, with every check a wanted one requires (among ``checks``, a problem's) added
    in front: a gate is decided wherever a check it gates is."""
    have = {c.name: c for c in checks}
    added, todo = [], list(wanted)
    while todo:
        check = have.get(todo.pop())
        for name in check.requires if check is not None else ():
            if name in have and name not in wanted and name not in added:
                added.append(name)
                todo.append(name)
    return [*reversed(added), *wanted] if added else list(wanted)


def problems_with(names, own: tuple[Check, ...], problem) -> list[str]:
    """Why ``problem`` cannot ask for the checks ``names`` with its own declarations ``own``
    (an empty list: it can)."""
    known = {*CHECKS, *(c.name for c in own)}
    unknown = set(names) - known
    if unknown:
        return [f"unknown checks {sorted(unknown)}; known: {CHECKS}"]
    clash = [c.name for c in own if c.name in BY_NAME and c is not BY_NAME[c.name]]
    if clash:
        return [f"checks {clash} are the registry's: declare yours under another name"]
    why, seen = [], set()
    for check in in_order(names, own):
        late = [r for r in (*check.requires, *check.after) if r in names and r not in seen]
        if late:
            why.append(f"{check.name!r} is decided before {late}, which it reads: declare it "
                       f"after them")
        if check.allowed is not None and check.allowed(problem):
            why.append(check.allowed(problem))
        seen.add(check.name)
    return why


__all__ = ["REGISTRY", "CHECKS", "CHECK_TITLES", "BY_NAME", "DEFAULT_CHECKS", "Check", "Need",
           "in_order", "needs_of", "with_requirements", "problems_with"]
