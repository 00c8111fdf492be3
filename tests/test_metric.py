"""A metric is registered once with its direction and unit, and a figure's label comes from it."""

from __future__ import annotations

import pytest

from esc.reports.bootstrap import Interval, estimate
from esc.reports.metric import METRICS, Metric, checked_unit, definitions, metric
from esc.reports.result import Cell, Report, Table, figure
from esc.site.result_html import table_html


@pytest.fixture()
def share():
    m = metric("test.share", "share of yes", True, "role card", "%")
    yield m
    METRICS.remove("test.share")


def test_a_name_holds_one_definition(share: Metric) -> None:
    assert metric("test.share", "share of yes", True, "role card", "%") is not None  # the same again
    with pytest.raises(ValueError, match="registered twice"):
        metric("test.share", "share of yes", False, "role card", "%")  # the other direction
    assert definitions(["test.share", "test.share", "unknown"]) == {
        "test.share": {
            "aggregation": "share of yes",
            "higher_is_better": True,
            "unit": "role card",
            "scale": "%",
        }
    }


def test_a_figure_states_its_metric_and_cannot_claim_another_unit(share: Metric) -> None:
    e = estimate(0.5, Interval(0.25, 0.75, 0.0), 8, None, metric=share)
    assert (e.unit, e.metric) == ("role card", "test.share")  # the unit from the metric
    with pytest.raises(ValueError, match="resamples role cards, but this figure resampled dialogues"):
        estimate(0.5, Interval(0.25, 0.75, 0.0), 8, "dialogue", metric=share)
    assert checked_unit(Metric("x", "", None, None), "dialogue", "here") == "dialogue"  # the data decide


def test_a_tables_column_names_its_metric(share: Metric) -> None:
    rows = [["a", figure("50", 0.5, unit="role card")], ["b", figure("75", 0.75)], ["c", "n/a"]]
    table = Table.of(["target", "yes"], rows, metrics={"yes": share})
    placed = Report("toy", (table,)).estimates()
    assert [(e.metric, e.unit) for e in placed] == [("test.share", "role card")] * 2
    with pytest.raises(ValueError, match="columns the table does not have"):
        Table.of(["target", "yes"], rows, rank_within=["Lang"])
    with pytest.raises(ValueError, match="columns the table does not have"):
        Table.of(["target", "yes"], rows, metrics={"no": share})
    with pytest.raises(ValueError, match="this figure resampled dialogues"):
        Table.of(["target", "yes"], [["a", figure("50", 0.5, unit="dialogue")]], metrics={"yes": share})


@pytest.mark.parametrize(("better", "best"), [(True, ["0.75"]), (False, ["0.5"]), (None, [])])
def test_a_groups_best_is_marked_only_where_its_interval_overlaps_no_other(
    better: bool | None, best: list
) -> None:
    """`Table.of`'s default where no paired interval exists: per group of comparable rows, the best
    figure by the metric's direction, only where its interval overlaps no other figure's of the group
    (en: [0.4, 0.6] and [0.7, 0.8] are apart; zh: [0.5, 0.7] and [0.2, 0.65] overlap, so nothing)."""
    m = Metric("test.dir", "x", better, None)
    rows = [[lang, t, Cell(str(v), estimate(v, Interval(lo, hi, 0.0), metric=m))] for lang, t, v, lo, hi in
            [("en", "a", 0.5, 0.4, 0.6), ("en", "b", 0.75, 0.7, 0.8), ("zh", "a", 0.6, 0.5, 0.7),
             ("zh", "b", 0.3, 0.2, 0.65)]]  # fmt: skip

    def marked(table: Table) -> list[str]:
        html = table_html(table, {"test.dir": m})
        assert ("\u2191" in html, "\u2193" in html) == (better is True, better is False)  # the direction
        shown = [part.split('"')[0] for part in html.split('data-value="')[1:] if 'class="num best"' in part]
        assert shown == [c.text for row in table.rows for c in row if c.best]  # the site reads the mark
        return shown

    metrics = {"v": m}
    assert marked(Table.of(["Lang", "t", "v"], rows, metrics=metrics, rank_within=["Lang"])) == best
    whole = marked(Table.of(["Lang", "t", "v"], rows, metrics=metrics, rank_within=[]))
    assert whole == []  # over both languages 0.75 [0.7, 0.8] touches 0.6 [0.5, 0.7]; 0.3's reaches 0.5's
    assert marked(Table.of(["Lang", "t", "v"], rows, metrics=metrics)) == []  # rows not declared comparable
    no_intervals = [[lang, t, Cell(c.text, estimate(c.value, metric=m))] for lang, t, c in rows]
    assert marked(Table.of(["Lang", "t", "v"], no_intervals, metrics=metrics, rank_within=["Lang"])) == []


def test_the_reports_marks_are_what_every_view_shows() -> None:
    """A report that decided its best cells (`best=`) has them marked, whatever the intervals say: in
    bold in the markdown, as `"best": true` in the JSON (and read back), as class "best" on the site."""
    rows = [["a", figure("1.0 [0.0, 2.0]", 1.0, Interval(0.0, 2.0, 0.0))], ["b", figure("0.5", 0.5)]]
    table = Table.of(["t", "v"], rows, rank_within=[], best={(0, "v")})
    assert [[c.best for c in row] for row in table.rows] == [[False, True], [False, False]]
    assert "| a | **1.0 [0.0, 2.0]** |" in Report("toy", (table,)).to_markdown()
    assert "| b | 0.5 |" in Report("toy", (table,)).to_markdown()
    cells = Report("toy", (table,)).to_json()["blocks"][0]["rows"]
    assert cells[0][1]["best"] is True and "best" not in cells[1][1]
    from esc.reports.result import _block

    assert _block(Report("toy", (table,)).to_json()["blocks"][0]) == table  # read back as written
    assert table_html(table).count('class="num best"') == 1
    with pytest.raises(ValueError, match="columns the table does not have"):
        Table.of(["t", "v"], rows, best={(0, "w")})
    with pytest.raises(ValueError, match="best names row 5"):
        Table.of(["t", "v"], rows, best={(5, "v")})


def test_a_table_says_what_its_figures_resampled() -> None:
    one = Table.of(["t", "v"], [["a", figure("1", 1.0, unit="role card")], ["b", "n/a"]])
    both = Table.of(
        ["t", "v"], [["a", figure("1", 1.0, unit="role card")], ["b", figure("2", 2.0, unit="dialogue")]]
    )
    assert (one.resampled(), both.resampled()) == ("role card", "dialogue and role card")
    assert Table.of(["t"], [["a"]]).resampled() == ""
