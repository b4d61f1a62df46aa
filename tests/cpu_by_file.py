"""Where the suite's cores went (tests/conftest.py writes tests/artifacts/cpu/WORKER.json): CPU
seconds per test file, the largest first, and the largest tests.

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


def by_file(rows: dict[str, dict]) -> list[tuple[str, float, float]]:
    """``(file, CPU seconds, wall seconds)`` per test file, the most CPU first."""
    cpu, wall = defaultdict(float), defaultdict(float)
    for nodeid, row in rows.items():
        name = nodeid.split("::")[0]
        cpu[name] += row["own_s"] + row["children_s"]
        wall[name] += row["wall_s"]
    return sorted(((n, cpu[n], wall[n]) for n in cpu), key=lambda r: -r[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=20, help="how many of the largest tests")
    args = parser.parse_args()
    rows = load()
    files = by_file(rows)
    total = sum(r[1] for r in files)
    print(f"{len(rows)} tests, {total:.0f} CPU seconds\n\n| file | CPU s | share | wall s |\n|---|---|---|---|")
    for name, cpu, wall in files:
        print(f"| {name} | {cpu:.0f} | {cpu / total:.0%} | {wall:.0f} |")
    print(f"\n| test | CPU s | wall s |\n|---|---|---|")
    tests = sorted(rows.items(), key=lambda r: -(r[1]["own_s"] + r[1]["children_s"]))
    for nodeid, row in tests[:args.tests]:
        print(f"| {nodeid} | {row['own_s'] + row['children_s']:.0f} | {row['wall_s']:.0f} |")


if __name__ == "__main__":
    main()
