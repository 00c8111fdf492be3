"""Pairwise judging: verdicts from both orders, position bias detected when planted, Bradley-Terry
recovering a planted order, resume, and the tiny judge through rank.py."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest

from esc.dialogues.record import Dialogue, Turn
from esc.errors import DataError
from esc.reports.result import Cell, read_result, result_path
from esc.scoring.judge import VALID, Judge, JudgeAnswer, JudgeSettings, ScoreItem, register_judge
from esc.scoring.store import ScoreRecord
from esc.tasks.pairwise.questions import TIE, pair_items, pairs, verdict
from esc.tasks.pairwise.report import Judged, bradley_terry, comparisons, consistency, strengths, win_rates
from tests.helpers import compose, requires_data, run_entry


def _dialogue(card: int, target: str, quality: int, language: str = "en") -> Dialogue:
    d = Dialogue(card, language, "seeker", target, "sys", "Hello.", None, status="complete")
    d.turns = [
        Turn("roleplayer", f"I feel low ({card})", "stop"),
        Turn("target", f"Q{quality} reply", "stop"),
    ]
    return d


def _record(score: int | None) -> ScoreRecord | None:
    if score is None:
        return None
    return ScoreRecord("i", "empathy", "en", "j", {}, VALID, score)


def test_pairs_cover_every_two_targets_of_a_card_and_both_orders() -> None:
    found = pairs([_dialogue(1, "a", 1), _dialogue(1, "b", 2), _dialogue(1, "c", 3), _dialogue(2, "a", 1)])
    assert [(p.card_id, p.x, p.y) for p in found] == [(1, "a", "b"), (1, "a", "c"), (1, "b", "c")]
    items = pair_items(found[0], ["empathy", "overall"])
    assert [i.item_id.rsplit("/", 1)[1] for i in items] == ["xy", "yx", "xy", "yx"]
    xy, yx = items[0].messages[1][1], items[1].messages[1][1]
    assert xy.index("Q1 reply") < xy.index("Q2 reply") and yx.index("Q2 reply") < yx.index("Q1 reply")
    assert items[0].choices == ("A", "B", "C")


@pytest.mark.parametrize(
    "xy,yx,result,consistent",
    [
        (0, 1, "a", True),  # a shown first and chosen, then shown second and chosen
        (1, 0, "b", True),
        (2, 2, TIE, True),
        (0, 0, TIE, False),  # always the first conversation: position, not preference
        (0, None, None, None),  # an unread answer: no result
    ],
)
def test_a_verdict_needs_both_orders(
    xy: int, yx: int | None, result: str | None, consistent: bool | None
) -> None:
    [pair] = pairs([_dialogue(1, "a", 1), _dialogue(1, "b", 2)])
    v = verdict(pair, {"xy": _record(xy), "yx": _record(yx)})
    assert (v.result, v.consistent) == (result, consistent)


def test_bradley_terry_recovers_a_planted_order() -> None:
    rng = np.random.default_rng(0)
    truth = {"weak": -1.0, "mid": 0.0, "strong": 1.0}
    judged = []
    for card in range(40):
        found = pairs([_dialogue(card, t, 0) for t in truth])
        for pair in found:
            p_x = 1 / (1 + np.exp(truth[pair.y] - truth[pair.x]))
            win = pair.x if rng.random() < p_x else pair.y
            answers = {"xy": _record(0 if win == pair.x else 1), "yx": _record(1 if win == pair.x else 0)}
            judged.append(Judged(pair, "overall", verdict(pair, answers)))
    rows = strengths(judged, n_resamples=200, seed=0)
    assert [r.target for r in rows] == ["strong", "mid", "weak"]
    strong = rows[0]
    assert strong.interval.low > 0 and strong.theta == pytest.approx(1.0, abs=0.45)
    assert sum(r.theta for r in rows) == pytest.approx(0.0, abs=1e-9)  # centred
    rates = win_rates(judged, n_resamples=100)
    assert rates[("strong", "weak")].value > 0.7 and rates[("strong", "weak")].of == 40
    assert (
        rates[("strong", "weak")].interval.low
        < rates[("strong", "weak")].value
        < rates[("strong", "weak")].interval.high
    )


def test_a_tie_is_half_a_win_each_way() -> None:
    [pair] = pairs([_dialogue(1, "a", 1), _dialogue(1, "b", 2)])
    judged = [Judged(pair, "overall", verdict(pair, {"xy": _record(2), "yx": _record(2)}))]
    assert comparisons(judged, {"a": 0, "b": 1}) == [(0, 1), (1, 0)]
    theta = bradley_terry(2, comparisons(judged, {"a": 0, "b": 1}))
    assert theta == pytest.approx([0.0, 0.0], abs=1e-6)


@register_judge("planted_pairwise")
class PlantedJudge(Judge):
    """Prefers the conversation whose reply says the higher "Q<n>"; `bias: first` always answers A."""

    class Settings(JudgeSettings):
        bias: Literal["none", "first"] = "none"
        prompt: str = "official"

    def __init__(self, settings: Settings, config_key: str = "judge") -> None:
        self.name, self.bias, self.prompt = settings.name, settings.bias, settings.prompt
        self.asked = 0

    def judge(self, items: Sequence[ScoreItem]) -> list[JudgeAnswer]:
        out = []
        for item in items:
            self.asked += 1
            if self.bias == "first":
                out.append(JudgeAnswer(VALID, 0))
                continue
            text = item.messages[1][1]
            a = int(re.search(r"Q(\d)", text.split("Conversation B:")[0]).group(1))
            b = int(re.search(r"Q(\d)", text.split("Conversation B:")[1]).group(1))
            out.append(JudgeAnswer(VALID, 0 if a > b else 1 if b > a else 2))
        return out

    def identity(self) -> dict[str, Any]:
        return {"kind": "planted_pairwise", "name": self.name, "bias": self.bias}


def _runs(root: Path, qualities: dict[str, int], cards: int = 6) -> list[Path]:
    folders = []
    for target, quality in qualities.items():
        folder = root / target / "dialogues"
        folder.mkdir(parents=True)
        lines = [json.dumps(_dialogue(c, target, quality).to_dict()) + "\n" for c in range(cards)]
        (folder / f"{target}__seeker__en.jsonl").write_text("".join(lines))
        folders.append(folder.parent)
    return folders


def _rank(out: Path, runs: list[Path], bias: str):
    from omegaconf import open_dict

    from esc.config_schema import validate
    from esc.rank.run import rank

    cfg = compose(["mode=pairwise", f"dialogues=[{','.join(map(str, runs))}]", "dimensions=[empathy,overall]",
                   "pairwise.bootstrap=100", "scoring.progress=false", "cache=off"],
                  output_dir=out, config_name="rank")  # fmt: skip
    with open_dict(cfg):
        cfg.judge = {"kind": "planted_pairwise", "name": f"planted_{bias}", "bias": bias}
    return rank(cfg, validate(cfg, "rank"))


def _rows(out: Path, name: str) -> list[dict[str, Cell]]:
    """The rows of the report's table `name` (pairwise.result.json), each column -> cell."""
    [table] = [t for t in read_result(result_path(out, "pairwise")).tables() if t.name == name]
    return [dict(zip(table.columns, row, strict=True)) for row in table.rows]


