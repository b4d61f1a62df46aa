"""End to end in a real browser: JupyterLab with nbgrader's lab extensions, as a student uses it.

The test starts its own JupyterLab (the venv's ``jupyter lab``, a random token, a free loopback
port) on a temporary copy of what a student has: ``nbgrader_config.py`` (nbgrader's per-cell
timeout), ``release/ps2`` and one chapter. There is no ``source/`` in the copy, so the self-check
and the test cells compare against the shipped floors, exactly as on a student's machine. Every
piece of Jupyter state (runtime, config, data, lab settings and workspaces, IPython) lives in a
temporary folder, and the server is always shut down (its kernels through the REST API, then the
process group, then any kernel left over that was started with that runtime folder).

Playwright drives Debian's Chromium (``/usr/bin/chromium``, headless, no sandbox; installed by
``make setup``): Playwright never downloads a browser here.

1. ``release/ps2`` filled with the reference solution (the text between the source's solution
   markers, written into the notebook file before it is opened): Run All Cells in the browser,
   the self-check prints [PASS] verdicts, then nbgrader's **Validate** button reports success.
2. ``release/ps2`` as shipped (unsolved): Validate reports failure and names the failing test
   cells. The unsolved stub raises before the grader is called, so there is no hint to show.
3. A wrong attempt (the unbiased variance instead of the biased one): Validate names the failing
   test cell and shows the grader's verdict and hint, not a bare traceback.
4. ``notebooks/01_dynamo.ipynb`` (the quickest chapter) at ``COURSE_SIZE=ci``: Run All Cells, and
   its plots are rendered as PNG images in the page.

Screenshots of each step go to tests/artifacts/browser/, with the server's log
(jupyter-lab.log); a failing step saves FAILED-<step>.png and prints the log's tail.
Measured on the 2-core CPU box: 2.6 minutes (4.6 while other jobs loaded the machine), most of
it the grader's fresh-process measurements (one per Run All or Validate of ps2, 20-50 s each);
starting the server and the browser takes about 20 s, the chapter about 15 s (warm Inductor cache).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import notebook_solutions as sol

ROOT = sol.ROOT
ARTIFACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts", "browser")
# Debian's, or the one `make setup-browser` unpacked without root (.system/bin, on the PATH
# `make test` sets).
CHROMIUM = os.environ.get("COURSE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
BIN = os.path.dirname(sys.executable)
PS = "ps2"
CHAPTER = "01_dynamo.ipynb"

SERVER_START_S = 120
KERNEL_START_S = 120
RUN_ALL_S = 420
VALIDATE_S = 420


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(data, fh, indent=1)


class Lab:
    """A JupyterLab server started for the test; ``close()`` always ends it and its kernels."""

    def __init__(self, base: str):
        self.base = base
        self.course = os.path.join(base, "course")
        self.state = os.path.join(base, "jupyter")
        self.log_path = os.path.join(base, "jupyter-lab.log")
        self.token = secrets.token_hex(24)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self._prepare()

    # -- files ----------------------------------------------------------------------------------
    def _prepare(self) -> None:
        os.makedirs(os.path.join(self.course, "release", PS))
        os.makedirs(os.path.join(self.course, "notebooks"))
        shutil.copy(os.path.join(ROOT, "nbgrader_config.py"), self.course)
        shutil.copy(os.path.join(ROOT, "release", PS, f"{PS}.ipynb"),
                    os.path.join(self.course, "release", PS, f"{PS}.ipynb"))
        sol.save(sol.solved_release(PS), os.path.join(self.course, "release", PS, "solved.ipynb"))

        def unbiased(_grade_id: str, code: str) -> str:
            wrong = code.replace("((xs - mu) ** 2).mean(dim=-1, keepdim=True)",
                                 "xs.var(dim=-1, keepdim=True)")
            assert wrong != code, "the ps2 reference solution changed: update this test"
            return wrong

        sol.save(sol.solved_release(PS, edit=unbiased),
                 os.path.join(self.course, "release", PS, "wrong.ipynb"))
        shutil.copy(os.path.join(ROOT, "notebooks", CHAPTER),
                    os.path.join(self.course, "notebooks", CHAPTER))
        for sub in ("runtime", "config", "data", "ipython", "lab-workspaces"):
            os.makedirs(os.path.join(self.state, sub))
        # no announcements fetched from the internet
        _write_json(os.path.join(self.state, "config", "jupyter_lab_config.json"),
                    {"LabApp": {"news_url": None}})
        settings = os.path.join(self.state, "lab-settings")
        # Every cell attached to the page (not only those in view), no news or update checks.
        _write_json(os.path.join(settings, "@jupyterlab", "notebook-extension",
                                 "tracker.jupyterlab-settings"), {"windowingMode": "none"})
        _write_json(os.path.join(settings, "@jupyterlab", "apputils-extension",
                                 "notification.jupyterlab-settings"),
                    {"checkForUpdates": False, "fetchNews": "false"})

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("JUPYTER", "JPY_", "COURSE_"))}
        env.update(
            PATH=BIN + os.pathsep + env.get("PATH", ""),
            JUPYTER_RUNTIME_DIR=os.path.join(self.state, "runtime"),
            JUPYTER_CONFIG_DIR=os.path.join(self.state, "config"),
            JUPYTER_DATA_DIR=os.path.join(self.state, "data"),
            JUPYTERLAB_SETTINGS_DIR=os.path.join(self.state, "lab-settings"),
            JUPYTERLAB_WORKSPACES_DIR=os.path.join(self.state, "lab-workspaces"),
            IPYTHONDIR=os.path.join(self.state, "ipython"),
            JUPYTER_PLATFORM_DIRS="1",
            COURSE_SIZE="ci",  # the chapters' tiny shapes (grader/course/chapters/)
        )
        return env

    # -- process --------------------------------------------------------------------------------
    def start(self) -> None:
        cmd = [os.path.join(BIN, "jupyter"), "lab", "--no-browser",
               f"--IdentityProvider.token={self.token}", f"--port={self.port}", "--ip=127.0.0.1",
               "--ServerApp.port_retries=0", f"--ServerApp.root_dir={self.course}",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly"]
        if os.geteuid() == 0:  # CI and these machines run as root
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        # cwd = course: nbgrader's Validate reads nbgrader_config.py from the server's cwd.
        self.proc = subprocess.Popen(cmd, cwd=self.course, env=self.env(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("GET", "/api/status")
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"jupyter lab did not answer in {SERVER_START_S} s:\n{self.log_tail()}")

    def api(self, method: str, path: str):
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def log_tail(self, chars: int = 6000) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read().decode(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            for kernel in self.api("GET", "/api/kernels") or []:
                with contextlib.suppress(Exception):
                    self.api("DELETE", f"/api/kernels/{kernel['id']}")
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(wait)
        # Kernels run in sessions of their own: end any still alive that this server started
        # (their command line names a connection file in this test's runtime folder).
        runtime = os.path.join(self.state, "runtime")
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmdline = fh.read().decode(errors="replace")
            except OSError:
                continue
            if runtime in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
        self._log.close()
        with contextlib.suppress(OSError):
            os.makedirs(ARTIFACTS, exist_ok=True)
            shutil.copy(self.log_path, os.path.join(ARTIFACTS, "jupyter-lab.log"))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no Chromium at {CHROMIUM}: `make setup` installs Debian's chromium "
                    "(or set COURSE_CHROMIUM)")
    server = Lab(str(tmp_path_factory.mktemp("lab")))
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-dev-shm-usage",
                  "--disable-gpu", "--no-first-run", "--disable-extensions",
                  "--disable-component-update", "--disable-sync"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, lab):
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    context.set_default_timeout(60_000)
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()
        # the next test opens its own notebook on a fresh kernel
        with contextlib.suppress(Exception):
            for session in lab.api("GET", "/api/sessions") or []:
                lab.api("DELETE", f"/api/sessions/{session['id']}")


def shot(page, name: str) -> str:
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, f"{name}.png")
    page.screenshot(path=path)
    return path


@contextlib.contextmanager
def step(page, lab, name: str):
    """On failure: a screenshot (FAILED-<name>.png) and the server log's tail in the output."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            print("screenshot:", shot(page, f"FAILED-{name}"))
        print(f"----- jupyter lab log (tail) -----\n{lab.log_tail()}")
        raise


