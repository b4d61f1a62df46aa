"""Benchmarks: the grader's own cost, the course workloads' speedups, and the timer's stability.

    python -m grader.cli bench --out bench-results/bench-cpu.md             # make bench
    python -m grader.cli bench --device cuda --size full --calibrate --out bench-results/gpu-check.md
                                                                          # make gpu-check
(the chapters' own GPU table comes from :mod:`grader.tools.gpu_check_chapters`).

Prints a markdown table per section and writes them all to ``--out``. Nothing here asserts a
time: figures are for people to read (and commit, for the GPU table).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

from grader.checks import _torch_internals as ti
from grader.checks.breaks import fullgraph_check, graph_break_report
from grader.checks.targets import SpeedTarget, default_device, device_class, judge_speed
from grader.checks.timing import compare, first_call_seconds
from grader.course.workloads import build
from grader._paths import REPO_ROOT
from grader.common.tables import markdown_table


class _Broken(torch.nn.Module):
    """A small model with the three classic breaks."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            y = y * 2
        print("", end="")
        return y * y.abs().max().item()


def _table(header: list[str], rows: list[list]) -> str:
    return markdown_table(header, rows)


def _progress(text: str) -> None:
    print(f"  .. {text}", file=sys.stderr, flush=True)


def bench_grader_latency(device: str) -> str:
    model = _Broken().to(device)
    x = torch.randn(8, 64, device=device)
    rows = []
    for name, fn in (("graph-break report", graph_break_report), ("fullgraph check", fullgraph_check)):
        for attempt in ("first (cold: Dynamo loads)", "second"):
            t0 = time.perf_counter()
            fn(model, x)
            rows.append([name, attempt, f"{time.perf_counter() - t0:.2f}", "< 3 s"])
    return "## Grader latency (small model with 3 breaks)\n\n" + _table(
        ["check", "call", "seconds", "target"], rows)


def _speedup_row(name: str, model, inputs, device: str, claim: str, mode: str | None = None,
                 options: dict | None = None) -> list:
    ti.dynamo_reset()  # a fresh Dynamo cache too: otherwise a second compile of one model is a no-op
    with ti.fresh_inductor_cache(), ti.quiet_torch_logs(), \
            ti.inductor_config_patch(**(options or {})), torch.no_grad():
        opt = torch.compile(model, mode=mode)
        compile_s = first_call_seconds(opt, inputs, device)
        comp = compare({"eager": model, "compiled": opt}, [inputs], baseline="eager",
                       device=device, trials=11)
    sp = comp.speedup("compiled")
    label = name + (f" ({mode})" if mode else "") + (
        " + " + ", ".join(f"{k}={v}" for k, v in options.items()) if options else "")
    return [label, f"{compile_s:.1f}", f"{comp.per_call('eager').median * 1e3:.2f}",
            f"{comp.per_call('compiled').median * 1e3:.2f}", str(sp), claim]


def bench_workloads(device: str, size: str) -> str:
    rows = []
    plan = [("pointwise", None, False), ("four_op", None, False), ("resnet18", None, False),
            ("resnet18", None, True), ("gpt", None, False), ("gpt_small_batch", None, False),
            ("gpt_small_batch", "reduce-overhead", False), ("big_batch_mlp", None, False)]
    if device.startswith("cuda"):
        plan.append(("gpt", "max-autotune", False))
    for name, mode, with_options in plan:
        _progress(f"workload {name} {mode or ''}")
        w = build(name, device, size)
        options = w.inductor_options if with_options else None
        if with_options and not options:
            continue
        rows.append(_speedup_row(name, w.model, w.inputs, device, w.claim, mode, options))
    return (f"## Workload speedups ({size} size; compile = cold first call, fresh cache)\n\n"
            + _table(["workload", "compile s", "eager ms", "compiled ms", "speedup [95% CI]",
                      "seed chapter's claim"], rows))


