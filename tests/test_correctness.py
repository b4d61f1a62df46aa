"""grader.checks.correctness: check_outputs and compare_output on fresh, seeded inputs."""
from __future__ import annotations

import pytest
import torch

from grader.checks.correctness import CorrectnessReport, check_outputs, compare_output, fresh_seeds


def make_inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)


def reference(x, y):
    return x * y + 1


def good(x, y):
    return torch.addcmul(torch.ones_like(x), x, y)


def check(candidate, ref=reference, **kw):
    report = check_outputs(candidate, ref, make_inputs, **kw)
    assert isinstance(report, CorrectnessReport)
    return report


def test_correct_candidate_passes():
    report = check(good, n=4)
    assert report.ok and report.failures == [] and report.checked == 4
    assert "match the reference on 4 fresh random inputs" in str(report)


def test_compiled_candidate_passes():
    report = check(torch.compile(reference, backend="eager"))
    assert report.ok


def test_wrong_values_rejected():
    report = check(lambda x, y: x * y + 1.5)
    assert not report.ok and len(report.failures) == report.checked
    assert "differs from the reference" in report.failures[0]
    assert "max abs difference" in report.failures[0]
    assert "do not match" in str(report)


def test_small_float_noise_tolerated():
    assert check(lambda x, y: (x * y + 1) * (1 + 1e-6)).ok


def test_wrong_shape_rejected():
    report = check(lambda x, y: (x * y + 1).unsqueeze(0))
    assert not report.ok
    assert "shape (1, 4, 5), expected (4, 5)" in report.failures[0]


def test_wrong_dtype_rejected():
    report = check(lambda x, y: (x * y + 1).double())
    assert not report.ok
    assert "dtype torch.float64, expected torch.float32" in report.failures[0]


def test_tuple_instead_of_tensor_rejected():
    report = check(lambda x, y: (x * y + 1,))
    assert not report.ok
    assert "plain torch.Tensor" in report.failures[0] and "tuple" in report.failures[0]


def test_tensor_instead_of_tuple_rejected():
    report = check(lambda x, y: x * y + 1, ref=lambda x, y: (x * y + 1, x - y))
    assert not report.ok
    assert "tuple of 2 tensors" in report.failures[0] and "Tensor of shape (4, 5)" in report.failures[0]


def test_wrong_element_of_tuple_named():
    report = check(lambda x, y: (x * y + 1, x + y), ref=lambda x, y: (x * y + 1, x - y))
    assert not report.ok
    assert report.failures[0].startswith("output[1] differs")


class AlwaysEqual(torch.Tensor):
    """A subclass that could override comparisons to pass any check."""

    def __eq__(self, other):
        return True


def test_tensor_subclass_rejected():
    report = check(lambda x, y: (x * y + 1).as_subclass(AlwaysEqual))
    assert not report.ok
    assert "plain torch.Tensor" in report.failures[0] and "AlwaysEqual" in report.failures[0]


def test_parameter_output_accepted():
    report = check(lambda x, y: torch.nn.Parameter(x * y + 1))
    assert report.ok


def test_raising_candidate_rejected():
    def boom(x, y):
        raise RuntimeError("shape mismatch in my kernel")

    report = check(boom, n=3)
    assert not report.ok
    assert report.failures == ["raised RuntimeError: shape mismatch in my kernel"]


def test_in_place_mutation_of_inputs_rejected():
    """A candidate that overwrites its inputs gives the right output but destroys the caller's
    tensors. check_outputs builds inputs twice so the reference is safe, and checks that the
    candidate left its inputs as they were."""

    def mutating(x, y):
        return x.mul_(y).add_(1)

    report = check(mutating)
    assert not report.ok
    assert any(w in " ".join(report.failures).lower() for w in ("in place", "in-place", "modif", "mutat"))


def test_in_place_mutation_names_the_input_and_shows_once():
    def mutating(x, y):
        out = x * y + 1
        y.zero_()
        return out

    report = check(mutating, n=3)
    assert not report.ok and len(report.failures) == 3      # one entry per input checked
    assert all("input 1" in f and "in place" in f for f in report.failures)
    assert "input 0" not in report.failures[0]
    text = str(report)
    assert text.count("in place") == 1 and "(on 3 of 3 inputs)" in text
    assert text.startswith("the outputs match the reference, but")


