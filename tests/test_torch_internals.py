"""grader.checks._torch_internals: every function that touches private torch APIs.

A torch upgrade that moves one of these names must fail here, not somewhere deep in the grader.
One Inductor compile in this file (run_and_get_code + fresh cache).
"""
from __future__ import annotations

import logging
import os
import sys
import warnings

import pytest
import torch

import models
from grader.checks import _torch_internals as ti


def _breaks_once(x):
    y = torch.sin(x)
    torch._dynamo.graph_break()
    return torch.cos(y)


def test_dynamo_reset_forgets_compiled_functions(counting_backend):
    def f(x):
        return x + 1

    opt = torch.compile(f, backend=counting_backend)
    opt(torch.zeros(2))
    opt(torch.zeros(2))
    assert counting_backend.frame_count == 1
    ti.dynamo_reset()
    opt(torch.zeros(2))
    assert counting_backend.frame_count == 2


def test_explain_counts_graphs_and_breaks():
    out = ti.explain(_breaks_once, torch.randn(3))
    assert out.graph_count == 2
    assert out.graph_break_count == 1
    assert len(out.break_reasons) == 1
    assert out.op_count == 2
    out = ti.explain(models.BranchOnValueFixed(), models.example_input())
    assert out.graph_count == 1 and out.graph_break_count == 0


def test_explain_resets_other_functions(counting_backend):
    """The pitfall that makes graph_break_report avoid ``explain``: it wipes other caches."""
    def f(x):
        return x * 2

    opt = torch.compile(f, backend=counting_backend)
    opt(torch.zeros(2))
    ti.explain(_breaks_once, torch.randn(3))
    opt(torch.zeros(2))
    assert counting_backend.frame_count == 2


def test_guard_failures_recorded_and_cleared():
    def f(x):
        return x * 2

    ti.clear_guard_failures()
    opt = torch.compile(f, backend="eager")
    opt(torch.zeros(2))
    assert ti.guard_failures_for(f.__code__) == []
    opt(torch.zeros(2, dtype=torch.float64))
    failures = ti.guard_failures_for(f.__code__)
    assert len(failures) == 1
    assert failures[0] == "0/0: tensor 'x' dtype mismatch. expected Float, actual Double"
    opt(torch.zeros(5))   # size change on the float graph (float64 graph fails on dtype)
    assert len(ti.guard_failures_for(f.__code__)) > 1
    ti.clear_guard_failures()
    assert ti.guard_failures_for(f.__code__) == []
    assert ti.guard_failures_for((lambda: 0).__code__) == []


def test_recompile_limit_get_and_set(counting_backend):
    default = ti.recompile_limit()
    assert default == 8          # torch's default; the grader's texts mention it
    with ti.set_recompile_limit(2):
        assert ti.recompile_limit() == 2
        assert getattr(torch._dynamo.config, ti.recompile_limit_name()) == 2

        def f(x):
            return x + 1

        opt = torch.compile(f, backend=counting_backend, dynamic=False)
        for n in range(1, 6):
            opt(torch.zeros(n))
        assert counting_backend.frame_count == 2     # past the limit: eager, silently
    assert ti.recompile_limit() == default


def test_fresh_inductor_cache_uses_a_temporary_dir():
    before = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with ti.fresh_inductor_cache():
        inside = os.environ["TORCHINDUCTOR_CACHE_DIR"]
        assert inside != before and os.path.isdir(inside)
    assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == before
    assert not os.path.exists(inside)


_PROBE_THEN_FRESH = """
import glob, os, sys, torch
from grader.checks import _torch_internals as ti
usual = os.environ["TORCHINDUCTOR_CACHE_DIR"]
if sys.argv[1] == "read-only":    # as for a user who may not write there (root writes anything)
    _access = os.access
    os.access = lambda path, mode: False if os.path.realpath(path) == usual else _access(path, mode)
with ti.fresh_inductor_cache():
    torch.compile(lambda t: t.sin() + 1)(torch.ones(4))
print(len(glob.glob(os.path.join(usual, "**", "*.load_ok"), recursive=True)))
"""


