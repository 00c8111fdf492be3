"""Juries of judges and several simulators: pooled scores, a lenient judge shown as such, agreement,
rankings; Kendall's W and the variance split on hand-built tables."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from esc.dialogues.record import Dialogue, Turn
from esc.reports.result import Report
from esc.scoring.jury import JURY
from esc.scoring.rubrics import DIMENSION_KEYS
from esc.scoring.store import ScoreRecord
from esc.tasks.score import leaderboard as board
from esc.tasks.score.jury import agreement_between_judges as agreement
from esc.tasks.score.jury import leniency, pooled_records, rankings
from esc.tasks.score.simulators import kendalls_w, simulator_blocks, simulator_tables, variance_shares
from tests.helpers import requires_data, run_entry


def _record(judge: str, target: str, card: int, dim: str, score: int | None, roleplayer: str = "rp",
            expected: float | None = None) -> ScoreRecord:  # fmt: skip
    status = "valid" if score is not None else "invalid"
    prompt = {"style": "official", "version": 2}
    dialogue_id = f"{target}__{roleplayer}__en/{card}"
    return ScoreRecord(dialogue_id, dim, "en", judge, prompt, status, score, expected, target=target,
                       roleplayer=roleplayer, card_id=card)  # fmt: skip


def _jury_records(lenient_offset: int = 1) -> list[ScoreRecord]:
    """Two targets x 8 cards x 7 dimensions; judges a and b agree, c scores `lenient_offset` higher."""
    rng = np.random.default_rng(0)
    out = []
    for target, base in (("good", 3), ("poor", 1)):
        for card in range(8):
            for dim in DIMENSION_KEYS:
                score = int(np.clip(base + rng.integers(-1, 2), 0, 3))
                out += [_record("a", target, card, dim, score), _record("b", target, card, dim, score),
                        _record("c", target, card, dim, min(score + lenient_offset, 4))]  # fmt: skip
    return out


def test_pooled_scores_average_the_valid_judges_and_min_valid_decides() -> None:
    records = [_record("a", "t", 1, "empathy", 2), _record("b", "t", 1, "empathy", 4, expected=3.5),
               _record("a", "t", 2, "empathy", 1), _record("b", "t", 2, "empathy", None)]  # fmt: skip
    pooled = {r.dialogue_id: r for r in pooled_records(records, ["a", "b"])}
    assert pooled["t__rp__en/1"].score == pytest.approx((2 + 3.5) / 2) and pooled["t__rp__en/1"].judge == JURY
    assert pooled["t__rp__en/2"].status == "invalid" and "1 of 2 judges" in pooled["t__rp__en/2"].error
    lenient = {r.dialogue_id: r for r in pooled_records(records, ["a", "b"], pool="median", min_valid=1)}
    assert lenient["t__rp__en/2"].score == 1.0


def test_a_lenient_judge_shows_its_offset() -> None:
    records = _jury_records(lenient_offset=1)
    rows = {le.judge: le for le in leniency(records, ["a", "b", "c"], n=200, seed=0)}
    # c is +1 above a and b everywhere (their scores are 0-3): c's difference from the mean of the
    # other two is +1, a's from the mean of b and c is -1/2 (issue 62: from the others, not from a
    # pooled score that holds the judge itself, which read +2/3 and -1/3)
    assert rows["c"].offset == pytest.approx(1.0) and rows["a"].offset == pytest.approx(-1 / 2)
    assert rows["c"].interval.low > 0.5 and rows["a"].interval.high < 0
    assert rows["a"].items == 2 * 8 * 7 and rows["a"].unit == "role card"


def test_agreement_is_perfect_between_identical_judges() -> None:
    records = [r for r in _jury_records() if r.judge in ("a", "b")]
    alphas = agreement(records, ["a", "b"], n=50)
    assert set(alphas) == set(DIMENSION_KEYS) and all(a == pytest.approx(1.0) for a, *_ in alphas.values())
    assert alphas["empathy"][2] == 16 and alphas["empathy"][1].low == pytest.approx(1.0)
    assert alphas["empathy"][3] == "role card"  # what its interval resampled
    lenient = [r for r in _jury_records() if r.judge in ("a", "c")]
    assert (
        agreement(lenient, ["a", "c"], n=0)["empathy"][0] < 1.0
    )  # an offset is a disagreement on an interval scale


def test_rankings_show_where_judges_disagree() -> None:
    records = []
    for card in range(6):  # a and the jury: x > y; b: y > x
        records += [_record("a", "x", card, "empathy", 4), _record("a", "y", card, "empathy", 1),
                    _record("b", "x", card, "empathy", 2), _record("b", "y", card, "empathy", 3)]  # fmt: skip
    records += pooled_records(records, ["a", "b"])
    rows = board.leaderboard(records, n_resamples=50)
    [(key, r)] = rankings(rows, ["a", "b"]).items()
    assert (
        r["orders"]["a"] == ["x", "y"] and r["orders"]["b"] == ["y", "x"] and r["orders"][JURY] == ["x", "y"]
    )
    assert r["tau"] == {"a": pytest.approx(1.0), "b": pytest.approx(-1.0)}
    assert r["disputed"] == [("x", "y", {"a": "x", "b": "y"})]


def test_kendalls_w_and_variance_shares_on_hand_tables() -> None:
    same = np.array([[3.0, 30.0], [2.0, 20.0], [1.0, 10.0]])  # two raters, one order
    assert kendalls_w(same) == pytest.approx(1.0)
    reversed_ = np.array([[3.0, 1.0], [2.0, 2.0], [1.0, 3.0]])
    assert kendalls_w(reversed_) == pytest.approx(0.0)
    assert math.isnan(kendalls_w(np.array([[1.0, np.nan], [2.0, 3.0]])))
    shift = np.array([[1.0, 3.0], [2.0, 4.0]])  # the simulator adds 2 to every target
    shares = variance_shares(shift)
    assert shares["simulators"] == pytest.approx(0.8) and shares["targets"] == pytest.approx(0.2)
    assert shares["rest"] == pytest.approx(0.0, abs=1e-12)
    ties = np.array([[1.0, 2.0], [1.0, 2.0]])  # every ranking one tie: no order to agree on
    assert math.isnan(kendalls_w(ties))
    partial = np.array([[3.0, 2.0], [3.0, 1.0], [1.0, 0.0]])  # rater 1 ties the top two
    assert 0 < kendalls_w(partial) < 1


def test_several_simulators_table_from_score_records() -> None:
    records = []
    for card in range(10):  # simulator s1: good > poor; s2 lowers everything by 1 point, same order
        for dim in DIMENSION_KEYS:
            for sim, drop in (("s1", 0), ("s2", 1)):
                records += [
                    _record("j", "good", card, dim, 3 - drop, sim),
                    _record("j", "poor", card, dim, 1 - drop, sim),
                ]
    [table] = simulator_tables(records, n_resamples=100, seed=0)
    assert table.simulators == ["s1", "s2"] and table.targets == ["good", "poor"]
    assert table.means[0].tolist() == [75.0, 50.0] and table.cards == 10
    assert table.w == pytest.approx(1.0) and table.shares["simulators"][0] == pytest.approx(0.2)
    report = Report("leaderboard", tuple(simulator_blocks([table])))
    [w] = [e for e in report.estimates() if dict(e.keys).get("column") == "Kendall's W"]
    assert w.table == "leaderboard/ranking stability" and w.value == pytest.approx(1.0) and w.n == 10
    assert "| j | en |" in report.to_markdown()  # the stability table's row: judge, language
    [good_s2] = [e for e in report.estimates() if dict(e.keys) == {"target": "good", "column": "s2"}]
    assert (good_s2.value, good_s2.n, good_s2.unit) == (50.0, 10, "role card")
    assert good_s2.table == "leaderboard/Several simulators (en, judge j)"


@requires_data
def test_a_jury_run_writes_each_judges_files_their_agreement_and_the_pooled_leaderboard(
    tmp_path: Path,
) -> None:
    """The issue's jury of two judges on one set of dialogues (tiny, with the two prompt styles)."""
    folder = tmp_path / "run" / "dialogues"
    folder.mkdir(parents=True)
    lines = []
    for card in range(3):
        d = Dialogue(card, "en", "rp", "bot", "sys", "Hello.", None, status="complete")
        d.turns = [Turn("roleplayer", f"I feel low {card}", "stop"), Turn("target", "I hear you.", "stop")]
        lines.append(json.dumps(d.to_dict()) + "\n")
    (folder / "bot__rp__en.jsonl").write_text("".join(lines))
    out = tmp_path / "out"
    args = [
        "jury=tiny_pair",
        f"dialogues={tmp_path / 'run'}",
        "leaderboard.bootstrap=50",
        "dimensions=[empathy,overall]",
    ]
    result = run_entry("rank.py", [*args, f"hydra.run.dir={out}"], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (out / "scores").glob("*.jsonl")) == [
        "bot__rp__en__tiny.jsonl", "bot__rp__en__tiny_paper.jsonl"
    ]  # fmt: skip
    board_md = (out / "leaderboard.md").read_text()
    for needed in ("| en | bot | rp | jury |", "| en | bot | rp | tiny |", "| en | bot | rp | tiny_paper |",
                   "## The jury: tiny, tiny_paper", "Krippendorff's alpha"):  # fmt: skip
        assert needed in board_md
    settings = json.loads((out / "settings.json").read_text())
    assert set(settings["rank.score"]["jury"]) == {"tiny", "tiny_paper"}
    # the site's overview shows Table 2 as leaderboard.csv has it: the jury's pooled row too (issue 52,
    # item 6: index.html had left it out)
    with (out / "leaderboard.csv").open(encoding="utf-8") as fh:
        judges = [row["Judge"] for row in csv.DictReader(fh)]
    assert sorted(judges) == ["jury", "tiny", "tiny_paper"]
    index = (out / "report" / "index.html").read_text()
    table2 = index[index.index("<table") : index.index("</table>")]
    assert all(f"<td>{judge}</td>" in table2 for judge in judges)
    args = [
        "mode=leaderboard",
        "jury=tiny_pair",
        "jury.pool=median",
        f"scores={out}",
        "leaderboard.bootstrap=20",
    ]
    again = run_entry("rank.py", [*args, f"hydra.run.dir={tmp_path / 'report'}"], timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]  # the jury's files reported again, pooled another way
    report = (tmp_path / "report" / "leaderboard.md").read_text()
    assert "| en | bot | rp | jury |" in report and "the median of the judges' expected scores" in report


