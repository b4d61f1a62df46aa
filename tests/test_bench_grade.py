"""`make bench-grade` measures each confinement this machine can give and names each one as the
run really used it (bubblewrap, kernel confinement, none), never one for another."""
from grader.isolation import sandbox
from grader.tools import bench_grade


def test_each_confinement_asked_for_is_measured_and_named_as_probed(monkeypatch):
    probed = {"bwrap": sandbox.Isolation("bwrap"), "kernel": sandbox.Isolation("kernel", "asked")}
    monkeypatch.setattr(sandbox, "probe", lambda mode="auto": probed[mode])
    monkeypatch.setattr(sandbox.Isolation, "describe", lambda self: f"words for {self.mode}")
    assert bench_grade.sandbox_modes("bwrap,kernel") == [("bwrap", "words for bwrap"),
                                                         ("kernel", "words for kernel")]


def test_a_confinement_that_cannot_run_here_is_left_out_and_off_is_named_as_what_it_gives(
        monkeypatch, capsys):
    def probe(mode="auto"):
        if mode == "bwrap":
            raise sandbox.SandboxUnavailable("bubblewrap is not installed")
        # --sandbox off where Landlock works still confines with the kernel: named so, once
        return sandbox.Isolation("kernel", "bubblewrap turned off")

    monkeypatch.setattr(sandbox, "probe", probe)
    modes = bench_grade.sandbox_modes("bwrap,kernel,off")
    assert [mode for mode, _ in modes] == ["kernel"]
    assert "kernel confinement" in modes[0][1] and "WITHOUT" not in modes[0][1]
    assert "bwrap left out: bubblewrap is not installed" in capsys.readouterr().out


def test_the_estimate_is_titled_with_the_sets_measured():
    rows = [["ps1", "local", 1, 3, "5", "4", "10", "30", "6.00", "-", "10/10"],
            ["ps1", "local", 2, 3, "5", "4", "10", "20", "9.00", "-", "10/10"]]
    text = bench_grade._estimate(rows, [1, 2], 8, "kernel")
    assert "500 students x 8 problem sets (kernel)" in text and "4,000 submissions" in text