# ---------------------------------------------------------------------------------------------
# Driving JupyterLab

def open_notebook(page, lab, path: str) -> None:
    page.goto(f"{lab.url}/lab/tree/{path}?token={lab.token}&reset", wait_until="domcontentloaded",
              timeout=120_000)
    want = sum(c["cell_type"] == "code" for c in sol.load(os.path.join(lab.course, path))["cells"])
    deadline = time.monotonic() + 120
    while len(page.evaluate(_PROMPTS)) != want:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path}: {len(page.evaluate(_PROMPTS))} code cells on the page, "
                               f"{want} in the file")
        time.sleep(0.5)
    # the status bar says "Python 3 (ipykernel) | Idle" once the kernel is up
    page.locator(".jp-StatusBar-Widget", has_text=re.compile(r"\| Idle")).first.wait_for(
        timeout=KERNEL_START_S * 1000)


_CELLS = "document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell')"
_PROMPTS = f"""() => [...{_CELLS}].map(
    c => (c.querySelector('.jp-InputArea-prompt') || {{}}).textContent || '')"""
_OUTPUTS = f"""() => [...{_CELLS}].map(
    c => (c.querySelector('.jp-OutputArea') || {{}}).innerText || '')"""


def run_all(page, timeout_s: float = RUN_ALL_S) -> list[str]:
    """Run > Run All Cells, then wait until no cell is queued or running. Returns the prompts."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    deadline = time.monotonic() + timeout_s
    started = False
    while time.monotonic() < deadline:
        prompts = page.evaluate(_PROMPTS)
        busy = any("*" in p for p in prompts)
        numbered = all(re.search(r"\[\d+\]", p) for p in prompts)
        started = started or busy or numbered
        if started and not busy:
            return prompts
        time.sleep(1.0)
    raise TimeoutError(f"Run All did not finish in {timeout_s:.0f} s: prompts {prompts}")


def output_texts(page) -> list[str]:
    """The text of each code cell's output area, in order."""
    return page.evaluate(_OUTPUTS)


