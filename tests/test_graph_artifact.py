"""grader.checks.graph_artifact: a graph captured from a model travels as data and comes back
as a model that computes the same thing, and a graph that lies, hides work or reaches for memory
is refused before it runs (it is what a compromised subject would send the judge)."""
import copy
import json
import pickle

import pytest
import torch
from torch import nn

from grader.checks import graph_artifact as ga
from grader.common.wire import Packer


class Cached(nn.Module):
    """A step with a buffer written in place, and a size it reads from its input."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.register_buffer("seen", torch.zeros(4, 8), persistent=False)

    def forward(self, x, pos):
        h = torch.relu(self.fc(x))
        self.seen.index_copy_(0, pos.view(1), h[:1])
        return h.view(x.shape[0], -1) + self.seen.sum(0)


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.tanh(self.fc(x)) * 2


def _ship(model, args, **kw) -> tuple[dict, bytes]:
    with torch.no_grad():
        captured = ga.capture(lambda *a: model(*a), args, model=model, **kw)
    packer = Packer()
    header = json.loads(json.dumps(ga.to_wire(captured, packer)))
    return header, packer.blob()


def _load(header, blob, baseline):
    loaded = ga.load(header, blob, baseline=baseline, device="cpu")
    return loaded, loaded.module(baseline, "cpu")


def test_a_captured_graph_comes_back_as_a_model_that_computes_the_same():
    torch.manual_seed(0)
    model = Cached().eval()
    baseline = copy.deepcopy(model)
    header, blob = _ship(model, (torch.randn(2, 8), torch.tensor(1)))
    loaded, rebuilt = _load(header, blob, baseline)
    # It takes the judge's parameters by name, not the subject's bytes.
    assert [s["kind"] for s in header["slots"]].count("param") == 2
    assert "value" not in [s for s in header["slots"] if s["kind"] == "param"][0]
    for pos in range(4):
        x = torch.randn(2, 8)
        want = baseline(x, torch.tensor(pos))
        with torch.no_grad():
            got = rebuilt(x, torch.tensor(pos))
        torch.testing.assert_close(got, want.detach())
    torch.testing.assert_close(rebuilt.b0, baseline.seen)  # the buffer was written in place too


def test_sizes_dynamo_made_symbolic_stay_symbolic():
    model = Cached().eval()
    baseline = copy.deepcopy(model)
    header, blob = _ship(model, (torch.randn(3, 8), torch.tensor(0)), dynamic=True)
    assert {"kind": "size", "index": 0, "dim": 0} in header["slots"]
    _, rebuilt = _load(header, blob, baseline)
    for rows in (2, 5, 17):
        x = torch.randn(rows, 8)
        with torch.no_grad():
            assert rebuilt(x, torch.tensor(0)).shape == (rows, 8)


def test_a_graph_break_is_not_captured():
    class Printing(Plain):
        def forward(self, x):
            print("hello")
            return super().forward(x)

    with pytest.raises(ga.CaptureError):
        ga.capture(Printing(), (torch.randn(2, 8),), model=Printing())


def test_item_and_boolean_masks_are_refused_as_not_one_graph():
    class Item(Plain):
        def forward(self, x):
            return self.fc(x) / x.abs().max().item()

    class Mask(Plain):
        def forward(self, x):
            h = self.fc(x)
            return h - h[h > 0].mean()

    for cls in (Item, Mask):
        model = cls()
        baseline = copy.deepcopy(model)
        try:
            header, blob = _ship(model, (torch.randn(2, 8),))
        except ga.CaptureError:
            continue  # torch 2.8: fullgraph=True refuses it already
        with pytest.raises(ga.GraphRefused, match="host|data|shape"):
            loaded, rebuilt = _load(header, blob, baseline)
            ga.fake_run_on(loaded, rebuilt, (torch.randn(2, 8),))


def _plain_header():
    model = Plain()
    header, blob = _ship(model, (torch.randn(2, 8),))
    return model, header, blob


@pytest.mark.parametrize("target,why", [
    ("aten.as_strided.default", "memory"),
    ("aten._local_scalar_dense.default", "host"),
    ("aten.nonzero.default", "shape"),
    ("mylib.secret.default", "custom"),
    ("os.system", "not allowed"),
    ("builtins.eval", "not allowed"),
    ("aten.tanh.out", "overload"),
    ("aten.tanh.__init__", "overload"),
])
def test_operators_off_the_list_are_refused(target, why):
    model, header, blob = _plain_header()
    node = next(n for n in header["nodes"] if n["op"] == "call_function")
    node["target"] = target
    with pytest.raises(ga.GraphRefused, match=why):
        ga.load(header, blob, baseline=model, device="cpu")


def test_a_custom_operator_is_refused_by_name():
    @torch.library.custom_op("coursetest::hidden", mutates_args=())
    def hidden(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @hidden.register_fake
    def _(x):
        return torch.empty_like(x)

    class UsesCustom(Plain):
        def forward(self, x):
            return hidden(self.fc(x))

    model = UsesCustom()
    header, blob = _ship(model, (torch.randn(2, 8),))
    with pytest.raises(ga.GraphRefused, match="custom operators"):
        ga.load(header, blob, baseline=model, device="cpu")


def test_malformed_or_lying_graphs_are_refused():
    model, header, blob = _plain_header()
    cases = []
    h = copy.deepcopy(header)
    h["nodes"][0]["args"][0] = {"n": "v999"}                       # a node that does not exist
    cases.append((h, "earlier node"))
    h = copy.deepcopy(header)
    next(s for s in h["slots"] if s["kind"] == "param")["name"] = "fc.secret"  # not the problem's
    cases.append((h, "parameter"))
    h = copy.deepcopy(header)
    h["nodes"][0]["args"].append({"device": "meta"})
    cases.append((h, "device"))
    h = copy.deepcopy(header)
    h["nodes"][0]["args"].append("__import__('os').system('id')")   # a string that reads as code
    cases.append((h, "short word"))
    h = copy.deepcopy(header)
    h["outputs"] = [7]
    cases.append((h, "outputs"))
    h = copy.deepcopy(header)
    h["format"] = "something else"
    cases.append((h, "not a graph"))
    h = copy.deepcopy(header)
    h["nodes"] = h["nodes"] * 20_000
    cases.append((h, "at most"))
    h = copy.deepcopy(header)
    h["slots"].append({"kind": "constant", "value": {"tensor": {"dtype": "float32",
                       "shape": [1 << 20], "offset": 0, "nbytes": 4 << 20}}})
    cases.append((h, "fit|too large|malformed"))
    h = copy.deepcopy(header)
    h["slots"][0] = {"kind": "pickle", "value": "x"}
    cases.append((h, "unknown graph input"))
    for bad, why in cases:
        with pytest.raises(ga.GraphRefused, match=why):
            ga.load(bad, blob, baseline=model, device="cpu")


def test_a_graph_that_would_allocate_too_much_is_refused_before_it_runs():
    model, header, blob = _plain_header()
    header["nodes"].insert(0, {"op": "call_function", "name": "huge",
                               "target": "aten.zeros.default",
                               "args": [[1 << 20, 1 << 20]], "kwargs": {}})
    loaded, rebuilt = _load(header, blob, model)
    with pytest.raises(ga.GraphRefused, match="too large"):
        ga.fake_run_on(loaded, rebuilt, (torch.randn(2, 8),))


def test_nothing_is_unpickled_on_the_judges_side(monkeypatch, tmp_path):
    """A blob that is a pickle whose loading would run code stays bytes: the judge never calls
    pickle, torch.load or torch.export.load on what the subject sent."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    evil = pickle.dumps(Payload())
    for name in ("loads", "load"):
        monkeypatch.setattr(pickle, name, lambda *a, **k: pytest.fail("pickle was called"))
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    monkeypatch.setattr(torch.export, "load", lambda *a, **k: pytest.fail("export.load was called"))
    model, header, blob = _plain_header()
    header["slots"].append({"kind": "constant", "value": {"tensor": {
        "dtype": "uint8", "shape": [len(evil)], "offset": len(blob), "nbytes": len(evil)}}})
    loaded = ga.load(header, blob + evil, baseline=model, device="cpu")  # just bytes, as data
    assert not marker.exists()
    assert loaded.plan[-1][0] == "value" and loaded.plan[-1][1].dtype == torch.uint8