@pytest.mark.parametrize("usual", ["writable", "read-only"])
def test_the_cpu_vector_isa_is_probed_in_the_usual_cache_before_a_fresh_one(tmp_path, usual):
    """In a new process, a compile under fresh_inductor_cache leaves Inductor's proof that the
    CPU's vector instructions build and load (a ``.load_ok`` file per instruction set) in the
    usual cache folder, where the next process finds it; a folder the process may not write is
    left alone, and the compile still works (torch's own probe then runs in the fresh cache)."""
    import subprocess

    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.realpath(tmp_path),
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", _PROBE_THEN_FRESH, usual], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probed = int(proc.stdout.split()[-1])
    assert (probed > 0) == (usual == "writable"), (probed, proc.stderr[-2000:])


def test_a_second_kernel_count_generates_code_again_without_a_fresh_cache():
    """The same function counted twice in one cache folder: without the FX graph cache the second
    compile is lowered and generates its code again (no graph handed back whole), so both counts
    are made from code, and they agree."""
    from torch._dynamo.utils import counters

    from grader.checks.fusion import fusion_report

    def chain(x):
        return (x.sin() * 2).cos() + 1

    hits = counters["inductor"]["fxgraph_cache_hit"]
    first, second = (fusion_report(chain, torch.randn(64)) for _ in range(2))
    assert counters["inductor"]["fxgraph_cache_hit"] == hits
    assert first.kernels == second.kernels == 1


def test_run_and_get_code_and_kernel_sources():
    """The one Inductor compile of this file: a fresh cache, one fused kernel, its C++ code."""
    from grader.checks import fusion

    def chain(x):
        return (x.sin() + 1).relu()

    x = torch.randn(8)
    with ti.fresh_inductor_cache(), ti.quiet_torch_logs():
        out, sources = ti.run_and_get_code(torch.compile(chain), x)
    torch.testing.assert_close(out, chain(x))
    assert isinstance(sources, list) and len(sources) >= 1
    code = "\n".join(sources)
    assert "cpp_fused" in code and "kernel" in code
    assert len(fusion.kernel_sources(code)) == 1 and fusion.library_calls(code) == []


def test_inductor_config_patch():
    import torch._inductor.config as cfg

    before = cfg.freezing
    with ti.inductor_config_patch(freezing=not before):
        assert cfg.freezing is (not before)
    assert cfg.freezing is before
    with pytest.raises((AttributeError, KeyError)):
        with ti.inductor_config_patch(no_such_option_xyz=True):
            pass


def test_list_mode_options():
    modes = ti.list_mode_options()
    assert {"default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"} <= set(modes)
    assert modes["reduce-overhead"].get("triton.cudagraphs") is True
    assert modes["max-autotune"].get("max_autotune") is True
    assert modes["default"] == {}


def test_quiet_torch_logs_silences_and_restores(capfd):
    logger = logging.getLogger("torch._dynamo")
    torch_logger = logging.getLogger("torch")
    # A handler of our own on stderr, so the test does not depend on how this torch release
    # configures its loggers (2.6 and 2.14 differ).
    handler = logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    try:
        saved = [(lg.level, lg.propagate, list(lg.handlers)) for lg in (logger, torch_logger)]
        with ti.quiet_torch_logs():
            logger.warning("dynamo warns")
            logging.getLogger("torch._inductor.codecache").error("inductor errs")
            warnings.warn("a torch-ish warning")
            torch.compile(_breaks_once, backend="eager")(torch.randn(3))
        assert capfd.readouterr().err == ""
        assert [(lg.level, lg.propagate, list(lg.handlers))
                for lg in (logger, torch_logger)] == saved
        # Outside the block the same warning does reach stderr (so the check above means something).
        logger.warning("dynamo warns again")
        assert "dynamo warns again" in capfd.readouterr().err
    finally:
        logger.removeHandler(handler)


def test_capture_graph_breaks_records_file_line_reason():
    lg = logging.getLogger("torch._dynamo.symbolic_convert.__graph_breaks")
    saved = (lg.level, lg.propagate, lg.disabled, list(lg.handlers))
    with ti.capture_graph_breaks() as records:
        torch.compile(models.ItemRead(), backend="eager")(models.example_input())
    assert len(records) >= 1
    filename, lineno, reason = records[0]
    assert os.path.samefile(filename, models.__file__)
    assert lineno == models.break_line("scalar_read")[0]
    assert "item" in reason           # "item()" (2.7+), "Tensor.item" (2.6)
    assert (lg.level, lg.propagate, lg.disabled, list(lg.handlers)) == saved


