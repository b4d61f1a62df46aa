"""Fusion check: how many kernels a compiled function runs, not fooled by caches or by work
hidden where the count cannot see it.

>>> fusion_report(lambda x: x.sin().cos().exp().relu(), torch.randn(1024)).kernels   # 1

What counts, the same way on CPU and GPU, read from the code Inductor wrote (its wrapper module):

- a **generated kernel** is one function Inductor generates and launches: a ``triton_*`` kernel on
  a GPU, a ``cpp_fused_*`` C++ function on a CPU (one ``async_compile`` definition each). On a
  CPU, Inductor can also run several loop nests inside one C++ function under a shared outer loop
  ("outer loop fusion"); each of those loop nests counts, as it would be a kernel of its own on
  a GPU;
- a **library call** is a kernel Inductor calls instead of generating: ``extern_kernels.mm``,
  ``convolution`` and the like (cuBLAS, cuDNN, oneDNN), an ATen fallback for an op Inductor does not
  lower (``torch.ops.aten.*``), or a custom operator (``torch.ops.<namespace>.*``), whose inside the
  count cannot see at all.

:attr:`FusionReport.total` is both together: the passes over memory the compiled function makes.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

import torch

from grader.checks import _torch_internals as ti

# One generated kernel per definition in Inductor's wrapper module.
_KERNEL = re.compile(r"async_compile\.(?:cpp_pybinding|cpp|triton)\((?P<args>.*?)r?'''(?P<src>.*?)'''",
                     re.S)
# Calls of kernels Inductor did not generate, in the wrapper's `call` function.
_LIBRARY_CALL = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(")
# Wrapper helpers that allocate or view memory: no pass over the data.
_NOT_KERNELS = re.compile(r"\.(empty|empty_strided|as_strided|reinterpret_tensor|_reinterpret_tensor"
                          r"|set_|copy_|alias)\b|extern_kernels\.(zeros|ones)\b")


def kernel_sources(code: str) -> list[str]:
    """The source of each generated kernel (C++ or Triton) in Inductor's wrapper module(s)."""
    return [m["src"].strip("\n") for m in _KERNEL.finditer(code)]


def library_calls(code: str) -> list[str]:
    """The kernels Inductor's wrapper calls instead of generating (library kernels, ATen
    fallbacks, custom operators), in call order."""
    calls = []
    for module in code.split("\n\n\n"):
        body = module.split("def call(", 1)[1] if "def call(" in module else ""
        calls += [m.group(1) for m in _LIBRARY_CALL.finditer(body)
                  if not _NOT_KERNELS.search(m.group(1))]
    return calls


@dataclasses.dataclass
class FusionReport:
    kernels: int                 # generated kernels
    device: str
    code: str = ""
    library: list = dataclasses.field(default_factory=list)   # library / fallback / custom calls

    @property
    def total(self) -> int:
        return self.kernels + len(self.library)

    @property
    def custom_ops(self) -> list[str]:
        """Calls into custom operators (not ATen, not a library kernel Inductor chose)."""
        return [c for c in self.library if c.startswith("torch.ops.") and
                not c.startswith(("torch.ops.aten.", "torch.ops.prims."))]

    def __str__(self) -> str:
        text = (f"Inductor generated {self.kernels} kernel{'s' * (self.kernels != 1)} on "
                f"{self.device}")
        if self.library:
            text += (f", and calls {len(self.library)} kernel{'s' * (len(self.library) != 1)} it "
                     f"did not generate ({', '.join(self.library[:4])}"
                     f"{', ...' if len(self.library) > 4 else ''})")
        return text


def _device_of(args) -> str:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def fusion_report(fn: Callable, *example_inputs, mode: str | None = None,
                  keep_code: bool = False, **compile_options) -> FusionReport:
    """Compile ``fn`` with Inductor and count the kernels its generated code runs.

    The FX graph cache is off (:func:`grader.checks._torch_internals.no_compiled_graph_cache`): it
    would otherwise hand back a compiled graph without generating (and counting) anything; the
    kernels' own compiled-code cache still serves. A fresh copy of ``fn`` is compiled (see
    :func:`grader.checks._torch_internals.fresh_copy`), so that Dynamo's own cache of an earlier
    compile of ``fn`` (an earlier report, or the learner's ``torch.compile``) is not reused.
    ``keep_code`` keeps Inductor's wrapper module(s) in :attr:`FusionReport.code`.
    """
    with ti.no_compiled_graph_cache(), ti.quiet_torch_logs(), ti.own_automatic_dynamic_state(), \
            ti.outer_loop_fused_kernels() as outer_fused:
        opt = ti.compile_fresh(fn, mode=mode, **compile_options)
        _, sources = ti.run_and_get_code(opt, *example_inputs)
    code = "\n\n\n".join(sources)
    # On a CPU, Inductor may run several loop nests inside one C++ function under a shared
    # outer loop: each counts as the kernel it is on a GPU, so a count means the same on both.
    kernels = len(kernel_sources(code)) + sum(n - 1 for n in outer_fused)
    return FusionReport(kernels=kernels, device=_device_of(example_inputs),
                        code=code if keep_code else "", library=library_calls(code))