def bench_stability(device: str, repeats: int, size: str) -> str:
    """The same measurement ``repeats`` times, and verdicts for targets 15% either side."""
    w = build("pointwise", device, "ci" if size == "ci" else "small")
    with ti.quiet_torch_logs(), torch.no_grad():
        opt = torch.compile(w.model)
        opt(*w.inputs)
        pool = [w.inputs] + [tuple(torch.randn_like(t) for t in w.inputs) for _ in range(2)]
        speedups = []
        for i in range(repeats):
            _progress(f"stability repeat {i + 1}/{repeats}")
            comp = compare({"eager": w.model, "compiled": opt}, pool, baseline="eager",
                           device=device, trials=21)
            speedups.append(comp.speedup("compiled").median)
        typical = sorted(speedups)[len(speedups) // 2]
        dev = device_class(device)
        verdicts = {}
        # How grading judges: against the reference measured in the same run (here the
        # reference is the same compiled model, so the learner is at exactly 100% of it) ...
        cases = [("85% of the reference (15% below)", SpeedTarget(0.85, False), opt, "pass", "0.85 x ref"),
                 ("115% of the reference (15% above)", SpeedTarget(1.15, False), opt, "fail", "1.15 x ref")]
        # ... and how self-check judges: against a fixed floor, here set from the speedup
        # measured above; drift of the machine between then and now moves the verdict.
        for label, factor, expected in (("floor 15% below the typical speedup", 0.85, "pass"),
                                        ("floor 15% above the typical speedup", 1.15, "fail")):
            floor = typical * factor
            cases.append((label, SpeedTarget(fraction_of_reference=None, faster_than_baseline=False,
                                             floors={dev: floor}), None, expected, f"{floor:.2f}x"))
        for label, target, reference, expected, shown in cases:
            got = []
            for _ in range(repeats):
                v = judge_speed(opt, w.model, pool, reference=reference, target=target,
                                device=device, budget_s=20)
                got.append(v.verdict)
            flips = sum(g != expected for g in got)
            verdicts[label] = [shown, ", ".join(got), expected, flips]
    rows = [["speedup, repeated", "", ", ".join(f"{s:.2f}" for s in speedups),
             f"spread max/min {max(speedups) / min(speedups):.3f}"]]
    rows += [[k, *v[:3]] for k, v in verdicts.items()]
    relative = sum(v[3] for k, v in verdicts.items() if "reference" in k)
    floors = sum(v[3] for k, v in verdicts.items() if "floor" in k)
    return (f"## Timer stability (pointwise chain, {repeats} repeats of 21 interleaved trials, "
            f"{torch.get_num_threads()} thread(s))\n\n"
            + _table(["case", "target", "verdicts", "expected"], rows)
            + f"\n\nVerdicts that differed from the expected one: {relative} against the "
              f"reference in the same run (how grading judges; target: 0), {floors} against "
              f"fixed floors (self-check; they also absorb the machine's drift between runs)")


FLOOR_FRACTION = 0.8
"""A self-check floor is this fraction of the reference solution's measured speedup."""


def floor_for(reference_speedup: float, fraction: float = FLOOR_FRACTION) -> float:
    """The self-check floor for a reference solution that measured ``reference_speedup``:
    ``fraction`` of it, at least 1.0x (used by ``--calibrate`` and by ``make gpu-check``)."""
    return max(1.0, round(reference_speedup * fraction, 2))


def speedup_of(speed_details: dict) -> float | None:
    """The learner's median speedup in a speed check's details (``None`` when not measured)."""
    median = (speed_details.get("speedups") or {}).get("learner", {}).get("median")
    return float(median) if isinstance(median, (int, float)) else None


def calibrate_floors(device: str, fraction: float = FLOOR_FRACTION,
                     only: list[str] | None = None) -> str:
    """Measure every problem's reference solution and write its floor for this device class
    into its set's floors.json (floor = ``fraction`` x the reference's measured speedup;
    :func:`grader.problems.sets.write_floors`).
    ``only``: problem sets ("ps7") or problems ("ps7.q1") to calibrate; the others' floors are
    kept as they are."""
    from grader.isolation.check import evaluate
    from grader.isolation.judge.reference_cells import reference_cells
    from grader.problems import get_problem, problem_set, sets

    dev = device_class(device)
    floors: dict[str, dict[str, float]] = {}
    rows = []
    root = REPO_ROOT
    for ps in sets.names():
        for key in problem_set(ps).PROBLEMS:
            problem = get_problem(key)
            if "speed" not in problem.checks:
                continue
            if only and ps not in only and key not in only:
                continue
            cells = reference_cells(problem, root)
            _progress(f"calibrating {key}")
            ev = evaluate(key, cells=cells, reference="off", device=device, course_root=root)
            speed = ev.outcome("speed")
            med = speedup_of(speed.details)
            if med is None:
                rows.append([key, "-", "-", speed.message or "no figure"])
                continue
            floor = floor_for(med, fraction)
            floors[key] = {**get_problem(key).shipped_floors, dev: floor}
            rows.append([key, f"{med:.2f}x", f"{floor:.2f}x", ""])
    sets.write_floors(floors)
    return (f"## Self-check floors calibrated on {dev} (floor = {fraction:.0%} of the reference "
            f"speedup, at least 1.0x)\n\n" + _table(["problem", "reference speedup", "floor", "note"], rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    parser.add_argument("--size", default=None, choices=["ci", "small", "full"],
                        help="workload size (default: full on cuda, small on cpu)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of the stability measurement")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for timed runs (1: the steadiest timings on a shared 2-core machine)")
    parser.add_argument("--calibrate", action="store_true",
                        help="measure each problem's reference and write self-check floors")
    parser.add_argument("--only", default=None,
                        help="comma list of sections: latency,workloads,stability (none: only "
                             "what --calibrate asks for)")
    parser.add_argument("--problems", default=None,
                        help="with --calibrate: comma list of problem sets or problems to "
                             "calibrate (default: all); the other floors are kept")
    parser.add_argument("--out", default="bench-results/bench.md", help="markdown file to write")
    args = parser.parse_args(argv)
    device = args.device or default_device()
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no CUDA device", file=sys.stderr)
        return 2
    size = args.size or ("full" if device.startswith("cuda") else "small")
    if device == "cpu":
        torch.set_num_threads(args.threads)
    sections = set((args.only or "latency,workloads,stability").split(","))
    started = time.perf_counter()
    head = (f"# Benchmark: {platform.node() or 'this machine'}, {device_class(device)}"
            f" ({torch.cuda.get_device_name() if device.startswith('cuda') else platform.processor() or platform.machine()})"
            f"\n\ntorch {torch.__version__}, python {platform.python_version()}, "
            f"{os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), "
            f"{time.strftime('%Y-%m-%d %H:%M')}")
    parts = [head]

    def emit(text: str) -> None:
        print(text + "\n", flush=True)
        parts.append(text)

    print(head + "\n")
    if "latency" in sections:
        emit(bench_grader_latency(device))
    if "workloads" in sections:
        emit(bench_workloads(device, size))
    if "stability" in sections:
        emit(bench_stability(device, args.repeats, size))
    if args.calibrate:
        only = [p.strip() for p in args.problems.split(",") if p.strip()] if args.problems else None
        emit(calibrate_floors(device, only=only))
    emit(f"Total bench time: {time.perf_counter() - started:.0f} s")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write("\n\n".join(parts) + "\n")
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
