"""Where the suite's cores went (tests/conftest.py writes tests/artifacts/cpu/WORKER.json): CPU
seconds per test file, the largest first, and the largest tests. The CPU of every process of the
worker's where it was counted (``cpu_s``, a cpuacct group), else of those waited for (getrusage).

    python tests/cpu_by_file.py [--tests 20]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
from collections import defaultdict

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "artifacts", "cpu")


def load(folder: str = FOLDER) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as fh:
            rows.update(json.load(fh))
    return rows


def cpu_of(row: dict) -> float:
    return row["cpu_s"] if "cpu_s" in row else row["own_s"] + row["children_s"]


def by_file(rows: dict[str, dict]) -> list[tuple[str, float, float]]:
    """``(file, CPU seconds, wall seconds)`` per test file, the most CPU first."""
    cpu, wall = defaultdict(float), defaultdict(float)
    for nodeid, row in rows.items():
        name = nodeid.split("::")[0]
        cpu[name] += cpu_of(row)
        wall[name] += row["wall_s"]
    return sorted(((n, cpu[n], wall[n]) for n in cpu), key=lambda r: -r[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=20, help="how many of the largest tests")
    args = parser.parse_args()
    rows = load()
    files = by_file(rows)
    total = sum(r[1] for r in files)
    counted = "every process (cpuacct)" if all("cpu_s" in r for r in rows.values()) else \
        "the processes waited for (getrusage)"
    print(f"{len(rows)} tests, {total:.0f} CPU seconds of {counted}\n\n| file | CPU s | share | wall s |\n|---|---|---|---|")
    for name, cpu, wall in files:
        print(f"| {name} | {cpu:.0f} | {cpu / total:.0%} | {wall:.0f} |")
    print(f"\n| test | CPU s | wall s |\n|---|---|---|")
    tests = sorted(rows.items(), key=lambda r: -cpu_of(r[1]))
    for nodeid, row in tests[:args.tests]:
        print(f"| {nodeid} | {cpu_of(row):.0f} | {row['wall_s']:.0f} |")


if __name__ == "__main__":
    main()
