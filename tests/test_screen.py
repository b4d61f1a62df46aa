"""The screen: every reference solution and honest demo submission passes; what forges a
grade or reads secrets is refused with its line; the same check runs in self-check."""
from __future__ import annotations

import os
import textwrap

import pytest

from grader.cohort import assign, demo
from grader.isolation.cells.source import Cell, solution_cells
from grader.isolation.cells.screen import screen_cells, describe

ROOT = assign.COURSE_ROOT


def refused(source: str, allowed_config=()) -> list[str]:
    return [str(r) for r in screen_cells([Cell("cell 6", textwrap.dedent(source))], allowed_config)]


@pytest.mark.parametrize("ps", assign.assignments(ROOT))
def test_every_reference_solution_passes(ps):
    from grader.problems import get_problem, public_names, test_cells

    cells = solution_cells(os.path.join(ROOT, "source", ps, f"{ps}.ipynb"))
    code = [c for c in cells if "### BEGIN SOLUTION" in c.source]
    key = next(iter(test_cells(ps).values())).problems[0]
    assert code and screen_cells(code, (), public_names(get_problem(key))) == []


def test_the_demo_personas_that_are_honest_attempts_pass():
    from grader.problems import get_problem, public_names, test_cells

    for ps, personas in demo.demo_solutions(ROOT).items():
        names = public_names(get_problem(next(iter(test_cells(ps).values())).problems[0]))
        for persona, cells in personas.items():
            found = screen_cells([Cell(gid, src) for gid, src in cells.items()], (), names)
            assert found == [], (ps, persona, found)


@pytest.mark.parametrize("source, why", [
    ("import os\n", "the `os` module is not available"),
    ("from grader.isolation.check import Evaluation\nEvaluation.require = lambda s, n: None\n",
     "the `grader` module is not available"),
    ("class F(Original):\n    pass\nOriginal.forward = lambda self, x: x\n",
     "attributes of `self` only"),
    ("torch.compile = lambda m, **k: m\n", "attributes of `self` only"),
    ("torch._dynamo.config.suppress_errors = True\n", "is private"),
    ("class F(Original):\n    def forward(self, x):\n        return open('/x').read()\n", "`open`"),
    ("class F(Original):\n    def forward(self, x):\n        return self.forward.__globals__\n",
     "double-underscore attribute"),
    ("class F(Original):\n    def forward(self, x):\n        return getattr(self, 'fc1')(x)\n",
     "`getattr`"),
    ("s = '{0.forward}'\n", "format field"),
    ("s = 'a__b'\n", "double underscore"),
    ("print('hello')\n", "only imports, definitions and assignments"),
    ("while True:\n    pass\n", "only imports, definitions and assignments"),
    ("m = Original()\n", "would run when the cell is loaded"),
    ("class F(Original):\n    print('at class creation')\n", "directly in a class body"),
    ("class F(Original, metaclass=type):\n    pass\n", "class keywords"),
    ("@functools.lru_cache\ndef f(x):\n    return x\n", "decorator"),
    ("class F(Original):\n    def forward(self, x):\n        torch.set_num_threads(8)\n        return x\n",
     "process-wide torch state"),
    ("class F(Original):\n    def forward(self, x):\n        return x.data_ptr()\n", "`.data_ptr`"),
    ("class F(Original):\n    def forward(self, x):\n        return self.fc1._parameters\n",
     "private attributes of `self` only"),
    ("from torch.utils import cpp_extension\n", "the `torch.utils` module is not available"),
    ("import torch.hub\n", "loads code or files"),
    ("async def f():\n    pass\n", "`async`"),
    ("def f(:\n", "not valid Python"),
    ("class F(Original):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n",
     "has not been written yet"),
])
def test_refused_with_the_line_and_why(source, why):
    found = refused(source)
    assert any(why in r for r in found), found
    assert all(r.startswith("cell 6, line ") for r in found)


def test_what_a_solution_needs_is_allowed():
    assert refused("""
        import math
        from functools import partial
        import torch.nn.functional as F
        EPS = 1e-6
        SCALE = torch.tensor([1.0, 2.0])
        act = lambda x: torch.tanh(x) * 1.5

        def helper(h, mask):
            '''Mean of h where mask holds (a __doc__ may say anything).'''
            return torch.where(mask, h, 0.0).sum() / mask.sum()

        class FixedModel(Original):
            compile_mode = "reduce-overhead"
            calls = [0]

            def __init__(self):
                super().__init__()
                self._cache = {}

            @property
            def width(self):
                return self.fc1.out_features

            @torch.no_grad()
            def forward(self, x):
                self.calls[0] += 1
                self._cache["x"] = x
                print("debugging is a graph break, not a refusal", x.shape)
                h = torch._check(x.shape[0] > 0) or self.fc1(x)
                return F.gelu(h) * math.sqrt(2.0) + helper(h, h > 0) * EPS
        """) == []