def test_capture_graph_breaks_sees_a_break_at_the_start_of_a_frame():
    """A print as the very first statement ends an empty graph; explain's list can miss it."""
    with ti.capture_graph_breaks() as records:
        torch.compile(models.PrintInForward(), backend="eager")(models.example_input())
    assert [r[1] for r in records] == [models.break_line("print")[0]]


def test_fresh_copy_of_a_function_has_code_dynamo_has_not_seen(counting_backend):
    def f(x, k=2):
        return x * k

    copy_ = ti.fresh_copy(f)
    assert copy_ is not f and copy_.__code__ is not f.__code__
    assert copy_.__code__ != f.__code__          # not even equal: Dynamo keys some records by ==
    assert copy_.__code__.co_filename == f.__code__.co_filename
    assert copy_.__code__.co_firstlineno == f.__code__.co_firstlineno
    assert copy_.__name__ == "f" and copy_.__qualname__ == f.__qualname__
    x = torch.randn(3)
    assert torch.equal(copy_(x), f(x)) and torch.equal(copy_(x, k=3), f(x, k=3))

    opt = torch.compile(f, backend=counting_backend)
    opt(x)
    assert counting_backend.frame_count == 1
    torch.compile(ti.fresh_copy(f), backend=counting_backend)(x)   # not a cache hit
    assert counting_backend.frame_count == 2
    opt(x)                                                          # f's own entry is intact
    assert counting_backend.frame_count == 2


def test_fresh_copy_of_modules_and_other_callables():
    import functools

    model, x = models.SmallMLP(), torch.randn(2, 8)
    copy_ = ti.fresh_copy(model)
    assert isinstance(copy_, models.SmallMLP) and copy_ is not model
    assert copy_.fc is model.fc and copy_.fc.weight is model.fc.weight   # shallow: same weights
    assert copy_.forward.__func__.__code__ is not models.SmallMLP.forward.__code__
    assert "forward" not in vars(model)                                  # the original is untouched
    torch.testing.assert_close(copy_(x), model(x))
    # an already compiled module or function is unwrapped
    unwrapped = ti.fresh_copy(torch.compile(model, backend="eager"))
    assert isinstance(unwrapped, models.SmallMLP)
    assert ti.fresh_copy(torch.compile(models.pointwise)).__code__.co_name == "pointwise"
    # a forward set on the instance: a plain function, or another module's bound method
    other = models.SmallMLP()
    model.forward = lambda t: t + 1
    torch.testing.assert_close(ti.fresh_copy(model)(x), x + 1)
    model.forward = other.forward
    torch.testing.assert_close(ti.fresh_copy(model)(x), other(x))
    # partials, bound methods and callable objects
    part = ti.fresh_copy(functools.partial(torch.add, alpha=2))
    torch.testing.assert_close(part(x, x), x * 3)

    class Scale:
        def __call__(self, t):
            return t * 5

    torch.testing.assert_close(ti.fresh_copy(Scale())(x), x * 5)
    torch.testing.assert_close(ti.fresh_copy(other.forward)(x), other(x))


@pytest.mark.skipif(not ti.isolates_recompiles(),
                    reason="needs torch.compile(isolate_recompiles=True), torch 2.12+: on older "
                           "torch, repeated reports on a wrapper share the inner frame's limit "
                           "(docs/versions.md)")
def test_compile_fresh_reports_do_not_use_up_the_learners_recompile_limit(counting_backend):
    """A wrapper calling a module that breaks: the module's forward is compiled as its own
    frame. Many compiles with new backends must not leave the learner's own compile of the
    module running eagerly (recompile limit hit)."""
    model, x = models.ItemRead(), models.example_input()

    def wrapper(t):
        return model(t)

    for _ in range(ti.recompile_limit() + 2):
        ti.compile_fresh(wrapper, backend=ti.explain_backend())(x)
    torch.compile(model, backend=counting_backend)(x)
    assert counting_backend.frame_count >= 1


