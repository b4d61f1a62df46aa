"""Graphs as data: what the subject captured of the learner's model, checked and rebuilt by the judge.

The subject (the process that runs learner code) compiles the learner's model with
``fullgraph=True`` and a backend that keeps the graph Dynamo captured, as ATen operators
(:func:`capture`), and ships it as data (:func:`to_wire`): the operators with their arguments in
JSON, tensors as raw bytes, where each graph input comes from (a parameter of the model by its
name, a buffer, an input of the call, the size of an input), which graph output the call returns
and which buffers it writes back. A higher-order operator's subgraphs (the two branches of a
``torch.cond``) travel the same way, as graphs of their own. Nothing in it is code and nothing is
pickled.

The judge (which never runs learner code) rebuilds it (:func:`load`) only after checking it:

- every operator is on :data:`ALLOWED_ATEN` (or one of a few Python operators on sizes): no
  custom operator, no ``.item()``, no data-dependent output shape, no raw memory access, nothing
  random; every argument is a number, a boolean, a short word, a dtype, a device of the judge's,
  or an earlier node; a ``torch._check`` on a size travels as a run-time assertion, with the
  judge's own message;
- of the higher-order operators only ``torch.cond`` (:data:`ALLOWED_HIGHER_ORDER`): its branches
  are checked like the graph, a subgraph may stand only where ``cond`` takes one, and a
  subgraph's nodes count each time it is called; every other one (``while_loop``, ``map``, a
  nested compile region, ...) is refused by name;
- sizes are bounded (nodes, constants, buffers), parameters are the judge's own copy of the
  problem's weights (by name: a parameter the problem does not have is refused), and a buffer
  the learner added arrives as bytes;
- run on fake tensors first (:func:`grader.checks._torch_internals.fake_run`), no node may need
  tensor values to know its output, nor make a tensor beyond the size limit (in both branches of
  a ``cond`` too).

What the judge then does with it (runs it on inputs it chose, compares it with the baseline on
every shape and step the problem uses, compiles it with Inductor, counts its kernels, times it)
is in :mod:`grader.isolation.judge.steps`.

Why one long module: the wire format of a graph, its allow-list and its checks
are one trust boundary; split, a change to the format could miss the check that guards it.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import operator
import re
from typing import Any, Callable

import torch

from grader.checks import _torch_internals as ti
from grader.common.wire import DTYPES, Packer, ProtocolError, decode

FORMAT = "course-graph/2"
MAX_NODES = 20_000
MAX_CONSTANT_BYTES = 64 * 1024 ** 2
MAX_BUFFER_BYTES = 512 * 1024 ** 2
MAX_ELEMENTS = 1 << 27          # per tensor a node may make (512 MiB of float32)
MAX_SUBGRAPHS = 256
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,79}$")
_SUBGRAPH_NAME = re.compile(r"^g[0-9]{1,4}$")
_FQN = re.compile(r"^[A-Za-z0-9_]{1,80}(\.[A-Za-z0-9_]{1,80}){0,15}$")
_WORD = re.compile(r"^[A-Za-z0-9_,.\->\s]{0,64}$")


class CaptureError(RuntimeError):
    """The model could not be captured as one graph (the message is Dynamo's, or says why)."""


class HostRead(CaptureError):
    """Dynamo compiled the model with ``fullgraph=True``, but its graph reads a tensor's value into
    Python: not one graph as the grader defines it."""


class GraphRefused(ValueError):
    """A shipped graph the judge will not run; the message says why."""


# ---------------------------------------------------------------------------------------------
# What may be in a graph

_POINTWISE = """abs neg exp exp2 expm1 log log1p log2 log10 sqrt rsqrt sin cos tan tanh sinh cosh
asin acos atan asinh acosh atanh sigmoid relu gelu silu mish elu selu celu leaky_relu hardtanh
hardswish hardsigmoid softplus erf erfc erfinv reciprocal sign sgn floor ceil round trunc frac
square logical_not bitwise_not isnan isinf isfinite nan_to_num clamp clamp_min clamp_max clip
threshold logit lgamma digamma sinc deg2rad rad2deg positive signbit add sub rsub mul div
true_divide floor_divide remainder fmod pow float_power maximum minimum fmax fmin atan2 hypot eq
ne lt le gt ge logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor where lerp
addcmul addcdiv copysign xlogy heaviside masked_fill"""
_REDUCTIONS = """sum mean prod amax amin max min argmax argmin var std var_mean std_mean norm
linalg_vector_norm logsumexp cumsum cumprod all any aminmax softmax _softmax log_softmax
_log_softmax sort topk"""
_LINEAR_ALGEBRA = """mm bmm matmul addmm addmv baddbmm linear einsum dot mv outer
scaled_dot_product_attention conv1d conv2d conv3d convolution conv_transpose1d conv_transpose2d
layer_norm native_layer_norm group_norm native_group_norm batch_norm _native_batch_norm_legit
_native_batch_norm_legit_no_training _native_batch_norm_legit_functional instance_norm rms_norm
embedding cross_entropy_loss nll_loss nll_loss_forward nll_loss2d_forward mse_loss l1_loss
smooth_l1_loss huber_loss binary_cross_entropy binary_cross_entropy_with_logits kl_div"""
_SHAPES = """view reshape _unsafe_view permute transpose t expand expand_as squeeze unsqueeze
flatten unflatten contiguous clone detach alias slice select narrow split split_with_sizes chunk
unbind cat stack repeat tile flip roll diagonal diag diag_embed triu tril movedim view_as
reshape_as constant_pad_nd pad index_select gather scatter scatter_add scatter_reduce index
index_put index_add index_copy take_along_dim broadcast_to new_zeros new_ones new_full new_empty
zeros_like ones_like full_like empty_like zeros ones full empty empty_strided arange linspace eye
scalar_tensor lift_fresh_copy to _to_copy type_as copy fill zero _assert_tensor_metadata
sym_size sym_numel sym_stride numpy_T mT mH matrix_H
adjoint swapaxes swapdims moveaxis ravel relu6 hardshrink softshrink tanhshrink log_sigmoid
log_sigmoid_forward glu prelu addr bilinear cosine_similarity pairwise_distance cdist cummax
cummin logcumsumexp nansum nanmean count_nonzero isclose expand_copy view_copy permute_copy
transpose_copy unsqueeze_copy squeeze_copy slice_copy select_copy alias_copy"""
# In place: what a key/value cache or a running buffer needs; and the shape changes a vmap's
# batching rules emit (``squeeze_``, ``unsqueeze_``: on the judge's own copies, as every value).
_IN_PLACE = """copy_ fill_ zero_ index_copy_ index_put_ index_add_ masked_fill_ scatter_
scatter_add_ add_ sub_ mul_ div_ clamp_ relu_ squeeze_ unsqueeze_"""
ALLOWED_ATEN = frozenset(" ".join([_POINTWISE, _REDUCTIONS, _LINEAR_ALGEBRA, _SHAPES,
                                   _IN_PLACE]).split())

# Python-level targets: arithmetic on sizes, taking an item of a multi-output op, grad mode.
ALLOWED_PYTHON: dict[str, Callable] = {
    "operator.getitem": operator.getitem, "operator.add": operator.add,
    "operator.sub": operator.sub, "operator.mul": operator.mul,
    "operator.floordiv": operator.floordiv, "operator.truediv": operator.truediv,
    "operator.mod": operator.mod, "operator.neg": operator.neg, "operator.pow": operator.pow,
    "operator.eq": operator.eq, "operator.ne": operator.ne, "operator.lt": operator.lt,
    "operator.le": operator.le, "operator.gt": operator.gt, "operator.ge": operator.ge,
    "torch.sym_max": torch.sym_max, "torch.sym_min": torch.sym_min,
    "torch._C._set_grad_enabled": torch._C._set_grad_enabled,
}
_PYTHON_NAMES = {v: k for k, v in ALLOWED_PYTHON.items()}
LAYOUTS = {"strided": torch.strided}
MEMORY_FORMATS = {"contiguous_format": torch.contiguous_format,
                  "channels_last": torch.channels_last,
                  "preserve_format": torch.preserve_format}


def target_name(target) -> str:
    """The name a graph node's target travels under ("aten.add.Tensor", "operator.getitem")."""
    if isinstance(target, torch._ops.OpOverload):
        namespace, rest = target.name().split("::", 1)
        packet, _, overload = rest.partition(".")
        return f"{namespace}.{packet}.{overload or 'default'}"
    if target in _PYTHON_NAMES:
        return _PYTHON_NAMES[target]
    if ti.is_higher_order_operator(target):
        return f"higher_order.{target.name()}"
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__name__', repr(target))}"


# Operators a problem adds for one grading job, by the name a node travels under: ps8's custom
# operator, rebuilt by the judge from the problem's own kernel (grader.checks.custom_ops).
_EXTRA_OPERATORS: contextvars.ContextVar[dict] = contextvars.ContextVar("extra_operators",
                                                                         default={})


@contextlib.contextmanager
def extra_operators(operators: dict):
    """While inside, a node whose target is named in ``operators`` (``{"ps8.rms_pool.default":
    the judge's own operator}``) is rebuilt as a call of that operator: the judge's, never one
    the learner's process defined. Nothing else is added to the allow-list."""
    token = _EXTRA_OPERATORS.set({**_EXTRA_OPERATORS.get(), **operators})
    try:
        yield
    finally:
        _EXTRA_OPERATORS.reset(token)


def resolve_target(name: str) -> Callable:
    """The callable an allowed target name stands for; :class:`GraphRefused` for any other."""
    if name in ALLOWED_PYTHON:
        return ALLOWED_PYTHON[name]
    extra = _EXTRA_OPERATORS.get()
    if isinstance(name, str) and name in extra:
        return extra[name]
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) != 3 or parts[0] != "aten":
        raise GraphRefused(f"the operator {str(name)[:80]!r} is not allowed (only ATen operators: "
                           f"no custom operators)")
    packet_name, overload = parts[1], parts[2]
    if packet_name not in ALLOWED_ATEN:
        why = _REFUSED_WHY.get(packet_name, "it is not on the grader's list of operators")
        raise GraphRefused(f"the operator aten.{packet_name} is not allowed: {why}")
    if overload.endswith("out") or overload.startswith("_") or not _NAME.match(overload):
        raise GraphRefused(f"the overload {name} is not allowed")
    packet = getattr(torch.ops.aten, packet_name, None)
    if packet is None or overload not in packet.overloads():
        raise GraphRefused(f"this torch has no operator {name}")
    return getattr(packet, overload)


