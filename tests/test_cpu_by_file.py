"""tests/cpu_by_file.py: where the suite's cores went, per file, from every worker's record."""
from __future__ import annotations

import json

import cpu_by_file


def test_files_sum_every_worker_s_tests_and_prefer_the_group_s_count(tmp_path):
    (tmp_path / "gw0.json").write_text(json.dumps({
        "tests/test_a.py::test_one": {"own_s": 1.0, "children_s": 2.0, "wall_s": 9.0, "cpu_s": 7.0},
        "tests/test_b.py::test_two": {"own_s": 1.0, "children_s": 1.0, "wall_s": 2.0}}))
    (tmp_path / "gw1.json").write_text(json.dumps({
        "tests/test_a.py::test_three[x]": {"own_s": 0.5, "children_s": 0.0, "wall_s": 1.0,
                                           "cpu_s": 4.0}}))
    rows = cpu_by_file.load(str(tmp_path))
    assert len(rows) == 3
    # the cpuacct group's count where there is one (every process), else getrusage's
    assert cpu_by_file.by_file(rows) == [("tests/test_a.py", 11.0, 10.0),
                                         ("tests/test_b.py", 2.0, 2.0)]