def test_own_automatic_dynamic_state(counting_backend):
    def f(x):
        return x * 2

    learner = torch.compile(f, backend="eager")
    learner(torch.zeros(1))
    learner(torch.zeros(2))          # size 2 after size 1: dimension 0 is now dynamic for `f`

    def compiles_for(sizes):
        from torch._dynamo.testing import CompileCounter

        cc = CompileCounter()
        opt = torch.compile(ti.fresh_copy(f), backend=cc)
        for n in sizes:
            opt(torch.zeros(n))
        return cc.frame_count

    assert compiles_for([3, 4]) == 1          # what the process learnt carries over ...
    with ti.own_automatic_dynamic_state():
        assert compiles_for([3, 4]) == 2      # ... but not into the block
    assert compiles_for([5, 6]) == 1          # and it is back afterwards


def test_capture_recompile_limit_hits(capfd):
    def f(x):
        return x + 1

    with ti.set_recompile_limit(2), ti.capture_recompile_limit_hits() as hits:
        opt = torch.compile(ti.fresh_copy(f), backend="eager", dynamic=False)
        for n in range(1, 6):
            opt(torch.zeros(n))
    assert hits and hits[0] == (ti.recompile_limit_name(), 2)
    assert capfd.readouterr().err == ""
    with ti.capture_recompile_limit_hits() as hits:
        torch.compile(ti.fresh_copy(f), backend="eager")(torch.zeros(3))
    assert hits == []


def test_guard_failures_forget():
    def f(x):
        return x * 2

    opt = torch.compile(f, backend="eager")
    opt(torch.zeros(2))
    opt(torch.zeros(2, dtype=torch.float64))
    assert len(ti.guard_failures_for(f.__code__, forget=True)) == 1
    assert ti.guard_failures_for(f.__code__) == []


def test_explain_backend_counts_graphs():
    backend = ti.explain_backend()
    torch.compile(ti.fresh_copy(_breaks_once), backend=backend)(torch.randn(3))
    out = backend.output()
    assert out.graph_count == 2 and out.op_count == 2


# ---------------------------------------------------------------------------------------------
# Chapters 6-8: dynamic shapes, compile counting, AOTAutograd

def test_mark_dynamic_and_maybe_mark_dynamic(counting_backend):
    def f(x):
        return x * 2

    opt = ti.compile_fresh(f, backend=counting_backend)
    x = torch.zeros(3, 2)
    ti.mark_dynamic(x, 0)
    opt(x)
    opt(torch.zeros(5, 2))
    assert counting_backend.frame_count == 1           # dynamic from the first compile

    def branches(x):
        return x * 2 if x.shape[0] == 4 else x + 1

    y = torch.zeros(4, 2)
    ti.mark_dynamic(y, 0)
    with ti.quiet_torch_logs(), pytest.raises(Exception, match="(?i)constraint|specializ"):
        ti.compile_fresh(branches, backend="eager")(y)
    z = torch.zeros(4, 2)
    ti.maybe_mark_dynamic(z, 0)
    assert ti.compile_fresh(branches, backend="eager")(z).sum() == 0   # a hint: no error


def test_dynamo_config_patch_and_lookup_backend():
    import torch._dynamo.config as cfg

    before = cfg.capture_scalar_outputs
    with ti.dynamo_config_patch(capture_scalar_outputs=not before):
        assert cfg.capture_scalar_outputs is (not before)
    assert cfg.capture_scalar_outputs is before
    assert callable(ti.lookup_backend("eager")) and callable(ti.lookup_backend("inductor"))


def test_unique_graphs_counts_compiles():
    start = ti.unique_graphs()
    ti.compile_fresh(lambda t: t - 1, backend="eager")(torch.zeros(2))
    assert ti.unique_graphs() == start + 1


def test_capture_recompile_limit_messages(capfd):
    def f(x):
        return x + 1

    with ti.set_recompile_limit(1), ti.capture_recompile_limit_messages() as messages:
        opt = ti.compile_fresh(f, backend="eager", dynamic=False)
        for dtype in (torch.float32, torch.float64, torch.float16):
            opt(torch.zeros(2, dtype=dtype))
    assert messages and f"hit config.{ti.recompile_limit_name()} (1)" in messages[0]
    assert "dtype mismatch" in messages[0]           # the last reason is part of it
    assert capfd.readouterr().err == ""


