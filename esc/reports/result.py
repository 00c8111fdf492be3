"""A report as a typed result: text, headings and tables whose cells carry their figures.

A report module builds a `Report` (its prose and its tables, each cell the text a person reads plus
the figure behind it, an `esc.reports.estimate.Estimate`: value, 95% interval, n, the unit
resampled, and a note where the figure is undefined or unstable), and `write_result` writes it:
`OUT/<kind>.md` for people, `OUT/<kind>.result.json` for programs (the report site builds its pages
from it, `esc.site.pages`), and a CSV for each table that names one. The markdown is rendered
here, once: a module never joins table rows itself.

Why cells carry both: the text is the report's wording (intervals, "n/a (undefined in 12% of
resamples)", "(3/24)"), which stays as the module words it; the numbers let the site, a notebook
or a later paper table use the figures without parsing that text. `Report.estimates` places every
figure in its table (the run log's `results`, `esc.reports.runlog`). A cell shows one figure and its
interval; what a mark on an interval means is said once under its table (`footnotes`).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from esc.jsonl import atomic_write_text
from esc.reports.bootstrap import NO_INTERVAL, Interval, estimate
from esc.reports.chart_spec import Chart
from esc.reports.estimate import SAME, Estimate, mark_notes, resampled_units
from esc.reports.metric import Metric, checked_unit
from esc.reports.paired import separated_best

RESULT_FORMAT = "esc-report/1"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One table cell: `text` as the report shows it, and the figure behind it where there is one;
    `best`: the report marks it its group's best figure (`Table.of`'s `best`), which every view
    shows (markdown in bold, the site's class "best") and none decides."""

    text: str
    estimate: Estimate | None = None
    best: bool = False

    # the figure's parts as every view publishes them (`Estimate.shown`: None without a figure, and
    # where the figure reads n/a, undefined or unstable), as the CSV and the site's tables read them
    @property
    def value(self) -> float | None:
        return self.estimate.shown()[0] if self.estimate else None

    @property
    def low(self) -> float | None:
        return self.estimate.shown()[1] if self.estimate else None

    @property
    def high(self) -> float | None:
        return self.estimate.shown()[2] if self.estimate else None

    @property
    def n(self) -> int | None:
        return self.estimate.n if self.estimate else None

    @property
    def note(self) -> str | None:
        """Why the figure is n/a or what its n counts; else the share of undefined resamples."""
        return self.estimate.why_not() if self.estimate else None

    def to_json(self) -> dict[str, Any]:
        """The text, and the figure's value, low, high, n, unit, share of undefined resamples, note,
        metric, what it left out and an exact interval's kind where it has them (its placement is the
        run log's: `Report.estimates`)."""
        figure = self.estimate.to_json() if self.estimate else {}
        best = {"best": True} if self.best else {}
        return {"text": self.text, **{k: figure[k] for k in CELL_FIELDS if k in figure}, **best}


CELL_FIELDS = ("value", "low", "high", "n", "unit", "undefined", "note", "metric", "left_out", "interval")
CellLike = Cell | str | int | float


def figure(
    text: str, value: float | None, interval: Interval = NO_INTERVAL, n: int | None = None,
    note: str | None = None, unit: str | None = None, metric: Metric | None = None,
) -> Cell:  # fmt: skip
    """The cell of a figure with its 95% interval (low, high and the share of undefined resamples,
    which becomes the note when none is given), `unit`, what the interval resampled, and `metric`,
    what it measures (where a row, not a column, says: `Table.of`'s `metrics` name a column's)."""
    return Cell(text, estimate(value, interval, n, unit, note, metric))


def cell(value: CellLike) -> Cell:
    """A cell from a plain value: a string or a count is its own text."""
    return value if isinstance(value, Cell) else Cell(str(value))


@dataclasses.dataclass(frozen=True)
class Text:
    """A paragraph (or several lines) of markdown, shown as written."""

    text: str