def test_a_config_the_problem_allows_may_be_set_at_the_top_of_the_cell():
    line = "torch._inductor.config.freezing = True\n"
    assert refused(line, {"torch._inductor.config.freezing"}) == []
    assert refused(line)


def test_describe_names_every_refusal():
    text = describe(screen_cells([Cell("cell 6", "import os\nimport sys\n")]))
    assert "cell 6, line 1" in text and "cell 6, line 2" in text


def test_self_check_refuses_before_running_anything():
    # evaluate() screens in this process: no judge or subject starts, the result says why.
    from grader.isolation.check import evaluate

    ev = evaluate("ps1.q1", cells=[Cell("cell 6", "import os\nos.system('true')\n")],
                  reference="off")
    assert ev.status == "refused" and "cell 6, line 1" in ev.result["message"]
    assert "sandbox" not in ev.result  # nothing ran


def _screened_with_names(source: str, ps: str = "ps2") -> list[str]:
    from grader.problems import get_problem, public_names

    names = public_names(get_problem(f"{ps}.q1"))
    return [str(r) for r in screen_cells([Cell("cell 6", textwrap.dedent(source))], (), names)]


def test_free_names_are_an_allow_list():
    ok = """
    import math
    class FusedGroupNormGELU(GroupNormGELU):
        def forward(self, x):
            rows, d = x.shape
            out = [v for v in range(len(x))]
            return torch.tanh(x) * math.sqrt(2.0) + sum(out) * 0
    """
    assert _screened_with_names(ok) == []
    for name in ("breakpoint_like", "license", "copyright", "__builtins__", "memoryview", "vars"):
        src = f"class FusedGroupNormGELU(GroupNormGELU):\n    def forward(self, x):\n        return {name}\n"
        assert _screened_with_names(src), name


def test_annotations_are_screened_as_code_and_never_strings():
    for source in (
        "def f(x: 'torch.Tensor') -> 'torch.Tensor':\n    return x\n",
        "def f(x: open('/etc/passwd')):\n    return x\n",
        "def f(x: '__import__(\"os\").system(\"id\")'):\n    return x\n",
        "def f(x) -> 'os.system':\n    return x\n",
        "y: eval('1') = 3\n",
        "def f(x: 'not a type ((('):\n    return x\n",
    ):
        assert refused(source), source
    assert refused("def f(x: torch.Tensor) -> torch.Tensor:\n    return x\n") == []


def test_only_some_of_torchs_modules_are_reachable():
    for chain in ("torch.jit.script", "torch.fx.symbolic_trace", "torch.export.load",
                  "torch.package.PackageImporter", "torch.utils.cpp_extension"):
        src = f"class F(Original):\n    def forward(self, x):\n        return {chain}(x)\n"
        assert refused(src), chain
    assert refused("class F(Original):\n    def forward(self, x):\n"
                   "        return torch.nn.functional.gelu(torch.linalg.norm(x))\n") == []


METHOD = "class F(Original):\n    def forward(self, x):\n        {}\n        return x\n"