def validate(page, timeout_s: float = VALIDATE_S):
    """Press nbgrader's Validate button; return the result dialog's message element."""
    page.locator(".jp-NotebookPanel .validate-button").click()
    # any dialog: the results, or nbgrader's "Validation failed" / "Version Mismatch"
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=timeout_s * 1000)
    message = dialog.locator("#validation-message")
    if not message.count():
        raise AssertionError(f"nbgrader did not validate: {dialog.inner_text()}")
    return message


def close_dialog(page) -> None:
    page.locator(".jp-Dialog .jp-mod-accept").click()
    page.locator(".jp-Dialog").wait_for(state="detached")


# ---------------------------------------------------------------------------------------------

def test_reference_solution_runs_in_lab_and_validates(lab, page):
    with step(page, lab, "ps2-solved-open"):
        open_notebook(page, lab, f"release/{PS}/solved.ipynb")
        # nbgrader's toolbar button is there: the lab extensions are enabled
        assert page.locator(".jp-NotebookPanel .validate-button").is_visible()
        shot(page, "01-ps2-solved-opened")
    with step(page, lab, "ps2-solved-run-all"):
        prompts = run_all(page)
        texts = output_texts(page)
        assert all(re.search(r"\[\d+\]", p) for p in prompts), prompts
        self_check = next(t for t in texts if f"{PS}.q1 " in t and "[" in t)
        assert "[PASS]" in self_check and "[FAIL]" not in self_check, self_check
        assert "floor" in self_check, self_check  # no source/ here: a student's self-check
        for t in texts:
            assert "Traceback" not in t, t
        page.locator(".jp-CodeCell", has_text="Self-check").first.scroll_into_view_if_needed()
        shot(page, "02-ps2-solved-run-all")
    with step(page, lab, "ps2-solved-validate"):
        message = validate(page)
        shot(page, "03-ps2-solved-validate-success")
        assert "validation-success" in (message.get_attribute("class") or ""), message.inner_text()
        assert "Success! Your notebook passes all the tests." in message.inner_text()
        close_dialog(page)


