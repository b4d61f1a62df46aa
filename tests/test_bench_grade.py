"""`make bench-grade` measures where `make grade` runs: with bubblewrap where it can run, and
without it, saying so, where it cannot (as `make grade` grades the demo there)."""
from grader.isolation import sandbox
from grader.tools import bench_grade


def test_bench_grade_grades_without_the_sandbox_where_it_cannot_run_and_says_so(monkeypatch):
    def cannot(mode="auto"):
        raise sandbox.SandboxUnavailable("bubblewrap is not installed")

    monkeypatch.setattr(sandbox, "probe", cannot)
    mode, line = bench_grade.sandbox_mode()
    assert mode == "off"
    assert "WITHOUT the sandbox" in line and "bubblewrap is not installed" in line


def test_bench_grade_uses_the_sandbox_where_it_runs(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda mode="auto": sandbox.Isolation("bwrap", "probed"))
    assert bench_grade.sandbox_mode()[0] == "bwrap"
