"""What a job of N calls costs each way of running a model: every compile mode's cold first call
and its time per call, measured in rounds so that the machine's other work moves them little,
and the break-even they give with its spread from round to round.

One measurement, used both by the judge (ps3 q1's hidden jobs are judged on it:
:func:`grader.isolation.judge.reference_side.measure_jobs`) and by the learner's exploration cell
(:func:`measure_modes`), so that a learner who measures carefully measures what the judge does.

How it is measured (:func:`measure`), and why:

- **Rounds.** Each round compiles every way afresh from a cold compiler cache and times its first
  call (compile included), then times every way's calls, interleaved (:func:`grader.checks.timing.compare`);
  the round's figures give one break-even. A round's compiles and its timing see the same load,
  and the rounds' break-evens show how far the machine's load moved the figures while it measured.
- **The least of the cold compiles, the median of the calls.** A compile slowed by other work is
  only ever slower, so the least of the rounds' compiles is the one least disturbed; per-call
  times are the median of every interleaved trial of every round.
- **One core on a CPU.** Calls run on one thread (the judge's rule for every CPU timing,
  docs/design.md) and cold compiles with one compile worker (Inductor's ``compile_threads``; by
  default it compiles C++ kernels on as many threads as the machine has cores): another process
  busy on the machine's other core then slows neither, and the two stay in proportion.
- **Modes that compile alike are measured once.** On a device without CUDA graphs (a CPU) the
  modes whose Inductor options differ only in ``triton.cudagraphs`` (``reduce-overhead`` and
  ``default``; ``max-autotune`` and ``max-autotune-no-cudagraphs``) compile the same code: a graph
  with a CPU tensor skips CUDA graphs (``torch._inductor.cudagraph_utils``). One of each such
  group is measured and its figures stand for the others (:attr:`JobFigures.shared`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import statistics
import time
from typing import Callable, Sequence

import torch

from grader.checks import _torch_internals as ti
from grader.checks import targets, timing

ROUNDS = 3             # rounds of cold compiles and timing (the least of ROUNDS cold compiles)
TRIALS_PER_ROUND = 7   # interleaved timing trials of every way per round


@dataclasses.dataclass
class JobFigures:
    """Every way of running a model, measured in rounds (:func:`measure`): per round, each
    measured mode's cold first call (``first_call_s``, seconds, compile included) and its
    seconds per call over interleaved trials (``samples``). ``shared`` maps every mode to the
    mode whose measurement stands for it (itself, or one that compiles alike on this device).

    The figures jobs are priced with are the least cold first call of the rounds and the median
    of every trial (:attr:`first_call_s`, :meth:`per_call`); each round's own figures
    (:meth:`figure_sets`) give the spread of the break-even (:meth:`spread`)."""

    modes: tuple[str, ...]
    eager: str
    rounds: list[dict]
    shared: dict[str, str]
    device: str = "cpu"
    compile_threads: int | None = None
    load: tuple[float, float] | None = None
    seconds: float = 0.0
    # Why jobs cannot be judged fairly on these figures ('' : they can): the instructor's own
    # rule does not earn the question on them (a machine busy while it measured, or unlike the
    # one the rule was written for). Every submission's question is then held for a person.
    unfit: str = ""
    # False: the compiles came from the warm on-disk cache (``measure(cold=False)``, the test
    # suite's exploration cell), so the first calls are not cold compiles. The judge's are.
    cold: bool = True

    # -- the figures -------------------------------------------------------------------------------
    def _expand(self, measured: dict) -> dict:
        return {mode: measured[self.shared[mode]] for mode in self.modes}

    @property
    def first_call_s(self) -> dict[str, float]:
        """Each mode's least cold first call over the rounds."""
        measured = {m: min(r["first_call_s"][m] for r in self.rounds)
                    for m in self.rounds[0]["first_call_s"]}
        return self._expand(measured)

    @property
    def samples(self) -> dict[str, list[float]]:
        """Each mode's seconds per call, every trial of every round."""
        measured = {m: [s for r in self.rounds for s in r["samples"][m]]
                    for m in self.rounds[0]["samples"]}
        return self._expand(measured)

    def per_call(self, mode: str) -> float:
        return statistics.median(self.samples[mode])

    def figure_sets(self) -> list[tuple[dict, dict]]:
        """``(samples, first_call_s)`` for the figures jobs are priced with, then for each
        round alone: a verdict that differs between them is within the measurement's spread."""
        rounds = [(self._expand(r["samples"]), self._expand(r["first_call_s"]))
                  for r in self.rounds]
        return [(self.samples, self.first_call_s), *rounds]

    @property
    def break_even(self) -> float | None:
        """The fewest calls after which some compile mode's job total beats eager's (``None``:
        no compile mode is faster per call than eager here)."""
        return targets.break_even(self.samples, self.first_call_s, self.eager)[0]

    @property
    def best_mode(self) -> str | None:
        return targets.break_even(self.samples, self.first_call_s, self.eager)[1]

    def round_break_evens(self) -> list[float | None]:
        return [targets.break_even(samples, first, self.eager)[0]
                for samples, first in self.figure_sets()[1:]]

    def spread(self) -> tuple[float, float] | None:
        """The least and the greatest break-even of the rounds (``None`` where compiling never
        pays in some round)."""
        found = self.round_break_evens()
        if any(b is None for b in found):
            return None
        return min(found), max(found)

    # -- what a reader sees ------------------------------------------------------------------------
    def table(self) -> list[str]:
        lines = [f"  {'mode':<28}{'first call s':>13}{'us/call':>10}"]
        first = self.first_call_s
        for mode in self.modes:
            alike = f"  (measured as {self.shared[mode]!r})" if self.shared[mode] != mode else ""
            lines.append(f"  {mode:<28}{first[mode]:>13.2f}{self.per_call(mode) * 1e6:>10.1f}"
                         + alike)
        return lines

    def how(self) -> str:
        """How these figures were measured, in a sentence."""
        core = (" on one core (one thread per call, one compile worker)"
                if self.compile_threads == 1 else "")
        load = (f"; load average {self.load[0]:.1f} before, {self.load[1]:.1f} after"
                if self.load else "")
        compiles = "a cold compile" if self.cold else \
            "a compile from the warm cache (not cold: first calls compare nothing)"
        rounds = f"{len(self.rounds)} round{'s' if len(self.rounds) != 1 else ''}"
        return (f"{rounds}{core}, each {compiles} of every way then "
                f"{len(next(iter(self.rounds[0]['samples'].values())))} interleaved timing trials; "
                f"first call: the least of the rounds, time per call: the median of every trial "
                f"({self.seconds:.0f} s{load})")

    def summary(self) -> str:
        """The break-even with its spread over the rounds, in a line."""
        if self.break_even is None:
            return "no compile mode is faster per call than eager here: compiling never pays"
        spread = self.spread()
        if spread and len(self.rounds) == 1:
            rounds = "one round: no spread"
        elif spread:
            rounds = f"{spread[0]:,.0f}-{spread[1]:,.0f} calls over the {len(self.rounds)} rounds"
        else:
            rounds = "in some round compiling never paid"
        return (f"compiling pays after {self.break_even:,.0f} calls (mode {self.best_mode!r}; "
                f"{rounds})")

    def __str__(self) -> str:
        lines = [f"measured on {self.device}: {self.how()}", *self.table()]
        for mode in self.modes:
            if mode == self.eager:
                continue
            pays = targets.calls_to_pay_back(self.first_call_s[mode] - self.first_call_s[self.eager],
                                             self.per_call(self.eager) - self.per_call(mode))
            per_round = []
            for samples, first in self.figure_sets()[1:]:
                calls = targets.calls_to_pay_back(
                    first[mode] - first[self.eager],
                    statistics.median(samples[self.eager]) - statistics.median(samples[mode]))
                per_round.append("never" if math.isinf(calls) else f"{calls:,.0f}")
            said = "never pays" if math.isinf(pays) else f"pays after {pays:,.0f} calls"
            lines.append(f"  {mode:<28}{said} (rounds: {', '.join(per_round)})")
        return "\n".join(lines)

    # -- as data -----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"modes": list(self.modes), "eager": self.eager, "rounds": self.rounds,
                "shared": dict(self.shared), "device": self.device,
                "compile_threads": self.compile_threads,
                "load": list(self.load) if self.load else None, "seconds": round(self.seconds, 2),
                "break_even": self.break_even, "spread": self.spread(), "unfit": self.unfit}

    @classmethod
    def from_dict(cls, data: dict, modes: Sequence[str]) -> "JobFigures":
        """Figures another judge measured (:meth:`to_dict`), checked to be figures for exactly
        ``modes``, every measured mode with a first call and samples in every round: a
        ``ValueError`` otherwise."""
        try:
            shared = {str(m): str(data["shared"][m]) for m in data["shared"]}
            measured = set(shared.values())
            rounds = [{"first_call_s": {m: float(r["first_call_s"][m]) for m in measured},
                       "samples": {m: [float(x) for x in r["samples"][m]] for m in measured}}
                      for r in data["rounds"]]
            eager = str(data["eager"])
            load = tuple(float(x) for x in data["load"]) if data.get("load") else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"job figures without every mode's numbers: {exc!r}") from exc
        if list(data.get("modes") or []) != list(modes) or set(shared) != set(modes) \
                or eager not in modes or not rounds \
                or not all(r["samples"][m] for r in rounds for m in measured) \
                or not all(math.isfinite(x) and x >= 0 for r in rounds
                           for x in [*r["first_call_s"].values(),
                                     *(s for v in r["samples"].values() for s in v)]):
            raise ValueError(f"job figures for other modes than {list(modes)}, or not numbers")
        threads = data.get("compile_threads")
        return cls(tuple(modes), eager, rounds, shared, str(data.get("device") or "cpu"),
                   int(threads) if threads is not None else None,
                   load if load and len(load) == 2 else None, float(data.get("seconds") or 0.0),
                   str(data.get("unfit") or ""))


