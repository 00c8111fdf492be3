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


@pytest.mark.parametrize(("better", "best"), [(True, ["0.75", "0.6"]), (False, ["0.5", "0.3"]), (None, [])])
def test_the_site_marks_each_groups_best_row_by_the_metrics_direction(
    better: bool | None, best: list
) -> None:
    m = Metric("test.dir", "x", better, None)
    rows = [[lang, t, Cell(str(v), estimate(v, metric=m))] for lang, t, v in
            [("en", "a", 0.5), ("en", "b", 0.75), ("zh", "a", 0.6), ("zh", "b", 0.3)]]  # fmt: skip

    def marked(table: Table) -> list[str]:
        html = table_html(table, {"test.dir": m})
        assert ("\u2191" in html, "\u2193" in html) == (better is True, better is False)  # the direction
        return [part.split('"')[0] for part in html.split('data-value="')[1:] if 'class="num best"' in part]

    assert marked(Table.of(["Lang", "t", "v"], rows, rank_within=["Lang"])) == best  # per language
    whole = marked(Table.of(["Lang", "t", "v"], rows, rank_within=[]))
    assert whole == ([] if better is None else ["0.75"] if better else ["0.3"])
    assert marked(Table.of(["Lang", "t", "v"], rows)) == []  # rows not declared comparable: none marked


def test_a_table_says_what_its_figures_resampled() -> None:
    one = Table.of(["t", "v"], [["a", figure("1", 1.0, unit="role card")], ["b", "n/a"]])
    both = Table.of(
        ["t", "v"], [["a", figure("1", 1.0, unit="role card")], ["b", figure("2", 2.0, unit="dialogue")]]
    )
    assert (one.resampled(), both.resampled()) == ("role card", "dialogue and role card")
    assert Table.of(["t"], [["a"]]).resampled() == ""
