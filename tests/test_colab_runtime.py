"""A Colab-like clean runtime: a learner with torch, torchvision and matplotlib needs nothing else.

Colab has torch, torchvision, matplotlib (and a Jupyter kernel) preinstalled, no nbgrader, no
JupyterLab, no checkout of this repository. This test builds such a runtime and runs a problem set
and a chapter in it top to bottom, the way a learner on Colab would.

How the clean runtime is built (fast and honest; ``grader/tools/clean_venv.py``):

* ``python -m venv --without-pip`` in a temporary folder, then the **exact dependency closure** of
  ``torch``, ``torchvision``, ``matplotlib``, ``ipykernel`` (the kernel that runs the notebook, as
  on Colab) and ``pip`` (the install cell needs it), resolved from each distribution's metadata
  (requirements with their environment markers and extras), is *hard-linked* file by file (from
  each distribution's RECORD) out of the course's venv into the new venv's site-packages. That is
  what ``pip install torch torchvision matplotlib ipykernel`` would lay down (the test asserts
  ``pip check`` is clean), in about 10 s instead of 2 minutes and 5.7 GB for a real reinstall.
  Hard links, not symlinks or a ``.pth`` file: nothing else of the course's venv (nbgrader,
  JupyterLab, nbclient, the editable ``grader``) is visible, and an uninstall in the new venv
  could not delete the course venv's files.
* The notebooks are driven by nbclient from the test process, but their kernel is the new venv's
  Python, started from a kernelspec made for the test, with a scrubbed environment (no
  ``PYTHONPATH``, no course venv on ``PATH``, no user site-packages, a fresh Inductor cache).
* ``COURSE_PIP_SOURCE`` points the notebooks' first cell (:data:`grader.course.colab.INSTALL_CELL`) at a
  copy of this checkout's files (those git tracks or would track), so ``pip install`` builds and
  installs the course package from a path, as Colab does from the repository's URL. The package's
  base dependencies are only torch, torchvision and matplotlib: the test asserts that the install
  pulled in no nbgrader, JupyterLab, nbclient, nbformat or nbconvert, and that ``grader`` is
  imported from the new venv, not from the checkout.
* The notebooks run in a temporary working folder that is not the checkout (no ``source/`` and no
  ``nbgrader_config.py`` above it), so self-check compares with the shipped floors, as it would
  for a learner.

Notebooks: ``release/ps2`` with the reference solution filled in (every self-check and visible
test passes), ``release/ps2`` with a wrong attempt (the self-check prints [FAIL] with the
grader's hint, and the test cell's error carries the same hint), and the chapter
``notebooks/01_dynamo.ipynb`` at ``COURSE_SIZE=ci`` (its plots are PNG outputs). Network: only
the package index that ``pip install`` of the course package uses for its build backend.

Measured on the 2-core CPU box: 2-3 minutes in all (building the runtime 5-10 s; each notebook
35-55 s, including its ``pip install`` of the course package, about 10 s, and cold compiles).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import notebook_solutions as sol
from grader.tools.clean_venv import (INSTRUCTOR_ONLY, canonical as _canonical, copy_checkout,
                                     dependency_closure, link_distributions)

ROOT = sol.ROOT
PS = "ps2"
CHAPTER = "01_dynamo.ipynb"
# What Colab preinstalls that matters here, plus its kernel and pip.
PREINSTALLED = ["torch", "torchvision", "matplotlib", "ipykernel", "pip"]
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts", "colab")
CELL_TIMEOUT_S = 600


class Runtime:
    def __init__(self, base: str):
        self.base = base
        self.venv = os.path.join(base, "venv")
        self.python = os.path.join(self.venv, "bin", "python")
        self.src = os.path.join(base, "course-src")
        self.work = os.path.join(base, "content")  # Colab's working folder is /content
        self.kernels = os.path.join(base, "kernels")
        self.timings: dict[str, float] = {}

    def build(self) -> None:
        start = time.monotonic()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", self.venv], check=True)
        site = self.run_py("import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
        self.expected = dependency_closure(PREINSTALLED)
        link_distributions(self.expected, site)
        self.timings["venv"] = time.monotonic() - start
        copy_checkout(self.src)
        os.makedirs(self.work)
        spec_dir = os.path.join(self.kernels, "colab-like")
        os.makedirs(spec_dir)
        with open(os.path.join(spec_dir, "kernel.json"), "w") as fh:
            json.dump({"argv": [self.python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                       "display_name": "Colab-like", "language": "python"}, fh)

    def env(self, extra: dict | None = None) -> dict:
        venv_bin = os.path.join(self.venv, "bin")
        ours = os.path.realpath(sys.prefix)
        path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
                if p and not os.path.realpath(p).startswith(ours)]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTHON", "VIRTUAL_ENV", "COURSE_", "JUPYTER", "JPY_",
                                    "TORCHINDUCTOR", "MPL"))}
        env.update(PATH=os.pathsep.join([venv_bin, *path]), VIRTUAL_ENV=self.venv,
                   PYTHONNOUSERSITE="1",
                   COURSE_PIP_SOURCE=self.src,
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(self.base, "inductor-cache"),
                   JUPYTER_RUNTIME_DIR=os.path.join(self.base, "jupyter-runtime"))
        env.update(extra or {})
        return env

    def run_py(self, code: str, check: bool = True) -> str:
        proc = subprocess.run([self.python, "-c", code], env=self.env(), cwd=self.base,
                              capture_output=True, text=True)
        if check and proc.returncode:
            raise AssertionError(f"{code!r} failed:\n{proc.stdout}{proc.stderr}")
        return proc.stdout if check else proc.stdout + proc.stderr + f"\nrc={proc.returncode}"

    def importable(self, module: str) -> bool:
        out = self.run_py(f"import importlib.util as u; print(u.find_spec({module!r}) is not None)")
        return out.strip() == "True"

    def distributions(self) -> set[str]:
        out = self.run_py("import importlib.metadata as m, json; "
                          "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))")
        return {_canonical(n) for n in json.loads(out)}

    def execute(self, nb: dict, name: str, allow_errors: bool = False, env: dict | None = None):
        """Run ``nb`` top to bottom in the clean kernel, from the working folder; the executed
        copy is kept under tests/artifacts/colab/."""
        import nbformat
        from jupyter_client.kernelspec import KernelSpecManager
        from jupyter_client.manager import KernelManager
        from nbclient import NotebookClient

        node = nbformat.reads(json.dumps(nb), as_version=4)
        # One cell of the test's own at the end: which interpreter ran, and what it can import.
        node.cells.append(nbformat.v4.new_code_cell(
            "import sys, importlib.util, grader\n"
            "print('KERNEL', sys.executable)\n"
            "print('GRADER', grader.__file__)\n"
            f"print('MISSING', [m for m in {INSTRUCTOR_ONLY!r} if importlib.util.find_spec(m) is None])"))
        os.makedirs(self.env()["JUPYTER_RUNTIME_DIR"], exist_ok=True)
        km = KernelManager(kernel_name="colab-like",
                           kernel_spec_manager=KernelSpecManager(kernel_dirs=[self.kernels]))
        km.connection_file = os.path.join(self.env()["JUPYTER_RUNTIME_DIR"], f"kernel-{name}.json")
        client = NotebookClient(node, km=km, timeout=CELL_TIMEOUT_S, allow_errors=allow_errors,
                                resources={"metadata": {"path": self.work}})
        start = time.monotonic()
        try:
            client.execute(env=self.env(env), cwd=self.work)
        finally:
            self.timings[name] = time.monotonic() - start
            os.makedirs(ARTIFACTS, exist_ok=True)
            nbformat.write(node, os.path.join(ARTIFACTS, f"{name}.ipynb"))
        return node


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    rt = Runtime(str(tmp_path_factory.mktemp("colab")))
    rt.build()
    yield rt
    os.makedirs(ARTIFACTS, exist_ok=True)
    with open(os.path.join(ARTIFACTS, "timings.json"), "w") as fh:
        json.dump(rt.timings, fh, indent=1)


def _stream(cell, name: str | None = None) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and (name is None or o.get("name") == name))


def _errors(cell) -> list:
    return [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]


def _cell(nb, text: str):
    return next(c for c in nb.cells if c.cell_type == "code" and text in c.source)


def _check_kernel_cell(rt: Runtime, nb) -> None:
    out = _stream(nb.cells[-1])
    assert f"KERNEL {rt.python}" in out, out
    grader_file = out.split("GRADER ", 1)[1].splitlines()[0]
    assert grader_file.startswith(rt.venv + os.sep), f"grader imported from {grader_file}"
    assert f"MISSING {INSTRUCTOR_ONLY!r}" in out, out


# ---------------------------------------------------------------------------------------------

def test_runtime_is_clean(runtime):
    """Only the preinstalled packages and their dependencies: no grader, no nbgrader."""
    names = runtime.distributions()
    assert names == set(runtime.expected), names ^ set(runtime.expected)
    for module in ["grader", *INSTRUCTOR_ONLY]:
        assert not runtime.importable(module), f"{module} is importable in the clean runtime"
    for module in ("torch", "torchvision", "matplotlib", "ipykernel"):
        assert runtime.importable(module), module
    out = runtime.run_py("import nbgrader", check=False)
    assert "ModuleNotFoundError: No module named 'nbgrader'" in out, out
    proc = subprocess.run([runtime.python, "-m", "pip", "check"], env=runtime.env(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_solved_problem_set_installs_the_course_and_self_checks(runtime):
    nb = runtime.execute(sol.solved_release(PS), f"{PS}-solved")
    for cell in nb.cells:
        assert not _errors(cell), (cell.source[:80], _errors(cell))
    # the install cell did install the course package, from the path, into this runtime
    assert "torch " in _stream(nb.cells[0]) and "on cpu" in _stream(nb.cells[0])
    _check_kernel_cell(runtime, nb)
    added = runtime.distributions() - set(runtime.expected)
    assert added == {"torch-compile-course"}, f"the install cell added {sorted(added)}"
    # self-check: a verdict per check, every one passing, against the shipped floor
    text = _stream(_cell(nb, f'check("{PS}.q1"'), "stdout")
    for title in ("outputs match the original", "compiles with fullgraph=True", "kernel count",
                  "speedup target"):
        assert f"[PASS] {PS}.q1 {title}" in text, text
    assert "[FAIL]" not in text, text
    assert "shipped floor" in text and "measured against the reference" not in text, text
    # the visible test cells print their verdicts too
    assert f"[PASS] {PS}.q1 outputs match the original" in _stream(_cell(nb, f"run_test(\"{PS}-q1-correctness\""))


def test_wrong_attempt_self_check_prints_the_hint(runtime):
    from grader.problems.ps2 import HINTS

    def unbiased(_grade_id: str, code: str) -> str:
        wrong = code.replace("((xs - mu) ** 2).mean(dim=-1, keepdim=True)",
                             "xs.var(dim=-1, keepdim=True)")
        assert wrong != code, "the ps2 reference solution changed: update this test"
        return wrong

    nb = runtime.execute(sol.solved_release(PS, edit=unbiased), f"{PS}-wrong", allow_errors=True)
    _check_kernel_cell(runtime, nb)
    check_cell = _cell(nb, f'check("{PS}.q1"')
    assert not _errors(check_cell), "self-check must report, not raise"
    text = _stream(check_cell, "stdout")
    assert f"[FAIL] {PS}.q1 outputs match the original" in text, text
    assert "hint: " + HINTS["correctness"] in " ".join(text.split()), text
    # Fused, but no other check is credited (or measured) for code whose outputs are wrong.
    assert f"[FAIL] {PS}.q1 kernel count" in text and "see the correctness check" in text, text
    # the graded test cell fails with the grader's message and hint, not a bare traceback
    errors = _errors(_cell(nb, "# Outputs match GroupNormGELU"))
    assert errors and errors[0]["ename"] == "CheckFailed", errors
    assert "outputs match the original failed" in errors[0]["evalue"]
    assert "hint: " + HINTS["correctness"] in errors[0]["evalue"]


def test_chapter_runs_and_plots(runtime):
    nb = runtime.execute(sol.load(os.path.join(ROOT, "notebooks", CHAPTER)),
                         CHAPTER.removesuffix(".ipynb"), env={"COURSE_SIZE": "ci"})
    for cell in nb.cells:
        assert not _errors(cell), (cell.source[:80], _errors(cell))
    _check_kernel_cell(runtime, nb)
    pngs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if o.get("output_type") in ("display_data", "execute_result")
            and "image/png" in o.get("data", {})]
    assert len(pngs) >= 2, f"{len(pngs)} plots"
    assert any("COURSE_SIZE=ci" in _stream(c) for c in nb.cells if c.cell_type == "code")


# ---------------------------------------------------------------------------------------------
# An old Colab runtime (torch < 2.8): the setup cell stops before pip replaces anything

def _fake_runtime(base: str, versions: dict) -> str:
    """A venv whose only distributions are metadata saying which torch, torchvision and
    torchaudio it has (nothing importable: the cell must decide before importing torch)."""
    venv = os.path.join(base, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    for name, version in versions.items():
        info = os.path.join(site, f"{name}-{version}.dist-info")
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as fh:
            fh.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return python


def _run_setup_cell(python: str, base: str) -> subprocess.CompletedProcess:
    from grader.course.colab import INSTALL_CELL

    # The install source does not exist: if the cell reached pip, pip would fail on it.
    env = {"PATH": "/usr/bin:/bin", "PYTHONNOUSERSITE": "1",
           "COURSE_PIP_SOURCE": os.path.join(base, "no-such-checkout")}
    return subprocess.run([python, "-c", INSTALL_CELL], capture_output=True, text=True, env=env,
                          cwd=base, timeout=120)


def test_an_old_runtime_is_told_what_to_do_before_anything_is_installed(tmp_path):
    python = _fake_runtime(str(tmp_path), {"torch": "2.6.0+cu124", "torchvision": "0.21.0+cu124",
                                           "torchaudio": "2.6.0+cu124"})
    proc = _run_setup_cell(python, str(tmp_path))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "This runtime has torch 2.6.0+cu124 (torchvision 0.21.0+cu124, torchaudio 2.6.0+cu124)" in out
    assert "the course needs torch 2.8 or newer" in out and "Nothing was installed" in out
    assert "%pip install -q 'torch>=2.8' torchvision torchaudio" in out
    assert "restart the session" in out
    assert "stopped before installing anything" in out
    assert "CalledProcessError" not in out and "no-such-checkout" not in out   # pip never ran


def test_a_runtime_with_a_supported_torch_goes_on_to_install(tmp_path):
    python = _fake_runtime(str(tmp_path), {"torch": "2.8.0", "torchvision": "0.23.0"})
    proc = _run_setup_cell(python, str(tmp_path))
    out = proc.stdout + proc.stderr
    assert "This runtime has torch" not in out
    # It reached pip (which this fake runtime does not even have, or which fails on the source).
    assert proc.returncode != 0 and ("No module named pip" in out or "no-such-checkout" in out), out
