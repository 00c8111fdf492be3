"""A report's blocks (`esc.reports.result`, as a run log holds them) as the HTML of the site's pages:
the one renderer of every figure the site shows, on the report pages, the overview and the targets'.

Prose blocks go through markdown (raw HTML in them is escaped); tables are built from their cells,
so a figure's value, interval, n and note reach the page as data (`data-value`, `data-low`,
`data-high`, `data-n`, and the note as the cell's tooltip), not only as the text a person reads;
a table sorts by its figures (`static/site.js` reads `data-value`). A column whose figures name a
metric the run log defines (`esc.reports.metric`) says which direction is better in its header,
read from the metric, never from the task; a figure the report marked its group's best
(`esc.reports.result.Cell.best`, decided by the report from paired intervals) has the class "best":
the site reads the mark and computes none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from esc.reports.metric import Metric
from esc.reports.result import Cell, Heading, Report, Table, Text

ARROWS = {True: "\u2191", False: "\u2193"}  # higher / lower is better


def _attrs(cell: Cell) -> str:
    """The cell's figure as data: value, low and high as `Cell` publishes them (none for a figure
    that reads n/a, undefined or unstable: it sorts with the n/a's), n, its note as the tooltip, and
    the report's mark of a best figure (`Cell.best`) as the class "best"."""
    figures = {
        k: v
        for k, v in (("value", cell.value), ("low", cell.low), ("high", cell.high))
        if v is not None and not math.isnan(float(v))
    }
    parts = [f' data-{k}="{v:.6g}"' for k, v in figures.items()]
    if cell.n is not None:
        parts.append(f' data-n="{int(cell.n)}"')
    said = [cell.note] if cell.note else []
    left = [f"{k} {v}" for k, v in (cell.estimate.left_out if cell.estimate else ()) if v]
    if left:  # what the figure did not count, from the figure (Table 2: invalid and failed judgments)
        said.append("left out: " + ", ".join(left))
    if said:
        parts.append(f' title="{escape("; ".join(said))}"')
    if "value" in figures:
        parts.append(' class="num best"' if cell.best else ' class="num"')
    elif cell.estimate is not None:
        parts.append(' data-sort=""')  # an n/a figure: last in either order (`static/site.js`)
    return "".join(parts)


def column_metric(table: Table, i: int, metrics: Mapping[str, Metric]) -> Metric | None:
    """The metric column `i`'s figures measure, where they all name one the log defines."""
    named = {c.estimate.metric for row in table.rows if (c := row[i]).estimate and c.estimate.metric}
    return metrics.get(named.pop()) if len(named) == 1 else None


def _head(name: str, metric: Metric | None) -> str:
    if metric is None or metric.higher_is_better is None:
        return f"<th>{escape(name)}</th>"
    better = "higher" if metric.higher_is_better else "lower"
    title = escape(f"{metric.name}: {metric.aggregation}; {better} is better")
    return f'<th title="{title}">{escape(name)} {ARROWS[metric.higher_is_better]}</th>'


def table_html(table: Table, metrics: Mapping[str, Metric] | None = None) -> Markup:
    """The table; `metrics`: the run log's definitions (`RunLog.metrics`), for each column's
    direction; the best figures are those the report marked (`Cell.best`)."""
    columns = [column_metric(table, i, metrics or {}) for i in range(len(table.columns))]
    head = "".join(_head(c, m) for c, m in zip(table.columns, columns, strict=True))
    rows = "\n".join(
        "<tr>" + "".join(f"<td{_attrs(c)}>{escape(c.text)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    body = f"<thead>\n<tr>{head}</tr>\n</thead>\n<tbody>\n{rows}\n</tbody>\n"
    return Markup(f'<table class="sortable results">\n{body}</table>\n')


def result_html(report: Report, top: int = 1, metrics: Mapping[str, Metric] | None = None) -> Markup:
    """The blocks of `report`, in order, as one HTML fragment; its headings from level `top` (a
    report inside another page's section: under that section's heading); `metrics` as `table_html`."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    parts = []
    for block in report.blocks:
        if isinstance(block, Text):
            parts.append(md.render(block.text))
        elif isinstance(block, Heading):
            level = min(max(block.level, 1) + top - 1, 6)
            parts.append(f"<h{level}>{escape(block.text)}</h{level}>\n")
        else:
            parts.append(table_html(block, metrics))
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
