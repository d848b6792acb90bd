"""Markdown tables, written one way everywhere: `| a | b |`, a `|---|---|` rule, one line a row.

Cells are written as given: callers format their numbers and keep `|` and newlines out of text."""

from __future__ import annotations

import math
from typing import Iterable


def row(cells: Iterable) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header: list, rows: Iterable[Iterable]) -> list[str]:
    """The lines of a table: header, rule, rows."""
    return [row(header), "|" + "---|" * len(header), *(row(r) for r in rows)]


_STYLE = ("body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;margin:.5em 0 1.5em}"
          "th,td{border:1px solid #bbb;padding:2px 6px;text-align:left;font-size:90%}th{background:#eee}")


def split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip()[1:-1].split("|")]


def to_html(text: str, title: str) -> str:
    """A page of Markdown as written here (headings, `|` tables, paragraphs) as one standalone HTML
    page whose tables are HTML tables, for Snakemake's report, which shows HTML in place and offers
    any other text file as a download."""
    return page(title, body_html(text))


def page(title: str, body: str, style: str = "") -> str:
    """A standalone HTML page (no network: the style is inline)."""
    from html import escape

    return (f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{_STYLE}{style}</style></head>\n<body>\n{body}\n</body></html>\n")


def body_html(text: str, shift: int = 0) -> str:
    """The HTML of a page of Markdown as written here (headings `shift` levels deeper)."""
    from html import escape

    out, block = [], []

    def flush():
        if block:
            rows = [r for r in block if not set(r) <= set("|-: ")]  # the |---| rule is no row
            out.append("<table>\n<tr>" + "".join(f"<th>{escape(c)}</th>" for c in split_row(rows[0])) + "</tr>")
            out.extend("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in split_row(r)) + "</tr>" for r in rows[1:])
            out.append("</table>")
            block.clear()

    for line in text.splitlines():
        if line.startswith("|"):
            block.append(line)
            continue
        flush()
        if line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + shift, 6)
            out.append(f"<h{level}>{escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            out.append(f"<p>{escape(line.strip())}</p>")
    flush()
    return "\n".join(out)


def cell(v) -> str:
    """A value as a table cell: empty for None or NaN, floats to 4 significant digits, text with
    `|` and newlines made harmless."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "/").replace("\n", " ")


def frame(df) -> str:
    """A DataFrame as a Markdown table (tabulate, which comes with snakemake): floats to 3 significant
    digits, integers whole, text as given."""
    import pandas as pd
    shown = df.copy()
    for c in shown.columns:
        if pd.api.types.is_float_dtype(shown[c]):
            shown[c] = [f"{v:.3g}" for v in shown[c]]
    return shown.to_markdown(index=False, disable_numparse=True)
