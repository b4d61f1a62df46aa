"""Every chapter notebook runs top to bottom on CPU, plots its figures and records its claims.

The chapters run at ``COURSE_SIZE=ci`` (tiny shapes) unless ``COURSE_SIZE`` is set; each runs once
in a fresh kernel (module-scoped fixture) and the tests below inspect the executed copy. Run times
are written to tests/artifacts/chapter-times.json.
"""
from __future__ import annotations

import ast
import json
import os
import re

import nbformat
import pytest

from conftest import TEST_JOBS, at_once
from grader.checks._torch_internals import torch_at_least
from grader.course import chapters
from grader.tools.gpu_check_chapters import chapter_paths, execute_chapter, run_all

SIZE = os.environ.get("COURSE_SIZE", "ci")
ARTIFACTS = os.path.join(os.path.dirname(__file__), "artifacts")

# chapter file -> (record key, minimum number of plots, minimum number of recorded rows)
EXPECTED = {
    "01_dynamo.ipynb": ("ch1", 2, 5),
    "02_inductor_fusion.ipynb": ("ch2", 2, 5),
    "03_modes.ipynb": ("ch3", 1, 9),
    "04_graph_breaks.ipynb": ("ch4", 1, 4),
    "05_realistic_speedups.ipynb": ("ch5", 1, 3),
    "06_dynamic_shapes.ipynb": ("ch6", 1, 18),
    "07_training.ipynb": ("ch7", 1, 8),
    "08_compile_time_debugging.ipynb": ("ch8", 1, 14),
    "09_debugging.ipynb": ("ch9", 2, 28),
    "10_training_stack.ipynb": ("ch10", 1, 23),
    "11_extend_and_ship.ipynb": ("ch11", 2, 14),
}
# COURSE_CHAPTERS=06,07 runs only the chapters whose file names start with those prefixes (to
# work on a few chapters without executing them all); unset, every chapter runs.
ONLY = [p.strip() for p in os.environ.get("COURSE_CHAPTERS", "").split(",") if p.strip()]


def _selected(name: str) -> bool:
    return not ONLY or any(name.startswith(p) for p in ONLY)


