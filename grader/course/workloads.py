"""The course's reference workloads, defined once: chapters, benchmarks and gpu-check use these.

Each builder returns a :class:`Workload`: an eager model (in ``eval`` mode), example inputs on
the requested device, and the seed chapter's claim for it where there is one.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch
from torch import nn


@dataclasses.dataclass
class Workload:
    name: str
    model: Callable
    inputs: tuple
    claim: str = ""                      # what the seed chapter says (a GPU figure)
    inductor_options: dict = dataclasses.field(default_factory=dict)  # e.g. freezing on CPU


def pointwise_chain(x: torch.Tensor) -> torch.Tensor:
    """Eight chained pointwise ops: eight kernels in eager, one after Inductor fuses them."""
    for _ in range(4):
        x = torch.cos(torch.sin(x))
    return x


def four_op_chain(x: torch.Tensor) -> torch.Tensor:
    """The seed chapter's four pointwise ops: sin, cos, multiply-add, relu."""
    return torch.relu(torch.cos(torch.sin(x)) * 2.0 + 1.0)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class GPTBlock(nn.Module):
    """A hand-written GPT block: many small ops (layer norms, GELU, softmax) for Inductor to fuse."""

    def __init__(self, d_model: int = 256, n_head: int = 4):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        h = self.fc(self.ln2(x))
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))  # GELU, by hand
        return x + self.out(h)


def gpt(n_layers: int = 2, d_model: int = 256, n_head: int = 4) -> nn.Module:
    return nn.Sequential(*[GPTBlock(d_model, n_head) for _ in range(n_layers)])


def _eval(model: nn.Module, device: str) -> nn.Module:
    torch.manual_seed(0)
    return model.to(device).eval()


# Sizes per scale: "ci" (tests), "small" (CPU laptops), "full" (GPU)
SIZES = {
    "ci": dict(n=256, batch=2, img=32, seq=16, d=64, big_batch=64),
    "small": dict(n=1024, batch=8, img=64, seq=128, d=256, big_batch=512),
    "full": dict(n=4096, batch=32, img=224, seq=256, d=512, big_batch=4096),
}


def build(name: str, device: str = "cpu", size: str = "small") -> Workload:
    """One workload by name: 'pointwise', 'four_op', 'resnet18', 'gpt', 'gpt_small_batch',
    'big_batch_mlp'."""
    s = SIZES[size]
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g).to(device)

    if name == "pointwise":
        return Workload(name, pointwise_chain, (randn(s["n"], s["n"]),),
                        "one fused kernel instead of eight; memory bound")
    if name == "four_op":
        return Workload(name, four_op_chain, (randn(s["n"], s["n"]),),
                        "four pointwise ops fused into one kernel")
    if name == "resnet18":
        import torchvision

        model = _eval(torchvision.models.resnet18(weights=None), device)
        return Workload(name, model, (randn(s["batch"], 3, s["img"], s["img"]),),
                        "CNN about 1.2x (cuDNN kernels already fast)",
                        inductor_options={"freezing": True} if device == "cpu" else {})
    if name == "gpt":
        model = _eval(gpt(2, s["d"]), device)
        return Workload(name, model, (randn(s["batch"], s["seq"], s["d"]),),
                        "transformer about 2x (many small ops fused)")
    if name == "gpt_small_batch":
        model = _eval(gpt(2, s["d"]), device)
        return Workload(name, model, (randn(1, max(s["seq"] // 4, 8), s["d"]),),
                        "reduce-overhead about 1.2-1.5x when launch bound")
    if name == "big_batch_mlp":
        d = s["d"] * 2
        model = _eval(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)), device)
        return Workload(name, model, (randn(s["big_batch"], d),),
                        "big batch about 1.1x (compute bound)")
    raise KeyError(f"unknown workload {name!r}")


WORKLOADS = ("pointwise", "four_op", "resnet18", "gpt", "gpt_small_batch", "big_batch_mlp")
