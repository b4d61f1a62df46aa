"""Markdown tables, written one way for every report, benchmark and chapter table."""
from __future__ import annotations

from typing import Iterable, Sequence


def markdown_table(header: Sequence[str], rows: Iterable[Sequence]) -> str:
    """A Markdown table: one row per item of ``rows``, each cell as ``str``, a ``|`` inside a cell
    escaped so it does not split the row."""
    def line(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *(line(r) for r in rows)])