_REFUSED_WHY = {
    "_local_scalar_dense": "`.item()` (or `int(t)`, `float(t)`) reads a value to the host: not one "
                           "graph as the grader defines it",
    "item": "`.item()` reads a value to the host",
    "nonzero": "its output's shape depends on the data", "masked_select": "its output's shape "
    "depends on the data (a boolean mask: use torch.where)",
    "unique": "its output's shape depends on the data", "_unique2": "its output's shape depends "
    "on the data", "repeat_interleave": "its output's shape depends on the data",
    "as_strided": "it reads memory by address", "set_": "it replaces a tensor's memory",
    "resize_": "it replaces a tensor's memory", "dropout": "it is random",
    "native_dropout": "it is random", "rand": "it is random", "randn": "it is random",
    "bernoulli": "it is random", "randint": "it is random",
    "sym_constrain_range_for_size": "it bounds a size that depends on the data (a data-dependent "
                                    "shape)",
}


# Higher-order operators (operators that take subgraphs) the judge runs: ``torch.cond``, which
# chapter 4 teaches. Its branches travel as data and are checked like the graph; it runs one of
# them once per call on operands of known shapes, so the judge knows the work before it runs
# anything. Every other one arrives as data too and is refused by name.
ALLOWED_HIGHER_ORDER: dict[str, Callable] = {"cond": torch.ops.higher_order.cond}
_REFUSED_HIGHER_ORDER_WHY = {
    "while_loop": "how many times it runs its body depends on the data, so the judge cannot bound "
                  "its work before running it (a loop over a fixed count can be written in Python: "
                  "Dynamo unrolls it)",
    "map_impl": "the grader does not run torch's prototype `map` (a loop over a fixed count can "
                "be written in Python, which Dynamo unrolls, or vectorised)",
    "scan": "the grader does not run torch's prototype `scan` (a loop over a fixed count can be "
            "written in Python, which Dynamo unrolls, or vectorised)",
    "associative_scan": "the grader does not run torch's prototype `associative_scan` (use "
                        "torch.cumsum / torch.cumprod, or vectorise)",
    "invoke_subgraph": "the grader does not run a nested compile region "
                       "(torch.compiler.nested_compile_region): call the function directly",
}


