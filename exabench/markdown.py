"""Markdown tables, written one way everywhere: `| a | b |`, a `|---|---|` rule, one line a row.

Cells are written as given: callers format their numbers and keep `|` and newlines out of text."""

from __future__ import annotations

from typing import Iterable


def row(cells: Iterable) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header: list, rows: Iterable[Iterable]) -> list[str]:
    """The lines of a table: header, rule, rows."""
    return [row(header), "|" + "---|" * len(header), *(row(r) for r in rows)]
