"""The one renderer of a table's chart (`esc.reports.table_chart`): the points drawn are the cells'
figures (read back from where the SVG puts them against its own axis ticks), an n/a figure is a
labelled gap, facets are SVGs of their own, ids never collide, the SVG is the same each time, and
the titles are in English and Chinese; the site puts the chart before its table."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from esc.reports import table_chart
from esc.reports.chart_spec import Chart
from esc.reports.estimate import Estimate
from esc.reports.result import Cell, Report, Table, Text
from esc.reports.table_chart import chart_svgs
from esc.scoring.rubrics import dimension
from esc.site.result_html import result_html
from esc.tasks.stress import card
from esc.tasks.stress.report import report_blocks

NS = {"svg": table_chart.SVG_NS}
HREF = f"{{{table_chart.XLINK_NS}}}href"


def _cell(value: float | None, low: float | None = None, high: float | None = None, **kw) -> Cell:
    e = Estimate(value, low, high, kw.pop("n", 4), "role card", **kw)
    return Cell("n/a" if e.shown()[0] is None else f"{value:.2f}", e)


def board(targets=("alpha", "beta", "gamma"), languages=("en",)) -> Table:
    """A Table 2 of a few targets: Average and two dimensions, known figures, one of them n/a."""
    rows = []
    for language in languages:
        for i, target in enumerate(targets):
            v = 20.0 + 15 * i + (5 if language == "zh" else 0)
            empathy = (
                _cell(None, note="no valid Empathy judgment: all 4 invalid")
                if target == "gamma"
                else _cell(v + 10, v + 2, v + 19)
            )
            rows.append([language, target, _cell(v, v - 6, v + 7), empathy, _cell(v - 3, v - 9, v + 1)])
    return Table.of(
        ["Lang", "Target", "Average", "Empathy", "Fluency"],
        rows,
        csv="board.csv",
        chart=Chart(
            label=("Target",),
            facet=("Lang",),
            limits=(0.0, 100.0),
            title=("Scores with 95% intervals", "得分及其 95% 区间"),
            axis=("score (0-100)", "得分 (0-100)"),
        ),
    )


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def _axes_of(root: ET.Element) -> dict[ET.Element, ET.Element]:
    """Each element's axes group (matplotlib's `<g id="...axes_N">`)."""
    found = {}
    for axes in root.iter(f"{{{table_chart.SVG_NS}}}g"):
        if re.search(r"axes_\d+$", axes.get("id", "")):
            for el in axes.iter():
                found[el] = axes
    return found


def _scale(axes: ET.Element, axis: str) -> tuple[float, float]:
    """(slope, intercept) from SVG coordinates to values along `axis`, fitted on the axes' ticks:
    each tick mark's position and its label's number."""
    positions, values = [], []
    for tick in axes.iter(f"{{{table_chart.SVG_NS}}}g"):
        if re.search(rf"{axis}tick_\d+$", tick.get("id", "")):
            mark = tick.find(".//svg:use", NS)
            text = tick.find(".//svg:text", NS)
            if mark is not None and text is not None and text.text:
                positions.append(float(mark.get(axis)))
                values.append(float(text.text))
    assert len(positions) >= 2, "an axis with fewer than two labelled ticks"
    slope, intercept = np.polyfit(positions, values, 1)
    return slope, intercept


def drawn(svg: str) -> list[dict[str, float | str]]:
    """Every point of an SVG as drawn: its data, and its value, low and high read back from the
    position of its marker and the ends of its interval against its axes' ticks."""
    root = parse(svg)
    axes_of = _axes_of(root)
    out = []
    for g in root.iterfind(".//svg:g[@class='point']", NS):
        axis = g.get("data-axis")
        slope, intercept = _scale(axes_of[g], axis)
        marker = g.find(".//svg:use", NS)
        at = {k: float(v) for k, v in g.attrib.items() if k in ("data-value", "data-low", "data-high")}
        point = {**g.attrib, **at, "drawn": slope * float(marker.get(axis)) + intercept}
        path = g.find("svg:path", NS)
        if path is not None:
            numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", path.get("d"))]
            ends = numbers[0::2] if axis == "x" else numbers[1::2]
            point["drawn_low"], point["drawn_high"] = sorted(slope * e + intercept for e in ends[::2][:2])
        out.append(point)
    return out


