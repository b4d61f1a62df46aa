"""Compile a small model in a fresh process and report how long the first call took (JSON).

Chapter 8 runs this through :func:`grader.course.chapters.compile_in_fresh_process` to time a cold
compile, a compile after ``torch.compiler.load_cache_artifacts``, and to write a ``TORCH_TRACE``
log for tlparse, each in a new process (a new machine or Colab session starts the same way)::

    TORCHINDUCTOR_CACHE_DIR=/tmp/empty python -m grader.course.compile_child --save artifacts.bin
    TORCHINDUCTOR_CACHE_DIR=/tmp/empty2 python -m grader.course.compile_child --load artifacts.bin

The last line of stdout is the report: ``{"first_call_s": ..., "second_call_s": ...,
"import_inductor_s": ..., "wrap_s": ..., "loaded": {...} | null, "saved_bytes": int | null,
"torch": "..."}``: ``import_inductor_s`` is importing ``torch._inductor`` (and with it Dynamo),
done first and timed apart, which ``torch.compile(model)`` would otherwise do before the first
call's timer; ``wrap_s``, the ``torch.compile(model)`` call itself.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def build(size: str, device: str):
    """The model (a few transformer-style MLP blocks) and an input, for ``size``."""
    import torch

    d, layers, batch = {"full": (512, 4, 64), "small": (256, 4, 32), "ci": (64, 2, 8)}[size]

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d)
            self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block() for _ in range(layers)]).to(device).eval()
    return model, torch.randn(batch, d, device=device)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="ci", choices=("full", "small", "ci"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--save", help="write torch.compiler.save_cache_artifacts() bytes here")
    parser.add_argument("--load", help="torch.compiler.load_cache_artifacts() these bytes first")
    parser.add_argument("--extras", action="store_true",
                        help="also compile a function with a graph break and a recompile "
                             "(something for tlparse to show)")
    args = parser.parse_args(argv)

    import torch

    from grader.checks import _torch_internals as ti

    report: dict = {"torch": torch.__version__, "loaded": None, "saved_bytes": None,
                     "mega_cache": hasattr(torch.compiler, "save_cache_artifacts")}
    # What torch.compile(model) would import below, before any timer (torch._inductor, and
    # Dynamo with it): timed apart, as the AOTInductor child times it (chapter 11 compares both
    # with and without it)
    start = time.perf_counter()
    ti.import_inductor()
    report["import_inductor_s"] = time.perf_counter() - start
    if (args.load or args.save) and not report["mega_cache"]:
        args.load = args.save = None          # older torch: no save/load_cache_artifacts
    if args.load:
        with open(args.load, "rb") as fh:
            info = torch.compiler.load_cache_artifacts(fh.read())
        report["loaded"] = _describe(info)
    model, x = build(args.size, args.device)
    start = time.perf_counter()
    compiled = torch.compile(model)
    report["wrap_s"] = time.perf_counter() - start         # torch.compile's own call: no compile yet
    with torch.no_grad():
        start = time.perf_counter()
        compiled(x)
        _sync(args.device)
        report["first_call_s"] = time.perf_counter() - start
        start = time.perf_counter()
        compiled(x)
        _sync(args.device)
        report["second_call_s"] = time.perf_counter() - start
    if args.extras:
        def with_break(t):
            t = torch.sin(t) * 2
            print("a print is a graph break")
            return torch.cos(t) + 1

        f = torch.compile(with_break)
        f(torch.randn(8, device=args.device))
        f(torch.randn(16, device=args.device))   # a new size: a recompile
    if args.save:
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            data, info = saved
            with open(args.save, "wb") as fh:
                fh.write(data)
            report["saved_bytes"] = len(data)
            report["saved"] = _describe(info)
    print(json.dumps(report))
    return 0


def _describe(info) -> dict | None:
    """A CacheInfo as ``{kind: number of artifacts}``."""
    if info is None:
        return None
    found = {}
    for name in dir(info):
        if name.endswith("_artifacts") and not name.startswith("_"):
            try:
                found[name[: -len("_artifacts")]] = len(getattr(info, name))
            except TypeError:
                pass
    return found


if __name__ == "__main__":
    sys.exit(main())
