"""A report's blocks (`esc.reports.result`, as a run log holds them) as the HTML of the site's pages:
the one renderer of every figure the site shows, on the report pages, the overview and the targets'.

Prose blocks go through markdown (raw HTML in them is escaped); tables are built from their cells,
so a figure's value, interval, n and note reach the page as data (`data-value`, `data-low`,
`data-high`, `data-n`, and the note as the cell's tooltip), not only as the text a person reads;
a table sorts by its figures (`static/site.js` reads `data-value`). A column whose figures name a
metric the run log defines (`esc.reports.metric`) says which direction is better in its header,
read from the metric, never from the task; a figure the report marked its group's best
(`esc.reports.result.Cell.best`, decided by the report from paired intervals) has the class "best":
the site reads the mark and computes none. A table that declares a chart (`Table.chart`) is drawn
before it (`chart_html`: `esc.reports.table_chart`'s SVG inline, in a figure whose caption links to
the table's id).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from esc.reports.metric import Metric
from esc.reports.result import Cell, Heading, Report, Table, Text, footnotes
from esc.reports.table_chart import chart_svgs

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


def table_html(
    table: Table, metrics: Mapping[str, Metric] | None = None, anchor: str | None = None
) -> Markup:
    """The table; `metrics`: the run log's definitions (`RunLog.metrics`), for each column's
    direction; the best figures are those the report marked (`Cell.best`); `anchor`: its id (what
    its chart's caption links to)."""
    columns = [column_metric(table, i, metrics or {}) for i in range(len(table.columns))]
    head = "".join(_head(c, m) for c, m in zip(table.columns, columns, strict=True))
    rows = "\n".join(
        "<tr>" + "".join(f"<td{_attrs(c)}>{escape(c.text)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    body = f"<thead>\n<tr>{head}</tr>\n</thead>\n<tbody>\n{rows}\n</tbody>\n"
    named = f' id="{escape(anchor)}"' if anchor else ""
    return Markup(f'<table class="sortable results"{named}>\n{body}</table>\n' + footnotes_html(table))


def footnotes_html(table: Table) -> str:
    """What the marks in the table's cells mean (`esc.reports.result.footnotes`), once, under it."""
    return "".join(f'<p class="footnote">{escape(note)}</p>\n' for note in footnotes(table))


def chart_html(table: Table, anchor: str) -> Markup:
    """The table's chart (`esc.reports.table_chart`: matplotlib's SVG, one per facet), in a figure
    whose caption names it in English and Chinese and links to the table of its numbers (`anchor`,
    the table's id; every id in the SVGs starts with it); nothing for a table without a chart."""
    svgs = chart_svgs(table, f"{anchor}-")
    if not svgs or table.chart is None:
        return Markup("")
    en, zh = table.chart.title
    names = " ".join(
        f'<span class="title" lang="{lang}">{escape(t)}</span>' for lang, t in (("en", en), ("zh", zh)) if t
    )
    csv = f' data-csv="{escape(table.csv)}"' if table.csv else ""
    plots = "".join(f'<div class="plot">{svg}</div>\n' for svg in svgs)  # escaped by the SVG writer
    caption = (
        f"<figcaption>{names} · each point its figure and 95% interval (hover for its text); "
        f'<a href="#{escape(anchor)}">the numbers: the table below</a></figcaption>'
    )
    return Markup(f'<figure class="chart" data-table="{escape(anchor)}"{csv}>\n{plots}{caption}\n</figure>\n')


def result_html(
    report: Report, top: int = 1, metrics: Mapping[str, Metric] | None = None, anchor: str = ""
) -> Markup:
    """The blocks of `report`, in order, as one HTML fragment; its headings from level `top` (a
    report inside another page's section: under that section's heading); `metrics` as `table_html`;
    each table's id `<anchor>t<i>` (its place among the report's tables, from 1), its chart before
    it (`chart_html`): give two reports on one page two anchors (`anchor_of`)."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    parts = []
    tables = 0
    for block in report.blocks:
        if isinstance(block, Text):
            parts.append(md.render(block.text))
        elif isinstance(block, Heading):
            level = min(max(block.level, 1) + top - 1, 6)
            parts.append(f"<h{level}>{escape(block.text)}</h{level}>\n")
        else:
            tables += 1
            named = f"{anchor}t{tables}"
            parts += [chart_html(block, named), table_html(block, metrics, named)]
    return Markup("".join(parts))


def anchor_of(name: str) -> str:
    """An id prefix made of `name` (a report page's file name): letters, digits, `_` and `-`."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-") + "-"


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