def test_aot_graphs_joint_forward_backward_and_saved():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    for partitioner in ("default", "min_cut"):
        graphs = ti.aot_graphs(model, x, partitioner=partitioner)
        assert {"joint", "forward", "backward", "saved"} <= set(graphs)
        joint_inputs = [n.name for n in graphs["joint"].graph.nodes if n.op == "placeholder"]
        assert any(n.startswith("tangents") for n in joint_inputs)      # forward + backward
        assert graphs["saved"] and all(row[3] >= 0 for row in graphs["saved"])
        kinds = {row[4] for row in graphs["saved"]}
        assert kinds <= {"input", "view of an input", "activation", "view of an activation"}
        assert graphs["activation_bytes"] > 0
    assert model[0].weight.grad is not None          # the backward ran (on the shared weights)


def test_nonstrict_trace_decorator_keeps_a_function_in_one_graph(counting_backend):
    deco = ti.nonstrict_trace_decorator()
    if deco is None:
        pytest.skip(f"torch {torch.__version__} has no nonstrict_trace")

    def helper(t):
        return t * 2

    wrapped = deco(helper)
    out = ti.compile_fresh(lambda t: wrapped(t.sin()).cos(), backend=counting_backend)(torch.ones(3))
    torch.testing.assert_close(out, (torch.ones(3).sin() * 2).cos())
    assert counting_backend.frame_count == 1


# ---------------------------------------------------------------------------------------------
# What differs between supported releases (docs/versions.md): each test states the release
# condition with ti.torch_at_least, so a run on the oldest supported torch checks the other side.

def _one_item(t):
    y = t.sin()
    return y / (y.max().item() + 1)


def _one_mask(t):
    return t[t > 0].sum() * 2


@pytest.mark.parametrize("fn", [_one_item, _one_mask], ids=["item", "boolean mask"])
def test_fullgraph_captures_item_and_masks_from_torch_2_10(fn):
    """torch 2.10 turned on capture_scalar_outputs / capture_dynamic_output_shape_ops for
    fullgraph=True (pytorch PRs 163121, 163123); 2.8 and 2.9 raise. A plain compile breaks on both
    in every release (chapter 4's table, ps1/ps5/ps6's introductions)."""
    from torch._dynamo.testing import CompileCounter

    try:
        ti.compile_fresh(fn, fullgraph=True, backend="eager")(torch.randn(8))
        captured = True
    except Exception as exc:
        assert ti.is_graph_break_error(exc), exc
        captured = False
    assert captured == ti.torch_at_least(2, 10)
    plain = CompileCounter()
    with ti.quiet_torch_logs():
        ti.compile_fresh(fn, backend=plain)(torch.randn(8))
    assert plain.frame_count == 2                 # the break splits it in every release


def _write_by_setitem(cache, x, pos):
    cache[:, pos] = x
    return cache.sum()


def _write_by_select(cache, x, pos):
    cache.select(1, pos).copy_(x)
    return cache.sum()


def _write_by_slice(cache, x, pos):
    cache[:, pos:pos + 1] = x[:, None]
    return cache.sum()


def _write_by_index_copy(cache, x, pos):
    cache.index_copy_(1, torch.tensor([pos]), x[:, None])
    return cache.sum()


@pytest.mark.parametrize("fn", [_write_by_setitem, _write_by_select, _write_by_slice,
                                _write_by_index_copy])
