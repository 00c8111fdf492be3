"""Correlation analysis (esc/tasks/correlation/textmetrics.py, esc/tasks/correlation/report.py): each
text metric against a value worked out by hand, the correlations on a toy, n/a cases, and
`run_correlation` end
to end on small files (the two levels on an inputs x systems design: tests/test_scoring_statistics.py).
Offline, CPU."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from omegaconf import OmegaConf

from esc.annotate.human_scores import default_esconv_path
from esc.config_rules import load_section
from esc.config_schema import validate
from esc.errors import ConfigError, DataError
from esc.reports.result import read_result
from esc.tasks.correlation import report as corr
from esc.tasks.correlation.task import CorrelationSettings, run_correlation
from esc.tasks.correlation.textmetrics import bleu, distinct, meteor, rouge_l, tokenize
from tests.helpers import compose

HYP = ["the cat sat on the mat"]
REF = ["the cat is on the mat"]


# --- text metrics ---------------------------------------------------------------------------------


def test_bleu_matches_the_formula() -> None:
    # unigrams 5/6 clipped matches, bigrams 3/5, trigrams 1/4, 4-grams 0/3 (smoothed to 0.1/3); BP = 1
    assert bleu(HYP, REF, "en", 1) == pytest.approx(5 / 6)
    assert bleu(HYP, REF, "en", 2) == pytest.approx(math.sqrt(5 / 6 * 3 / 5))
    logs = [math.log(5 / 6), math.log(3 / 5), math.log(1 / 4), math.log(0.1 / 3)]
    assert bleu(HYP, REF, "en", 4) == pytest.approx(math.exp(sum(logs) / 4))
    # brevity penalty: 2 tokens against 6, exp(1 - 6/2)
    assert bleu(["the cat"], REF, "en", 1) == pytest.approx(math.exp(-2))
    # several references: clipped counts against the best one, turns joined in order
    assert bleu(["the cat", "sat on the mat"], ["a dog", *REF], "en", 1) == pytest.approx(5 / 6)
    assert math.isnan(bleu([""], REF, "en", 1))


def test_distinct_counts_ngrams_within_turns() -> None:
    turns = ["I am so sorry", "I am here"]
    assert distinct(turns, "en", 1) == pytest.approx(5 / 7)  # i, am, so, sorry, here of 7
    assert distinct(turns, "en", 2) == pytest.approx(4 / 5)  # "i am" twice; no "sorry i" across turns
    assert math.isnan(distinct(["yes"], "en", 2))


def test_rouge_l_is_the_lcs_f_measure() -> None:
    # LCS "the cat was under the bed" = 6: P = 6/7, R = 6/6, F = 2PR/(P+R) = 12/13
    assert rouge_l(["the cat was found under the bed"], ["the cat was under the bed"], "en") == pytest.approx(
        12 / 13
    )
    assert rouge_l(HYP, ["completely different words", *REF], "en") == pytest.approx(5 / 6)  # best reference


def test_meteor_exact_and_stem_matches_without_synonyms() -> None:
    # 5 exact matches of 6 and 6: P = R = 5/6, Fmean = 5/6; 2 chunks -> penalty 0.5 (2/5)^3
    assert meteor(HYP, REF, "en") == pytest.approx((1 - 0.5 * 0.4**3) * 5 / 6)
    # "running" and "runs" share the Porter stem: 2 matches, P = 2/3, R = 1, 2 chunks of 2 -> penalty 0.5
    fmean = (2 / 3) / (0.9 * 2 / 3 + 0.1)
    assert meteor(["he is running"], ["he runs"], "en") == pytest.approx(0.5 * fmean)
    # WordNet synonyms are not matched: "car"/"auto" is no match here, 1 of 2 words: 0.5 * (1 - 0.5)
    assert meteor(["my car"], ["my auto"], "en") == pytest.approx(0.25)
    # nltk with a WordNet that knows car.n.01 would match both: 1 chunk of 2, penalty 0.5 * (1/2)^3
    from nltk.translate.meteor_score import meteor_score

    car = SimpleNamespace(lemmas=lambda: [SimpleNamespace(name=lambda n=n: n) for n in ("car", "auto")])
    wordnet = SimpleNamespace(synsets=lambda word: [car] if word in ("car", "auto") else [])
    assert meteor_score([["my", "auto"]], ["my", "car"], wordnet=wordnet) == pytest.approx(1 - 0.5 / 8)


def test_chinese_goes_through_jieba() -> None:
    assert tokenize("我今天很开心", "zh") == ["我", "今天", "很", "开心"]
    # rouge-score's own tokenizer keeps only [a-z0-9]: Chinese would score 0 against itself
    from rouge_score.rouge_scorer import RougeScorer

    assert RougeScorer(["rougeL"]).score("我今天很开心", "我今天很开心")["rougeL"].fmeasure == 0
    assert rouge_l(["我今天很开心"], ["我今天很开心"], "zh") == pytest.approx(1.0)
    assert rouge_l(["我今天很开心"], ["我今天很难过"], "zh") == pytest.approx(3 / 4)
    assert bleu(["我今天很开心"], ["我今天很难过"], "zh", 1) == pytest.approx(3 / 4)
    assert distinct(["我很好，我很好"], "zh", 1) == pytest.approx(4 / 7)  # 我 很 好 ， 我 很 好


# --- correlations -----------------------------------------------------------------------------------


def test_correlations_match_hand_computed_values() -> None:
    x, y = [1, 2, 3, 4, 10], [2, 1, 4, 3, 5]
    result = corr.correlate(x, y, n_resamples=200, seed=0)
    assert result.n == 5 and result.note is None and result.inputs == 5
    figures = result.estimates
    assert figures["spearman"].value == pytest.approx(1 - 6 * 4 / (5 * 24))  # sum d^2 = 4
    assert figures["pearson"].value == pytest.approx(18 / math.sqrt(50 * 10))
    assert figures["kendall"].value == pytest.approx((8 - 2) / 10)  # 8 concordant, 2 discordant pairs
    for stat in corr.STATISTICS:
        e = figures[stat]
        assert -1 <= e.low <= e.value <= e.high <= 1 and e.n == 5
        assert e.unit == "dialogue"  # no inputs given: every pair its own unit


def test_nan_pairs_dropped_and_constant_series_are_na() -> None:
    result = corr.correlate([1, 2, math.nan, 3, 4], [1, 2, 3, 3, 5], n_resamples=0)
    assert result.n == 4 and result.estimates["spearman"].value > 0.9
    assert all(e.low is None for e in result.estimates.values())  # no resamples, no interval
    constant = corr.correlate([2, 2, 2, 2], [1, 2, 3, 4], n_resamples=100)
    assert constant.note == "constant metric" and not any(e.defined for e in constant.estimates.values())
    assert corr.correlate([1, 2], [2, 1]).note == "fewer than 3 pairs"
    # few distinct values: many resamples are constant; they are counted, and the figure is n/a
    tied = corr.correlate([0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [0, 1, 0, 0, 0, 1, 1, 1, 0, 1], n_resamples=300)
    assert tied.estimates["pearson"].undefined > 0.2
    assert corr._fmt(tied, "pearson").startswith("n/a (undefined in ")


# --- end to end -------------------------------------------------------------------------------------


def _annotation(
    dialogue_id: str, dim: str, score: int, source: str, reply: str, annotator: str = "a"
) -> dict:
    dialogue = [{"role": "user", "content": "I feel sad."}, {"role": "assistant", "content": reply}]
    return {
        "dialogue_id": dialogue_id,
        "language": "en",
        "dialogue": dialogue,
        "dimension": dim,
        "score": score,
        "annotator": annotator,
        "source": source,
    }


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


REPLIES = [
    "ok",
    "ok ok ok",
    "I am sorry you feel sad.",
    "I am sorry, that sounds hard. What happened?",
    "That sounds really hard. I am here for you; would you like to talk about it?",
    "I hear you. Feeling sad is hard. Have you tried a walk, or calling a friend you trust?",
]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    anns, scores = [], []
    for i, reply in enumerate(REPLIES):
        source = "abc"[i // 2]
        anns.append(_annotation(f"d{i}", "empathy", min(4, i), source, reply))
        anns.append(_annotation(f"d{i}", "overall", max(0, i - 2), source, reply))
        anns.append(_annotation(f"d{i}", "overall", 4, source, reply, annotator="b"))  # median: lower of two
        for dim, score, status in (("empathy", min(4, i), "valid"), ("overall", 4 - i % 5, "valid")):
            scores.append({"dialogue_id": f"d{i}", "dimension": dim, "language": "en", "judge": "toy",
                           "prompt": {"style": "official", "version": 1}, "status": status, "score": score,
                           "target": f"model{i % 3}"})  # fmt: skip
    scores.append({**scores[0], "status": "invalid", "score": None})  # supersedes d0/empathy
    scores.append({**scores[1], "dialogue_id": "elsewhere"})
    refs = [{"dialogue_id": f"d{i}", "references": [REPLIES[(i + 1) % 6], "I am sorry."]} for i in range(5)]
    refs.append({"dialogue_id": "nowhere", "references": ["hello"]})
    return {
        "annotations": _write(tmp_path / "ann.jsonl", anns),
        "scores": _write(tmp_path / "scores.jsonl", scores),
        "references": _write(tmp_path / "refs.jsonl", refs),
    }


def settings(**given: Any) -> CorrelationSettings:
    """conf/rank.yaml's `correlation` section with `given` set."""
    section = OmegaConf.to_container(compose([], config_name="rank").correlation)
    return load_section("correlation", CorrelationSettings, {**section, **given})