class Branchy(nn.Module):
    """A data-dependent `if` (with a nested one), each side using the model's parameters."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.fc = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        if h.mean() > 0:
            h = torch.tanh(self.fc2(h)) if h.sum() > 4 else h * 3
        else:
            h = torch.sigmoid(h) - 0.5
        return h * 2


class BranchyWithCond(Branchy):
    """The fix chapter 4 teaches: both sides in the graph, `torch.cond` picks one per call."""

    def forward(self, x):
        h = self.fc(x)

        def positive(h):
            return torch.cond(h.sum() > 4, lambda g: torch.tanh(self.fc2(g)), lambda g: g * 3, (h,))

        h = torch.cond(h.mean() > 0, positive, lambda h: torch.sigmoid(h) - 0.5, (h,))
        return h * 2


def test_a_cond_travels_with_its_branches_and_computes_every_side():
    baseline = Branchy().eval()
    header, blob = _ship(BranchyWithCond().eval(), (torch.randn(4, 8),))
    assert len(header["subgraphs"]) == 4   # two branches, one of them with two of its own
    loaded, rebuilt = _load(header, blob, baseline)
    assert loaded.operators.count("higher_order.cond") == 2
    assert "aten.tanh.default" in loaded.operators   # a branch's operators are listed (and checked)
    sides = set()
    gen = torch.Generator().manual_seed(0)
    for shift in torch.linspace(-2, 2, 21).tolist():
        x = torch.randn(4, 8, generator=gen) + shift
        ga.fake_run_on(loaded, rebuilt, (x,))
        with torch.no_grad():
            h = baseline.fc(x)
            sides.add((bool(h.mean() > 0), bool(h.sum() > 4)))
            torch.testing.assert_close(rebuilt(x), baseline(x))
    assert len(sides) == 3, sides


def _higher_order(name):
    from torch._higher_order_ops.map import map as map_hop
    from torch._higher_order_ops.while_loop import while_loop

    if name == "while_loop":
        return lambda h: while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, h * 2),
                                    (torch.zeros((), dtype=torch.int64), h))[1]
    return lambda h: map_hop(lambda row: row * 2, h)


@pytest.mark.parametrize("name,why", [("while_loop", "while_loop.*bound its work"),
                                      ("map", "map_impl.*prototype `map`")])
def test_other_higher_order_operators_travel_and_are_refused_by_name(name, why):
    loop = _higher_order(name)

    class Looping(Plain):
        def forward(self, x):
            return loop(self.fc(x))

    model = Looping()
    header, blob = _ship(model, (torch.randn(2, 8),))   # data, not a crash in the subject
    assert header["subgraphs"]
    with pytest.raises(ga.GraphRefused, match=why):
        ga.load(header, blob, baseline=model, device="cpu")


def _cond_header():
    model = BranchyWithCond().eval()
    header, blob = _ship(model, (torch.randn(4, 8),))
    return Branchy().eval(), header, blob


def _cond_node(nodes):
    return next(n for n in nodes if n.get("target") == "higher_order.cond")


def test_lying_subgraphs_are_refused():
    baseline, header, blob = _cond_header()
    cases = []
    h = copy.deepcopy(header)                     # a branch handed to an ordinary operator
    node = next(n for n in h["nodes"] if n.get("target") == "aten.mul.Tensor")
    branch = _cond_node(h["nodes"])["args"][1]
    node["args"][0] = branch
    cases.append((h, "only to a higher-order operator"))
    h = copy.deepcopy(header)                     # a tensor where cond takes a branch
    cond = _cond_node(h["nodes"])
    cond["args"][1] = cond["args"][0]
    cases.append((h, "must be given a subgraph"))
    h = copy.deepcopy(header)                     # a refused operator hidden in a branch
    h["subgraphs"][0]["nodes"][0]["target"] = "aten.as_strided.default"
    cases.append((h, "memory"))
    h = copy.deepcopy(header)                     # a branch that calls one sent after it
    h["subgraphs"].reverse()
    cases.append((h, "not sent"))
    h = copy.deepcopy(header)
    h["subgraphs"][0]["name"] = "c0"
    cases.append((h, "subgraph name"))
    for bad, why in cases:
        with pytest.raises(ga.GraphRefused, match=why):
            ga.load(bad, blob, baseline=baseline, device="cpu")


def test_a_subgraph_counts_each_time_it_is_called():
    """Twenty subgraphs, each calling the one before it through both branches of a cond: 22
    nodes sent, 2**20 to run and compile. Refused before anything runs."""
    baseline, header, blob = _cond_header()
    subgraphs = [{"name": "g0", "inputs": 1, "single": False, "graph_outputs": [{"n": "v0"}],
                  "nodes": [{"op": "call_function", "name": "v0", "target": "aten.neg.default",
                             "args": [{"n": "a0"}], "kwargs": {}}]}]
    for i in range(1, 20):
        subgraphs.append({"name": f"g{i}", "inputs": 1, "single": False, "nodes": [
            {"op": "call_function", "name": "p", "target": "aten.gt.Scalar",
             "args": [{"n": "a0"}, 0], "kwargs": {}},
            {"op": "get_attr", "name": "b", "target": f"g{i - 1}"},
            {"op": "call_function", "name": "c", "target": "higher_order.cond",
             "args": [{"n": "p"}, {"n": "b"}, {"n": "b"}, [{"n": "a0"}]], "kwargs": {}},
            {"op": "call_function", "name": "o", "target": "operator.getitem",
             "args": [{"n": "c"}, 0], "kwargs": {}}], "graph_outputs": [{"n": "o"}]})
    header["subgraphs"] = subgraphs
    cond = _cond_node(header["nodes"])
    branch = next(n for n in header["nodes"] if n["name"] == cond["args"][1]["n"])
    branch["target"] = "g19"
    with pytest.raises(ga.GraphRefused, match="counting a subgraph's nodes each time"):
        ga.load(header, blob, baseline=baseline, device="cpu")


def test_a_branch_that_would_allocate_too_much_is_refused_even_when_not_taken():
    baseline, header, blob = _cond_header()
    branch = header["subgraphs"][-1]        # the outer false branch: not taken for these inputs
    branch["nodes"].insert(0, {"op": "call_function", "name": "huge",
                               "target": "aten.zeros.default",
                               "args": [[1 << 20, 1 << 20]], "kwargs": {}})
    loaded, rebuilt = _load(header, blob, baseline)
    with pytest.raises(ga.GraphRefused, match="too large"):
        ga.fake_run_on(loaded, rebuilt, (torch.randn(4, 8) + 3,))


def test_a_size_check_travels_as_an_assertion_with_the_judges_message():
    """`torch._check(T <= 6)` on a dynamic size (chapter 6) stays in the graph as a run-time
    assertion: the judge runs it, with its own message, whatever text the subject sent."""
    class Checked(Plain):
        def forward(self, x):
            torch._check(x.shape[0] <= 6)
            return super().forward(x)

    from grader.checks import _torch_internals as ti

    model = Checked()
    header, blob = _ship(model, (torch.randn(3, 8),), dynamic=True)
    asserts = [n for n in header["nodes"] if n["target"] == "aten._assert_scalar.default"]
    # torch 2.14 keeps the check in the graph; 2.8 makes it a guard of the compiled frame only.
    assert asserts or not ti.torch_at_least(2, 14)
    for node in asserts:
        node["args"][1] = "__import__('os').system('id')"
    loaded, rebuilt = _load(header, blob, model)
    ga.fake_run_on(loaded, rebuilt, (torch.randn(5, 8),))
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(torch.ones(5, 8)), model(torch.ones(5, 8)))
        if asserts:
            with pytest.raises(RuntimeError, match="a torch._check in your code failed"):
                rebuilt(torch.ones(7, 8))
