"""A compile that fails on purpose, for chapter 9's minifier section (run in a fresh process).

``python -m grader.course.minify_child --fault backend`` compiles a small model with the backend
``relu_compile_error_TESTING_ONLY`` (registered by torch in ``torch/_dynamo/backends/debugging.py``
for testing the minifier: it raises ``ReluCompileError`` on any graph that calls ``relu``);
``--fault inductor`` compiles it with Inductor and its ``cpp.inject_relu_bug_TESTING_ONLY =
"compile_error"`` (Inductor's C++ code generator then writes code that does not compile for
``relu``). With ``TORCHDYNAMO_REPRO_AFTER`` set (``dynamo`` or ``aot``), torch writes a
``minifier_launcher.py`` under ``./torch_compile_debug`` when the compile fails
(:func:`grader.course.chapters.minify_in_fresh_process` runs the rest). Prints ``ops: N``, the
operators Dynamo captured, before compiling; the compile's exception ends the process.
"""
from __future__ import annotations

import argparse

import torch

from grader.checks import _torch_internals as ti


class Pipeline(torch.nn.Module):
    """Three layers and a dozen operators, one of which is a ``relu``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 64)
        self.c = torch.nn.Linear(64, 8)

    def forward(self, x):
        h = torch.tanh(self.a(x)) * 2.0
        h = torch.relu(self.b(h)) + torch.sin(h)
        h = torch.nn.functional.layer_norm(h, (64,))
        return torch.softmax(self.c(h) / 2.0, dim=-1)


def count_ops(model, x) -> int:
    counted = []

    def backend(gm, example_inputs):
        counted.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method",
                                                               "call_module")))
        return gm

    with torch.no_grad():
        ti.compile_fresh(model, backend=backend)(x)
    return counted[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fault", choices=("backend", "inductor"), default="backend")
    args = parser.parse_args(argv)
    model, x = Pipeline().eval(), torch.randn(16, 32)
    print(f"ops: {count_ops(model, x)}", flush=True)
    with torch.no_grad():
        if args.fault == "backend":
            torch.compile(model, backend="relu_compile_error_TESTING_ONLY")(x)
        else:
            with ti.inject_inductor_relu_bug("compile_error"):
                torch.compile(model)(x)
    print("compiled without an error (unexpected)", flush=True)
    return 3


if __name__ == "__main__":
    raise SystemExit(main())