@pytest.mark.parametrize("source, why", [
    # imports and attribute chains: any module or name off the list, however it is reached
    ("from torch.utils.collect_env import run\n", "`torch.utils.collect_env` module"),
    ("from torch.utils.benchmark import Timer\n", "`torch.utils.benchmark` module"),
    ("import torch.utils.benchmark as bench\n", "`torch.utils.benchmark` module"),
    ("from torch import os as o\n", "the `os` module"),
    ("import torch.nn.functional as G\n" + METHOD.format("G.torch.utils.collect_env.run('id')"),
     "the `torch.utils` module"),
    (METHOD.format("torch.utils.benchmark.Timer('x').timeit(1)"), "the `torch.utils` module"),
    (METHOD.format("torch.CompilationUnit('def f(x): return x')"), "`torch.CompilationUnit`"),
    (METHOD.format("torch.get_device_module()"), "`torch.get_device_module`"),
    ("def f(m=torch):\n    return m.utils\n", "`torch` is a module"),
    ("def f(torch):\n    return torch\n", "`torch` names a module here"),
    (METHOD.format("torch._dynamo.mark_dynamic(x, 0)"), "compile_dynamic"),
    # strings read later as code: run-time format strings, string types
    (METHOD.format("fmt = '{0' + '.fc1}'\n        fmt.format(self)"), "format string is a literal"),
    (METHOD.format("str.format('{}', self)"), "format string is a literal"),
    ("from typing import get_type_hints\n", "`typing.get_type_hints`"),
    ("import dataclasses\n" + METHOD.format("dataclasses.make_dataclass('D', [('a', 'int')])"),
     "`dataclasses.make_dataclass`"),
    ("import typing\nP = typing.NamedTuple('P', [('a', 'int')])\n", "use the class form"),
    ("from typing import Optional\nT = Optional['os.system']\n", "never as a string"),
    ("T = list['int']\n", "never as a string"),
    # backends and library registrations
    (METHOD.format("torch.compile(self, backend=lambda gm, inputs: gm)"), "a backend is named"),
    (METHOD.format("self.compile(backend=print)"), "a backend is named"),
    (METHOD.format("torch.compile(self, options={'cpp.cxx': 'sh'})"), "`options=`"),
    (METHOD.format("c = torch.compile"), "`compile` is called directly"),
    ("from torch.compiler import set_default_backend\n", "`torch.compiler.set_default_backend`"),
    (METHOD.format("torch.library.define('x::y', '(Tensor a) -> Tensor')"),
     "`torch.library.define`"),
    ("@torch.library.register_fake('aten::add')\ndef f(x):\n    return x\n",
     "`torch.library.register_fake`"),
    ("name = 'a::b'\n@torch.library.custom_op(name, mutates_args=())\n"
     "def f(x: torch.Tensor) -> torch.Tensor:\n    return x\n", "named by a string"),
])
def test_the_screen_is_an_allow_list_in_every_form(source, why):
    found = refused(source)
    assert any(why in r for r in found), found
    assert all(r.startswith("cell 6, line ") for r in found)


def test_what_the_chapters_teach_passes():
    """The fixes of chapters 4, 6 and 8, the imports a solution needs, a format string written
    in the cell and types written as expressions: none of it is refused."""
    assert _screened_with_names("""
    import math
    from functools import partial
    import torch.nn.functional as G
    from torch import nn
    from typing import Literal, NamedTuple, Optional
    from dataclasses import dataclass, field
    act = G.gelu
    norm = torch.nn.functional

    @torch.compiler.disable
    def log_norm(h):
        print("hidden norm: {:.3f}".format(h.norm()))

    @torch.library.custom_op("course::legacy_normalize", mutates_args=())
    def legacy_op(t: torch.Tensor) -> torch.Tensor:
        return t / t.norm()

    @legacy_op.register_fake
    def _(t):
        return torch.empty_like(t)

    class Pair(NamedTuple):
        a: torch.Tensor
        kind: Literal["x", "y"] = "x"

    @dataclass
    class Spec:
        scale: Optional[torch.Tensor] = None
        sizes: list = field(default_factory=list)

    class FusedGroupNormGELU(GroupNormGELU):
        compile_dynamic = True

        def forward(self, x):
            torch._check(x.shape[0] >= 2)
            h = torch.cond(x.sum() > 0, lambda h: h * 2, lambda h: h.clone(), (x,))
            h = torch.where(h > 0, h, 0.0) + norm.relu(h) * math.sqrt(2.0)
            step = torch.compile(act, backend="eager", fullgraph=True, dynamic=None)
            return step(h) + torch.finfo(x.dtype).eps
    """) == []


def test_the_namespace_modules_are_what_the_problem_sets_export():
    """The screen follows `nn.`, `F.` ... as the modules the subject's namespace binds them to."""
    import types

    from grader.isolation.cells.screen import ALWAYS_IN_NAMESPACE, NAMESPACE_MODULES
    from grader.isolation.sandbox.subject import namespace_for

    for ps in assign.assignments(ROOT):
        namespace = namespace_for(f"grader.problems.{ps}", name=f"__screen_test_{ps}__")
        assert set(ALWAYS_IN_NAMESPACE) <= set(namespace)
        for name, value in namespace.items():
            if isinstance(value, types.ModuleType):
                assert NAMESPACE_MODULES.get(name) == value.__name__, (ps, name)


@pytest.mark.parametrize("source, ok", [
    # A custom operator's autograd formula has no decorator form with setup_context (ps8).
    ("op.register_autograd(backward, setup_context=save)\n", True),
    # ... and nothing else rides on it: torch.library's functions (any operator's name), a call
    # in an argument, another method, a call chain.
    ("torch.library.register_autograd('aten::add', backward, setup_context=save)\n", False),
    ("torch.library.register_fake('ps8::rms_pool', fake)\n", False),
    ("op.register_autograd(print('x'), setup_context=save)\n", False),
    ("op.register_kernel(backward)\n", False),
    ("make().register_autograd(backward)\n", False),
])
def test_a_custom_operators_registration_may_stand_at_the_top_of_a_cell(source, ok):
    why = refused(source)
    assert (why == []) == ok, why
