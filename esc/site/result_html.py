"""A report's blocks (`esc.reports.result`, as a run log holds them) as the HTML of the site's pages:
the one renderer of every figure the site shows, on the report pages, the overview and the targets'.

Prose blocks go through markdown (raw HTML in them is escaped); tables are built from their cells,
so a figure's value, interval, n and note reach the page as data (`data-value`, `data-low`,
`data-high`, `data-n`, and the note as the cell's tooltip), not only as the text a person reads;
a table sorts by its figures (`static/site.js` reads `data-value`).
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


def table_html(table: Table) -> Markup:
    head = "".join(f"<th>{escape(c)}</th>" for c in table.columns)
    rows = "\n".join(
        "<tr>" + "".join(f"<td{_attrs(c)}>{escape(c.text)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    body = f"<thead>\n<tr>{head}</tr>\n</thead>\n<tbody>\n{rows}\n</tbody>\n"
    return Markup(f'<table class="sortable results">\n{body}</table>\n')


def result_html(report: Report, top: int = 1) -> Markup:
    """The blocks of `report`, in order, as one HTML fragment; its headings from level `top` (a
    report inside another page's section: under that section's heading)."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    parts = []
    for block in report.blocks:
        if isinstance(block, Text):
            parts.append(md.render(block.text))
        elif isinstance(block, Heading):
            level = min(max(block.level, 1) + top - 1, 6)
            parts.append(f"<h{level}>{escape(block.text)}</h{level}>\n")
        else:
            parts.append(table_html(block))
    return Markup("".join(parts))


def lead(report: Report) -> Report:
    """The report's headline: its first table, with what the report says before it and the text
    right after it (the whole report when it has no table)."""
    blocks = list(report.blocks)
    end = next((i + 1 for i, b in enumerate(blocks) if isinstance(b, Table)), len(blocks))
    while end < len(blocks) and isinstance(blocks[end], Text):
        end += 1
    return Report(report.kind, tuple(blocks[:end]))


def label_columns(table: Table) -> int:
    """How many leading columns label a row (no cell of theirs carries a figure)."""
    return next(
        (i for i in range(len(table.columns)) if any(row[i].estimate for row in table.rows)),
        len(table.columns),
    )