# ---------------------------------------------------------------------------------------------
# Subject side: capture and serialise

@dataclasses.dataclass
class Captured:
    """One graph Dynamo captured from a call, as ATen operators, and where its inputs come from."""

    graph: torch.fx.GraphModule
    slots: list[dict]           # per graph input, in order (see the module docstring)
    outputs: list[int]          # which graph outputs the call returned
    single: bool                # the call returned one tensor (else a tuple of them)
    stores: list[list]          # [buffer name, graph output] written back after each call


def _flat_tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flat_tensors(v)]
    return []


def capture(fn: Callable, args: tuple, *, model: torch.nn.Module, dynamic: bool | None = None,
            ) -> Captured:
    """Compile ``fn`` (which calls ``model``) with ``fullgraph=True`` and keep the graph Dynamo
    captured on ``fn(*args)``. Raises :class:`CaptureError` with Dynamo's reason when it is not
    one graph, or when the graph's inputs or outputs cannot all be named."""
    got: dict = {}

    def keep_graph(gm, example_inputs):
        got["host_reads"] = got.get("host_reads", []) + ti.host_reads(gm)
        got["graph"], got["fake"] = ti.aten_graph(gm, list(example_inputs))
        got["example"] = list(example_inputs)
        got["count"] = got.get("count", 0) + 1

        def run(*inputs):
            got["outputs"] = gm.forward(*inputs)
            return got["outputs"]
        return run

    named_params = dict(model.named_parameters(remove_duplicate=False))
    before = {name: b for name, b in model.named_buffers(remove_duplicate=False)}
    try:
        with ti.quiet_torch_logs(), ti.own_automatic_dynamic_state():
            result = ti.compile_fresh(fn, backend=keep_graph, fullgraph=True,
                                      dynamic=dynamic)(*args)
    except Exception as exc:
        raise CaptureError(f"{type(exc).__name__}: {str(exc).strip()}") from None
    if got.get("host_reads"):
        raise HostRead("it reads a tensor's value into Python (`.item()`, `int(t)`, `float(t)`), "
                       "a host sync, at " + "; ".join(f"`{line}`" for line in
                                                      dict.fromkeys(got["host_reads"])))
    if got.get("count") != 1:
        raise CaptureError("Dynamo captured no graph" if not got else
                           f"Dynamo captured {got['count']} graphs, not one")
    ids = {id(t): ("param", n) for n, t in named_params.items()}
    ids.update({id(t): ("buffer", n) for n, t in before.items()})
    flat_args = [a for a in args]
    slots: list[dict] = []
    for j, value in enumerate(got["example"]):
        if isinstance(value, torch.SymInt):
            slots.append(_size_slot(value, got["fake"], got["example"], flat_args))
        elif isinstance(value, torch.Tensor) and id(value) in ids:
            kind, name = ids[id(value)]
            slots.append({"kind": kind, "name": name, "value": value})
        elif isinstance(value, torch.Tensor) and any(value is a for a in flat_args):
            slots.append({"kind": "input", "index": next(i for i, a in enumerate(flat_args)
                                                         if value is a)})
        elif isinstance(value, torch.Tensor):
            slots.append({"kind": "constant", "value": value})
        elif isinstance(value, (bool, int, float)):
            slots.append({"kind": "number", "number": value})
        else:
            raise CaptureError(f"graph input {j} is a {type(value).__name__}, which the grader "
                               f"cannot name")
    graph_outputs = got["outputs"] if isinstance(got["outputs"], (tuple, list)) \
        else (got["outputs"],)
    returned = _flat_tensors(result)
    if not returned:
        raise CaptureError("the call returned no tensor")
    outputs = [_output_index(t, graph_outputs) for t in returned]
    stores = []
    after = dict(model.named_buffers(remove_duplicate=False))
    for name, buffer in after.items():
        if before.get(name) is not buffer:
            index = next((i for i, o in enumerate(graph_outputs) if o is buffer), None)
            if index is None:
                raise CaptureError(f"forward replaces the buffer `{name}` with a tensor the graph "
                                   f"does not compute")
            stores.append([name, index])
    return Captured(got["graph"], slots, outputs, isinstance(result, torch.Tensor), stores)


