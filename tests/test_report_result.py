"""Reports as typed results (`esc.reports.result`): one writer for markdown, JSON and CSV, and the
site's pages built from the JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from esc.reports.estimate import Estimate
from esc.reports.result import (
    RESULT_FORMAT,
    Cell,
    Heading,
    Report,
    Table,
    Text,
    read_result,
    result_path,
    table_csv,
    write_result,
)
from esc.site.result_html import result_html

REPORT = Report(
    "toy",
    (
        Heading("Toy report", level=1),
        Text("Flag rate with a 95% interval; (flagged/valid)."),
        Table.of(
            ["", "target", "rate"],
            [
                ["a", "t|1", Cell("12.5% [0.0%, 30.0%] (1/8)", Estimate(0.125, 0.0, 0.3, 8, "role card"))],
                [
                    "b",
                    "t2",
                    Cell(
                        "n/a (undefined in 40% of resamples)",
                        Estimate(math.nan, math.nan, math.nan, 3, undefined=0.4, note="unstable"),
                    ),
                ],
            ],
            csv="toy.csv",
        ),
        Heading("Notes"),
        Text("- one\n- two"),
    ),
)


def test_markdown_is_the_blocks_a_blank_line_apart() -> None:
    assert REPORT.to_markdown() == (
        "# Toy report\n\n"
        "Flag rate with a 95% interval; (flagged/valid).\n\n"
        "| | target | rate |\n"  # an unnamed column is "| |"
        "|---|---|---|\n"
        "| a | t\\|1 | 12.5% [0.0%, 30.0%] (1/8) |\n"  # a | in a cell is escaped, not a new column
        "| b | t2 | n/a (undefined in 40% of resamples) |\n\n"
        "## Notes\n\n"
        "- one\n- two\n"
    )


def test_the_json_round_trips_and_keeps_the_undefined_share(tmp_path: Path) -> None:
    markdown = write_result(tmp_path, REPORT)
    assert (tmp_path / "toy.md").read_text(encoding="utf-8") == markdown == REPORT.to_markdown()
    data = json.loads(result_path(tmp_path, "toy").read_text(encoding="utf-8"))  # strict JSON: no NaN
    assert data["format"] == RESULT_FORMAT and data["kind"] == "toy"
    table = data["blocks"][2]
    assert table["rows"][0][2] == {
        "text": "12.5% [0.0%, 30.0%] (1/8)",
        "value": 0.125,
        "low": 0.0,
        "high": 0.3,
        "n": 8,
        "unit": "role card",
    }
    unstable = {"text": "n/a (undefined in 40% of resamples)", "n": 3, "undefined": 0.4, "note": "unstable"}
    assert table["rows"][1][2] == unstable  # no value (NaN is no JSON), but the share that made it n/a
    again = read_result(result_path(tmp_path, "toy"))
    assert again.estimates()[1].unstable  # read back, the figure still says it is unstable
    assert again.to_markdown() == markdown
    assert again.estimates()[0] == REPORT.estimates()[0]  # the figure read back, its unit too
    assert (tmp_path / "toy.csv").read_text(encoding="utf-8") == table_csv(REPORT.tables()[0])


def test_csv_gives_a_figure_column_its_numbers() -> None:
    lines = table_csv(REPORT.tables()[0]).splitlines()
    assert lines[0] == ",target,rate,rate value,rate low,rate high,rate n"
    assert lines[1] == 'a,t|1,"12.5% [0.0%, 30.0%] (1/8)",0.125,0.0,0.3,8'
    assert lines[2] == "b,t2,n/a (undefined in 40% of resamples),,,,3"


def test_a_ragged_row_and_a_foreign_file_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="row 0 has 1 cells for 2 columns"):
        Table.of(["a", "b"], [["x"]])
    (tmp_path / "x.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a report result"):
        read_result(tmp_path / "x.json")


def test_the_page_carries_the_figures_and_escapes_the_text() -> None:
    report = REPORT + [Text("<script>alert(1)</script>"), Table.of(["x"], [["<b>"]])]
    html = str(result_html(report))
    assert '<td data-value="0.125" data-low="0" data-high="0.3" data-n="8" class="num">' in html
    assert '<td data-n="3" title="unstable" data-sort="">n/a (undefined in 40% of resamples)</td>' in html
    assert "<h1>Toy report</h1>" in html and "<li>two</li>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html and "<td>&lt;b&gt;</td>" in html
    assert "<td>t|1</td>" in html  # the page shows the text itself, not markdown's escape


def test_a_header_with_a_bar_stays_one_column() -> None:
    table = Table.of(["tiny vs a|b", "n"], [["0.5", 3]])
    assert Report("x", (table,)).to_markdown() == "| tiny vs a\\|b | n |\n|---|---|\n| 0.5 | 3 |\n"


def test_every_figure_is_placed_by_its_table_row_and_column() -> None:
    """The run log's `results`: each figure with the table it is in (its name, else the heading above
    it, else its number) and the row labels left of the first figure column."""
    from esc.reports.result import figure

    report = REPORT + [
        Table.of(
            ["judge", "alpha", "n"], [["a", figure("0.50", 0.5, n=4), 4], ["b", "n/a", 2]], name="alpha"
        ),
        Text("no heading for the next one"),
    ]
    report = Report("toy", (Table.of(["x", "y"], [["1", figure("2", 2.0)]]), *report.blocks))
    placed = report.estimates()
    assert [(e.table, dict(e.keys), e.value) for e in placed][:1] == [
        ("toy/table 1", {"x": "1", "column": "y"}, 2.0)
    ]
    first, second = placed[1], placed[2]
    assert first.table == "toy/Toy report" and dict(first.keys) == {
        "row": "a",
        "target": "t|1",
        "column": "rate",
    }
    assert (first.value, first.low, first.high, first.n, first.unit) == (0.125, 0.0, 0.3, 8, "role card")
    assert (
        dict(second.keys) == {"row": "b", "target": "t2", "column": "rate"} and second.why_not() == "unstable"
    )
    named = placed[3]
    assert named.table == "toy/alpha" and dict(named.keys) == {"judge": "a", "column": "alpha"}
    assert len(placed) == 4  # a plain text or count is no figure
    assert named.to_json()["keys"] == {"judge": "a", "column": "alpha"}  # as the run log holds it


def test_a_figure_cell_says_how_often_its_statistic_was_undefined() -> None:
    from esc.reports.bootstrap import NO_INTERVAL, Interval
    from esc.reports.result import figure

    cell = figure("0.41 [0.10, 0.70]", 0.41, Interval(0.1, 0.7, 0.03), 30)
    assert (cell.low, cell.high, cell.n, cell.note) == (0.1, 0.7, 30, "undefined in 3% of resamples")
    # above 5% the figure reads n/a, and no view carries its value or interval (issue 62)
    unstable = figure("n/a (undefined in 12.0% of resamples)", 0.41, Interval(0.1, 0.7, 0.12), 30)
    assert (unstable.value, unstable.low, unstable.high, unstable.n) == (None, None, None, 30)
    assert unstable.note == "undefined in 12% of resamples"
    assert figure("0.41", 0.41, Interval(0.1, 0.7, 0.0)).note is None
    assert figure("n/a", None, NO_INTERVAL, 3, "one card").note == "one card"  # no resampling: its own note