def test_the_report_ranks_a_planted_order_and_a_rerun_judges_nothing(tmp_path: Path) -> None:
    runs = _runs(tmp_path, {"low": 1, "mid": 2, "high": 3})
    result = _rank(tmp_path / "out", runs, "none")
    assert result.counts[VALID] == 6 * 3 * 2 * 2  # cards x pairs x dimensions x orders
    table = (tmp_path / "out" / "pairwise.md").read_text()
    order = [
        line.split("|")[3].strip() for line in table.splitlines() if re.match(r"\| seeker \| [123] \|", line)
    ]
    assert order == ["high", "mid", "low"]
    assert [row["target"].text for row in _rows(tmp_path / "out", "strengths")] == order
    # every resample equal at 100%: the exact 95% interval by card (6/6: 1 - 0.025^(1/6) = 54.1%) in
    # the cell, marked, and by pair (36/36: 1 - 0.025^(1/36) = 90.3%) in its note; not [100.0, 100.0]
    assert "| seeker | 100.0% [54.1, 100.0]\u2020 of 36 pairs |" in table
    [row] = _rows(tmp_path / "out", "position consistency")
    assert "90.3-100.0% by pair (36)" in (row["judged the same both ways"].note or "")
    again = _rank(tmp_path / "out", runs, "none")
    assert again.counts["skipped"] == 6 * 3 * 2 * 2


