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
from grader.checks.wire import Packer


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
            ga.check_on(loaded, rebuilt, (torch.randn(2, 8),))


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
        ga.check_on(loaded, rebuilt, (torch.randn(2, 8),))


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