def test_python_int_position_compiles_by_how_it_is_used(fn):
    """ps6's rubric: a Python-int position written with `cache[:, pos] = x` is guarded on its value
    from torch 2.9 on (one compile per position, up to the recompile limit); through select, a slice
    or index_copy_ it becomes dynamic after one recompile (2 compiles), as in torch 2.8 for all four."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    cache = torch.zeros(2, 16)
    with ti.quiet_torch_logs(), ti.own_automatic_dynamic_state():
        compiled = ti.compile_fresh(fn, backend=counter)
        for pos in range(12):
            compiled(cache, torch.ones(2), pos)
    assert cache.sum().item() == 24.0            # every position written, compiled or not
    guards_on_value = fn is _write_by_setitem and ti.torch_at_least(2, 9)
    assert counter.frame_count == (ti.recompile_limit() if guards_on_value else 2)


def test_automatic_dynamic_is_remembered_by_file_line_and_name(counting_backend):
    """Chapter 6, section 1: a re-run (a new function at the same file, line and name) compiles
    the dynamic graph first; after torch._dynamo.reset() the first compile is static again."""
    from torch._dynamo.testing import CompileCounter

    def head(x):
        return torch.tanh(x).sum(-1) * 2

    def run(fn):
        cc = CompileCounter()
        compiled = torch.compile(fn, backend=cc)
        for b in (2, 3, 4, 5):
            compiled(torch.randn(b, 8))
        return cc.frame_count

    ti.dynamo_reset()
    assert run(ti.fresh_copy(head)) == 2          # static, then dynamic
    assert run(ti.fresh_copy(head)) == 1          # remembered: dynamic from the first compile
    ti.dynamo_reset()
    assert run(ti.fresh_copy(head)) == 2          # forgotten


def test_regional_compile_recompiles_on_requires_grad():
    """Chapter 8: compiled blocks share one graph under no_grad; with gradients on, the first
    block's input does not require grad and the others' do: a second graph."""
    from torch._dynamo.testing import CompileCounter

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return x + torch.tanh(self.fc(x))

    for grad, expected in ((False, 1), (True, 2)):
        ti.dynamo_reset()
        cc = CompileCounter()
        blocks = torch.nn.Sequential(*[Block() for _ in range(3)])
        for block in blocks:
            block.compile(backend=cc)
        with torch.set_grad_enabled(grad):
            blocks(torch.randn(4, 8))
        assert cc.frame_count == expected, (grad, cc.frame_count)


def test_aot_graphs_static_after_a_plain_compile_of_the_same_code_with_other_sizes():
    """Chapter 7 compiles a Sequential plainly before ch.aot_graphs compiles another: automatic
    dynamic (keyed by file, line and name) would make the second one's sizes symbolic; aot_graphs
    compiles in a state of its own and reports the sizes of its arguments."""
    small = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    torch.compile(small, backend="eager")(torch.randn(2, 4)).sum().backward()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    graphs = ti.aot_graphs(model, torch.randn(5, 8))
    assert isinstance(graphs["activation_bytes"], int)
    assert all(isinstance(d, int) for row in graphs["saved"] for d in row[1])
    assert any(row[1] and row[1][0] == 5 for row in graphs["saved"])


# ---------------------------------------------------------------------------------------------
# Chapter 9 and ps7: debugging a wrong, crashing or slow compile

def _round_trip(x):
    y = x * 3.0
    return y - y.to(torch.bfloat16).float()


def test_compiler_bisector_names_what_changes_a_result():
    assert ti.has_compiler_bisector() == ti.torch_at_least(2, 6)
    if not ti.has_compiler_bisector():
        pytest.skip("no compiler bisector before torch 2.6")
    stages = ti.compiler_bisector_stages()
    assert list(stages)[:3] == ["eager", "aot_eager", "aot_eager_decomp_partition"]
    assert "lowerings" in stages["inductor"]
    assert "inductor_emulate_precision_casts" in stages["inductor"]
    x = torch.randn(64, 64)
    want = _round_trip(x)
    found, log = ti.compiler_bisect(lambda: torch.equal(torch.compile(_round_trip)(x), want))
    assert found is not None and found["backend"] == "inductor", log
    if ti.torch_at_least(2, 14):
        assert found["subsystem"] == "inductor_emulate_precision_casts"
    # nothing to find: every backend gives eager's result within float32's rounding (bit for bit,
    # Inductor's vectorized sin differs in the last bits: the bisector would name its lowering)
    found, _ = ti.compiler_bisect(lambda: torch.allclose(torch.compile(torch.sin)(x), torch.sin(x)))
    assert found is None


def test_emulate_precision_casts_rounds_as_eager_does_since_2_14():
    """2.14 keeps a float32 -> bfloat16 -> float32 chain under emulate_precision_casts, so the
    compiled residual is eager's; 2.8's joint-graph pass ``pointless_convert`` removes the chain
    whatever the setting says (docs/versions.md), so the residual is 0 (run on 2.8.0)."""
    x = torch.randn(64, 64)
    with ti.emulate_precision_casts(), ti.fresh_inductor_cache():
        got = ti.compile_fresh(_round_trip)(x)
    if ti.torch_at_least(2, 14):
        assert torch.equal(got, _round_trip(x))
    else:
        assert torch.count_nonzero(got) == 0 and torch.count_nonzero(_round_trip(x)) > 0


def test_torch_logs_and_cudagraph_skips(capsys):
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer), ti.torch_logs(recompiles=True):
        f = ti.compile_fresh(lambda t: t + 1, backend="eager")
        f(torch.zeros(2))
        f(torch.zeros(2, dtype=torch.float64))
    assert "[__recompiles]" in buffer.getvalue()
    assert isinstance(ti.cudagraph_skips(), int)


def test_compiled_autograd_counters_and_config():
    net = torch.nn.Linear(4, 4)
    before = ti.compiled_autograd_counters().get("captures", 0)

    def step(x):
        net(x).sum().backward()

    with ti.dynamo_config_patch(compiled_autograd=True):
        torch.compile(step)(torch.randn(3, 4))
    assert ti.compiled_autograd_counters().get("captures", 0) == before + 1


def test_compiled_autograd_enabled_captures_an_eager_backward_and_dynamo_setting():
    """The context captures a backward called outside any compiled function, each capture handed
    to the compiler function given (chapter 10 compiles DDP's backward with it)."""
    net = torch.nn.Linear(4, 4)
    before = ti.compiled_autograd_counters().get("captures", 0)
    handed = []

    def compiler(gm, example_inputs):
        handed.append(gm)
        return gm.forward

    with ti.compiled_autograd_enabled(torch.compile(backend=compiler)):
        net(torch.randn(3, 4)).sum().backward()
    assert ti.compiled_autograd_counters().get("captures", 0) == before + 1
    assert len(handed) >= 1 and net.weight.grad is not None
    assert ti.dynamo_setting("optimize_ddp") is True          # the default: DDPOptimizer
    assert ti.dynamo_setting("no_such_setting") is None


def test_compile_cache_counters_count_a_recompile_served_by_the_caches():
    """A recompile of the same graph (only a guard changed) is served by AOTAutograd's and the FX
    graph cache, which the counters show; the first compile in an empty cache misses both."""
    class Counted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)
            self.calls = 0

        def forward(self, x):
            self.calls += 1
            return torch.tanh(self.fc(x))

    with ti.fresh_inductor_cache(), torch.no_grad():
        before = ti.compile_cache_counters()
        model = ti.compile_fresh(Counted())
        model(torch.randn(2, 8))
        first = ti.compile_cache_counters()
        model(torch.randn(2, 8))
        second = ti.compile_cache_counters()
    assert first["fxgraph_cache_miss"] - before["fxgraph_cache_miss"] == 1
    assert first["fxgraph_cache_hit"] == before["fxgraph_cache_hit"]
    assert second["fxgraph_cache_hit"] - first["fxgraph_cache_hit"] == 1
    assert second["autograd_cache_hit"] - first["autograd_cache_hit"] == 1