def test_a_planted_position_bias_is_reported(tmp_path: Path) -> None:
    runs = _runs(tmp_path, {"low": 1, "high": 3})
    _rank(tmp_path / "out", runs, "first")
    [row] = _rows(tmp_path / "out", "position consistency")
    assert row["judged the same both ways"].value == 0.0 and row["chose the one shown first"].value == 1.0
    rates = {(r["A"].text, r["B"].text): r for r in _rows(tmp_path / "out", "win rates")}
    assert set(rates) == {("high", "low"), ("low", "high")}
    assert all(r["all"].value == r["Empathy"].value == 0.5 for r in rates.values())  # every verdict a tie
    verdicts = _rows(tmp_path / "out", "verdicts")
    assert len(verdicts) == 6 * 2 and {r["result"].text for r in verdicts} == {TIE}  # cards x dimensions
    assert (tmp_path / "out" / "verdicts.csv").read_text().count("\n") == 1 + 6 * 2
    judged = [Judged(p, "empathy", verdict(p, {"xy": _record(0), "yx": _record(0)})) for p in
              pairs([_dialogue(1, "a", 1), _dialogue(1, "b", 2)])]  # fmt: skip
    assert consistency(judged).first.value == 1.0


@requires_data
def test_rank_py_pairwise_with_the_tiny_judge(tmp_path: Path) -> None:
    """The issue's command: the local judge reads A/B/C off the answer distribution."""
    runs = _runs(tmp_path, {"a": 1, "b": 2}, cards=2)
    out = tmp_path / "out"
    result = run_entry("rank.py", ["mode=pairwise", "judge=tiny", f"dialogues=[{runs[0]},{runs[1]}]",
                                   "pairwise.bootstrap=20", f"hydra.run.dir={out}"], timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(line) for line in (out / "pairwise" / "tiny.jsonl").read_text().splitlines()]
    assert len(records) == 2 * 7 * 2 and all(len(r["probs"]) == 3 for r in records)
    from esc.tasks.pairwise.questions import pairwise_prompts

    asked = {"style": "pairwise", "version": 1, "sha256": pairwise_prompts()["sha256"]}
    assert all(r["prompt"] == asked for r in records) and len(asked["sha256"]) == 64
    assert (out / "strengths.csv").is_file() and "Bradley-Terry" in (out / "pairwise.md").read_text()


def _won(pair, winner: str) -> Judged:
    first = 0 if winner == pair.x else 1
    return Judged(pair, "overall", verdict(pair, {"xy": _record(first), "yx": _record(1 - first)}))


def test_strengths_are_undefined_where_the_data_cannot_place_a_target() -> None:
    # a-b met on some cards, c-d on others: nothing puts the two groups on one scale
    judged = [_won(p, p.x) for c in range(5) for p in pairs([_dialogue(c, "a", 1), _dialogue(c, "b", 1)])]
    judged += [
        _won(p, p.y) for c in range(5, 10) for p in pairs([_dialogue(c, "c", 1), _dialogue(c, "d", 1)])
    ]
    rows = {r.target: r for r in strengths(judged, n_resamples=50)}
    assert all(np.isnan(r.theta) for r in rows.values()) and "never met" in rows["a"].undefined
    assert (
        bradley_terry(3, [(0, 1), (1, 0)])[2] != bradley_terry(3, [(0, 1), (1, 0)])[2]
    )  # c: no verdict, NaN


