"""Fusion check: how many kernels Inductor generates for a function, not fooled by caches.

>>> fusion_report(lambda x: x.sin().cos().exp().relu(), torch.randn(1024)).kernels   # 1
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from . import _torch_internals as ti


@dataclasses.dataclass
class FusionReport:
    kernels: int
    device: str
    code: str = ""

    def __str__(self) -> str:
        return f"Inductor generated {self.kernels} kernel{'s' * (self.kernels != 1)} on {self.device}"


def _device_of(args) -> str:
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def fusion_report(fn: Callable, *example_inputs, mode: str | None = None,
                  keep_code: bool = False, **compile_options) -> FusionReport:
    """Compile ``fn`` with Inductor in a fresh cache and count the generated kernels.

    The FX graph cache would otherwise hand back a compiled graph without generating (and
    counting) anything; and a fresh copy of ``fn`` is compiled (see
    :func:`grader._torch_internals.fresh_copy`), so that Dynamo's own cache of an earlier
    compile of ``fn`` (an earlier report, or the learner's ``torch.compile``) is not reused.
    Kernels are Triton kernels on CUDA and C++ kernels on CPU; calls into library kernels
    (matmul, conv) are not counted: they are not generated.
    """
    code = ""
    with ti.fresh_inductor_cache(), ti.quiet_torch_logs(), ti.own_automatic_dynamic_state(), \
            ti.count_generated_kernels() as count:
        opt = ti.compile_fresh(fn, mode=mode, **compile_options)
        if keep_code:
            _, sources = ti.run_and_get_code(opt, *example_inputs)
            code = "\n\n".join(sources)
        else:
            opt(*example_inputs)
    return FusionReport(kernels=count["kernels"], device=_device_of(example_inputs), code=code)