# ---------------------------------------------------------------------------------------------
# Measuring

def compile_alike(modes: Sequence[str], eager: str, device: str) -> dict[str, str]:
    """``{mode: the mode measured for it}``: on a device without CUDA graphs, modes whose
    Inductor options (``torch._inductor.list_mode_options``) differ only in
    ``triton.cudagraphs`` share the first such mode's measurement; elsewhere each mode stands for
    itself."""
    if torch.device(device).type == "cuda":
        return {m: m for m in modes}
    options = ti.list_mode_options()
    first_of: dict[frozenset, str] = {}
    shared = {}
    for mode in modes:
        if mode == eager or mode not in options:
            shared[mode] = mode
            continue
        key = frozenset((k, str(v)) for k, v in options[mode].items() if k != "triton.cudagraphs")
        shared[mode] = first_of.setdefault(key, mode)
    return shared


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def measure(build: Callable[[str], Callable], pool: Sequence[tuple], modes: Sequence[str], *,
            eager: str, device: str = "cpu", rounds: int = ROUNDS,
            trials: int = TRIALS_PER_ROUND, cold: bool = True) -> JobFigures:
    """Measure every way in ``modes`` of running what ``build(mode)`` returns (a fresh callable
    each time it is called: eagerly for ``eager``, else compiled with that mode, never compiled
    before), on the inputs of ``pool``: see the module's docstring for how. ``cold=False``: the
    compiles use the warm on-disk cache (their first calls are then not cold compiles: for a
    run that checks only that the code works, such as the test suite's)."""
    started = time.monotonic()
    load_before = _load_average()
    shared = compile_alike(modes, eager, device)
    measured = list(dict.fromkeys(shared[m] for m in modes))
    compiled = [m for m in measured if m != eager]
    one_core = torch.device(device).type == "cpu"

    def cold_first_call(fn: Callable) -> float:
        workers = ti.inductor_config_patch(compile_threads=1) if one_core \
            else contextlib.nullcontext()
        # cold, as in a fresh process (or, cold=False, from the warm on-disk cache)
        cache = ti.fresh_inductor_cache() if cold else contextlib.nullcontext()
        with cache, workers:
            return timing.first_call_seconds(fn, pool[0], device)

    found = []
    with ti.quiet_torch_logs():
        # One tiny compile first, thrown away: the first compile in a process also sets Inductor
        # up (imports, the C++ toolchain's precompiled header), which would be charged to
        # whichever mode came first. (From the warm cache the first calls compare nothing.)
        if compiled and cold:
            ti.warm_inductor(device)
        for round_ in range(rounds):
            fns, first = {}, {}
            for mode in timing.interleave_order(measured, round_):
                fns[mode] = build(mode)
                first[mode] = cold_first_call(fns[mode])
            comp = timing.compare({m: fns[m] for m in measured}, pool, baseline=eager,
                                  device=device, trials=trials)
            found.append({"first_call_s": {m: first[m] for m in measured},
                          "samples": {m: list(comp.seconds[m]) for m in measured}})
    load_after = _load_average()
    load = (load_before, load_after) if load_before is not None and load_after is not None \
        else None
    return JobFigures(tuple(modes), eager, found, shared, str(device),
                      1 if one_core else None, load, time.monotonic() - started, cold=cold)


def measure_modes(make_model: Callable[[], torch.nn.Module], inputs: tuple,
                  modes: Sequence[str], *, device: str = "cpu", eager: str = "none",
                  rounds: int = ROUNDS, cold: bool = True) -> JobFigures:
    """The same measurement for a notebook: ``make_model()`` run eagerly (``eager``) or compiled
    with ``torch.compile(model, mode=...)``, on ``inputs``, without autograd. Print the result
    for the table, each mode's break-even and the rounds' spread.

    >>> print(measure_modes(lambda: TinyMLP().eval(), example_mlp_inputs(), ["none", "default"]))
    """
    def build(mode: str) -> Callable:
        model = make_model()
        run = model if mode == eager else torch.compile(ti.fresh_copy(model), mode=mode)

        def call(*args):
            with torch.no_grad():
                return run(*args)
        return call

    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)   # as the judge times: one thread (see the module's docstring)
    try:
        return measure(build, [inputs], modes, eager=eager, device=device, rounds=rounds,
                       cold=cold)
    finally:
        torch.set_num_threads(threads)