@dataclasses.dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclasses.dataclass(frozen=True)
class Table:
    """Rows of cells under `columns`; `csv`: the file name this table is also written to, if any;
    `name`: what its figures' `Estimate.table` says (None: the heading above it, `Report.estimates`).
    `Table.of(..., metrics={column: Metric})` names what a column's figures measure; `rank_within`:
    the label columns whose values make rows comparable (() the whole table, None: rows are not
    ranked, e.g. they mix dimensions); the cells marked `best` are decided by `Table.of`."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    csv: str | None = None
    name: str | None = None
    rank_within: tuple[str, ...] | None = None
    chart: Chart | None = None  # how a view draws it (`esc.reports.chart_spec`); None: a table only

    @classmethod
    def of(
        cls, columns: Sequence[str], rows: Sequence[Sequence[CellLike]], csv: str | None = None,
        name: str | None = None, metrics: Mapping[str, Metric] | None = None,
        rank_within: Sequence[str] | None = None, chart: Chart | None = None,
        best: Iterable[tuple[int, str]] | None = None,
    ) -> Table:  # fmt: skip
        """The table; `metrics`: column -> the metric its figures measure (each figure then names
        it, and states its unit: a figure that resampled another unit than the metric's is a
        ValueError, `esc.reports.metric.checked_unit`). `best`: the (row index, column) cells the
        report decided are their group's best (from paired intervals, `esc.reports.paired`); not
        given, each `rank_within` group's best figure of a column whose metric has a better
        direction is marked only where its interval overlaps no other figure's of the group
        (`esc.reports.paired.separated_best`: a conservative stand-in where no paired interval exists)."""
        named = set(metrics or ()) | set(rank_within or ()) | set(chart.columns() if chart else ())
        named |= {column for _, column in best or ()}
        unknown = named - set(columns)
        if unknown:
            raise ValueError(
                f"metrics, rank_within or chart name columns the table does not have: {sorted(unknown)}"
            )
        cells = [[cell(c) for c in row] for row in rows]
        for i, row in enumerate(cells):
            if len(row) != len(columns):
                raise ValueError(f"row {i} has {len(row)} cells for {len(columns)} columns")
            for j, (column, c) in enumerate(zip(columns, row, strict=True)):
                m = (metrics or {}).get(column)
                if m is not None and c.estimate is not None:
                    unit = checked_unit(m, c.estimate.unit, f"column {column!r}, row {i}")
                    row[j] = dataclasses.replace(
                        c, estimate=dataclasses.replace(c.estimate, metric=m.name, unit=unit)
                    )
        within = None if rank_within is None else tuple(rank_within)
        marked = set(best) if best is not None else _separated(columns, cells, metrics or {}, within)
        for r, column in marked:
            if not 0 <= r < len(cells):
                raise ValueError(f"best names row {r} of a table of {len(cells)} rows")
            j = list(columns).index(column)
            cells[r][j] = dataclasses.replace(cells[r][j], best=True)
        return cls(tuple(columns), tuple(tuple(row) for row in cells), csv, name, within, chart)

    def resampled(self) -> str:
        """What its figures' intervals resampled, read from them ("role card", "dialogue", ...; ""
        for none): the words a note about the table uses (`esc.reports.estimate.resampled_units`)."""
        return resampled_units(c.estimate.unit for row in self.rows for c in row if c.estimate)


def _separated(
    columns: Sequence[str], cells: Sequence[Sequence[Cell]], metrics: Mapping[str, Metric],
    within: tuple[str, ...] | None,
) -> set[tuple[int, str]]:  # fmt: skip
    """`Table.of`'s default marks: per group of rows (`within`) and column with a better direction, the
    best figure whose interval overlaps no other's (`esc.reports.paired.separated_best`)."""
    if within is None:
        return set()
    keys = [list(columns).index(c) for c in within]
    marked = set()
    for j, column in enumerate(columns):
        m = metrics.get(column)
        if m is None or m.higher_is_better is None:
            continue
        groups: dict[tuple[str, ...], dict[int, Estimate]] = {}
        for r, row in enumerate(cells):
            if row[j].estimate is not None:
                groups.setdefault(tuple(row[k].text for k in keys), {})[r] = row[j].estimate
        for figures in groups.values():
            r = separated_best(figures, m.higher_is_better)
            if r is not None:
                marked.add((r, column))
    return marked


