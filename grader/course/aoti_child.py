"""Load an AOTInductor package in a fresh process, run it, and report each step's time (JSON).

Chapter 11 runs this through :func:`grader.course.chapters.load_package_in_fresh_process`, so that
the cold start of a compiled-ahead-of-time model is measured as a server or a new machine sees it:
a new Python process that imports torch, loads the ``.pt2`` package
(``torch._inductor.aoti_load_package``, after importing ``torch._inductor``, timed apart) and
calls it, with no Dynamo trace and no Inductor compile::

    python -m grader.course.aoti_child --package model.pt2 --size small --device cpu

The model is chapter 8's (:func:`grader.course.compile_child.build`, the same weights from the
same seed), so the package's outputs are checked against the eager model's here too. The last
line of stdout is the report: ``{"import_s", "import_inductor_s", "dynamo_imported_by_inductor",
"load_s", "first_call_s", "second_call_s", "to_first_output_s", "max_abs_diff", "torch"}``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", required=True, help="a .pt2 file of aoti_compile_and_package")
    parser.add_argument("--size", default="ci", choices=("full", "small", "ci"))
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    import torch

    from grader.checks import _torch_internals as ti
    from grader.course.compile_child import build

    def sync() -> None:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    report: dict = {"torch": torch.__version__, "import_s": time.perf_counter() - started}
    dynamo_before = "torch._dynamo" in sys.modules
    start = time.perf_counter()
    ti.import_inductor()            # Python's package loader lives in torch._inductor
    report["import_inductor_s"] = time.perf_counter() - start
    # Did importing torch._inductor import Dynamo too (torch/_inductor/__init__.py imports
    # standalone_compile, which imports from torch._dynamo)?
    report["dynamo_imported_by_inductor"] = not dynamo_before and "torch._dynamo" in sys.modules
    start = time.perf_counter()
    runner = ti.aoti_load_package(args.package)
    report["load_s"] = time.perf_counter() - start
    model, x = build(args.size, args.device)
    with torch.no_grad():
        start = time.perf_counter()
        out = runner(x)
        sync()
        report["first_call_s"] = time.perf_counter() - start
        report["to_first_output_s"] = time.perf_counter() - started
        start = time.perf_counter()
        runner(x)
        sync()
        report["second_call_s"] = time.perf_counter() - start
        report["max_abs_diff"] = float((out - model(x)).abs().max())
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