def test_mutation_the_reference_does_too_is_allowed():
    def ref(x, y):
        return x.add_(y)

    assert check(lambda x, y: x.add_(y), ref=ref).ok
    report = check(lambda x, y: x + y, ref=ref)   # right output, inputs left alone: still ok
    assert report.ok


def test_seeds_are_fresh_between_calls():
    seen: list[int] = []

    def recording_inputs(seed):
        seen.append(seed)
        return make_inputs(seed)

    check_outputs(good, reference, recording_inputs, n=3)
    first = set(seen)
    seen.clear()
    check_outputs(good, reference, recording_inputs, n=3)
    second = set(seen)
    assert len(first) == 3 and len(second) == 3
    assert first.isdisjoint(second)
    seeds = fresh_seeds(50)
    assert len(set(seeds)) == 50 and all(0 <= s < 2 ** 31 for s in seeds)


def test_explicit_seeds_and_separate_input_copies():
    calls: list[int] = []
    seen_by: dict[str, list] = {"reference": [], "candidate": []}

    def recording_inputs(seed):
        calls.append(seed)
        return make_inputs(seed)

    def recorder(name):
        def fn(x, y):
            seen_by[name].append(x)
            return reference(x, y)
        return fn

    report = check_outputs(recorder("candidate"), recorder("reference"), recording_inputs,
                           seeds=[7, 8])
    assert report.ok and report.checked == 2
    assert calls == [7, 7, 8, 8]      # built once for the reference, once for the candidate
    for ref_x, cand_x in zip(seen_by["reference"], seen_by["candidate"]):
        assert ref_x is not cand_x and torch.equal(ref_x, cand_x)


def test_memoising_by_metadata_is_caught():
    """A candidate that computes once and replays its first output (keyed by shape and dtype,
    a 'hash' that does not see the values) fails because every input is fresh."""
    cache = {}

    def memo(x, y):
        key = (tuple(x.shape), x.dtype)
        if key not in cache:
            cache[key] = reference(x, y)
        return cache[key]

    report = check(memo, n=3)
    assert not report.ok
    assert len(report.failures) == 2                 # the first call was honest
    assert "differs from the reference" in report.failures[0]


@pytest.mark.parametrize("keyed_by", ["id", "values"])
def test_memo_never_hits(keyed_by):
    """A cache keyed by input identity or by a hash of the values never pays: no input object
    or value is presented twice."""
    cache, keep_alive, hits = {}, [], [0]

    def memo(x, y):
        keep_alive.append(x)  # keep ids unique
        key = id(x) if keyed_by == "id" else hash(x.numpy().tobytes())
        if key in cache:
            hits[0] += 1
            return cache[key]
        cache[key] = reference(x, y)
        return cache[key]

    for _ in range(2):
        assert check(memo, n=3).ok
    assert hits[0] == 0


def test_compare_output_directly():
    t = torch.tensor([1.0, float("nan")])
    assert compare_output(t.clone(), t) is None                    # NaN == NaN here
    assert compare_output(torch.tensor([1, 2]), torch.tensor([1, 2])) is None
    msg = compare_output(torch.tensor([1, 3]), torch.tensor([1, 2]))  # integers: exact
    assert msg and "index (1,)" in msg
    assert compare_output(3, 3) is None
    assert "is 4, expected 3" in compare_output(4, 3)
    assert "output[0]" in compare_output([torch.zeros(2)], [torch.ones(2)])
    assert compare_output(torch.zeros(2), torch.zeros(2), what="logits") is None
    assert compare_output(torch.ones(2), torch.zeros(2), what="logits").startswith("logits differs")


def test_compare_output_tensor_against_python_number():
    """Regression: a reference that returns a Python number and a candidate that returns a
    tensor of several elements crashed compare_output (``bool`` of a tensor) instead of giving a
    message."""
    msg = compare_output(torch.tensor([1.0, 2.0]), 3.0)
    assert isinstance(msg, str) and "expected 3.0" in msg


def test_compare_output_other_python_values():
    assert "is a Tensor of shape (), expected 3" in compare_output(torch.tensor(3.0), 3)
    assert compare_output({"a": torch.ones(2)}, {"a": torch.ones(2)}) is None
    assert compare_output({"a": torch.zeros(2)}, {"a": torch.ones(2)}).startswith("output['a'] differs")
    assert "dict with keys 'a'" in compare_output(torch.ones(2), {"a": torch.ones(2)})
    import numpy as np
    assert compare_output(np.ones(2), np.zeros(2)) is not None      # no crash on arrays
