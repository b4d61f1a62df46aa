"""Small models for the grader's tests: one per graph-break cause, each with its fixed twin.

The offending line of every broken model carries a ``# BREAK: <cause>`` marker so tests can
find its line number (see :func:`break_line`) instead of hard-coding it.
"""
from __future__ import annotations

import linecache

import torch
from torch import nn


def break_line(cause: str) -> tuple[int, str]:
    """(lineno, stripped text) of the line in this file marked ``# BREAK: <cause>``."""
    marker = f"# BREAK: {cause}"
    for lineno, line in enumerate(linecache.getlines(__file__), start=1):
        if line.rstrip().endswith(marker):
            return lineno, line.strip()
    raise LookupError(marker)


# --- data-dependent `if` on a tensor value ------------------------------------------------------

class BranchOnValue(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # BREAK: data_dependent_branch
            return x * 2
        return x - 1


class BranchOnValueFixed(nn.Module):
    def forward(self, x):
        return torch.where(x.sum() > 0, x * 2, x - 1)


# --- print in forward ---------------------------------------------------------------------------

class PrintInForward(nn.Module):
    def forward(self, x):
        y = x.relu()
        print("debug: forward called")  # BREAK: print
        return y + 1


class PrintInForwardFixed(nn.Module):
    def forward(self, x):  # fix: no print (log the returned tensor after the call)
        y = x.relu()
        return y + 1


# --- .item() ------------------------------------------------------------------------------------

class ItemRead(nn.Module):
    def forward(self, x):
        scale = x.abs().max().item()  # BREAK: scalar_read
        return x / scale


class ItemReadFixed(nn.Module):
    def forward(self, x):
        scale = x.abs().max()  # keep it a tensor
        return x / scale


# --- .tolist() / .numpy() -----------------------------------------------------------------------

class ToList(nn.Module):
    def forward(self, x):
        values = x.sum(dim=1).tolist()  # BREAK: host_conversion
        return x + len(values)


class ToListFixed(nn.Module):
    def forward(self, x):
        return x + x.shape[0]  # the length is static: no need to leave torch


class ToNumpy(nn.Module):
    """``.numpy()``: since torch 2.1 Dynamo traces NumPy calls through ``torch._numpy``, so this
    is NOT a graph break on torch 2.14 (the test documents it)."""

    def forward(self, x):
        a = x.numpy()
        return torch.from_numpy(a * 2) + 1


class ToNumpyFixed(nn.Module):
    def forward(self, x):
        return x * 2 + 1


# --- a torch.compiler.disable'd function called in forward ---------------------------------------

@torch.compiler.disable
def disabled_helper(x):
    return x * 3


def helper(x):
    return x * 3


class CallsDisabled(nn.Module):
    def forward(self, x):
        y = disabled_helper(x)  # BREAK: disabled_or_skipped
        return y + 1


class CallsDisabledFixed(nn.Module):
    def forward(self, x):
        y = helper(x)
        return y + 1


# --- data-dependent output shape (boolean masking) ----------------------------------------------

class MaskSelect(nn.Module):
    def forward(self, x):
        positive = x[x > 0]  # BREAK: dynamic_shape_op
        return positive.sum()


class MaskSelectFixed(nn.Module):
    def forward(self, x):
        return torch.where(x > 0, x, 0).sum()


# (broken model, fixed twin, expected cause)
BREAK_CASES = [
    (BranchOnValue, BranchOnValueFixed, "data_dependent_branch"),
    (PrintInForward, PrintInForwardFixed, "print"),
    (ItemRead, ItemReadFixed, "scalar_read"),
    (ToList, ToListFixed, "host_conversion"),
    (CallsDisabled, CallsDisabledFixed, "disabled_or_skipped"),
    (MaskSelect, MaskSelectFixed, "dynamic_shape_op"),
]


def example_input() -> torch.Tensor:
    """A small input whose sum is positive (so BranchOnValue takes its first branch)."""
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=g).abs() + 0.1


# --- recompiles ---------------------------------------------------------------------------------

class SmallMLP(nn.Module):
    """Recompiles once when the batch size first changes (default ``dynamic=None``: Dynamo
    specialises on the first size, then turns dimension 0 dynamic); ``dynamic=True`` compiles once."""

    def __init__(self, d_in: int = 8, d_out: int = 4):
        super().__init__()
        self.fc = nn.Linear(d_in, d_out)

    def forward(self, x):
        return torch.relu(self.fc(x))


def pointwise(x):
    """Recompiles for every new dtype: dtypes are always specialised."""
    return x.sin() * 2 + 1


def batches(sizes, d: int = 8):
    return [(torch.randn(b, d),) for b in sizes]


def dtype_inputs(dtypes, shape=(4, 8)):
    return [(torch.randn(*shape).to(dt),) for dt in dtypes]
