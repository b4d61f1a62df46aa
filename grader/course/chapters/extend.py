"""Extending and shipping (chapter 11): custom operators, Triton, FlexAttention, AOTInductor.

Part of :mod:`grader.course.chapters` (the chapters import it as ``from grader.course import
chapters as ch``, which re-exports every public name of these modules)."""
from __future__ import annotations

import json
import os
import time
from typing import Callable

import torch

from grader.checks import _torch_internals as ti
from grader.course.chapters.compile_time import run_python
from grader.course.chapters.core import DEVICE, SIZE


def opcheck_results(op, args: tuple, kwargs: dict | None = None) -> dict[str, str]:
    """Run ``torch.library.opcheck`` on ``op(*args, **kwargs)`` and return ``{test: "SUCCESS"
    or "<Error>: <first line>"}`` for each of its tests (``test_schema``,
    ``test_autograd_registration``, ``test_faketensor``, ``test_aot_dispatch_dynamic``), instead
    of raising at the first failure."""
    found = torch.library.opcheck(op, args, kwargs, raise_exception=False)
    return {test: result if isinstance(result, str)
            else f"{type(result).__name__}: {(str(result).strip().splitlines() or [''])[0][:160]}"
            for test, result in found.items()}


def sliding_window_causal(window: int) -> Callable:
    """A FlexAttention ``mask_mod``: query ``q_idx`` sees key ``kv_idx`` when it is not in the
    future and at most ``window - 1`` positions back (a sliding-window causal mask)."""
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    mask_mod.__name__ = f"sliding_window_causal_{window}"
    return mask_mod


def dense_mask(mask_mod: Callable, seq_len: int, device: str = DEVICE) -> torch.Tensor:
    """The ``(seq_len, seq_len)`` boolean mask a ``mask_mod`` describes (True: attend), built by
    calling it on every (query, key) pair at once: what SDPA's ``attn_mask`` takes."""
    idx = torch.arange(seq_len, device=device)
    zero = torch.zeros((), dtype=torch.long, device=device)
    return mask_mod(zero, zero, idx[:, None], idx[None, :])


def flex_attention_on_cpu() -> tuple[bool, str]:
    """Can ``torch.compile(flex_attention)`` generate a fused kernel on this CPU, and why not?

    Inductor's CPU lowering of FlexAttention (a C++ template, ``lower_cpu``: in
    ``torch/_inductor/kernel/flex_attention.py`` in torch 2.8, in ``kernel/flex/flex_cpu.py`` in
    2.14) needs an x86 CPU with AVX2, not macOS, float32/16 or bfloat16 inputs, and inference
    only (no backward, no ``return_lse``); it raises ``NotImplementedError`` otherwise."""
    import importlib
    import platform
    import sys

    try:
        importlib.import_module("torch.nn.attention.flex_attention")
    except ImportError:
        return False, f"torch {torch.__version__} has no torch.nn.attention.flex_attention"
    if sys.platform == "darwin":
        return False, "Inductor's C++ FlexAttention template is not built for macOS"
    if not ti.cpu_has_avx2():
        return False, f"this CPU ({platform.machine()}) has no AVX2, or ATEN_CPU_CAPABILITY=default"
    return True, "x86 CPU with AVX2: Inductor's C++ FlexAttention template applies (inference only)"


def triton_available(device: str = DEVICE) -> tuple[bool, str]:
    """Can this process run user Triton kernels on ``device``, and why not?"""
    if not str(device).startswith("cuda"):
        return False, (f"Triton kernels run on GPUs: the device here is {device} (Inductor writes "
                       "C++, not Triton, for a CPU)")
    if not ti.has_triton():
        return False, "Triton is not installed, or this GPU is older than Triton supports"
    return True, "a CUDA GPU with Triton"


def export_and_package(model: torch.nn.Module, args: tuple, path: str) -> dict:
    """``torch.export.export(model, args)``, then AOTInductor into the package ``path`` (``.pt2``).

    Returns ``{"package": path, "export_s", "compile_s", "package_bytes"}``: what shipping costs
    ahead of time, on the machine that builds the package."""
    start = time.perf_counter()
    exported = torch.export.export(model, args)
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    written = ti.aoti_compile_and_package(exported, package_path=path)
    return {"package": written, "export_s": export_s, "compile_s": time.perf_counter() - start,
            "package_bytes": os.path.getsize(written)}


def load_package_in_fresh_process(package: str, *, size: str | None = None,
                                  device: str = DEVICE, env: dict | None = None) -> dict:
    """Load and run an AOTInductor package of chapter 8's model in a new Python process
    (:mod:`grader.course.aoti_child`): the cold start a deployed model pays. Returns the child's
    report (``import_s``, ``import_inductor_s``, ``load_s``, ``first_call_s``, ``second_call_s``,
    ``to_first_output_s``, ``max_abs_diff`` against the eager model) plus ``process_s``, the
    whole process as the parent saw it; raises ``RuntimeError`` with the child's stderr when it
    fails."""
    args = ["-m", "grader.course.aoti_child", "--package", package, "--size", size or SIZE,
            "--device", device]
    done, seconds = run_python(args, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the child process failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["process_s"] = seconds
    return report