def test_every_chapter_is_expected():
    names = [os.path.basename(p) for p in chapter_paths()]
    assert names == sorted(EXPECTED), names


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run every chapter once; map file name -> (notebook or exception, seconds, records).

    Chapters run TEST_JOBS at a time (tests/conftest.py), each in a kernel of its own: at CI
    size a chapter keeps about one core busy (tracing, compiling, the kernel's start)."""

    def run(path):
        name = os.path.basename(path)
        record = str(tmp_path_factory.mktemp("rec") / "records.json")
        try:
            nb, seconds = execute_chapter(path, size=SIZE, record=record, timeout=600)
        except Exception as exc:  # reported by the test of this chapter
            nb, seconds = exc, float("nan")
        if not isinstance(nb, Exception):  # kept for reading (tests/artifacts is not committed)
            os.makedirs(os.path.join(ARTIFACTS, "executed"), exist_ok=True)
            nbformat.write(nb, os.path.join(ARTIFACTS, "executed", name))
        return name, (nb, seconds, chapters.load_records(record))

    # the later chapters are the longer ones: started first, the two queues end close together
    paths = [p for p in reversed(chapter_paths()) if _selected(os.path.basename(p))]
    out = dict(at_once(run, paths))
    times = {name: out[name][1] for name in sorted(out)}
    os.makedirs(ARTIFACTS, exist_ok=True)
    with open(os.path.join(ARTIFACTS, "chapter-times.json"), "w") as fh:
        json.dump({"size": SIZE, "jobs": TEST_JOBS, "seconds": times,
                   "total": sum(times.values())}, fh, indent=1)
    return out


def _outputs(nb):
    for cell in nb.cells:
        if cell.cell_type == "code":
            yield from cell.get("outputs", [])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_chapter_runs_plots_and_records(executed, name):
    if not _selected(name):
        pytest.skip(f"COURSE_CHAPTERS={os.environ.get('COURSE_CHAPTERS')} leaves {name} out")
    nb, seconds, records = executed[name]
    if isinstance(nb, Exception):
        pytest.fail(f"{name} failed at size {SIZE}:\n{str(nb)[-3000:]}")
    errors = [o for o in _outputs(nb) if o.output_type == "error"]
    assert not errors, [f"{e.ename}: {e.evalue}" for e in errors]
    key, plots, rows = EXPECTED[name]
    pngs = [o for o in _outputs(nb) if o.output_type in ("display_data", "execute_result")
            and "image/png" in o.get("data", {})]
    assert len(pngs) >= plots, f"{name}: {len(pngs)} plots, expected at least {plots}"
    mine = [r for r in records if r["chapter"] == key]
    assert len(mine) >= rows, f"{name}: {len(mine)} recorded rows, expected at least {rows}"
    for r in mine:
        assert r["device"] == "cpu" and r["size"] == SIZE
        assert isinstance(r["measured"], float)
    # the recorded figures are printed in the notebook, next to the claim
    text = "".join(o.get("text", "") for o in _outputs(nb) if o.output_type == "stream")
    assert f"[{key}]" in text and "measured" in text
    assert seconds < 600, f"{name} took {seconds:.0f} s at size {SIZE}"


def test_cpu_run_says_what_is_gpu_only(executed):
    if not _selected("03_modes.ipynb"):
        pytest.skip("chapter 3 is left out by COURSE_CHAPTERS")
    nb = executed["03_modes.ipynb"][0]
    if isinstance(nb, Exception):
        pytest.skip("chapter 3 failed (reported by its own test)")
    text = "".join(o.get("text", "") for o in _outputs(nb) if o.output_type == "stream")
    assert "GPU-only:" in text and "skipped on cpu because" in text


def test_claims_table_and_record(tmp_path, monkeypatch):
    path = tmp_path / "rec.json"
    monkeypatch.setenv("COURSE_RECORD", str(path))
    chapters.record("chX", "speedup | with a pipe", 1.234, "about 2x", low=1.1, high=1.4)
    chapters.record("chX", "compile", 12.5, None, unit="s")
    rows = chapters.load_records()
    assert [r["name"] for r in rows] == ["speedup | with a pipe", "compile"]
    table = chapters.claims_table(rows)
    assert "| chX | speedup \\| with a pipe | 1.23x [1.10, 1.40] | about 2x | cpu |" in table
    assert "12.50 s" in table
    monkeypatch.delenv("COURSE_RECORD")
    chapters.record("chX", "not written", 1.0, None)  # no file: a no-op besides printing
    assert len(chapters.load_records(str(path))) == 2


def test_size_switch_defaults():
    assert chapters.SIZE in chapters.SIZES
    if "COURSE_SIZE" not in os.environ:
        assert chapters.SIZE == ("full" if chapters.DEVICE == "cuda" else "small")
    assert chapters.pick(full=3, small=2, ci=1) == {"full": 3, "small": 2, "ci": 1}[chapters.SIZE]


def test_break_even():
    assert chapters.break_even_calls(10.0, 0.5, 1.5) == pytest.approx(9.5)
    assert chapters.break_even_calls(10.0, 2.0, 1.0) == float("inf")


def test_gpu_check_runner_writes_the_table(tmp_path):
    """The runner behind `make gpu-check`, on a one-cell notebook (the real chapters are run above)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "from grader.course import chapters as ch\n"
        "ch.record('ch0', 'smoke speedup', 1.5, 'about 1.2x')\n"
        "print(ch.SIZE)")]
    path = tmp_path / "00_smoke.ipynb"
    nbformat.write(nb, str(path))
    out = tmp_path / "table.md"
    text = run_all(str(out), size="ci", notebooks=[str(path)], keep=str(tmp_path / "kept"))
    assert "| ch0 | smoke speedup | 1.50x | about 1.2x | cpu | ci |" in text
    assert out.read_text() == text
    assert (tmp_path / "kept" / "00_smoke.ipynb").exists()
    assert json.loads((tmp_path / "table.json").read_text())["rows"][0]["chapter"] == "ch0"


def _rows(executed, name: str, key: str) -> dict:
    """The recorded rows of one executed chapter, by measurement name (skips when left out)."""
    if not _selected(name):
        pytest.skip(f"{name} is left out by COURSE_CHAPTERS")
    nb, _, records = executed[name]
    if isinstance(nb, Exception):
        pytest.skip(f"{name} failed (reported by its own test)")
    return {r["name"]: r["measured"] for r in records if r["chapter"] == key}


def _stream_text(nb) -> str:
    return "".join(o.get("text", "") for o in _outputs(nb) if o.output_type == "stream")


def test_chapter4_fullgraph_table_matches_this_release(executed):
    """Section 4's table: fullgraph=True captures .item() and boolean masks from torch 2.10 on
    (2.8 and 2.9 raise); the grader calls none of the four one-break functions one graph."""
    from grader.checks._torch_internals import torch_at_least

    rows = _rows(executed, "04_graph_breaks.ipynb", "ch4")
    accepted = rows["of the 4 one-break functions, fullgraph=True compiles"]
    assert accepted == (2 if torch_at_least(2, 10) else 0)
    assert rows["of the 4 one-break functions, the grader calls one graph"] == 0
    text = _stream_text(executed["04_graph_breaks.ipynb"][0])
    column = "torch 2.10 and newer" if torch_at_least(2, 10) else "torch 2.8 and 2.9"
    assert f"the table's column for {column}" in text


def test_chapter6_counts_compiles_per_strategy(executed):
    from grader.checks._torch_internals import torch_at_least

    rows = _rows(executed, "06_dynamic_shapes.ipynb", "ch6")
    assert rows["compiles for 4 batch sizes, dynamic=None (automatic dynamic)"] == 2
    # automatic dynamic is remembered by a hash of the file, the line and the name (CodeId in
    # torch/_dynamo/pgo.py): a re-run compiles the dynamic graph only, until torch._dynamo.reset()
    assert rows["compiles for 4 batch sizes, dynamic=None, re-run in the same process"] == 1
    assert rows["compiles for 4 batch sizes, dynamic=None, re-run after torch._dynamo.reset()"] == 2
    # ... and, from torch 2.14 on (not in 2.8), by a hash of the closure's functions
    assert rows["compiles for 4 batch sizes, the same closure again"] == 1
    around_another = rows["compiles for 4 batch sizes, the same code around another function"]
    if torch_at_least(2, 14):
        assert around_another == 2
    elif not torch_at_least(2, 9):
        assert around_another == 1
    # plain torch.compile of one function, three settings in a row: the recompile limit is shared
    assert rows["plain torch.compile, 3 settings in a row on one function: compiles with "
                "dynamic=True"] == 0
    assert rows["compiles for 4 batch sizes, mark_dynamic"] == 1
    assert rows["compiles for batch sizes [1, 2, 3, 4, 0, 5], dynamic=False"] == 6
    # 0/1 specialization: sizes 1 and 0 get graphs of their own even with dynamic=True
    assert rows["compiles for batch sizes [1, 2, 3, 4, 0, 5], dynamic=True"] == 3
    assert rows["compiles for 4 dtypes with the recompile limit at 2"] == 2
    sweep = {k.split(", ", 1)[1]: v for k, v in rows.items()
             if k.startswith("sweep of ") and k.endswith(": compiles")}
    assert sweep["dynamic=True: compiles"] == 1
    assert sweep["mark_dynamic: compiles"] == 1
    assert sweep["dynamic=False: compiles"] > sweep["dynamic=None (auto): compiles"] > 1
    assert 1 <= sweep["pad to buckets: compiles"] < sweep["dynamic=False: compiles"]
    text = _stream_text(executed["06_dynamic_shapes.ipynb"][0])
    extra = re.search(r"compiles during the steady-state timing \(should be 0\): (\{.*?\})", text)
    assert extra and set(ast.literal_eval(extra[1]).values()) == {0}, extra
    assert "hit config." in text and "torch._check" in text
    # section 6: the Python bounds check cannot compile, torch._check's bounds can, and fail at run time
    assert re.search(r"used_tokens +UserError: .*torch\._check", text)
    assert re.search(r"used_tokens_checked +one graph \(1 compile\)", text)
    assert "more tokens than fit, the run-time check fails: RuntimeError" in text
    assert "GPU-only:" in text and "skipped on cpu because" in text


def test_chapter7_partitioners_and_training_step(executed):
    rows = _rows(executed, "07_training.ipynb", "ch7")
    # Inductor's min-cut partitioner keeps fewer activations and recomputes in the backward
    assert rows["activation bytes saved for backward, min-cut / default partitioner"] < 1
    assert rows["backward ops, min-cut - default partitioner"] > 0
    assert rows["first compiled training step (forward + backward compile)"] > 0
    text = _stream_text(executed["07_training.ipynb"][0])
    assert "after two steps the compiled model's loss and weights match eager's" in text
    # the plain compile's aot_graphs log (stderr) returns what ch.aot_graphs lists as saved
    saved = re.search(r"saved for backward \(min-cut\): (.*)", text)
    assert saved, "the cell printing ch.aot_graphs' saved tensors of the one-block model"
    log = "".join(o.get("text", "") for o in _outputs(executed["07_training.ipynb"][0])
                  if o.output_type == "stream" and o.get("name") == "stderr")
    assert "def forward" in log
    for name in saved[1].split(", "):
        assert re.search(rf"\b{re.escape(name)}\b", log), name
    for what in ("peak memory of a training step", "CUDA graphs in a training loop", "TF32 matmuls",
                 "bf16 speed on Tensor Cores"):
        assert f"GPU-only: {what}" in text, what


def test_chapter8_escape_hatches_caches_and_tools(executed):
    rows = _rows(executed, "08_compile_time_debugging.ipynb", "ch8")
    assert rows["graphs: a .tolist() function as it is"] > 1
    assert rows["graphs: the same behind torch.compiler.disable"] == 2
    assert rows["graphs: the same as a torch.library.custom_op"] == 1
    assert rows["graphs: a helper under allow_in_graph"] == 1
    regional = [v for k, v in rows.items() if k.startswith("graphs compiled, regional")]
    assert regional == [1]                                  # one graph serves every block ...
    with_grad = [v for k, v in rows.items() if k.startswith("graphs compiled with gradients on")]
    assert with_grad == [2]                                 # ... under no_grad only
    # nested_compile_region: one graph for the model, the block one subgraph called once per block
    layers = {"ci": 4, "small": 8, "full": 12}[SIZE]
    assert rows[f"nested_compile_region: subgraphs for {layers} blocks"] == 1
    assert rows[f"nested_compile_region: invoke_subgraph calls for {layers} blocks"] == layers
    assert rows["fresh process, cold cache: first call"] > 0
    assert rows["fresh process, same cache folder: first call"] > 0
    assert rows["tlparse: compile folders in its report"] >= 4   # model, break, resume, recompiles
    assert rows["TORCH_COMPILE_DEBUG (trace.enabled): files written for one graph"] >= 3
    text = _stream_text(executed["08_compile_time_debugging.ipynb"][0])
    assert "tlparse exited with 0" in text
    assert "fail_on_recompile: RuntimeError" in text
    assert "torch.export on Branchy: " in text and "exported (unexpected)" not in text
    assert rows["torch.compile graph breaks for a data-dependent if (torch.export refuses it)"] == 1


def test_compile_counter_and_helpers_of_chapters_6_to_8():
    import torch

    def f(x):
        return torch.tanh(x) * 2

    fn, counter = chapters.compile_counted(f, backend="eager")
    with chapters.own_automatic_dynamic_state():
        for b in (2, 3, 4):
            fn(torch.randn(b, 5))
    assert counter.graphs == 2                                  # static, then dynamic
    assert counter.inputs[0] == [(2, 5)] and isinstance(counter.inputs[1][0][0], str)
    assert chapters.round_up(5, 4) == 8 and chapters.round_up(8, 4) == 8
    padded = chapters.pad_to(torch.ones(2, 3), (4, 5))
    assert padded.shape == (4, 5) and padded.sum() == 6
    with pytest.raises(ValueError):
        chapters.pad_to(torch.ones(4), (2,))
    times = chapters.interleaved_seconds_per_call({"a": f, "b": torch.sin}, (torch.ones(4),),
                                                  budget_seconds=0.5)
    assert set(times) == {"a", "b"} and all(t > 0 for t in times.values())
    assert chapters.cold_cache_dir("/x") == (None if chapters.SIZE == "ci" else "/x")
    folder = chapters.scratch_dir("course-test-")
    assert os.path.isdir(folder)
    os.rmdir(folder)


def test_shape_sweep_counts_compiles_per_strategy():
    import torch

    def f(x):
        return x.sin() + 1

    static, c_static = chapters.compile_counted(f, backend="eager", dynamic=False)
    dyn, c_dyn = chapters.compile_counted(f, backend="eager", dynamic=True)
    inputs = [(torch.randn(n),) for n in (2, 3, 4)]
    sweep = chapters.shape_sweep({"static": (static, c_static), "dynamic": (dyn, c_dyn)}, inputs,
                                 eager=f)
    assert sweep["compiles"] == {"static": [1, 2, 3], "dynamic": [1, 1, 1]}
    assert sweep["extra_compiles"] == {"static": 0, "dynamic": 0}
    assert set(sweep["per_call_s"]) == {"eager", "static", "dynamic"}
    assert all(len(v) == 3 for v in sweep["per_call_s"].values())


def test_chapter9_bisects_minifies_and_measures(executed):
    rows = _rows(executed, "09_debugging.ipynb", "ch9")
    # section 1: normal differences are of the dtype's size, of the order of eager's own error
    for dtype in ("float32", "bfloat16", "float16"):
        assert rows[f"compiled vs eager, over eager vs float64, {dtype}"] < 10, dtype
    assert rows["max |compiled - eager| / max |output|, float32"] < 1e-5
    # rounding appears with the decompositions already, not only in Inductor's generated code
    assert rows["Block, float32: backends that give eager's result exactly"] == 2
    assert 0 < rows["Block, float32: max |aot_eager_decomp_partition - eager| / max |output|"] < 1e-5
    # random numbers: Inductor draws its own unless fallback_random
    assert rows["dropout, same seed: share of the mask that differs, compiled vs eager"] > 0.2
    assert rows["the same with fallback_random=True"] == 0
    # the planted bug: only inductor differs, and by the whole residual
    assert rows["ErrorFeedback: backends that match eager before the first that differs"] == 3
    assert rows["ErrorFeedback compiled: residual lost, max difference / max residual"] > 0.5
    text = _stream_text(executed["09_debugging.ipynb"][0])
    from grader.checks._torch_internals import has_compiler_bisector, torch_at_least

    if has_compiler_bisector():
        assert "result: {'backend': 'inductor'" in text
    if torch_at_least(2, 14):
        assert "'subsystem': 'inductor_emulate_precision_casts'" in text
        assert rows["ErrorFeedback compiled with emulate_precision_casts: residual difference"] == 0
    # section 2: the minifier shrinks the failing graph to the relu, and repro.py fails the same way
    assert rows["minifier (after dynamo): operators in repro.py"] == 1
    assert rows["minifier (after dynamo): operators in the failing graph"] > 5
    assert "relu = torch.relu(" in text and "python repro.py: exit status 1, ReluCompileError" in text
    # the Inductor-level minifier is opt-in: by default the cell shows its recorded figures
    assert "not run here (opt-in: RUN_INDUCTOR_MINIFIER = True). Recorded on" in text
    assert re.search(r"minified in \d+ s, from \d+ operators to 1; python repro.py: exit status [1-9]", text)
    # the C++ flags: Inductor's, and (with GCC) what is left of fast-math: IEEE arithmetic
    flags = chapters.cpp_float_flags()
    assert " ".join("-" + f for f in flags["flags"]) in text
    if flags["effective"] is not None:
        for option, state in (("associative-math", "disabled"), ("fp-contract", "off"),
                               ("signed-zeros", "enabled"), ("trapping-math", "enabled")):
            assert re.search(rf"-f{option} +{state}\n", text), option
    # section 3: the fallback hint on a CPU, recompiles up to the limit, the profiler's rows
    assert rows["perf_hints: fallback kernels reported for cumsum"] == 1
    assert "Using FallbackKernel: torch.ops.aten.cumsum" in text
    assert rows["compiles over 10 calls: a Python int counter"] == 8
    # the same graph each time: every recompile after the first is served by the caches
    assert rows["of these compiles, served by the FX graph cache"] == 7
    assert rows["compiles over 10 calls: the counter in a tensor buffer"] == 1
    assert "self.calls ==" in text
    # guard overhead: a global config read setting by setting makes many guards; the filter keeps
    # few; a changed setting is missed by the filter and by the stance before a recompile
    assert rows["guards made for a function reading 500 global settings"] >= 1000
    assert rows["guards kept by skip_guard_on_globals_unsafe"] < 20
    assert rows["a setting changed: right results among the 4 calls (filter, stance before and after, every guard)"] == 2
    assert re.search(r"under the stance, before any recompile +False", text)
    assert re.search(r"under the stance, after that recompile +True", text)
    assert "Torch-Compiled Region" in text and "CompiledFxGraph" in text and "cpp_fused" in text
    # the compiled region is the forward's frame: the backward runs after it returned
    assert rows["profiled compiled step: rows of the backward inside the Torch-Compiled Region"] == 0
    assert re.search(r"CompiledFunctionBackward +OUTSIDE the Torch-Compiled Region", text)
    assert re.search(r"CompiledFunction +inside the Torch-Compiled Region", text)
    assert rows["profiled compiled step: share of CPU time in generated kernels"] > 0
    assert "GPU-only: CUDA-graph skips and their memory" in text
    assert "GPU-only: TF32's share of the float32 differences" in text
    # section 4: compiled autograd captures the backward whole, with eager's gradients
    assert rows["compiled autograd: backward graphs captured at the first step"] == 1
    # each way from an empty Dynamo cache: without it, the hook is compiled as graphs of its own
    assert (rows["graphs Dynamo compiled for the first step, compiled autograd off"]
            > rows["graphs Dynamo compiled for the first step, compiled autograd on"] >= 2)
    assert "gradients as eager's: True" in text and "gradients as eager's: False" not in text


def test_chapter11_custom_op_flex_attention_and_aoti_package(executed):
    rows = _rows(executed, "11_extend_and_ship.ipynb", "ch11")
    # section 1: Dynamo rewrites np.tanh into torch; np.interp is a library call it cannot trace
    assert rows["graphs: np.tanh inside (Dynamo rewrites it into torch.tanh)"] == 1
    assert rows["graphs: np.interp inside (a library call Dynamo cannot trace)"] > 1
    # section 2: the custom op is one graph, forward and backward, with eager's gradients
    assert rows["opcheck tests passed by course::calibrate"] == 4
    assert rows["opcheck tests failed by a fake of the wrong shape"] == 1
    assert rows["graphs: np.interp as a custom op"] == 1
    assert rows["graphs: compiled forward + backward with the custom op"] == 1
    assert rows["max |compiled - eager| gradient through the custom op"] < 1e-5
    text = _stream_text(executed["11_extend_and_ship.ipynb"][0])
    assert "backward through the NumPy call: RuntimeError" in text
    # a mutating operator: declared, made functional, written in place again; undeclared, caught
    assert rows["opcheck test_schema failed by an undeclared mutation (1 yes, 0 no)"] == 1
    assert "Argument out is not defined as mutable but was mutated" in text
    assert rows["auto_functionalized calls in AOTAutograd's graph of the mutating operator"] == 1
    assert rows["Inductor's code calls the mutating operator on the buffer (calls)"] == 1
    assert "calibrate_any on cpu: ran the CPU's kernel (NumPy)" in text
    assert re.search(r"opcheck test_faketensor +MetadataMismatchError", text)
    assert "gradcheck (register_autograd's formula against finite differences): True" in text
    # section 3: the Triton cell says on a CPU that it skipped, and why
    assert "GPU-only: a user Triton kernel inside a compiled model" in text
    assert "skipped on cpu because Triton kernels run on GPUs" in text
    # section 4: FlexAttention computes SDPA's attention with the same mask, where it compiles here
    built = rows.get("compiled flex_attention built and ran here (1 yes, 0 no)", 0)
    if chapters.flex_attention_on_cpu()[0] and torch_at_least(2, 14):
        assert built == 1     # torch 2.8.0's C++ template fails to compile for this mask (run)
    if built:
        assert rows["max |flex_attention - SDPA| with the same sliding-window mask"] < 1e-4
        assert rows["max |flex_attention(score_mod=soft_cap) - by hand|"] < 1e-4
        assert 0 < rows["share of blocks the sliding-window block mask skips"] < 100
    else:
        assert "skipped the FlexAttention measurements on this machine" in text
    # section 5: the package, loaded in a fresh process, computes the eager model's outputs
    assert rows["max |AOTInductor package - eager| in the fresh process"] < 1e-4
    assert rows["AOTInductor: compile and package, ahead of time"] > 0
    assert rows["torch.compile in a fresh process, warm cache: torch.compile + first call"] > 0
    assert rows["AOTInductor package in a fresh process: load + first call"] > 0
    assert rows["importing torch._inductor (both ways pay it)"] > 0
    assert rows["importing torch._inductor imports Dynamo too (1 yes, 0 no)"] == 1
    # the cold start compared on equal terms: the import of torch._inductor left out of both, and in both
    assert "first output, torch.compile warm cache / AOTInductor package, imports left out" in rows
    assert "first output, torch.compile warm cache / AOTInductor package, import of torch._inductor included" in rows
    # where gradients part, the cell names the knot; the markdown says only -2 parts them
    knots = re.search(r"of the knot\(s\) \[(.*?)\]", text)
    if knots:
        assert knots.group(1) == "-2.0", knots.group(0)


def test_sliding_window_mask_and_the_flex_attention_probe():
    import torch

    mask = chapters.dense_mask(chapters.sliding_window_causal(3), 6, device="cpu")
    expected = torch.tensor([[q >= k and q - k < 3 for k in range(6)] for q in range(6)])
    assert torch.equal(mask, expected)
    ok, why = chapters.flex_attention_on_cpu()
    assert isinstance(ok, bool) and why
    usable, reason = chapters.triton_available("cpu")
    assert usable is False and "GPU" in reason


def test_opcheck_results_names_a_wrong_fake():
    import torch

    # the schema spelled out: this file's annotations are strings (from __future__ import annotations)
    @torch.library.custom_op("course_test::twice_wrong_fake", mutates_args=(), schema="(Tensor t) -> Tensor")
    def twice(t):
        return t * 2

    @twice.register_fake
    def _(t):
        return t.new_empty(t.shape[0])

    found = chapters.opcheck_results(twice, (torch.randn(3, 4),))
    assert found["test_schema"] == "SUCCESS"
    assert found["test_faketensor"].startswith("MetadataMismatchError")


def test_a_package_that_cannot_be_loaded_is_the_child_process_failing(tmp_path):
    """The fresh-process loader raises with the child's stderr (the chapter's run covers a
    package that loads, and tests/test_torch_internals.py the compile and load themselves)."""
    with pytest.raises(RuntimeError, match="child process failed"):
        chapters.load_package_in_fresh_process(str(tmp_path / "absent.pt2"), size="ci", device="cpu")


def test_recorded_long_demonstrations_and_cudagraph_skip_report(tmp_path):
    """The figures a long, opt-in demonstration shows by default are read back as they were saved,
    with where and when they were measured; the shipped file holds chapter 9's minifier. The
    CUDA-graph report runs on a CPU too (no CUDA graphs there: nothing is logged)."""
    import torch

    path = str(tmp_path / "recorded.json")
    entry = chapters.save_recorded_run("demo", {"minify_s": 12.5}, machine="a CPU", command="cmd",
                                       path=path)
    assert entry["figures"] == {"minify_s": 12.5} and entry["torch"] == torch.__version__
    assert chapters.recorded_run("demo", path=path) == entry
    assert chapters.recorded_run("absent", path=path) == {}
    shipped = chapters.recorded_run("ch9 inductor minifier")
    assert shipped["figures"]["ops_after"] == 1 and shipped["figures"]["repro_status"] != 0, shipped
    assert shipped["figures"]["ops_before"] > 5 and "error" not in shipped["figures"]
    assert chapters.LONG is (os.environ.get("COURSE_LONG") == "1")
    skips, reasons = chapters.cudagraph_skip_report(lambda t: torch.tanh(t) * 2,
                                                    lambda: (torch.randn(4, 4),))
    assert isinstance(skips, int) and reasons == []


def test_a_bad_course_size_warns_and_the_chapters_still_import():
    """A typo in COURSE_SIZE must not stop a chapter's first cell: it warns and uses the default."""
    import subprocess
    import sys

    env = {**os.environ, "COURSE_SIZE": "huge"}
    out = subprocess.run([sys.executable, "-W", "always", "-c",
                          "from grader.course import chapters as ch; print(ch.SIZE)"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("small", "full") and "COURSE_SIZE='huge'" in out.stderr


def test_chapter10_ddp_fsdp_checkpointing_and_random_numbers(executed):
    rows = _rows(executed, "10_training_stack.ipynb", "ch10")
    from grader.course.chapters import expected_ddp_buckets

    # DDPOptimizer cuts the graph where DDP's buckets fill (sizes at COURSE_SIZE=ci and small: D=256)
    layers = {"ci": 2, "small": 3, "full": 8}[SIZE]
    d, bucket_mb = (1024, 25) if SIZE == "full" else (256, 2)
    buckets = expected_ddp_buckets(d, layers, bucket_mb)
    assert buckets > 1
    assert rows["DDP compiled, optimize_ddp='ddp_optimizer': graphs"] == buckets
    assert rows["DDP compiled, optimize_ddp='no_optimization': graphs"] == 1
    assert rows["DDP compiled, optimize_ddp='python_reducer' + compiled autograd: graphs"] == 2
    assert rows["DDP compiled (ddp_optimizer): max |gradient - eager DDP's|"] < 1e-4
    # the fourth value of optimize_ddp behaves as no_optimization (nothing reads it)
    assert rows["optimize_ddp='python_reducer_without_compiled_forward', traced: graphs"] == 1
    # DDP's own buckets: one in the first iteration, then rebuilt with the cap passed as the first
    # bucket's cap too; DDPOptimizer's first piece is cut at 1 MiB whatever the cap
    assert rows["eager DDP: buckets in the first iteration"] == 1
    assert rows[f"eager DDP, bucket_cap_mb={bucket_mb} passed: first rebuilt bucket"] >= bucket_mb
    assert 1 <= rows["DDPOptimizer's first piece (its rule)"] < 1.1
    # GELU's erf is not recomputed by the checkpoint: its derivative computes it already
    assert rows["erf operations the checkpoint adds to the backward (checkpoint each block)"] == 0
    # FSDP2: each process holds half the parameters; one graph for the blocks, one for the first
    assert 0.45 < rows["FSDP2, 2 processes: parameter bytes per process / whole model"] < 0.55
    assert rows[f"FSDP2, {layers} blocks compiled one by one: graphs"] == 2
    assert rows["3 blocks compiled one by one, one process: graphs"] == 2
    # activation checkpointing keeps less, the selective policy in between
    full_ac = rows["activation bytes saved, checkpoint each block / no checkpoint (compiled)"]
    selective = rows["activation bytes saved, selective (save matmuls) / no checkpoint (compiled)"]
    assert full_ac < selective < 1
    # random numbers: Inductor's own, reproducible, the same across ranks with the same seed
    assert rows["dropout mask, same seed in both processes, compiled: share differing between ranks"] == 0
    assert rows["dropout mask, seed + rank, compiled: share differing between ranks"] > 0.2
    assert rows["dropout mask, compiled vs eager, same seed: share differing"] > 0.2
    assert rows["dropout mask with fallback_random=True vs eager, same seed: share differing"] == 0
    assert rows["accumulating index_put, deterministic algorithms on: ATen fallback calls"] >= 1
    assert rows["accumulating index_put, deterministic algorithms off: lines with atomic_add"] >= 1
    assert rows["compiles for calls with deterministic algorithms off, on, off"] == 2
    text = _stream_text(executed["10_training_stack.ipynb"][0])
    assert "weights the same in every process: True" in text
    assert "gradients the same in every process: True" in text
    assert "equal: True" in text
    assert "requires_grad mismatch" in text
    assert f"DDPOptimizer used bucket cap {bucket_mb * 2 ** 20} and created {buckets} buckets" in text
    # between a forward and its backward the blocks are resharded, the root is not
    assert "on the blocks ['DTensor'], on the root (the head) ['Parameter']" in text
    assert "python_reducer_without_compiled_forward: 1 graph(s)" in text
    # the recomputed operations are those the markdown names (no erf among them)
    recomputed = re.search(r"recomputed in the backward \(checkpoint each block\): (.*)", text).group(1)
    assert "var_mean" in recomputed and "addmm" in recomputed and "erf" not in recomputed
    assert "GPU-only: peak memory of a training step with activation checkpointing" in text


def test_a_chapters_scratch_folder_goes_when_its_kernel_is_killed(tmp_path):
    """A Jupyter kernel whose exit takes more than a few seconds is killed (chapters 8 and 9's
    folders were left in /tmp after every run): the folder goes all the same."""
    import subprocess
    import sys
    import time

    code = ("import sys, time; from grader.course import chapters; "
            "print(chapters.scratch_dir('course-test-'), flush=True); time.sleep(60)")
    kernel = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    folder = kernel.stdout.readline().strip()
    open(os.path.join(folder, "trace.log"), "w").close()
    kernel.kill()                       # SIGKILL: no atexit handler runs
    kernel.wait()
    deadline = time.monotonic() + 30
    while os.path.exists(folder) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert folder.startswith("/") and not os.path.exists(folder)