def _size_slot(value, fake: list, example: list, args: list) -> dict:
    for j, f in enumerate(fake):
        if isinstance(f, torch.Tensor) and any(example[j] is a for a in args):
            for dim, size in enumerate(f.shape):
                if ti.same_symbol(size, value):
                    return {"kind": "size", "index": next(i for i, a in enumerate(args)
                                                          if example[j] is a), "dim": dim}
    raise CaptureError("the graph takes a symbolic size that is not a size of an input")


def _output_index(t: torch.Tensor, graph_outputs) -> int:
    for i, o in enumerate(graph_outputs):
        if o is t:
            return i
    for i, o in enumerate(graph_outputs):  # a view Dynamo rebuilt outside the graph
        if isinstance(o, torch.Tensor) and o.shape == t.shape and o.dtype == t.dtype \
                and torch.equal(o.detach(), t.detach()):
            return i
    raise CaptureError("the call returns a tensor the graph does not compute")


def _encode_arg(a, names: dict) -> Any:
    if isinstance(a, torch.fx.Node):
        return {"n": names[a]}
    if a is None or isinstance(a, (bool, int, str)):
        return a
    if isinstance(a, float):
        return a if math.isfinite(a) else {"float": repr(a)}
    if isinstance(a, (list, tuple)):
        return [_encode_arg(x, names) for x in a]
    if isinstance(a, torch.dtype):
        return {"dtype": str(a).removeprefix("torch.")}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    if isinstance(a, torch.layout):
        return {"layout": str(a).removeprefix("torch.")}
    if isinstance(a, torch.memory_format):
        return {"memory_format": str(a).removeprefix("torch.")}
    raise CaptureError(f"a graph argument of type {type(a).__name__} cannot travel")


class _Encoder:
    """Writes a captured graph, and the subgraphs its higher-order operators call, as data."""

    def __init__(self, packer: Packer) -> None:
        self.packer = packer
        self.constants: dict[str, dict] = {}
        self.subgraphs: list[dict] = []
        self._subgraph_keys: dict[int, str] = {}

    def graph(self, gm: torch.fx.GraphModule) -> tuple[int, list, Any, bool]:
        """(inputs, nodes, outputs, single) of ``gm``; its subgraphs go to :attr:`subgraphs`
        first (a subgraph is written before anything that calls it)."""
        names: dict = {}
        nodes: list[dict] = []
        placeholders, graph_outputs, single = 0, [], False
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                names[node] = f"a{placeholders}"
                placeholders += 1
            elif node.op == "get_attr":
                value = _attribute(gm, node.target)
                if isinstance(value, torch.fx.GraphModule):
                    key = self.subgraph(value)
                elif isinstance(value, torch.Tensor):
                    key = f"c{len(self.constants)}"
                    self.constants[key] = self.packer.tensor(value)
                else:
                    raise CaptureError(f"the graph holds `{node.target}`, a "
                                       f"{type(value).__name__}, which cannot travel as data")
                names[node] = f"v{len(nodes)}"
                nodes.append({"op": "get_attr", "name": names[node], "target": key})
            elif node.op == "call_function":
                names[node] = f"v{len(nodes)}"
                nodes.append({"op": "call_function", "name": names[node],
                              "target": target_name(node.target),
                              "args": _encode_arg(list(node.args), names),
                              "kwargs": {k: _encode_arg(v, names) for k, v in node.kwargs.items()}})
            elif node.op == "output":
                single = not isinstance(node.args[0], (tuple, list))
                outs = (node.args[0],) if single else node.args[0]
                graph_outputs = [_encode_arg(o, names) for o in outs]
            else:
                raise CaptureError(f"a graph node of kind {node.op} cannot travel")
        return placeholders, nodes, graph_outputs, single

    def subgraph(self, gm: torch.fx.GraphModule) -> str:
        if id(gm) not in self._subgraph_keys:
            inputs, nodes, outputs, single = self.graph(gm)
            key = f"g{len(self.subgraphs)}"
            self.subgraphs.append({"name": key, "inputs": inputs, "nodes": nodes,
                                   "graph_outputs": outputs, "single": single})
            self._subgraph_keys[id(gm)] = key
        return self._subgraph_keys[id(gm)]


