"""The small decoder that ps4 and ps6 share: a pre-norm transformer block's parameters and the
maths of its attention and MLP, written once.

Each set's ``TinyGPT`` (``grader/problems/ps4/``, ``ps6/``) subclasses :class:`TinyGPTLayers`
for ``attention`` and ``mlp`` and writes its own ``__init__`` (seed, depth, buffers) and
``forward`` (the part of the model the set is about).
"""
import math

import torch
from torch import nn

VOCAB, DIM, HEADS = 512, 128, 4
HEAD_DIM = DIM // HEADS


class Block(nn.Module):
    """The parameters of one pre-norm transformer block (the maths is in TinyGPTLayers)."""

    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)


def softmax_last(att):
    """Softmax over the last dimension, written out (what ``attention`` uses)."""
    att = torch.exp(att - att.amax(dim=-1, keepdim=True))
    return att / att.sum(dim=-1, keepdim=True)


class TinyGPTLayers(nn.Module):
    """``attention`` and ``mlp`` of one :class:`Block` over a whole sequence."""

    def attention(self, blk, x):
        """Causal self-attention of ``x`` ([B, T, DIM]) through block ``blk``."""
        B, T, _ = x.shape
        q, k, v = blk.qkv(blk.ln1(x)).split(DIM, dim=-1)
        q = q.view(B, T, HEADS, HEAD_DIM).transpose(1, 2)
        k = k.view(B, T, HEADS, HEAD_DIM).transpose(1, 2)
        v = v.view(B, T, HEADS, HEAD_DIM).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(HEAD_DIM)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        att = softmax_last(att.masked_fill(mask, float("-inf")))
        return blk.proj((att @ v).transpose(1, 2).reshape(B, T, DIM))

    def mlp(self, blk, x):
        """The block's MLP with the tanh approximation of GELU, written out."""
        h = blk.fc1(blk.ln2(x))
        h = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))
        return blk.fc2(h)