def test_a_jury_is_checked_before_any_work() -> None:
    from omegaconf import open_dict

    from esc.config_schema import validate
    from esc.errors import ConfigError
    from esc.rank.run import jury_members
    from esc.tasks.task import get_mode
    from tests.helpers import compose

    cfg = compose(["jury=tiny_pair", "jury.min_valid=3", "dialogues=/tmp"], config_name="rank")
    with pytest.raises(ConfigError, match="jury.min_valid"):
        validate(cfg, "rank")
    cfg = compose(["jury=tiny_pair", "dialogues=/tmp"], config_name="rank")
    with open_dict(cfg):
        cfg.jury.members.tiny_paper.name = "jury"
    with pytest.raises(ConfigError, match="must differ and not be 'jury'"):
        validate(cfg, "rank")
    checked = validate(compose(["jury=tiny_pair", "dialogues=/tmp"], config_name="rank"), "rank")
    with pytest.raises(ConfigError, match="mode=safety"):
        jury_members(get_mode("safety"), checked["jury"], True)


def test_an_ad_hoc_jury_takes_its_pooling_from_jury_none() -> None:
    """Issue 62: the documented ad hoc jury (`+judge@jury.members.a=tiny +judge@jury.members.b=...`,
    docs/scoring.md) failed with `jury.pool is not set`: conf/jury/none.yaml holds the pooling keys."""
    from esc.config_schema import validate
    from esc.rank.run import jury_members
    from esc.tasks.task import get_mode
    from tests.helpers import compose

    cfg = compose(
        [
            "+judge@jury.members.a=tiny",
            "+judge@jury.members.b=tiny",
            "jury.members.b.name=b",
            "dialogues=/tmp",
        ],
        config_name="rank",
    )
    checked = validate(cfg, "rank")
    assert checked["jury"].pool == "mean" and sorted(checked["jury"].members) == ["a", "b"]
    judges = jury_members(get_mode("score"), checked["jury"], True)
    assert [j.name for j in judges] == ["tiny", "b"] and [j.config_key for j in judges] == [
        "jury.members.a",
        "jury.members.b",
    ]