def test_the_points_drawn_are_the_cells_figures() -> None:
    table = board()
    (svg,) = chart_svgs(table)
    points = drawn(svg)
    cells = {(r, c): row[table.columns.index(c)] for r, row in enumerate(table.rows) for c in table.columns}
    assert len(points) == 8  # 3 targets x 3 columns, less gamma's n/a Empathy
    for p in points:
        c = cells[(int(p["data-row"]), p["data-column"])]
        assert p["data-value"] == c.value and p["data-low"] == c.low and p["data-high"] == c.high
        assert p["data-n"] == "4" and p["data-label"] == table.rows[int(p["data-row"])][1].text
        assert p["drawn"] == pytest.approx(c.value, abs=0.01)  # where it is drawn, on its axis
        assert (p["drawn_low"], p["drawn_high"]) == pytest.approx((c.low, c.high), abs=0.01)
    root = parse(svg)
    titles = [g.find("svg:title", NS).text for g in root.iterfind(".//svg:g[@class='point']", NS)]
    assert "beta · Empathy: 45.00" in titles  # the tooltip: the row, the panel and the cell's text


def test_a_figure_without_an_interval_is_a_point_alone_and_an_na_figure_a_labelled_gap() -> None:
    unstable = Estimate(30.0, 20.0, 40.0, 5, "role card", undefined=0.38)  # n/a: undefined in 38%
    table = Table.of(
        ["Target", "Average"],
        [["a", _cell(12.0)], ["b", Cell("n/a (undefined in 38.0% of resamples)", unstable)], ["c", "-"]],
        chart=Chart(label=("Target",)),
    )
    root = parse(chart_svgs(table)[0])
    points = root.findall(".//svg:g[@class='point']", NS)
    assert [p.get("data-label") for p in points] == ["a"]
    assert "data-low" not in points[0].attrib and points[0].find("svg:path", NS) is None  # no interval
    gaps = {g.get("data-label"): g for g in root.iterfind(".//svg:g[@class='na']", NS)}
    assert set(gaps) == {"b", "c"}  # a cell without a figure says what it says
    assert gaps["b"].find(".//svg:text", NS).text == "n/a: undefined in 38% of resamples"
    assert "data-value" not in gaps["b"].attrib  # what the table shows as n/a is no number here
    assert gaps["c"].find(".//svg:text", NS).text == "-"


def test_one_svg_per_facet_each_with_its_own_rows() -> None:
    table = board(languages=("en", "zh"))
    en, zh = chart_svgs(table)
    assert {int(p["data-row"]) for p in drawn(en)} == {0, 1, 2}
    assert {int(p["data-row"]) for p in drawn(zh)} == {3, 4, 5}
    texts = [t.text for t in parse(zh).iter(f"{{{table_chart.SVG_NS}}}text")]
    assert "Scores with 95% intervals (zh)" in texts  # the facet's key in its title


def test_titles_axis_and_dimension_panels_are_in_english_and_chinese_as_text() -> None:
    (svg,) = chart_svgs(board())
    texts = [t.text for t in parse(svg).iter(f"{{{table_chart.SVG_NS}}}text")]
    assert "得分及其 95% 区间" in texts and "score (0-100) / 得分 (0-100)" in texts
    assert f"Empathy {dimension('empathy').zh}" in texts and f"Fluency {dimension('fluency').zh}" in texts
    assert "Average" in texts  # not a dimension: its name only
    # Table 4's short names and the keys are dimensions too
    assert table_chart.panel_title("Empa.") == table_chart.panel_title("empathy").replace("empathy", "Empa.")


def test_ids_are_prefixed_unique_across_charts_and_every_reference_resolves() -> None:
    svgs = [*chart_svgs(board(languages=("en", "zh")), "t1-"), *chart_svgs(board(("x", "y")), "t2-")]
    seen: list[str] = []
    for svg, prefix in zip(svgs, ("t1-f0-", "t1-f1-", "t2-f0-"), strict=True):
        root = parse(svg)
        ids = [el.get("id") for el in root.iter() if el.get("id")]
        assert ids and all(i.startswith(prefix) for i in ids)
        references = [el.get(HREF)[1:] for el in root.iter() if el.get(HREF)]
        references += [
            m for el in root.iter() for v in el.attrib.values() for m in re.findall(r"url\(#([^)]+)\)", v)
        ]
        assert references and set(references) <= set(ids)  # markers and clip paths are the SVG's own
        seen += ids
    assert len(seen) == len(set(seen))


def test_the_svg_is_the_same_each_time_and_drawn_once_per_table() -> None:
    table = board()
    first = chart_svgs(table, "a-")
    table_chart._rendered.cache_clear()
    again = chart_svgs(table, "a-")
    assert first == again  # drawn anew: no date, no random id
    assert chart_svgs(table, "b-") == [s.replace('id="a-', 'id="b-').replace("#a-", "#b-") for s in first]
    assert table_chart._rendered.cache_info().misses == 1  # the second prefix reused the drawing
    assert "<metadata" not in first[0] and 'width="' not in first[0].split(">", 1)[0]  # scales by its viewBox


