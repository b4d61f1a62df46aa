"""Setup without root: `make setup` installs no system package; bubblewrap and chromium come from
`make setup-sandbox` / `make setup-browser` (grader/tools/system-package), which install them as root
or through sudo, print the exact command otherwise, and record nothing, so a failed install is
tried again. `make test` asks for both (the suite tests the sandbox and the browser).

grader/tools/system-package runs here against fake `id`, `sudo` and `apt-get` on PATH: nothing is
installed on this machine.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "grader", "tools", "system-package")
CMD, PKG = "course-test-command", "course-test-package"


def _fake(folder, name: str, body: str) -> None:
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)


def _run(fakebin) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{fakebin}:/usr/bin:/bin")
    return subprocess.run(["bash", SCRIPT, CMD, PKG, "for a test"], env=env, capture_output=True,
                          text=True, timeout=60)


def _apt(fakebin, log, works: bool) -> None:
    """A fake apt-get that logs its calls and, when it works, "installs" the command."""
    install = f'[ "$1" = install ] && {{ printf "#!/bin/sh\\n" > {fakebin}/{CMD}; chmod +x {fakebin}/{CMD}; }}'
    _fake(fakebin, "apt-get", f'echo "$@" >> {log}\n' + (install + "\nexit 0" if works else "exit 100"))


def test_without_root_or_sudo_it_prints_the_exact_command_and_fails(tmp_path):
    _fake(tmp_path, "id", '[ "$1" = -u ] && echo 1000 || /usr/bin/id "$@"')
    _fake(tmp_path, "sudo", "exit 1")               # sudo asks for a password: refused with -n
    _apt(tmp_path, tmp_path / "apt.log", works=True)
    proc = _run(tmp_path)
    assert proc.returncode == 1
    assert f"sudo apt-get install -y {PKG}" in proc.stdout
    assert not (tmp_path / "apt.log").exists()      # it did not try


def test_a_failed_install_fails_and_is_tried_again_next_time(tmp_path):
    _fake(tmp_path, "id", '[ "$1" = -u ] && echo 0 || /usr/bin/id "$@"')   # root
    log = tmp_path / "apt.log"
    _apt(tmp_path, log, works=False)
    proc = _run(tmp_path)
    assert proc.returncode == 1 and "FAILED" in proc.stdout
    _apt(tmp_path, log, works=True)                  # e.g. the mirror is back
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout
    calls = open(log).read().splitlines()
    assert calls.count("update -qq") == 2 and calls[-1] == f"install -y -qq {PKG}"  # tried twice
    # Installed now: the next call checks the command and does nothing.
    os.remove(log)
    assert _run(tmp_path).returncode == 0 and not log.exists()


def _dry_run(target: str) -> str:
    # -n prints the recipes without running them; -B as if nothing were set up yet.
    return subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout


def test_make_setup_installs_no_system_package_and_make_test_asks_for_both():
    setup = _dry_run("setup")
    assert "grader/tools/pip-install" in setup    # every install is tried again on a cut download
    assert not re.search(r"apt-get|sudo|system-package", setup), setup
    test = _dry_run("test")
    assert "system-package bwrap bubblewrap" in test
    assert "system-package chromium chromium" in test
    grade = _dry_run("grade")
    assert not re.search(r"apt-get|sudo|system-package", grade)


def _phony_targets() -> list[str]:
    text = open(os.path.join(ROOT, "Makefile")).read()
    return re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split()


def test_make_help_lists_every_target():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    listed = set(re.findall(r"^make ([\w-]+)", out, re.M))
    assert set(_phony_targets()) <= listed, sorted(set(_phony_targets()) - listed)


def test_make_clean_removes_everything_the_targets_make():
    # Every ignored path is something a target or a test makes, except the instructor's own data.
    instructors = {"submitted/", "downloads/", "canvas-roster.csv"}
    ignored = [line.strip() for line in open(os.path.join(ROOT, ".gitignore"))
               if line.strip() and not line.startswith("#")]
    clean = _dry_run("clean")
    for path in ignored:
        if path in instructors:
            continue
        name = path.strip("/").lstrip("*")
        assert name in clean, f"make clean leaves {path} behind"


def test_make_setup_enables_nbgraders_lab_extension_by_its_real_name():
    assert "labextension enable --level=sys_prefix @jupyter/nbgrader" in _dry_run("setup")
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "jupyter"),
                          "labextension", "list"], capture_output=True, text=True, timeout=120)
    assert re.search(r"@jupyter/nbgrader\b.*enabled", out.stdout + out.stderr)


def _python_without_ensurepip(folder) -> str:
    """A python3 that behaves as Debian's does without python3-venv: `-m venv DIR` fails
    because ensurepip is missing; `-m venv --without-pip DIR` works."""
    real = sys._base_executable if hasattr(sys, "_base_executable") else sys.executable
    _fake(folder, "python3", f'''if [ "$1" = -m ] && [ "$2" = venv ] && [ "$3" != --without-pip ]; then
  echo "The virtual environment was not created successfully because ensurepip is not" >&2
  echo "available.  On Debian/Ubuntu systems, you need to install the python3-venv package" >&2
  exit 1
fi
exec {real} "$@"''')
    return os.path.join(folder, "python3")


def test_make_venv_without_python3_venv_falls_back_without_root(tmp_path):
    python = _python_without_ensurepip(tmp_path)
    venv = tmp_path / "venv"
    proc = subprocess.run([os.path.join(ROOT, "grader", "tools", "make-venv"), python, str(venv)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sudo apt-get install -y python3-venv" in proc.stdout   # the lasting fix, named
    assert "created without python3-venv" in proc.stdout
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"],
                         capture_output=True, text=True, timeout=60)
    assert pip.returncode == 0 and str(venv) in pip.stdout
    # A second run finds it done.
    again = subprocess.run([os.path.join(ROOT, "grader", "tools", "make-venv"), python, str(venv)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == ""


def test_a_cut_off_download_is_tried_again_and_a_lasting_failure_fails(tmp_path):
    """CI lost a setup to one download cut off at 77.3 of 79.3 MB: pip-install tries again."""
    script = os.path.join(ROOT, "grader", "tools", "pip-install")
    calls = tmp_path / "calls"
    # A fake Python whose `pip install` fails until its third call (its `--help` is not counted).
    _fake(tmp_path, "python", f'case "$*" in *--help*) exit 0;; esac\n'
                              f'echo "$*" >> {calls}\n'
                              f'[ "$(wc -l < {calls})" -ge 3 ]')
    env = dict(os.environ, PIP_RETRY_DELAY_S="0")
    proc = subprocess.run(["bash", script, str(tmp_path / "python"), "-q", "ray"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout
    lines = calls.read_text().splitlines()
    assert len(lines) == 3 and all(line.startswith("-m pip install --retries 10") and
                                   line.endswith("-q ray") for line in lines)
    assert "attempt 2 of 4" in proc.stdout
    calls.unlink()
    proc = subprocess.run(["bash", script, str(tmp_path / "python"), "ray"],
                          env=dict(env, PIP_ATTEMPTS="2"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "FAILED" in proc.stdout   # make setup stops; no stamp written
    assert len(calls.read_text().splitlines()) == 2


def test_without_root_bubblewrap_is_unpacked_into_the_course_and_runs():
    """`make setup-sandbox` as an ordinary user without sudo, bubblewrap not installed (hidden
    here): the package and what it needs are downloaded and unpacked into .system/ without root,
    and the bwrap there runs a sandboxed command (it needs no set-user-id bit where user
    namespaces are allowed, as here)."""
    import pytest

    import fresh_machine

    import pathlib
    import shutil
    import tempfile

    if fresh_machine.available():
        pytest.skip(fresh_machine.available())
    top = tempfile.mkdtemp(prefix="setup-unprivileged-", dir="/tmp")   # where nobody may go
    os.chmod(top, 0o755)
    folder = pathlib.Path(top) / "course"
    folder.mkdir()
    fresh_machine.give_to(str(folder), fresh_machine.NOBODY)
    prefix = folder / ".system"
    try:
        _unpack_as_nobody(folder, prefix)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _unpack_as_nobody(folder, prefix) -> None:
    import fresh_machine

    env = {"PATH": f"{prefix}/bin:/usr/bin:/bin", "HOME": str(folder)}
    proc = subprocess.run(fresh_machine.command(
        ["bash", SCRIPT, "bwrap", "bubblewrap", "the sandbox", str(prefix)],
        user=fresh_machine.NOBODY), capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bubblewrap unpacked without root" in proc.stdout, proc.stdout
    run = subprocess.run(fresh_machine.command(
        [str(prefix / "bin" / "bwrap"), "--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc",
         "--dev", "/dev", "sh", "-c", "echo sandboxed $(id -u)"], user=fresh_machine.NOBODY),
        capture_output=True, text=True, timeout=60, env=env)
    assert run.stdout.strip() == f"sandboxed {fresh_machine.NOBODY}", run.stdout + run.stderr
    # Found first on the PATH the Makefile sets (.system/bin after the venv's).
    again = subprocess.run(fresh_machine.command(
        ["bash", SCRIPT, "bwrap", "bubblewrap", "the sandbox", str(prefix)],
        user=fresh_machine.NOBODY), capture_output=True, text=True, timeout=60, env=env)
    assert again.returncode == 0 and again.stdout == ""