Block = Text | Heading | Table


def footnotes(table: Table) -> list[str]:
    """What the marks in the table's cells mean, one line per mark its cells show (`Estimate.mark`,
    `esc.reports.estimate.mark_notes`): the lines every view writes once under the table (the
    markdown here, the site's `esc.site.result_html.table_html`), so no cell repeats its method."""
    return mark_notes(
        c.estimate
        for row in table.rows
        for c in row
        if c.estimate is not None and c.estimate.mark() and f"]{c.estimate.mark()}" in c.text
    )


@dataclasses.dataclass(frozen=True)
class Report:
    """What `OUT/<kind>.md` says, in order."""

    kind: str
    blocks: tuple[Block, ...]

    def __add__(self, blocks: Sequence[Block]) -> Report:
        return Report(self.kind, (*self.blocks, *blocks))

    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]

    def estimates(self) -> list[Estimate]:
        """Every cell's figure, placed: table "<kind>/<table name>" (its `name`, else the nearest
        heading above it, else "table <i>", counting the report's tables from 1), keys the row's
        labels (the cells left of the first column holding a figure, by column header; an unnamed
        column is "row") and "column", the figure's column header."""
        out: list[Estimate] = []
        heading = None
        tables = 0
        for block in self.blocks:
            if isinstance(block, Heading):
                heading = block.text
            if not isinstance(block, Table):
                continue
            tables += 1
            where = f"{self.kind}/{block.name or heading or f'table {tables}'}"
            first = next((i for i in range(len(block.columns)) if any(r[i].estimate for r in block.rows)), 0)
            for row in block.rows:
                labels = {block.columns[i] or "row": row[i].text for i in range(first)}
                out += [
                    c.estimate.at(where, {**labels, "column": column})
                    for column, c in zip(block.columns, row, strict=True)
                    if c.estimate is not None
                ]
        return out

    def to_markdown(self) -> str:
        """The blocks, a blank line between each (a table followed by its `footnotes`), ending in a
        newline."""
        return "\n\n".join(_markdown(b) for b in self.blocks) + "\n"

    def to_json(self) -> dict[str, Any]:
        return {"format": RESULT_FORMAT, "kind": self.kind, "blocks": [_block_json(b) for b in self.blocks]}


def _escape(text: str) -> str:
    """A cell's text inside a markdown table row: a `|` would end the cell, a newline the row."""
    return " ".join(text.split("\n")).replace("|", "\\|")


def _markdown(block: Block) -> str:
    if isinstance(block, Text):
        return block.text
    if isinstance(block, Heading):
        return f"{'#' * block.level} {block.text}"
    head = "| " + " | ".join(_escape(c) for c in block.columns) + " |"
    if block.columns and not block.columns[0]:  # an unnamed first column (a matrix's corner): "| |"
        head = "| |" + head[4:]
    lines = [
        head,
        "|" + "---|" * len(block.columns),
        *(
            "| " + " | ".join(f"**{_escape(c.text)}**" if c.best else _escape(c.text) for c in row) + " |"
            for row in block.rows
        ),
    ]
    notes = ["\\" + n if n.startswith(SAME) else n for n in footnotes(block)]  # "* ..." is no list item
    return "\n\n".join(["\n".join(lines), *notes])


def _block_json(block: Block) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Heading):
        return {"type": "heading", "level": block.level, "text": block.text}
    return {
        "type": "table",
        "columns": list(block.columns),
        "rows": [[c.to_json() for c in row] for row in block.rows],
        **({"csv": block.csv} if block.csv else {}),
        **({"name": block.name} if block.name else {}),
        **({"rank_within": list(block.rank_within)} if block.rank_within is not None else {}),
        **({"chart": block.chart.to_json()} if block.chart is not None else {}),
    }