def test_inductor_setting_and_cpp_flags():
    assert ti.inductor_setting("fallback_random") is False
    assert isinstance(ti.inductor_setting("triton.cudagraphs"), bool)
    assert ti.inductor_setting("no_such_setting") is None
    assert ti.inductor_setting("triton.no_such_setting") is None
    compiler, flags = ti.inductor_cpp_flags()
    assert compiler and "ffp-contract=off" in flags
    # fast-math's flags first, then most of them taken back (cpp_builder.py, 2.8 and 2.14)
    assert flags.index("funsafe-math-optimizations") < flags.index("fno-unsafe-math-optimizations")
    assert flags.index("ffinite-math-only") < flags.index("fno-finite-math-only")
    if ti.torch_at_least(2, 14):
        assert "fmath-errno" in flags and "fno-math-errno" not in flags
    elif not ti.torch_at_least(2, 9):
        assert "fno-math-errno" in flags


def test_inject_inductor_relu_bug_breaks_inductors_cpp():
    with ti.inject_inductor_relu_bug("compile_error"), ti.fresh_inductor_cache():
        with pytest.raises(Exception, match="C\\+\\+ compile error|CppCompileError"):
            ti.compile_fresh(lambda t: torch.relu(t) + 1)(torch.randn(8))


def test_host_reads_names_the_line_that_reads_a_value_not_a_float_attribute():
    """A `.item()` of an input is a host read, named by the learner's line; a layer norm's eps that
    Dynamo passes as a 0-d tensor under dynamic=True and reads back is not."""
    found = {}
    norm = torch.nn.LayerNorm(8)

    def keep(gm, example_inputs):
        found["reads"] = ti.host_reads(gm)
        return gm.forward

    def sliced(x, pos):
        n = int(pos) + 1
        return norm(x[:, :n].sum(1))

    with ti.dynamo_config_patch(capture_scalar_outputs=True):   # fullgraph turns it on from 2.10
        torch.compile(sliced, backend=keep, fullgraph=True, dynamic=True)(
            torch.randn(2, 4, 8), torch.tensor(1))
    assert found["reads"] == ["n = int(pos) + 1"]
    torch.compile(lambda x: norm(x * 2), backend=keep, fullgraph=True, dynamic=True)(
        torch.randn(2, 8))
    assert found["reads"] == []