def _attribute(gm: torch.nn.Module, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part, None)
    return value


def to_wire(captured: Captured, packer: Packer) -> dict:
    """``captured`` as a JSON-able header; its tensors go into ``packer``'s blob. A higher-order
    operator's subgraphs (a ``torch.cond`` branch) travel as data too, in ``subgraphs``; whether
    the judge runs them is :func:`load`'s decision."""
    encoder = _Encoder(packer)
    placeholders, nodes, graph_outputs, _ = encoder.graph(captured.graph)
    if placeholders != len(captured.slots):
        raise CaptureError("the graph's inputs and their sources disagree")
    slots = []
    for slot in captured.slots:
        out = {k: v for k, v in slot.items() if k != "value"}
        if slot["kind"] in ("buffer", "constant"):
            out["value"] = packer.tensor(slot["value"])
        slots.append(out)
    return {"format": FORMAT, "slots": slots, "nodes": nodes, "constants": encoder.constants,
            "subgraphs": encoder.subgraphs, "graph_outputs": graph_outputs,
            "outputs": captured.outputs, "single": captured.single, "stores": captured.stores}


# ---------------------------------------------------------------------------------------------
# Judge side: check and rebuild

def _require(condition: bool, why: str) -> None:
    if not condition:
        raise GraphRefused(why)


class ArtifactModule(torch.nn.Module):
    """A shipped graph with the judge's own parameters: called like the learner's model.

    Parameters are registered in the order of the problem's baseline model (so a training step's
    gradients come in the same order as the baseline's), buffers and constants after them."""

    def __init__(self, graph: torch.fx.GraphModule, plan: tuple, outputs: tuple, single: bool,
                 stores: tuple, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                 training: bool):
        super().__init__()
        self.graph_module = graph
        self._attr = {}
        for i, (name, value) in enumerate(params.items()):
            self.register_parameter(f"p{i}", torch.nn.Parameter(value.detach().clone(),
                                                                requires_grad=training))
            self._attr[name] = f"p{i}"
        for i, (name, value) in enumerate(buffers.items()):
            self.register_buffer(f"b{i}", value, persistent=False)
            self._attr[name] = f"b{i}"
        self._plan = tuple((kind, self._attr.get(ref, ref) if kind == "attr" else ref)
                           for kind, ref in plan)
        self._outputs = outputs
        self._single = single
        self._stores = tuple((self._attr[name], index) for name, index in stores)

    def forward(self, *inputs):
        values = []
        for kind, ref in self._plan:
            if kind == "attr":
                values.append(getattr(self, ref))
            elif kind == "input":
                values.append(inputs[ref])
            elif kind == "size":
                values.append(inputs[ref[0]].size(ref[1]))
            else:
                values.append(ref)
        out = self.graph_module(*values)
        for attr, index in self._stores:
            getattr(self, attr).copy_(out[index])
        if self._single:
            return out[self._outputs[0]]
        return tuple(out[i] for i in self._outputs)


@dataclasses.dataclass
class LoadedGraph:
    """A shipped graph that passed the checks of this module, ready to build models from."""

    graph: torch.fx.GraphModule
    plan: tuple
    outputs: tuple
    single: bool
    stores: tuple
    extra_buffers: dict            # buffers the learner added (name -> initial value)
    operators: tuple               # every target, in graph order

    def module(self, baseline: torch.nn.Module, device: str, training: bool = False) -> ArtifactModule:
        """A model that runs this graph with ``baseline``'s parameters and buffers (copies)."""
        params = {n: p.detach() for n, p in baseline.named_parameters(remove_duplicate=False)}
        buffers = {n: b.detach().clone() for n, b in baseline.named_buffers(remove_duplicate=False)}
        buffers.update({n: b.clone() for n, b in self.extra_buffers.items()})
        model = ArtifactModule(self.graph, self.plan, self.outputs, self.single, self.stores,
                               params, buffers, training)
        return model.to(device).train(training)


def _tensor(value, blob: bytes) -> torch.Tensor:
    t = decode(value, blob)
    _require(isinstance(t, torch.Tensor), "a tensor was expected")
    return t


