"""`make bench-grade` measures each confinement this machine can give and names each one as the
run really used it (bubblewrap, kernel confinement, none), never one for another."""
from grader.isolation.sandbox import process
from grader.tools import bench_grade


def test_each_confinement_asked_for_is_measured_and_named_as_probed(monkeypatch):
    probed = {"bwrap": process.Isolation("bwrap"), "kernel": process.Isolation("kernel", "asked")}
    monkeypatch.setattr(process, "probe", lambda mode="auto": probed[mode])
    monkeypatch.setattr(process.Isolation, "describe", lambda self: f"words for {self.mode}")
    assert bench_grade.sandbox_modes("bwrap,kernel") == [("bwrap", "words for bwrap"),
                                                         ("kernel", "words for kernel")]


def test_a_confinement_that_cannot_run_here_is_left_out_and_off_is_named_as_what_it_gives(
        monkeypatch, capsys):
    def probe(mode="auto"):
        if mode == "bwrap":
            raise process.SandboxUnavailable("bubblewrap is not installed")
        # --sandbox off where Landlock works still confines with the kernel: named so, once
        return process.Isolation("kernel", "bubblewrap turned off")

    monkeypatch.setattr(process, "probe", probe)
    modes = bench_grade.sandbox_modes("bwrap,kernel,off")
    assert [mode for mode, _ in modes] == ["kernel"]
    assert "kernel confinement" in modes[0][1] and "WITHOUT" not in modes[0][1]
    assert "bwrap left out: bubblewrap is not installed" in capsys.readouterr().out


def test_the_estimate_is_titled_with_the_sets_measured():
    rows = [["ps1", "local", 1, 3, "5", "4", "10", "30", "6.00", "-", "10/10"],
            ["ps1", "local", 2, 3, "5", "4", "10", "20", "9.00", "-", "10/10"]]
    text = bench_grade._estimate(rows, [1, 2], 8, "kernel")
    assert "500 students x 8 problem sets (kernel)" in text and "4,000 submissions" in text


def test_where_a_submissions_seconds_go_adds_up_to_its_total():
    """Every phase the judge times lands in one column (none left out, none counted twice), and
    what is outside the judge is the rest: the columns add up to the total."""
    import types

    phases = {"reference side": 0.0, "subject start": 2.4, "learner cells": 0.01,
              "correctness": 0.4, "capture": 3.0, "calls as used": 2.1, "subject stop": 0.1,
              "graph checks": 0.3, "check speed": 3.7, "graph child": 0.1, "check recompiles": 0.2,
              "next subject": 0.3, "judge ps1.q1": 12.5, "judged scores": 12.6,
              "nbgrader autograde": 0.4}
    outcome = types.SimpleNamespace(phases=phases, seconds=13.3)
    parts = {part: bench_grade._part(outcome, part) for part in bench_grade.PARTS}
    assert abs(sum(parts.values()) - 13.3) < 1e-6
    assert abs(parts["subject's answers"] - 5.6) < 1e-6
    assert abs(parts["next subject"] - 0.3) < 1e-6
    assert abs(parts["other checks"] - 0.2) < 1e-6
    assert abs(parts["outside the judge"] - (13.3 - 13.01)) < 1e-6


def test_every_set_is_measured_in_every_confinement_and_the_executors_on_the_compared_ones():
    plan = bench_grade.run_plan(["bwrap", "kernel"], ["ps1", "ps2", "ps3"], ["local", "ray"],
                                [1, 2], ["ps1"])
    assert sorted(r for r in plan if r[2:] == ("local", 1)) == [
        (m, a, "local", 1) for m in ("bwrap", "kernel") for a in ("ps1", "ps2", "ps3")]
    assert sorted(r for r in plan if r[2:] != ("local", 1)) == [
        ("bwrap", "ps1", "local", 2), ("bwrap", "ps1", "ray", 1), ("bwrap", "ps1", "ray", 2)]
    assert len(plan) == len(set(plan))