def test_aoti_package_round_trip_and_the_probes_of_chapter_11(tmp_path):
    """torch.export -> aoti_compile_and_package -> aoti_load_package on a small MLP: the package
    computes the model's outputs (one AOTInductor compile: about 20 s on 2 cores). And the probes
    chapter 11 uses: Triton (never on a CPU-only machine), AVX2, importing torch._inductor."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()
    x = torch.randn(3, 16)
    exported = torch.export.export(model, (x,))
    with ti.quiet_torch_logs():
        path = ti.aoti_compile_and_package(exported, str(tmp_path / "mlp.pt2"))
    assert path == str(tmp_path / "mlp.pt2") and os.path.getsize(path) > 0
    ti.import_inductor()
    runner = ti.aoti_load_package(path)
    with torch.no_grad():
        torch.testing.assert_close(runner(x), model(x))
    if not torch.cuda.is_available():
        assert ti.has_triton() is False
    assert isinstance(ti.cpu_has_avx2(), bool)


def test_custom_op_registration_reads_back_what_torch_library_registered():
    """ps8: the fake and the autograd formula a custom operator was given (None where none)."""
    @torch.library.custom_op("course_ti_test::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert ti.custom_op_registration("course_ti_test::double") == {
        "fake": None, "setup_context": None, "backward": None}

    def fake(x):
        return torch.empty_like(x)

    def setup(ctx, inputs, output):
        pass

    def backward(ctx, grad):
        return grad * 2

    double.register_fake(fake)
    double.register_autograd(backward, setup_context=setup)
    assert ti.custom_op_registration("course_ti_test::double") == {
        "fake": fake, "setup_context": setup, "backward": backward}
    assert ti.custom_op_registration("course_ti_test::absent") is None


def test_ddp_bucket_sizes_and_ddpoptimizers_log():
    """DDP's buckets as its logging data says (chapter 10): one bucket in the first iteration
    (find_unused_parameters=False), rebuilt at the second forward with the cap passed as the first
    bucket's cap too; DDPOptimizer's log lines collected, not printed: the cap it was handed and,
    at the debug level, its table of buckets or the request to install tabulate."""
    import importlib.util
    import socket

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from grader.course.chapters.distributed import make_net

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        # chapter 10's model (a model made only of torch.nn's own modules would give Dynamo no
        # frame of user code to compile inside DDP's forward)
        model = DDP(make_net(256, 2), bucket_cap_mb=1.5)
        x = torch.randn(4, 256)
        for _ in range(3):          # rebuilt at the second forward, in the logging data after the third
            model(x).sum().backward()
        buckets = ti.ddp_bucket_sizes(model)
        whole = sum(p.numel() * 4 for p in model.parameters())
        assert buckets["first_iteration"] == [whole]
        assert len(buckets["rebuilt"]) > 1 and sum(buckets["rebuilt"]) == whole
        assert buckets["rebuilt"][0] >= 1.5 * 2 ** 20 > 2 ** 20     # the cap passed, not 1 MiB

        ti.dynamo_reset()
        with ti.capture_log_messages(ti.DDP_OPTIMIZER_LOGGER) as lines:
            torch.compile(model, backend="eager")(x).sum().backward()
        ti.dynamo_reset()
        cap = int(1.5 * 2 ** 20)
        assert any(f"DDPOptimizer used bucket cap {cap} and created" in line for line in lines), lines
        if importlib.util.find_spec("tabulate") is None:
            assert any("pip install tabulate" in line for line in lines), lines
        else:
            assert any("bucket assignments" in line for line in lines), lines
        assert not any("---orig graph---" in line for line in lines)   # the ddp_graphs artifact is left out
    finally:
        dist.destroy_process_group()