def _decode_arg(a, env: dict, device: torch.device, depth: int = 0, subgraphs: dict = {}):
    _require(depth <= 6, "a graph argument is nested too deeply")
    if a is None or isinstance(a, (bool, int)):
        return a
    if isinstance(a, float):
        return a
    if isinstance(a, str):
        _require(bool(_WORD.match(a)), "a graph argument is a string that is not a short word")
        return a
    if isinstance(a, list):
        _require(len(a) <= 4096, "a graph argument is a list that is too long")
        return [_decode_arg(x, env, device, depth + 1, subgraphs) for x in a]
    _require(isinstance(a, dict) and len(a) == 1, "malformed graph argument")
    (kind, value), = a.items()
    if kind == "n":
        _require(value in env, f"a node refers to {str(value)[:40]!r}, which is not an earlier node")
        _require(value not in subgraphs, "a subgraph may be given only to a higher-order operator "
                                         "that calls it")
        return env[value]
    if kind == "float":
        _require(value in ("inf", "-inf", "nan"), "malformed float")
        return float(value)
    if kind == "dtype":
        _require(value in DTYPES, f"the dtype {str(value)[:20]!r} is not allowed")
        return DTYPES[value]
    if kind == "device":
        _require(isinstance(value, str) and torch.device(value).type == device.type
                 if isinstance(value, str) and re.match(r"^(cpu|cuda)(:\d{1,2})?$", value) else False,
                 f"the device {str(value)[:20]!r} is not the judge's")
        return device
    if kind == "layout":
        _require(value in LAYOUTS, "only strided tensors are allowed")
        return LAYOUTS[value]
    if kind == "memory_format":
        _require(value in MEMORY_FORMATS, "unknown memory format")
        return MEMORY_FORMATS[value]
    raise GraphRefused("malformed graph argument")


