"""A report as a typed result: text, headings and tables whose cells carry their figures.

A report module builds a `Report` (its prose and its tables, each cell the text a person reads plus
the number behind it: value, 95% interval, n, and a note where the figure is undefined or
unstable), and `write_result` writes it: `OUT/<kind>.md` for people, `OUT/<kind>.result.json` for
programs (the report site builds its pages from it, `esc.site.pages`), and a CSV for each
table that names one. The markdown is rendered here, once: a module never joins table rows itself.

Why cells carry both: the text is the report's wording (intervals, "n/a (undefined in 12% of
resamples)", "(3/24)"), which stays as the module words it; the numbers let the site, a notebook
or a later paper table use the figures without parsing that text.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from esc.jsonl import atomic_write_text

RESULT_FORMAT = "esc-report/1"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One table cell: `text` as the report shows it, and the figure behind it where there is one."""

    text: str
    value: float | None = None
    low: float | None = None  # the 95% interval
    high: float | None = None
    n: int | None = None  # the items behind the figure (the resampling unit may be coarser: `note`)
    note: str | None = None  # why a figure is n/a, or what its n counts

    def to_json(self) -> dict[str, Any]:
        figures = {k: _finite(getattr(self, k)) for k in ("value", "low", "high")}
        return {
            "text": self.text,
            **{k: v for k, v in figures.items() if v is not None},
            **({"n": int(self.n)} if self.n is not None else {}),
            **({"note": self.note} if self.note else {}),
        }


CellLike = Cell | str | int | float


def figure(
    text: str, value: float | None, interval: Any, n: int | None = None, note: str | None = None
) -> Cell:
    """The cell of a figure with its 95% interval (`esc.reports.bootstrap.Interval`: low, high and
    the share of undefined resamples, which becomes the note when none is given)."""
    undefined = getattr(interval, "undefined", None)
    if note is None and undefined is not None and math.isfinite(undefined) and undefined > 0:
        note = f"undefined in {undefined:.0%} of resamples"
    return Cell(text, value, interval.low, interval.high, n, note)


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
    """Rows of cells under `columns`; `csv`: the file name this table is also written to, if any."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    csv: str | None = None

    @classmethod
    def of(cls, columns: Sequence[str], rows: Sequence[Sequence[CellLike]], csv: str | None = None) -> Table:
        table = cls(tuple(columns), tuple(tuple(cell(c) for c in row) for row in rows), csv)
        for i, row in enumerate(table.rows):
            if len(row) != len(table.columns):
                raise ValueError(f"row {i} has {len(row)} cells for {len(table.columns)} columns")
        return table


Block = Text | Heading | Table


@dataclasses.dataclass(frozen=True)
class Report:
    """What `OUT/<kind>.md` says, in order."""

    kind: str
    blocks: tuple[Block, ...]

    def __add__(self, blocks: Sequence[Block]) -> Report:
        return Report(self.kind, (*self.blocks, *blocks))

    def tables(self) -> list[Table]:
        return [b for b in self.blocks if isinstance(b, Table)]

    def to_markdown(self) -> str:
        """The blocks, a blank line between each, ending in a newline."""
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
        *("| " + " | ".join(_escape(c.text) for c in row) + " |" for row in block.rows),
    ]
    return "\n".join(lines)


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
    }


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def table_csv(table: Table) -> str:
    """A table as CSV: each cell's text, and for a cell with a figure its value, low, high and n."""
    figures = [any(row[i].value is not None for row in table.rows) for i in range(len(table.columns))]
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


def _number(x: Any) -> float | None:
    if x is not None and (isinstance(x, bool) or not isinstance(x, int | float)):
        raise TypeError(f"expected a number, got {x!r}")
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
    rows = tuple(
        tuple(
            Cell(_text(c["text"]), _number(c.get("value")), _number(c.get("low")), _number(c.get("high")),
                 _count(c.get("n")), c.get("note") and _text(c["note"]))
            for c in row
        )
        for row in b["rows"]
    )  # fmt: skip
    return Table(tuple(_text(c) for c in b["columns"]), rows, b.get("csv") and _text(b["csv"]))