def table_csv(table: Table) -> str:
    """A table as CSV: each cell's text, and for a column of figures each one's value, low, high and
    n (blank where n/a, undefined or unstable, `Estimate.shown`: a column of figures keeps its shape
    when none of them has a value)."""
    figures = [any(row[i].estimate is not None for row in table.rows) for i in range(len(table.columns))]
    head: list[str] = []
    for name, has in zip(table.columns, figures, strict=True):
        head += [name, f"{name} value", f"{name} low", f"{name} high", f"{name} n"] if has else [name]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(head)
    for row in table.rows:
        line: list[Any] = []
        for c, has in zip(row, figures, strict=True):
            line += [c.text, *(_blank(x) for x in (c.value, c.low, c.high, c.n))] if has else [c.text]
        writer.writerow(line)
    return buffer.getvalue()


def _blank(x: float | int | None) -> Any:
    return "" if x is None or not math.isfinite(float(x)) else x


def result_path(out: Path, kind: str) -> Path:
    return Path(out) / f"{kind}.result.json"


def write_result(out: Path, report: Report) -> str:
    """OUT/<kind>.md, OUT/<kind>.result.json and each named table's CSV; the markdown, returned."""
    out = Path(out)
    markdown = report.to_markdown()
    payload = json.dumps(report.to_json(), indent=1, ensure_ascii=False, allow_nan=False)  # before any write
    atomic_write_text(out / f"{report.kind}.md", markdown)
    atomic_write_text(result_path(out, report.kind), payload + "\n")  # after the markdown: the newer
    for table in report.tables():
        if table.csv:
            atomic_write_text(out / table.csv, table_csv(table))
    return markdown


def read_result(path: Path) -> Report:
    """A `<kind>.result.json` back as a Report (the site's pages are built from it); ValueError when
    it is not one, whatever is wrong with it (not JSON, another format, a field of the wrong type)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != RESULT_FORMAT:
            raise ValueError(f"not a report result ({RESULT_FORMAT})")
        return Report(_text(data["kind"]), tuple(_block(b) for b in data["blocks"]))
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: {err}") from None


def _text(x: Any) -> str:
    if not isinstance(x, str):
        raise TypeError(f"expected a string, got {x!r}")
    return x


def _count(x: Any) -> int | None:
    if x is not None and (isinstance(x, bool) or not isinstance(x, int)):
        raise TypeError(f"expected a count, got {x!r}")
    return x


def _block(b: dict[str, Any]) -> Block:
    if b["type"] == "text":
        return Text(_text(b["text"]))
    if b["type"] == "heading":
        return Heading(_text(b["text"]), int(_count(b["level"]) or 2))
    if b["type"] != "table":
        raise ValueError(f"unknown block type {b['type']!r}")
    rows = tuple(tuple(_cell(c) for c in row) for row in b["rows"])
    columns = tuple(_text(c) for c in b["columns"])
    within = b.get("rank_within")
    if within is not None and not (isinstance(within, list) and all(isinstance(c, str) for c in within)):
        raise TypeError(f"rank_within must be a list of column names, got {within!r}")
    return Table(
        columns, rows, b.get("csv") and _text(b["csv"]), b.get("name") and _text(b["name"]),
        None if within is None else tuple(within), Chart.from_json(b["chart"]) if "chart" in b else None,
    )  # fmt: skip


def _cell(c: dict[str, Any]) -> Cell:
    best = c.get("best", False)
    if not isinstance(best, bool):
        raise TypeError(f"a cell's best is true or false, got {best!r}")
    if not any(k in c for k in CELL_FIELDS):
        return Cell(_text(c["text"]), best=best)
    return Cell(_text(c["text"]), Estimate.from_json({k: c[k] for k in CELL_FIELDS if k in c}), best)
