"""Values as data: a JSON-able form and one blob of raw tensor bytes, nothing pickled.

Tensors travel as references into the blob (``{"tensor": {"dtype": "float32", "shape": [...],
"offset": ..., "nbytes": ...}}``) and are rebuilt with ``torch.frombuffer`` after every field is
checked: what the other side sends is only ever parsed as JSON and copied as bytes, within the
limits below. Used for the judge's messages (:mod:`grader.isolation.sandbox.channel`) and for the
graph artifacts they carry (:mod:`grader.checks.graph_artifact`).
"""
from __future__ import annotations

import math
from typing import Any

import torch

MAX_TENSOR_ELEMENTS = 1 << 28
MAX_DEPTH = 8

# dtypes that may travel, by name (no getattr on a name the other side chose).
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool)}


class ProtocolError(ValueError):
    """Data that is not what the protocol allows; the message says why."""



class Packer:
    """Collects tensors into one blob while values are encoded."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def tensor(self, t: torch.Tensor) -> dict:
        t = t.detach().to("cpu").contiguous()
        name = str(t.dtype).removeprefix("torch.")
        if name not in DTYPES:
            raise ProtocolError(f"a {t.dtype} tensor cannot travel")
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        ref = {"dtype": name, "shape": list(t.shape), "offset": self.size, "nbytes": len(data)}
        self.parts.append(data)
        self.size += len(data)
        return {"tensor": ref}

    def value(self, v: Any, depth: int = 0) -> Any:
        """A JSON-able form of ``v``: tensors, None, bools, ints, floats, strings, and lists,
        tuples and string-keyed dicts of them."""
        if depth > MAX_DEPTH:
            raise ProtocolError("a value is nested too deeply")
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if v is None or isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else {"float": repr(v)}
        if isinstance(v, (list, tuple)):
            return {"tuple" if isinstance(v, tuple) else "list":
                    [self.value(x, depth + 1) for x in v]}
        if isinstance(v, dict) and all(isinstance(k, str) for k in v):
            return {"dict": {k: self.value(x, depth + 1) for k, x in v.items()}}
        raise ProtocolError(f"a {type(v).__name__} cannot travel")

    def blob(self) -> bytes:
        return b"".join(self.parts)


def tensor_from(ref: Any, blob: bytes, device: str = "cpu") -> torch.Tensor:
    """The tensor a reference describes, checked against the blob; a new tensor (a copy)."""
    if not isinstance(ref, dict) or set(ref) != {"dtype", "shape", "offset", "nbytes"}:
        raise ProtocolError("malformed tensor reference")
    dtype = DTYPES.get(ref["dtype"]) if isinstance(ref["dtype"], str) else None
    shape, offset, nbytes = ref["shape"], ref["offset"], ref["nbytes"]
    if dtype is None:
        raise ProtocolError(f"dtype {ref['dtype']!r} may not travel")
    if not (isinstance(shape, list) and len(shape) <= 8
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n for n in shape)):
        raise ProtocolError("malformed tensor shape")
    numel = math.prod(shape)
    if numel > MAX_TENSOR_ELEMENTS:
        raise ProtocolError(f"a tensor of {numel} elements is too large")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if not (isinstance(offset, int) and isinstance(nbytes, int) and nbytes == numel * itemsize
            and 0 <= offset and offset + nbytes <= len(blob)):
        raise ProtocolError("a tensor reference does not fit the data sent")
    if numel == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    raw = bytearray(blob[offset:offset + nbytes])
    return torch.frombuffer(raw, dtype=dtype).reshape(shape).to(device)


def decode(v: Any, blob: bytes, device: str = "cpu", depth: int = 0) -> Any:
    """The value :meth:`Packer.value` encoded (tensors rebuilt on ``device``)."""
    if depth > MAX_DEPTH:
        raise ProtocolError("a value is nested too deeply")
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict) and len(v) == 1:
        (kind, inner), = v.items()
        if kind == "tensor":
            return tensor_from(inner, blob, device)
        if kind == "float" and inner in ("inf", "-inf", "nan"):
            return float(inner)
        if kind in ("list", "tuple") and isinstance(inner, list):
            items = [decode(x, blob, device, depth + 1) for x in inner]
            return tuple(items) if kind == "tuple" else items
        if kind == "dict" and isinstance(inner, dict):
            return {str(k): decode(x, blob, device, depth + 1) for k, x in inner.items()}
    raise ProtocolError("malformed value")