def test_run_correlation_end_to_end(files: dict[str, Path], tmp_path: Path) -> None:
    cfg = settings(
        annotations=str(files["annotations"]),
        scores=[str(files["scores"])],
        references=str(files["references"]),
        metrics=["bleu1", "distinct1", "rouge_l", "meteor"],
        bootstrap=50,
    )
    out = tmp_path / "out"
    result = run_correlation(cfg, 1, out)
    assert {Path(p).name for p in result["files"].values()} == {
        f"correlation.{k}" for k in ("md", "csv", "result.json")
    }
    summary = result["summary"]
    assert summary["dialogues"] == 6 and summary["dimensions"] == ["empathy", "overall", "average"]
    assert summary["metrics"]["BLEU-1"]["dialogues"] == 5  # d5 has no reference
    assert "references for 5 of 6" in summary["metrics"]["BLEU-1"]["note"]
    assert summary["metrics"]["Distinct-1"]["dialogues"] == 6
    assert {"ESC-Empathy", "ESC-Overall", "ESC-Eval"} <= set(summary["metrics"])
    # every row on the same dialogues: d5 has no reference, d0's empathy judgment went invalid
    assert summary["common_dialogues"] == 4
    assert any("every row is computed on the other 4" in w for w in result["warnings"])
    cell = summary["dataset"]["ESC-Empathy"]["empathy"]
    assert cell["n"] == 4 and cell["spearman"]["value"] == pytest.approx(1.0)
    # the Distinct-1 row is on the same four dialogues, pooled (dataset level)
    human_overall = [0, 0, 0, 1, 2, 3]  # median of (max(0, i-2), 4): the lower one
    distinct1 = [corr.TEXT_METRICS["distinct1"].fn([r], (), "en") for r in REPLIES]
    expected = corr.correlate(distinct1[1:5], human_overall[1:5], n_resamples=0).estimates["kendall"].value
    # on 4 dialogues it is undefined in 8% of the resamples: n/a in the report, and no value in the
    # summary either (issue 62); without resamples the same figure is the point value
    kendall = summary["dataset"]["Distinct-1"]["overall"]["kendall"]
    assert kendall["reported"] == f"n/a (undefined in {kendall['undefined_share']:.1%} of resamples)"
    assert kendall["value"] is None and kendall["ci"] == [None, None]
    point = run_correlation(cfg.model_copy(update={"bootstrap": 0}), 1, tmp_path / "point")
    assert point["summary"]["dataset"]["Distinct-1"]["overall"]["kendall"]["value"] == pytest.approx(
        expected, abs=1e-6
    )
    assert summary["dataset"]["Distinct-1"]["overall"]["n"] == 4
    # the scores name a target per dialogue and no role card: each dialogue is its own input, so
    # nothing can be correlated within an input (sample level), and the table says why
    note = summary["sample"]["Distinct-1"]["overall"]["note"]
    assert note.startswith("every input has fewer than 3 dialogues")
    assert summary["systems"] == ["model0", "model1", "model2"]
    assert any("elsewhere" in w for w in result["warnings"]) and any(
        "nowhere" in w for w in result["warnings"]
    )

    rows = list(csv.DictReader((out / "correlation.csv").open()))
    assert {r["level"] for r in rows} == {"sample", "dataset"}
    assert len(rows) == 2 * len(summary["metrics"])  # levels x rows; a column per dimension x statistic
    [esc] = [r for r in rows if (r["level"], r["Metric"]) == ("dataset", "ESC-Empathy")]
    assert float(esc["Empathy Spear. value"]) == pytest.approx(1.0) and esc["Empathy Spear. n"] == "4"
    # the report's tables for programs: every row's dialogues and what limits it
    report = read_result(out / "correlation.result.json")
    [table] = [t for t in report.tables() if t.name == "rows"]
    limits = {row[0].text: (row[1].text, row[2].text) for row in table.rows}
    assert limits["BLEU-1"][0] == "5" and "references for 5 of 6" in limits["BLEU-1"][1]
    assert limits["Distinct-1"] == ("6", "")
    md = (out / "correlation.md").read_text()
    assert "| Distinct-1 |" in md and "Empathy Spear." in md and "Average Kend." in md
    assert "match no annotation" in md
    # the note names the unit the figures say they resampled (issue 52: it said "inputs" whatever they were)
    [correlations] = [t for t in report.tables() if t.name == "correlations"]
    assert correlations.resampled() == "input" and "resampled by input]" in md