def test_a_target_that_won_every_verdict_stays_finite_under_the_prior() -> None:
    judged = [
        _won(p, "high") for c in range(20) for p in pairs([_dialogue(c, "high", 1), _dialogue(c, "low", 1)])
    ]
    rows = {r.target: r for r in strengths(judged, n_resamples=50)}
    assert 0 < rows["high"].theta < 3 and rows["high"].theta == pytest.approx(-rows["low"].theta)
    weaker = {r.target: r for r in strengths(judged, n_resamples=0, prior=10.0)}
    assert weaker["high"].theta < rows["high"].theta  # a stronger prior pulls towards 0


def test_cards_played_by_one_target_are_listed_and_an_adapter_judge_is_refused(tmp_path: Path) -> None:
    from omegaconf import open_dict

    from esc.config_schema import validate
    from esc.errors import ConfigError
    from esc.rank.run import rank

    runs = _runs(tmp_path, {"low": 1, "high": 3}, cards=3)
    extra = runs[1] / "dialogues" / "high__seeker__en.jsonl"
    extra.write_text(extra.read_text() + json.dumps(_dialogue(99, "high", 3).to_dict()) + "\n")
    _rank(tmp_path / "out", runs, "none")
    markdown = (tmp_path / "out" / "pairwise.md").read_text()
    assert "Left out: 1 cards played by one target only" in markdown and "| seeker | en | 99 |" in markdown
    cfg = compose(["mode=pairwise", f"dialogues=[{runs[0]},{runs[1]}]", "judge=tiny", "cache=off"],
                  output_dir=tmp_path / "esc_rank", config_name="rank")  # fmt: skip
    with open_dict(cfg):
        cfg.judge.adapters = {"layout": "single", "root": str(tmp_path), "dimensions": None}
    with pytest.raises(ConfigError, match="judge.adapters"):
        rank(cfg, validate(cfg, "rank"))


def test_a_dialogue_whose_turns_do_not_alternate_is_refused_naming_its_line(tmp_path: Path) -> None:
    """The checks every judging mode makes (`dialogue_lines`): a dropped turn is not judged as a pair."""
    runs = _runs(tmp_path, {"low": 1, "high": 3}, cards=3)
    path = runs[1] / "dialogues" / "high__seeker__en.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["turns"].insert(1, dict(rows[1]["turns"][0]))  # the seeker twice: the target's reply lost
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"high__seeker__en\.jsonl.*line 2.*turn 1 is by 'roleplayer'"):
        _rank(tmp_path / "out", runs, "none")
    assert not (tmp_path / "out" / "pairwise").exists()  # nothing judged


def test_targets_that_met_but_whose_verdicts_were_all_unread_are_not_said_never_to_have_met() -> None:
    """Issue 52, item 9: a and c played the same 10 cards, every answer about them unread."""
    from esc.tasks.pairwise.report import pairwise_report, report

    judged = []
    for card in range(10):
        ab, ac = pairs([_dialogue(card, "a", 1), _dialogue(card, "b", 2)]) + pairs(
            [_dialogue(card, "a", 1), _dialogue(card, "c", 3)]
        )
        judged += [
            Judged(ab, "overall", verdict(ab, {"xy": _record(1), "yx": _record(1)})),
            Judged(ac, "overall", verdict(ac, {"xy": _record(None), "yx": _record(None)})),
        ]
    rates = win_rates(judged, n_resamples=50)
    assert rates[("a", "c")].value is None and rates[("a", "c")].cards == 10
    table = next(
        t for t in pairwise_report(report(judged, ["overall"], 50, 0), "j").tables() if t.name == "win rates"
    )
    cells = {(row[1].text, row[2].text): row[3] for row in table.rows}
    assert cells[("a", "c")].text == "n/a (met on 10 card(s), every verdict unread)"
    assert "never met" not in " ".join(c.text for c in cells.values())
