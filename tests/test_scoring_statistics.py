"""Statistics that cannot mislead: undefined resamples make a figure n/a, the two correlation levels
follow the N inputs x M systems design, rows share their items, comparisons are paired intervals
resampled by the independent unit, and `Aver.` says which dimensions it covers. The expected values
are computed here independently (scipy on the raw arrays), not with the code under test."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from esc.reports.bootstrap import estimate, ratio_interval, unit_intervals
from esc.reports.estimate import MAX_UNDEFINED, format_estimate
from esc.reports.result import Report
from esc.tasks.agreement import report as agree
from esc.tasks.correlation import report as corr
from esc.tasks.correlation.task import CorrelationSettings, run_correlation


def degenerate() -> tuple[list[int], list[int]]:
    """120 items: the judge says "4" for all but one ("2"); people vary."""
    rng = np.random.default_rng(7)
    human = rng.integers(0, 5, 120).tolist()
    predicted = [4] * 120
    predicted[17] = 2
    return predicted, human


def test_one_informative_item_gives_n_a_not_a_conditional_interval() -> None:
    predicted, human = degenerate()
    assert not math.isnan(stats.spearmanr(predicted, human)[0])  # defined on the full sample...
    items = [agree.Item((f"d{i}", "overall"), h, f"d{i}") for i, h in enumerate(human)]
    rows = {"judge": {it.key: agree.Prediction(p) for it, p in zip(items, predicted, strict=True)}}
    tables = agree.agreement_tables(items, rows, n_resamples=1000, seed=0)
    row = agree.find_row(tables, "overall", "judge", "argmax")
    share = row.intervals["spearman"].undefined
    # ...but the one "2" is absent from a resample with probability (119/120)^120 = 36.6%
    assert share == pytest.approx((119 / 120) ** 120, abs=0.04) and share > MAX_UNDEFINED
    report = Report("agreement", tuple(agree.agreement_blocks(tables)))
    assert f"n/a (undefined in {share:.1%} of resamples)" in report.to_markdown()
    spearman = estimate(row.values["spearman"], row.intervals["spearman"])
    assert format_estimate(spearman).startswith("n/a (undefined")
    cell = {"Dim.": "Over.", "Judge": "judge", "reading": "argmax", "column": "Spearman"}
    [placed] = [e for e in report.estimates() if e.table == "agreement/all sources" and dict(e.keys) == cell]
    assert (
        placed.undefined == share
        and placed.unit == "dialogue"
        and placed.why_not() == f"undefined in {share:.0%} of resamples"
    )
    # the correlation module reports the same
    result = corr.correlate(predicted, human, n_resamples=1000, seed=0)
    assert corr._fmt(result, "spearman").startswith("n/a (undefined in ")


def test_undefined_share_is_counted_and_a_defined_statistic_has_none() -> None:
    values = np.arange(30, dtype=float)
    [interval] = unit_intervals(30, lambda units: values[units].mean(), 500, 0)
    assert interval.undefined == 0.0 and interval.low < values.mean() < interval.high
    [never] = unit_intervals(30, lambda units: math.nan, 200, 0)
    assert never.undefined == 1.0 and math.isnan(never.low)


def test_a_ratio_resamples_whole_cards_and_counts_empty_resamples_as_undefined() -> None:
    """ratio_interval against the same bootstrap written out item by item (numpy, no shared code)."""
    rng = np.random.default_rng(5)
    cards = [c for c in range(12) for _ in range(int(rng.integers(1, 5)))]  # 1-4 items per card
    hits = rng.integers(0, 2, len(cards)).astype(float)
    totals = np.ones(len(cards))
    got = ratio_interval(cards, hits, totals, 400, 3)
    members = {c: [i for i, u in enumerate(cards) if u == c] for c in dict.fromkeys(cards)}
    [want] = unit_intervals(
        len(members),
        lambda drawn: hits[sum((members[list(members)[d]] for d in drawn), [])].mean(),
        400,
        3,
    )
    assert (got.low, got.high) == pytest.approx((want.low, want.high))
    # a share of decisive answers: a resample of only indecisive cards has no denominator
    decisive = np.asarray([1.0 if c == 0 else 0.0 for c in cards])
    sparse = ratio_interval(cards, decisive * hits, decisive, 400, 3)
    absent = (1 - 1 / 12) ** 12  # card 0 missing from a resample
    assert sparse.undefined == pytest.approx(absent, abs=0.06) and sparse.undefined > MAX_UNDEFINED
    assert format_estimate(estimate(0.5, sparse)).startswith("n/a (undefined in")


# --- the inputs x systems design ----------------------------------------------------------------------


def design() -> tuple[np.ndarray, np.ndarray]:
    """20 inputs x 5 systems: metric and human scores with real structure, ties, and two inputs
    whose human scores are constant across systems (undefined within them)."""
    rng = np.random.default_rng(11)
    quality = np.array([0.0, 1.0, 2.0, 2.5, 3.5])  # the systems differ
    difficulty = rng.normal(0, 1, (20, 1))  # so do the inputs
    human = np.clip(np.rint(quality + difficulty + rng.normal(0, 0.8, (20, 5))), 0, 4)
    metric = 0.1 * human + rng.normal(0, 0.7, (20, 5)) + 2 * difficulty  # tracks the input, barely the system
    human[3] = 2.0  # constant within input 3
    human[12] = 4.0  # and 12
    return metric, human


def test_sample_and_dataset_level_follow_the_inputs_by_systems_design() -> None:
    metric, human = design()
    inputs = [f"card{i}" for i in range(20) for _ in range(5)]
    x, y = metric.ravel(), human.ravel()
    # independently: per input across its 5 systems, then the mean over the inputs where defined
    per_input = [stats.spearmanr(metric[i], human[i])[0] for i in range(20)]
    defined = [v for v in per_input if not math.isnan(v)]
    assert len(defined) == 18
    sample = corr.correlate_within_inputs(x, y, inputs, n_resamples=200, seed=0)
    assert sample.estimates["spearman"].value == pytest.approx(np.mean(defined))
    pearson = [stats.pearsonr(metric[i], human[i])[0] for i in range(20) if i not in (3, 12)]
    assert sample.estimates["pearson"].value == pytest.approx(np.mean(pearson))
    assert sample.inputs == 20 and "undefined for 2 of 20 inputs" in sample.note
    # dataset level: all 100 (input, system) pairs pooled
    dataset = corr.correlate(x, y, n_resamples=200, seed=0, inputs=inputs)
    assert dataset.estimates["spearman"].value == pytest.approx(stats.spearmanr(x, y)[0])
    assert dataset.estimates["kendall"].value == pytest.approx(stats.kendalltau(x, y)[0])
    assert dataset.n == 100 and dataset.inputs == 20
    # a metric that tracks the input (its difficulty) looks good pooled and weak within an input:
    # the two levels answer different questions
    assert dataset.estimates["spearman"].value > sample.estimates["spearman"].value + 0.2


def test_run_correlation_reads_inputs_and_systems_from_annotations(tmp_path: Path) -> None:
    metric, human = design()
    anns = []

    def reply(i: int, s: int) -> str:  # longer replies for a higher metric: Distinct-1 falls with them
        return "word " * int(5 + 10 * (metric[i, s] - metric.min()))

    for i in range(20):
        for s in range(5):
            dialogue = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": reply(i, s)}]
            anns.append({
                "dialogue_id": f"c{i}/s{s}", "language": "en", "dimension": "overall",
                "score": int(human[i, s]), "annotator": "a", "input": f"card{i}", "system": f"sys{s}",
                "dialogue": dialogue,
            })  # fmt: skip
    path = tmp_path / "ann.jsonl"
    path.write_text("".join(json.dumps(a) + "\n" for a in anns))
    section = CorrelationSettings(annotations=str(path), scores=None, references=None, metrics=["distinct1"],
                                  bootstrap=50)  # fmt: skip
    result = run_correlation(section, 42, tmp_path)
    summary = result["summary"]
    assert summary["inputs"] == 20 and summary["systems"] == [f"sys{s}" for s in range(5)]
    sample = summary["sample"]["Distinct-1"]["overall"]
    assert sample["inputs"] == 20 and sample["n"] == 100 and "2 of 20 inputs" in sample["note"]
    distinct1 = corr.TEXT_METRICS["distinct1"].fn
    distinct = np.array([[distinct1([reply(i, s)], (), "en") for s in range(5)] for i in range(20)])
    within = [stats.spearmanr(distinct[i], human[i])[0] for i in range(20) if i not in (3, 12)]
    assert sample["spearman"]["value"] == pytest.approx(
        np.mean([v for v in within if not math.isnan(v)]), abs=1e-6
    )
    # the note names what the intervals resampled, read from the figures: the annotations' inputs
    assert (
        "[95% percentile bootstrap interval, resampled by input]" in (tmp_path / "correlation.md").read_text()
    )


# --- agreement tables ------------------------------------------------------------------------------------


def _items(human: list[int], dim: str = "empathy", per_unit: int = 1) -> list[agree.Item]:
    return [agree.Item((f"d{i}", dim), h, f"u{i // per_unit}") for i, h in enumerate(human)]


def test_paired_difference_is_resampled_together() -> None:
    rng = np.random.default_rng(5)
    human = rng.integers(0, 5, 150).tolist()
    items = _items(human, per_unit=3)  # three dialogues per role card: cards are resampled
    good = {it.key: agree.Prediction(h) for it, h in zip(items, human, strict=True)}
    noise = {it.key: agree.Prediction(int(rng.integers(0, 5))) for it in items}
    tables = agree.agreement_tables(items, {"good": good, "noise": noise, "same": dict(good)}, 400, 0)
    [table] = [t for t in tables if t.scope == "empathy"]
    assert table.n_units == 50 and table.unit == "input"  # the estimates say what was resampled
    diff = {(d.other, d.reading, d.metric): d for d in table.differences}
    qwk = diff[("noise", "argmax", "qwk")]
    assert qwk.value == pytest.approx(1.0 - agree.qwk(
        np.array([noise[it.key].score for it in items], float), np.array(human, float)))  # fmt: skip
    assert qwk.interval.low > 0  # the better judge, and the interval says so
    same = diff[("same", "argmax", "acc")]
    assert same.value == 0 and same.interval.low == same.interval.high == 0  # identical rows: no spread


def test_rows_share_their_items_and_the_average_names_its_dimensions() -> None:
    human = [0, 1, 2, 3, 4, 3, 2, 1]
    items = _items(human, "empathy") + _items(human, "overall")
    items = [agree.Item((k[0] + ("x" if k[1] == "overall" else ""), k[1]), h, u) for (k, h, u, _) in
             ((it.key, it.human, it.unit, it.source) for it in items)]  # fmt: skip
    judge = {it.key: agree.Prediction(it.human) for it in items}
    judge[items[0].key] = agree.Prediction()  # one invalid empathy judgment
    partial = {it.key: agree.Prediction(2) for it in items if it.dimension == "empathy"}  # no overall at all
    tables = agree.agreement_tables(items, {"judge": judge, "partial": partial}, 100, 0)
    empathy = agree.find_row(tables, "empathy", "partial", "argmax")
    assert empathy.n_common == 7  # the judge's invalid item leaves every row's valid-item figures
    assert agree.find_row(tables, "empathy", "judge", "argmax").values["mae"] == 0.0
    [average] = [t for t in tables if t.scope == agree.AVERAGE]
    assert average.dimensions == ("empathy",) and average.label.startswith("Aver. (1 of 2 dim.")
    judge_avg = agree.find_row(tables, agree.AVERAGE, "judge", "argmax")
    assert judge_avg.values["acc"] == agree.find_row(tables, "empathy", "judge", "argmax").values["acc"]


def test_tables_per_source_show_a_judge_that_learned_the_corpus() -> None:
    """A "source oracle" agrees with people pooled over two corpora and not within either."""
    rng = np.random.default_rng(2)
    items, oracle = [], {}
    for i in range(200):
        source = "esconv" if i % 4 else "failedesconv"
        human = int(rng.choice([3, 4])) if source == "esconv" else int(rng.choice([0, 1, 2]))
        item = agree.Item((f"d{i}", "empathy"), human, f"d{i}", source)
        items.append(item)
        oracle[item.key] = agree.Prediction(4 if source == "esconv" else 1)
    tables = agree.agreement_tables(items, {"oracle": oracle}, 200, 0)
    pooled = agree.find_row(tables, "empathy", "oracle", "argmax")
    within = agree.find_row(tables, "empathy", "oracle", "argmax", source="esconv")
    assert pooled.values["qwk"] > 0.5
    assert within.values["qwk"] == pytest.approx(0.0, abs=1e-9)
    assert math.isnan(within.values["spearman"])  # a constant prediction within the corpus
