"""A report's typed result (`esc.reports.result`) as the HTML of its site page.

Prose blocks go through markdown (raw HTML in them is escaped); tables are built from their cells,
so a figure's value, interval, n and note reach the page as data (`data-value`, `data-low`,
`data-high`, `data-n`, and the note as the cell's tooltip), not only as the text a person reads.
"""

from __future__ import annotations

import math

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from esc.reports.result import Cell, Heading, Report, Table, Text


def _attrs(cell: Cell) -> str:
    figures = {
        k: v
        for k, v in (("value", cell.value), ("low", cell.low), ("high", cell.high))
        if v is not None and not math.isnan(float(v))
    }
    parts = [f' data-{k}="{v:.6g}"' for k, v in figures.items()]
    if cell.n is not None:
        parts.append(f' data-n="{int(cell.n)}"')
    if cell.note:
        parts.append(f' title="{escape(cell.note)}"')
    if "value" in figures:
        parts.append(' class="num"')
    return "".join(parts)


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    rows = "\n".join(
        "<tr>" + "".join(f"<td{_attrs(c)}>{escape(c.text)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    return f"<table>\n<thead>\n<tr>{head}</tr>\n</thead>\n<tbody>\n{rows}\n</tbody>\n</table>\n"


def result_html(report: Report) -> Markup:
    """The blocks of `report`, in order, as one HTML fragment."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    parts = []
    for block in report.blocks:
        if isinstance(block, Text):
            parts.append(md.render(block.text))
        elif isinstance(block, Heading):
            level = min(max(block.level, 1), 6)
            parts.append(f"<h{level}>{escape(block.text)}</h{level}>\n")
        else:
            parts.append(_table(block))
    return Markup("".join(parts))