def test_text_from_a_table_is_text_in_the_svg() -> None:
    table = Table.of(
        ["Target", "Average"],
        [["<script>alert(1)</script> $x$", _cell(3.0, 2.0, 4.0)]],
        chart=Chart(label=("Target",)),
    )
    svg = chart_svgs(table)[0]
    assert "<script" not in svg and "&lt;script&gt;" in svg
    texts = [t.text for t in parse(svg).iter(f"{{{table_chart.SVG_NS}}}text")]
    assert "<script>alert(1)</script> $x$" in texts  # drawn as written, not read as maths


def test_lines_put_each_label_s_points_along_the_x_texts() -> None:
    rows = [["a", str(x), _cell(40.0 + 5 * x, 35.0 + 5 * x, 46.0 + 5 * x)] for x in range(4)] + [
        ["b", str(x), _cell(60.0 - 4 * x, 50.0 - 4 * x, 70.0 - 4 * x)] for x in range(3)
    ]
    table = Table.of(
        ["target", "exchange", "mean emotion"],
        rows,
        chart=Chart(kind="lines", label=("target",), x="exchange", values=("mean emotion",), limits=(0, 100)),
    )
    points = drawn(chart_svgs(table)[0])
    assert [(p["data-label"], p["data-x"]) for p in points] == [(r[0], r[1]) for r in rows]
    for p, row in zip(points, table.rows, strict=True):
        assert p["drawn"] == pytest.approx(row[2].value, abs=0.01)
        assert (p["drawn_low"], p["drawn_high"]) == pytest.approx((row[2].low, row[2].high), abs=0.01)


def _line(judge: str, perturbation: str, key: str, value: float) -> card.Line:
    change = Estimate(value, value - 0.2, value + 0.2, 6, "role card")
    return card.Line(judge, perturbation, "neutral", key, 0, change, Estimate(0.5, n=6), "undecided", 0, 6)


def test_the_stress_card_draws_changes_by_dimension_with_the_tolerance_band() -> None:
    lines = [
        _line(judge, p, key, v)
        for judge in ("j1", "j2")
        for p, v in (("typos", -0.1), ("reorder", 0.4))
        for key in ("empathy", "fluency")
    ]
    (table, *_) = [b for b in report_blocks(lines, [], 0.3, 100) if isinstance(b, Table)]
    assert table.chart is not None and table.chart.label == ("Judge", "Perturbation")  # two judges
    root = parse(chart_svgs(table)[0])
    assert {p.get("data-panel") for p in root.iterfind(".//svg:g[@class='point']", NS)} == {
        "Empathy",
        "Fluency",
    }
    axes_of = _axes_of(root)
    band = next(
        g for g in root.iter(f"{{{table_chart.SVG_NS}}}g") if re.search(r"esc-band-0$", g.get("id", ""))
    )
    slope, intercept = _scale(axes_of[band], "x")
    xs = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", band.find("svg:path", NS).get("d"))[0::2]]
    assert sorted({round(slope * x + intercept, 3) for x in xs}) == [-0.3, 0.3]


def test_the_site_draws_a_chart_before_its_table_and_links_to_it() -> None:
    plain = Table.of(["Target", "Average"], [["a", _cell(3.0, 2.0, 4.0)]])
    html = str(result_html(Report("toy", (Text("two tables"), board(), plain)), anchor="r-"))
    assert html.count('<figure class="chart"') == 1  # the plain table has none
    figure_at, table_at = (
        html.index('<figure class="chart" data-table="r-t1"'),
        html.index('<table class="sortable results" id="r-t1">'),
    )
    assert figure_at < table_at < html.index('id="r-t2"')
    figure = html[figure_at:table_at]
    assert 'href="#r-t1"' in figure and 'data-csv="board.csv"' in figure and 'id="r-t1-f0-' in figure
    assert "得分及其 95% 区间" in figure


def test_a_chart_read_back_refuses_nan_and_infinity() -> None:
    """A result JSON's chart with NaN or Infinity (which Python's json reads) is not one this repo wrote."""
    from esc.reports.chart_spec import Chart

    assert Chart.from_json({"label": ["a"], "reference": 0, "band": [-0.25, 0.25]}).band == (-0.25, 0.25)
    for bad in ({"reference": float("nan")}, {"band": [0.0, float("inf")]}, {"limits": [True, 1]}):
        with pytest.raises(ValueError):
            Chart.from_json({"label": ["a"], **bad})
