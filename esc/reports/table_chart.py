"""The one renderer of a table's picture: its `Chart` (`esc.reports.chart_spec`) drawn by matplotlib
as SVG text, which the report site puts beside the table (`esc.site.result_html`) and a notebook can
show as it is.

The points are the table's own cells as every view publishes them (`Cell.value`, `low`, `high`:
`Estimate.shown`), so a picture cannot show a figure the table does not: a cell that reads n/a is
no point, and its reason ("n/a: undefined in 38% of resamples", `Estimate.na_reason`) is written
where the point would be.

- `points`: one row per label (the texts of the chart's `label` columns, in table order), each
  figure a dot with its 95% interval as a line through it; one panel per `values` column (every
  figure column when none is named), or per text of the `panel` column; every panel on one value
  axis (a chart compares figures of one scale), `limits` where the chart gives them.
- `lines`: the `x` column's texts along the x axis in table order, one line per label, each point
  with its interval as a bar and the lines' intervals as bands.
- `facet`: one SVG per distinct text of the facet columns; `reference`: a dashed line at that value;
  `band`: a shaded range.

Titles and axis labels in English and Chinese (the chart's pairs); a panel named by a dimension
(its key, paper name or Table 4's short name) also carries its Chinese name (`Dimension.zh`).

The SVG: deterministic (a fixed `svg.hashsalt`, no date), text kept as text (`svg.fonttype: none`:
the browser draws it with the page's fonts, Chinese included), no size but its viewBox (it scales
to its box; `style` says how wide it may grow, its natural size, and how narrow before its text would
fall under `MIN_TEXT_PX`, so a narrow screen scrolls it rather than shrinking it). Each point is a
`<g class="point">` carrying its numbers (`data-value`, `data-low`, `data-high`, `data-n`), where it
comes from (`data-row`: the table row, from 0, as in the table's CSV; `data-label`, `data-column`,
`data-panel`, `data-x`) and which screen axis holds its value (`data-axis`), with a `<title>`
tooltip saying the cell's text; an n/a gap is a `<g class="na">` with the same keys. Every id is
prefixed (`chart_svgs`'s `prefix`, then the facet), so several SVGs inline on one page never share
one. Each table's drawing is made once per process (`_rendered`, cached by the table), whatever
prefix each page gives it.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import re
import secrets
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from esc.reports.chart_spec import Chart
from esc.reports.charts import pyplot
from esc.reports.result import Cell, Table
from esc.scoring.rubrics import dimensions

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
#: how matplotlib writes every chart: text as text, ids from a fixed salt (the same SVG each time),
#: "-" for a minus (what the CSV and the tables write), a "$" in a name drawn, not read as maths
RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "esc-table-chart",
    "axes.unicode_minus": False,
    "text.parse_math": False,
    "font.size": 9,
}
MIN_TEXT_PX = 8.5  # the smallest text a chart is drawn at on screen: narrower than that, its box scrolls
PX_PER_PT = 4 / 3  # matplotlib's SVG is in points; CSS pixels are 3/4 of a point
COLOR = "#2f5fb3"  # the site's accent (static/site.css)
MUTED = "#5f6b76"
#: how an n/a's words are written where its point would be
NA_STYLE = {"ha": "center", "va": "center", "fontsize": 8, "color": MUTED, "style": "italic"}
MAX_PANELS_ACROSS = 4
MAX_NA = 36  # characters of an n/a's words drawn in a panel; a longer reason is in its tooltip only
MAX_LABEL = 42  # characters of a row's label on the axis; the tooltip has it whole
#: stands for the prefix in the cached SVG (`_rendered`), replaced by `chart_svgs`: random, so no
#: text in a table can hold it
TOKEN = f"q{secrets.token_hex(6)}-"


@dataclasses.dataclass(frozen=True)
class Point:
    """One figure of the chart: its table row, what names it, where it is drawn, and its cell."""

    row: int
    label: str  # the texts of the label columns, " · " between
    panel: str
    column: str
    cell: Cell
    x: str = ""  # kind "lines": the x column's text


def chart_svgs(table: Table, prefix: str = "chart-") -> list[str]:
    """The SVGs of `table`'s chart (one per facet; none without a chart), every id starting with
    `prefix` (then "f<facet>-"): give two tables on one page two prefixes."""
    if table.chart is None:
        return []
    return [svg.replace(TOKEN, prefix) for svg in _rendered(table)]


@functools.lru_cache(maxsize=128)
def _rendered(table: Table) -> tuple[str, ...]:
    """The chart's SVGs with `TOKEN` for the prefix: drawn once per table, however many pages show
    it (the overview and its report's page)."""
    chart = table.chart
    assert chart is not None
    facets = points_of(table, chart)
    x_texts = list(dict.fromkeys(p.x for ps in facets.values() for p in ps)) if chart.kind == "lines" else []
    svgs = []
    for i, (facet, points) in enumerate(facets.items()):
        drawn = (
            _draw_lines(chart, points, x_texts, facet)
            if chart.kind == "lines"
            else _draw_points(chart, points, facet)
        )
        svgs.append(_finish(*drawn, f"{TOKEN}f{i}-", _title(chart, facet)))
    return tuple(svgs)


def figure_columns(table: Table, chart: Chart) -> tuple[str, ...]:
    """The columns a chart draws: its `values`, else every column holding a figure that the chart
    does not name as a label, panel, facet or x."""
    if chart.values:
        return chart.values
    named = {*chart.label, *chart.facet, chart.panel, chart.x}
    return tuple(
        c
        for i, c in enumerate(table.columns)
        if c not in named and any(row[i].estimate is not None for row in table.rows)
    )


def points_of(table: Table, chart: Chart) -> dict[str, list[Point]]:
    """The chart's points by facet (its columns' texts, " · " between; "" without facets), in
    table order: a point per row and drawn column."""
    at = {c: i for i, c in enumerate(table.columns)}
    columns = figure_columns(table, chart)
    facets: dict[str, list[Point]] = {}
    for r, row in enumerate(table.rows):
        facet = " · ".join(row[at[c]].text for c in chart.facet)
        label = " · ".join(row[at[c]].text for c in chart.label)
        for column in columns:
            panel = [row[at[chart.panel]].text] if chart.panel else []
            if len(columns) > 1 or not panel:
                panel.append(column)
            point = Point(
                r, label, " · ".join(panel), column, row[at[column]], row[at[chart.x]].text if chart.x else ""
            )
            facets.setdefault(facet, []).append(point)
    return facets


def panel_title(name: str) -> str:
    """A panel's title: a dimension's name (key, paper name or short name) with its Chinese name."""
    wanted = name.strip().lower()
    for d in dimensions():
        if wanted in {d.key, d.paper_name.lower(), d.short.lower()}:
            return f"{name} {d.zh}"
    return name


def _title(chart: Chart, facet: str) -> str:
    en, zh = chart.title
    en = f"{en} ({facet})" if en and facet else en or facet
    return "\n".join(t for t in (en, zh) if t)


def _axis(chart: Chart) -> str:
    return " / ".join(t for t in chart.axis if t)


def _short(label: str) -> str:
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "\u2026"


def _limits(chart: Chart, points: Sequence[Point]) -> tuple[float, float]:
    """The value axis: the chart's `limits`, else the points, intervals, reference and band, padded."""
    if chart.limits is not None:
        return chart.limits
    xs = [x for p in points for x in (p.cell.value, p.cell.low, p.cell.high) if x is not None]
    xs += [chart.reference] if chart.reference is not None else []
    xs += list(chart.band or ())
    if not xs:
        return (0.0, 1.0)
    low, high = min(xs), max(xs)
    pad = (high - low) * 0.06 or max(abs(low), 1.0) * 0.1
    return (low - pad, high + pad)


def _guides(ax: Any, chart: Chart, k: int, vertical: bool) -> None:
    """Panel `k`'s tolerance band (`chart.band`, shaded) and reference line (`chart.reference`,
    dashed), across the value axis: the x axis of a points chart, the y axis of a lines chart."""
    span, line = (ax.axhspan, ax.axhline) if vertical else (ax.axvspan, ax.axvline)
    if chart.band is not None:
        span(*chart.band, color="#f2b134", alpha=0.18, linewidth=0, gid=f"esc-band-{k}")
    if chart.reference is not None:
        line(chart.reference, color=MUTED, linewidth=0.9, linestyle="--", gid=f"esc-ref-{k}")


def _na_text(cell: Cell) -> str:
    """What an n/a figure says where its point would be: with its reason where that fits a panel
    (`MAX_NA`), else "n/a" alone (the reason is in its tooltip, `_tooltip`)."""
    if cell.estimate is not None:
        said = "n/a: " + cell.estimate.na_reason()
        return said if len(said) <= MAX_NA else "n/a"
    return cell.text


def _tooltip(point: Point) -> str:
    where = " · ".join(t for t in (point.label, point.x, point.panel) if t)
    note = point.cell.note
    said = f"{where}: {point.cell.text}"
    return f"{said} ({note})" if note and note not in point.cell.text else said


def _attributes(point: Point, axis: str) -> dict[str, str]:
    """The data a point (or its gap) carries: its numbers as `Cell` publishes them, and its place."""
    c = point.cell
    out = {"data-row": str(point.row), "data-label": point.label, "data-column": point.column,
           "data-panel": point.panel, "data-axis": axis}  # fmt: skip
    if point.x:
        out["data-x"] = point.x
    for name, x in (("value", c.value), ("low", c.low), ("high", c.high)):
        if x is not None and math.isfinite(x):
            out[f"data-{name}"] = repr(float(x))
    if c.n is not None:
        out["data-n"] = str(int(c.n))
    return out


Marks = dict[str, tuple[str, dict[str, str], str]]  # gid -> (class, data attributes, tooltip)


def _draw_points(chart: Chart, points: Sequence[Point], facet: str) -> tuple[Any, Marks]:
    plt = pyplot()
    panels = list(dict.fromkeys(p.panel for p in points))
    labels = list(dict.fromkeys(p.label for p in points))
    across = min(len(panels), MAX_PANELS_ACROSS)
    down = math.ceil(len(panels) / across)
    label_width = min(3.2, 0.4 + 0.068 * max(len(_short(x)) for x in labels))
    width = label_width + max(2.3, 5.0 / across) * across  # inches; a panel at least 2.3 wide
    height = 0.6 + (0.75 + 0.27 * len(labels)) * down + 0.25 * bool(_title(chart, facet))
    with plt.rc_context(RC):
        fig, axes = plt.subplots(
            down,
            across,
            squeeze=False,
            sharex=True,
            sharey=True,
            layout="constrained",
            figsize=(width, height),
        )
        limits = _limits(chart, points)
        marks: Marks = {}
        for k, ax in enumerate(axes.flat):
            if k >= len(panels):
                ax.set_visible(False)
                continue
            if len(panels) > 1:  # one panel: the chart's title and axis say what it shows
                ax.set_title(panel_title(panels[k]), fontsize=9)
            ax.set_xlim(*limits)
            ax.grid(axis="x", color="#e5e8eb", linewidth=0.8)
            ax.set_axisbelow(True)
            ax.tick_params(labelbottom=True, labelsize=8.5)
            _guides(ax, chart, k, vertical=False)
        for j, p in enumerate(points):
            ax = axes.flat[panels.index(p.panel)]
            y = labels.index(p.label)
            gid = f"esc-p{j}"
            c = p.cell
            if c.value is None:
                said = _na_text(c)
                if said:
                    ax.text(sum(limits) / 2, y, said, gid=gid, **NA_STYLE)
                    marks[gid] = ("na", _attributes(p, "x"), _tooltip(p))
                continue
            _plot_point(ax, c, y, gid, COLOR, vertical=False)
            marks[gid] = ("point", _attributes(p, "x"), _tooltip(p))
        axes[0][0].set_yticks(range(len(labels)), [_short(x) for x in labels])
        axes[0][0].set_ylim(len(labels) - 0.5, -0.5)
        for row in axes:
            row[0].tick_params(labelleft=True, labelsize=8.5)
        _titles(fig, chart, facet)
    return fig, marks


def _draw_lines(
    chart: Chart, points: Sequence[Point], x_texts: Sequence[str], facet: str
) -> tuple[Any, Marks]:
    plt = pyplot()
    panels = list(dict.fromkeys(p.panel for p in points))
    labels = list(dict.fromkeys(p.label for p in points))
    across = min(len(panels), 2)
    down = math.ceil(len(panels) / across)
    with plt.rc_context(RC):
        width = 1.5 + max(4.0, 0.45 * len(x_texts)) * across
        height = 0.9 + 3.0 * down + 0.1 * len(labels)  # the legend's rows below
        fig, axes = plt.subplots(
            down, across, squeeze=False, sharey=True, layout="constrained", figsize=(width, height)
        )
        limits = _limits(chart, points)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        marks: Marks = {}
        for k, ax in enumerate(axes.flat):
            if k >= len(panels):
                ax.set_visible(False)
                continue
            if len(panels) > 1:
                ax.set_title(panel_title(panels[k]), fontsize=9)
            ax.set_ylim(*limits)
            ax.set_xlim(-0.5, len(x_texts) - 0.5)
            ax.set_xticks(range(len(x_texts)), x_texts)
            ax.set_xlabel(chart.x or "")
            ax.grid(axis="y", color="#e5e8eb", linewidth=0.8)
            ax.set_axisbelow(True)
            ax.tick_params(labelleft=True, labelsize=8.5)
            _guides(ax, chart, k, vertical=True)
        j = 0
        for n, label in enumerate(labels):
            color = colors[n % len(colors)]
            dodge = (n - (len(labels) - 1) / 2) * min(0.08, 0.5 / len(labels))  # intervals side by side
            for k, panel in enumerate(panels):
                ax = axes.flat[k]
                mine = [p for p in points if p.label == label and p.panel == panel]
                drawn = [(x_texts.index(p.x) + dodge, p.cell) for p in mine if p.cell.value is not None]
                if drawn:
                    ax.plot([x for x, _ in drawn], [c.value for _, c in drawn], color=color, linewidth=1.6,
                            label=_short(label) if k == 0 else None, gid=f"esc-l{n}-{k}")  # fmt: skip
                    banded = [(x, c) for x, c in drawn if c.low is not None and c.high is not None]
                    if len(banded) > 1:
                        xs, lows, highs = zip(*((x, c.low, c.high) for x, c in banded), strict=True)
                        ax.fill_between(xs, lows, highs, color=color, alpha=0.12, linewidth=0)
                for p in mine:
                    gid, x, c = f"esc-p{j}", x_texts.index(p.x) + dodge, p.cell
                    j += 1
                    if c.value is None:
                        said = _na_text(c)
                        if said:
                            ax.text(x, sum(limits) / 2, said, rotation=90, gid=gid, **NA_STYLE)
                            marks[gid] = ("na", _attributes(p, "y"), _tooltip(p))
                        continue
                    _plot_point(ax, c, x, gid, color, vertical=True)
                    marks[gid] = ("point", _attributes(p, "y"), _tooltip(p))
        if len(labels) > 1:
            fig.legend(loc="outside lower center", ncols=min(len(labels), 4), fontsize=8.5, frameon=False)
        _titles(fig, chart, facet, axis_on_y=True)
    return fig, marks


def _plot_point(ax: Any, c: Cell, at: float, gid: str, color: str, vertical: bool) -> None:
    """A figure as one artist (one element of the SVG): its interval a line with its value a dot on
    it, or the dot alone where it has no interval; `at`: its place across the value axis."""
    interval = c.low is not None and c.high is not None
    values = [c.low, c.value, c.high] if interval else [c.value]
    places = [at] * len(values)
    ax.plot(
        *((places, values) if vertical else (values, places)), color=color, linewidth=1.6, marker="o",
        markersize=5, markevery=[1] if interval else None, linestyle="-" if interval else "none", gid=gid,
    )  # fmt: skip


def _titles(fig: Any, chart: Chart, facet: str, axis_on_y: bool = False) -> None:
    title = _title(chart, facet)
    if title:
        fig.suptitle(title, fontsize=10)
    axis = _axis(chart)
    if axis:
        (fig.supylabel if axis_on_y else fig.supxlabel)("\n".join(textwrap.wrap(axis, 70)), fontsize=9)


def _finish(fig: Any, marks: Marks, prefix: str, title: str) -> str:
    """The figure as SVG text, ids prefixed, each mark classed with its data and tooltip, sized by
    its viewBox (see the module's docstring)."""
    plt = pyplot()
    buffer = io.StringIO()
    try:
        with plt.rc_context(RC):
            fig.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    finally:
        plt.close(fig)
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    root = ET.fromstring(buffer.getvalue())  # the XML declaration and doctype are read and dropped
    for meta in root.findall(f"{{{SVG_NS}}}metadata"):
        root.remove(meta)
    renamed = {}
    for el in root.iter():
        if "id" in el.attrib:
            renamed[el.attrib["id"]] = prefix + el.attrib["id"]
            el.attrib["id"] = renamed[el.attrib["id"]]
    reference = re.compile(r"url\(#([^)]+)\)")
    href = f"{{{XLINK_NS}}}href"
    for el in root.iter():
        for key, value in el.attrib.items():
            if key in (href, "href") and value.startswith("#") and value[1:] in renamed:
                el.attrib[key] = "#" + renamed[value[1:]]
            elif "url(#" in value:
                el.attrib[key] = reference.sub(lambda m: f"url(#{renamed.get(m[1], m[1])})", value)
    for gid, (kind, data, tooltip) in marks.items():
        el = root.find(f".//*[@id='{prefix}{gid}']")
        if el is None:  # matplotlib drew nothing for it
            continue
        el.attrib.update({"class": kind, **data})
        said = ET.Element(f"{{{SVG_NS}}}title")
        said.text = tooltip
        el.insert(0, said)
    sizes = [float(m.group(1)) for el in root.iter(f"{{{SVG_NS}}}text")
             for m in [re.search(r"font-size:\s*([\d.]+)px", el.attrib.get("style", ""))] if m]  # fmt: skip
    width = float(root.attrib["viewBox"].split()[2])
    natural = width * PX_PER_PT
    narrowest = min(natural, width * MIN_TEXT_PX / min(sizes)) if sizes else natural
    for key in ("width", "height"):
        root.attrib.pop(key, None)
    root.attrib.update(
        {
            "class": "table-chart",
            "role": "img",
            "aria-label": " ".join(title.split("\n")) or "chart",
            "style": f"max-width: {natural:.0f}px; min-width: {narrowest:.0f}px",
        }
    )
    return ET.tostring(root, encoding="unicode")