def load(header: dict, blob: bytes, *, baseline: torch.nn.Module, device: str) -> LoadedGraph:
    """Check a shipped graph (:func:`to_wire`'s header and the blob) and rebuild it.

    ``baseline`` is the judge's own copy of the problem's model: the graph may take its
    parameters and buffers (by name) and nothing else of it. Raises :class:`GraphRefused`."""
    try:
        return _load(header, blob, baseline, torch.device(device))
    except GraphRefused:
        raise
    except (ProtocolError, KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise GraphRefused(f"malformed graph ({type(exc).__name__}: {str(exc)[:200]})") from None


def _load(header: dict, blob: bytes, baseline: torch.nn.Module, device: torch.device) -> LoadedGraph:
    _require(isinstance(header, dict) and header.get("format") == FORMAT, "not a graph of this grader")
    nodes, slots = header["nodes"], header["slots"]
    _require(isinstance(nodes, list) and len(nodes) <= MAX_NODES,
             f"a graph may have at most {MAX_NODES} nodes")
    _require(isinstance(slots, list) and len(slots) <= 4096, "too many graph inputs")
    params = dict(baseline.named_parameters(remove_duplicate=False))
    buffers = dict(baseline.named_buffers(remove_duplicate=False))
    plan, extra, constant_bytes, buffer_bytes = [], {}, 0, 0
    for slot in slots:
        kind = slot.get("kind") if isinstance(slot, dict) else None
        if kind == "param":
            name = slot["name"]
            _require(isinstance(name, str) and name in params,
                     f"the graph uses a parameter {str(name)[:60]!r} the problem's model does not have")
            plan.append(("attr", name))
        elif kind == "buffer":
            name = slot["name"]
            _require(isinstance(name, str) and bool(_FQN.match(name)), "malformed buffer name")
            if name not in buffers:
                value = _tensor(slot["value"], blob)
                buffer_bytes += value.numel() * value.element_size()
                _require(buffer_bytes <= MAX_BUFFER_BYTES, "the graph's buffers are too large")
                extra[name] = value.to(device)
            plan.append(("attr", name))
        elif kind == "constant":
            value = _tensor(slot["value"], blob)
            constant_bytes += value.numel() * value.element_size()
            _require(constant_bytes <= MAX_CONSTANT_BYTES, "the graph's constants are too large")
            plan.append(("value", value.to(device)))
        elif kind == "input":
            _require(isinstance(slot["index"], int) and 0 <= slot["index"] < 16, "malformed input")
            plan.append(("input", slot["index"]))
        elif kind == "size":
            index, dim = slot["index"], slot["dim"]
            _require(all(isinstance(x, int) and 0 <= x < 16 for x in (index, dim)), "malformed size")
            plan.append(("size", (index, dim)))
        elif kind == "number":
            number = slot["number"]
            _require(isinstance(number, (bool, int, float)), "malformed number")
            plan.append(("value", number))
        else:
            raise GraphRefused(f"unknown graph input kind {str(kind)[:20]!r}")
    root = torch.nn.Module()   # holds the constants and subgraphs every graph may read
    constants: set[str] = set()
    raw_constants = header.get("constants") or {}
    _require(isinstance(raw_constants, dict), "malformed constants")
    for ref, value in raw_constants.items():
        _require(bool(_NAME.match(ref)), "malformed constant name")
        t = _tensor(value, blob)
        constant_bytes += t.numel() * t.element_size()
        _require(constant_bytes <= MAX_CONSTANT_BYTES, "the graph's constants are too large")
        root.register_buffer(ref, t.to(device), persistent=False)
        constants.add(ref)
    builder = _GraphBuilder(root, constants, device)
    raw_subgraphs = header.get("subgraphs") or []
    _require(isinstance(raw_subgraphs, list) and len(raw_subgraphs) <= MAX_SUBGRAPHS,
             f"a graph may call at most {MAX_SUBGRAPHS} subgraphs")
    for sub in raw_subgraphs:
        _require(isinstance(sub, dict) and isinstance(sub.get("name"), str)
                 and bool(_SUBGRAPH_NAME.match(sub["name"])) and sub["name"] not in constants
                 and sub["name"] not in builder.subgraphs, "malformed or repeated subgraph name")
        inputs = sub["inputs"]
        _require(isinstance(inputs, int) and 0 <= inputs <= 4096, "malformed subgraph inputs")
        graph, _ = builder.build(inputs, sub["nodes"], sub["graph_outputs"], sub["single"])
        builder.add_subgraph(sub["name"], graph)
    graph, graph_outputs = builder.build(len(slots), nodes, header["graph_outputs"], False)
    _require(builder.cost_of(graph) <= MAX_NODES,
             f"a graph may have at most {MAX_NODES} nodes, counting a subgraph's nodes each time "
             f"a higher-order operator calls it")
    n_out = len(graph_outputs)
    outputs = header["outputs"]
    _require(isinstance(outputs, list) and 1 <= len(outputs) <= 16
             and all(isinstance(i, int) and 0 <= i < n_out for i in outputs),
             "the graph's returned outputs are malformed")
    single = header["single"]
    _require(isinstance(single, bool) and (len(outputs) == 1 or not single), "malformed output kind")
    stores = header.get("stores") or []
    _require(isinstance(stores, list) and all(
        isinstance(s, list) and len(s) == 2 and (s[0] in buffers or s[0] in extra)
        and isinstance(s[1], int) and 0 <= s[1] < n_out for s in stores), "malformed buffer stores")
    gm = torch.fx.GraphModule(root, graph)
    return LoadedGraph(gm, tuple(plan), tuple(outputs), single, tuple(tuple(s) for s in stores),
                       extra, tuple(builder.operators))


class _GraphBuilder:
    """Rebuilds checked graphs from data: the main graph and the subgraphs its higher-order
    operators call. A subgraph may call only subgraphs sent before it (no cycles), and may be
    named only where a higher-order operator takes a subgraph."""

    def __init__(self, root: torch.nn.Module, constants: set[str], device: torch.device):
        self.root, self.constants, self.device = root, constants, device
        self.subgraphs: dict[str, int] = {}      # name -> its cost (nodes, calls expanded)
        self.operators: list[str] = []
        self._costs: dict[int, int] = {}         # id(fx.Graph) -> cost
        self.defined = 0                         # nodes in all graphs, as sent

    def add_subgraph(self, name: str, graph: torch.fx.Graph) -> None:
        self.subgraphs[name] = self.cost_of(graph)
        self.root.add_module(name, torch.fx.GraphModule(self.root, graph))

    def cost_of(self, graph: torch.fx.Graph) -> int:
        return self._costs[id(graph)]

    def build(self, inputs: int, nodes, outputs, single) -> tuple[torch.fx.Graph, list]:
        _require(isinstance(nodes, list) and len(nodes) <= MAX_NODES
                 and isinstance(outputs, list) and isinstance(single, bool)
                 and (len(outputs) == 1 or not single),
                 f"a graph may have at most {MAX_NODES} nodes")
        graph = torch.fx.Graph()
        env: dict[str, Any] = {f"a{i}": graph.placeholder(f"a{i}") for i in range(inputs)}
        called: dict[str, str] = {}               # env name of a subgraph -> the subgraph
        cost = len(nodes)
        self.defined += len(nodes)
        _require(self.defined <= MAX_NODES, f"a graph may have at most {MAX_NODES} nodes, its "
                                            f"subgraphs' included")
        for node in nodes:
            _require(isinstance(node, dict) and isinstance(node.get("name"), str)
                     and bool(_NAME.match(node["name"])) and node["name"] not in env,
                     "malformed or repeated node name")
            if node["op"] == "get_attr":
                target = node["target"]
                if target in self.subgraphs:
                    called[node["name"]] = target
                else:
                    _require(target in self.constants, "a node reads a constant that was not sent")
                env[node["name"]] = graph.get_attr(target)
                continue
            _require(node["op"] == "call_function",
                     f"node kind {str(node['op'])[:20]!r} is not allowed")
            kwargs = node.get("kwargs") or {}
            _require(isinstance(kwargs, dict)
                     and all(isinstance(k, str) and _NAME.match(k) for k in kwargs),
                     "malformed keyword arguments")
            if str(node["target"]).startswith("higher_order."):
                target, args, subgraphs = _higher_order_call(node["target"], node["args"], kwargs,
                                                             env, called, self.device)
                cost += sum(self.subgraphs[g] for g in subgraphs)
                kwargs = {}
            elif node["target"] == _ASSERT_SCALAR:
                target, args = _size_assertion(node["args"], env, self.device, called)
                kwargs = {}
            else:
                target = resolve_target(node["target"])
                args = tuple(_decode_arg(node["args"], env, self.device, subgraphs=called))
                kwargs = {k: _decode_arg(v, env, self.device, subgraphs=called)
                          for k, v in kwargs.items()}
            self.operators.append(node["target"])
            _require(cost <= MAX_NODES, f"a graph may have at most {MAX_NODES} nodes, counting a "
                                        f"subgraph's nodes each time a higher-order operator "
                                        f"calls it")
            env[node["name"]] = graph.call_function(target, args, kwargs)
        graph_outputs = [_decode_arg(o, env, self.device, subgraphs=called) for o in outputs]
        graph.output(graph_outputs[0] if single else tuple(graph_outputs))
        try:
            graph.lint()
        except Exception as exc:
            raise GraphRefused(f"the graph is not well formed ({str(exc)[:160]})") from None
        self._costs[id(graph)] = cost
        return graph, graph_outputs


_ASSERT_SCALAR = "aten._assert_scalar.default"


def _size_assertion(args, env: dict, device: torch.device, called: dict) -> tuple[Callable, tuple]:
    """``torch._check(T <= SEQ)`` on a size: the graph asserts it at run time
    (``aten._assert_scalar``). Its condition must be computed by the graph (from sizes: a value
    read from a tensor is refused where it is read); the message the subject sent is replaced by
    the judge's own."""
    _require(isinstance(args, list) and len(args) == 2, "malformed arguments of _assert_scalar")
    condition = _decode_arg(args[0], env, device, subgraphs=called)
    _require(isinstance(condition, (torch.fx.Node, bool)),
             "_assert_scalar must check a condition the graph computes")
    return torch.ops.aten._assert_scalar.default, (condition, "a torch._check in your code failed")


def _higher_order_call(name, args, kwargs: dict, env: dict, called: dict,
                       device: torch.device) -> tuple[Callable, tuple, list[str]]:
    """A higher-order operator's node, checked: (the operator, its arguments, the subgraphs it
    calls). Only :data:`ALLOWED_HIGHER_ORDER` are run, each with the layout of its arguments
    checked (a subgraph exactly where it takes one, and nowhere else)."""
    op = str(name).removeprefix("higher_order.")
    if op not in ALLOWED_HIGHER_ORDER:
        why = _REFUSED_HIGHER_ORDER_WHY.get(op, "it is not on the grader's list of operators "
                                                "(of the operators that take subgraphs, only "
                                                "torch.cond)")
        raise GraphRefused(f"the higher-order operator {str(name)[:60]!r} is not allowed: {why}")
    _require(isinstance(args, list) and not kwargs, f"malformed arguments of {op}")

    def subgraph(a) -> tuple[Any, str]:
        _require(isinstance(a, dict) and set(a) == {"n"} and a["n"] in called,
                 f"{op} must be given a subgraph where it calls one")
        return env[a["n"]], called[a["n"]]

    def operands(values) -> list:
        _require(isinstance(values, list), f"malformed operands of {op}")
        return [_decode_arg(v, env, device, subgraphs=called) for v in values]

    # cond(pred, true_graph, false_graph, operands)
    _require(len(args) == 4, "malformed arguments of cond")
    pred = _decode_arg(args[0], env, device, subgraphs=called)
    _require(isinstance(pred, torch.fx.Node), "cond's condition must be computed by the graph")
    (true_fn, true_name), (false_fn, false_name) = subgraph(args[1]), subgraph(args[2])
    return (ALLOWED_HIGHER_ORDER[op], (pred, true_fn, false_fn, tuple(operands(args[3]))),
            [true_name, false_name])


def subgraph_calls(target, args: tuple) -> list[tuple]:
    """The (subgraph, operands) pairs an allowed higher-order operator's node may run (both
    branches of a cond), for the fake run to check inside them too."""
    if target is ALLOWED_HIGHER_ORDER["cond"]:
        return [(args[1], tuple(args[3])), (args[2], tuple(args[3]))]
    return []


def fake_run_on(loaded: LoadedGraph, model: ArtifactModule, inputs: tuple) -> int:
    """Run the graph on fake copies of what ``model`` would give it for ``inputs``:
    :class:`GraphRefused` when a node needs tensor values to know its output (a host sync, a
    data-dependent shape) or would make a tensor beyond :data:`MAX_ELEMENTS`. Returns the most
    bytes its own tensors hold at once (:func:`grader.checks._torch_internals.fake_run`)."""
    values = []
    for kind, ref in model._plan:
        if kind == "attr":
            values.append(getattr(model, ref))
        elif kind == "input":
            _require(ref < len(inputs), "the graph takes more inputs than the call has")
            values.append(inputs[ref])
        elif kind == "size":
            _require(ref[0] < len(inputs) and ref[1] < inputs[ref[0]].dim(),
                     "the graph takes a size the inputs do not have")
            values.append(inputs[ref[0]].size(ref[1]))
        else:
            values.append(ref)
    try:
        return ti.fake_run(loaded.graph, values, max_elements=MAX_ELEMENTS,
                           subgraph_calls=subgraph_calls)
    except ti.DataDependent as exc:
        raise GraphRefused(f"a node needs tensor values to know its output (a host sync or a "
                           f"data-dependent shape, which one graph as the grader defines it "
                           f"cannot have): {str(exc)[:200]}") from None
    except ValueError as exc:
        raise GraphRefused(f"the graph makes a tensor that is too large ({exc})") from None
    except Exception as exc:
        raise GraphRefused(f"the graph does not run on these inputs ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0][:200] if str(exc) else ''})") from None