def test_unsolved_release_fails_validation_naming_the_tests(lab, page):
    with step(page, lab, "ps2-unsolved-validate"):
        open_notebook(page, lab, f"release/{PS}/{PS}.ipynb")
        # Run All stops at the unsolved stub
        prompts = run_all(page)
        assert not all(re.search(r"\[\d+\]", p) for p in prompts), prompts
        assert any("NotImplementedError" in t for t in output_texts(page))
        page.locator(".jp-CodeCell", has_text="YOUR CODE HERE").first.scroll_into_view_if_needed()
        shot(page, "04-ps2-unsolved-run-all")
        message = validate(page)
        shot(page, "05-ps2-unsolved-validate-failure")
        text = message.inner_text()
        assert "validation-failed" in (message.get_attribute("class") or ""), text
        assert "The following cell failed:" in text
        # each failing test cell is named by its own source (its first line says what it tests)
        for title in ("Outputs match GroupNormGELU", "Inductor generates at most MAX_KERNELS",
                      "Speedup over eager GroupNormGELU"):
            assert title in text, text
        assert "Success!" not in text
        close_dialog(page)


def test_wrong_attempt_fails_validation_with_the_graders_hint(lab, page):
    from grader.problems.ps2 import HINTS

    with step(page, lab, "ps2-wrong-validate"):
        open_notebook(page, lab, f"release/{PS}/wrong.ipynb")
        message = validate(page)
        shot(page, "06-ps2-wrong-validate-failure")
        text = message.inner_text()
        assert "validation-failed" in (message.get_attribute("class") or ""), text
        assert "Outputs match GroupNormGELU on fresh random inputs" in text, text
        # the grader's verdict and hint, in the learner's words, not only a traceback
        assert "ps2.q1: outputs match the original failed" in text, text
        assert "outputs do not match the reference" in text, text
        assert "hint: " + HINTS["correctness"][:60] in text, text
        # fused, but no other check is credited (or measured) for code whose outputs are wrong
        assert "Inductor generates at most MAX_KERNELS" in text, text
        assert "not checked: every check but correctness is credited only to code that computes" \
            in text and "see the correctness check" in text, text
        message.locator("pre", has_text="hint:").first.scroll_into_view_if_needed()
        shot(page, "07-ps2-wrong-validate-hint")
        close_dialog(page)


def test_chapter_plots_render_as_images(lab, page):
    with step(page, lab, "chapter-run-all"):
        open_notebook(page, lab, f"notebooks/{CHAPTER}")
        prompts = run_all(page)
        assert all(re.search(r"\[\d+\]", p) for p in prompts), prompts
        texts = output_texts(page)
        assert any("COURSE_SIZE=ci" in t for t in texts), "the server's COURSE_SIZE did not reach " \
                                                          "the kernel"
        for t in texts:
            assert "Traceback" not in t, t
    with step(page, lab, "chapter-plots"):
        images = page.locator(".jp-OutputArea-output[data-mime-type='image/png'] img")
        assert images.count() >= 2, f"{images.count()} PNG plots rendered"
        for i in range(images.count()):
            img = images.nth(i)
            assert (img.get_attribute("src") or "").startswith("data:image/png;base64,")
            img.scroll_into_view_if_needed()
            size = img.evaluate("el => [el.naturalWidth, el.naturalHeight, el.complete]")
            assert size[2] and size[0] > 100 and size[1] > 100, size
            shot(page, f"08-chapter-plot-{i + 1}")


def test_the_report_and_a_feedback_page_read_well_in_a_browser(browser, graded_demo):
    """What an instructor opens first after `make grade`: the report's students x sets table,
    each score a link to that student's feedback; panels without data say so; the feedback's
    verdict lines wrap instead of running off the side."""
    report = os.path.join(graded_demo.report_dir, "report.html")
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"file://{report}")
        table = page.locator("table.scores")
        assert table.count() == 1
        links = table.locator("a")
        assert links.count() == len(graded_demo.outcomes)   # every score links somewhere
        shot(page, "08-report")
        # The full solution's score (its speed cell may be held for review on a loaded machine).
        full = table.locator("tr", has=page.locator("th", has_text="ada_full")).locator("a").first
        full.click()
        page.wait_for_load_state()
        assert page.url.endswith("/feedback/ada_full/ps2/ps2.html"), page.url
        # No horizontal scroll: the page is no wider than the window, long lines wrap.
        widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], widths
        wrap = page.evaluate("() => getComputedStyle(document.querySelector('pre')).whiteSpace")
        assert wrap == "pre-wrap", wrap
        shot(page, "09-feedback-ada_full")
        page.goto(f"file://{report}")
        page.locator("table.scores a", has_text="not graded").first.click()
        page.wait_for_load_state()
        assert page.url.endswith("NOT_GRADED.html") and "not graded" in page.inner_text("h1")
    finally:
        context.close()