def test_reference_metrics_are_not_invented(files: dict[str, Path], tmp_path: Path) -> None:
    cfg = settings(annotations=str(files["annotations"]), metrics=["bleu4", "distinct2"], bootstrap=0)
    result = run_correlation(cfg, 42, tmp_path)
    assert result["summary"]["metrics"]["BLEU-4"]["computed"] is False
    assert "| BLEU-4 | 0 | not computed: no references file" in result["markdown"]
    assert "BLEU-4" not in result["summary"]["sample"]
    # a row not computed limits nothing; Distinct-2 of the one-word reply "ok" is undefined (no
    # bigram), so that dialogue leaves every row
    assert result["summary"]["common_dialogues"] == 5


def test_bad_inputs_name_the_file_and_line(files: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"dialogue_id": "d0", "references": ["a"]}\n{"dialogue_id": "d1", "references": []}\n')
    with pytest.raises(DataError, match=r"bad.jsonl \[record line 2\]: `references` must be"):
        corr.read_references(bad)
    bad.write_text('{"dialogue_id": "d0", "references": ["a"]}\nnot json\n')
    with pytest.raises(DataError, match=r"line 2"):
        corr.read_references(bad)
    cfg = compose(["mode=correlation", "correlation.metrics=[bleu3]"], tmp_path / "x", config_name="rank")
    with pytest.raises(ConfigError, match=r"correlation\.metrics`: item 0: must be 'bleu1'"):
        validate(cfg, "rank")
    with pytest.raises(ConfigError, match="correlation.scores"):
        run_correlation(
            settings(annotations=str(files["annotations"]), scores=[str(tmp_path / "no")]), 42, tmp_path
        )


@pytest.mark.skipif(not default_esconv_path().is_file(), reason="data/annotations not built: run `make data`")
def test_shipped_esconv_annotations_have_no_references(tmp_path: Path) -> None:
    result = run_correlation(settings(metrics=["distinct1", "rouge_l"], bootstrap=0), 42, tmp_path)
    summary = result["summary"]
    assert summary["dimensions"] == ["fluency", "empathy", "overall", "average"]
    assert summary["metrics"]["ROUGE-L"]["computed"] is False
    assert summary["dataset"]["Distinct-1"]["overall"]["n"] > 1000
    # ESConv: every dialogue its own input, one system: no sample level, and it says so
    assert summary["sample"]["Distinct-1"]["overall"]["note"].startswith("every input has fewer than 3")
