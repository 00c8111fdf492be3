"""Breakdowns (issue 23): leaderboard and agreement tables by language, taxonomy tiers, card source
and turns; every cell's n and mean counted by hand."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import pytest

from esc.cards import RoleCard, save_cards
from esc.config_schema import validate
from esc.dialogues.record import Dialogue, Turn
from esc.errors import ConfigError
from esc.reports.breakdown import (
    UNKNOWN,
    Facets,
    annotation_facets,
    breakdown_blocks,
    cell_text,
    dialogue_averages,
    dialogue_facets,
    exchanges,
    leaderboard_breakdowns,
    turn_labels,
)
from esc.reports.result import Report
from esc.scoring.judge import FAILED, INVALID, VALID
from esc.scoring.store import ScoreRecord
from esc.tasks.agreement import report as agree
from esc.tasks.agreement.breakdown import agreement_breakdown_blocks, agreement_breakdowns
from esc.tasks.score.task import write_reports
from esc.tasks.task import LeaderboardSettings
from tests.helpers import compose

PROMPT = {"style": "official", "version": 1}


def rec(did: str, dim: str, score: int | None, card: int, lang: str = "en", target: str = "t1",
        status: str = VALID, source: str | None = None) -> ScoreRecord:  # fmt: skip
    return ScoreRecord(did, dim, lang, "j", PROMPT, status, score if status == VALID else None,
                       target=target, roleplayer="rp", card_id=card, source=source)  # fmt: skip


def records() -> list[ScoreRecord]:
    """Row (t1, rp): f/1 75, f/2 50 (its invalid overall left out), f/3 12.5, f/4 no valid judgment,
    f/5 75. Row (t2, rp): g/1 25 and h/1 75, two dialogues of one card (card 1, en)."""
    return [
        rec("f/1", "fluency", 4, 1), rec("f/1", "empathy", 2, 1),
        rec("f/2", "fluency", 2, 2), rec("f/2", "empathy", 2, 2),
        rec("f/2", "overall", None, 2, status=INVALID),
        rec("f/3", "fluency", 0, 3, "zh"), rec("f/3", "empathy", 1, 3, "zh"),
        rec("f/4", "fluency", None, 4, "zh", status=INVALID),
        rec("f/4", "empathy", None, 4, "zh", status=FAILED),
        rec("f/5", "fluency", 3, 5), rec("f/5", "empathy", 3, 5),
        rec("g/1", "fluency", 1, 1, target="t2"), rec("g/1", "empathy", 1, 1, target="t2"),
        rec("h/1", "fluency", 3, 1, target="t2"), rec("h/1", "empathy", 3, 1, target="t2"),
    ]  # fmt: skip


# f/5, g/1 and h/1 have no facets (their card was not found): unknown but for their language
FACETS = {
    "f/1": Facets("en", "family_life", "marriage_relationship", "ESConv", 5),
    "f/2": Facets("en", "work_study", "work_study_status", "PsyQA", 5),
    "f/3": Facets("zh", "family_life", "marriage_relationship", "ESConv", 3),
    "f/4": Facets("zh", "family_life", UNKNOWN, "ESConv", 3),
}
T1, T2 = ("t1", "rp", "j"), ("t2", "rp", "j")


def table(tables, facet):
    [found] = [t for t in tables if t.facet == facet]
    return found


def counts(t, row):
    """{column: (n, n_unscored, mean rounded, shown)} of one row, every column (also left out)."""
    return {
        c.value: (
            c.n,
            c.n_unscored,
            None if c.estimate.value is None else round(c.estimate.value, 4),
            c.shown,
        )
        for c in t.cells
        if (c.target, c.roleplayer, c.judge) == row
    }


def test_dialogue_average_is_the_mean_of_its_valid_scores_on_0_100() -> None:
    averages = {s.dialogue_id: s.average for s in dialogue_averages(records())}
    assert averages == {"f/1": 75.0, "f/2": 50.0, "f/3": 12.5, "f/4": None, "f/5": 75.0,
                        "g/1": 25.0, "h/1": 75.0}  # fmt: skip


def test_cells_hold_the_hand_counted_n_and_means() -> None:
    tables = leaderboard_breakdowns(records(), FACETS, min_n=2, n_resamples=200, seed=0)
    assert [t.facet for t in tables] == ["language", "tier1", "tier2", "source", "turns"]
    language = table(tables, "language")
    assert language.columns == ["en", "zh"] and language.rows == [T1, T2]
    # en: (75 + 50 + 75) / 3; zh: f/3 alone, f/4 has no average (counted, in no mean)
    assert counts(language, T1) == {"en": (3, 0, 66.6667, True), "zh": (1, 1, 12.5, False)}
    assert counts(language, T2) == {"en": (2, 0, 50.0, True), "zh": (0, 0, None, False)}
    tier1 = table(tables, "tier1")
    assert tier1.columns == ["family_life", "work_study", UNKNOWN]  # taxonomy order, unknown last
    assert counts(tier1, T1) == {"family_life": (2, 1, 43.75, True), "work_study": (1, 0, 50.0, False),
                                 UNKNOWN: (1, 0, 75.0, False)}  # fmt: skip
    assert counts(tier1, T2) == {"family_life": (0, 0, None, False), "work_study": (0, 0, None, False),
                                 UNKNOWN: (2, 0, 50.0, True)}  # fmt: skip
    source = table(tables, "source")
    assert source.columns == ["ESConv", "PsyQA", UNKNOWN]
    assert counts(source, T1) == {"ESConv": (2, 1, 43.75, True), "PsyQA": (1, 0, 50.0, False),
                                  UNKNOWN: (1, 0, 75.0, False)}  # fmt: skip
    turns = table(tables, "turns")
    assert turns.columns == ["3", "5", UNKNOWN]
    assert counts(turns, T1) == {
        "3": (1, 1, 12.5, False),
        "5": (2, 0, 62.5, True),
        UNKNOWN: (1, 0, 75.0, False),
    }
    assert counts(turns, T2) == {
        "3": (0, 0, None, False),
        "5": (0, 0, None, False),
        UNKNOWN: (2, 0, 50.0, True),
    }


def test_intervals_resample_role_cards() -> None:
    language = table(leaderboard_breakdowns(records(), FACETS, min_n=2, n_resamples=200, seed=0), "language")
    en = language.cell(T1, "en").estimate  # three cards: 75, 50, 75
    assert 50.0 <= en.low < en.value < en.high <= 75.0 and en.unit == "role card"
    assert cell_text(language.cell(T1, "en"), 2) == f"66.7 [{en.low:.1f}, {en.high:.1f}], n=3"
    # t2's two dialogues share card 1: one unit, nothing to resample, so no interval (n is still 2)
    one_card = language.cell(T2, "en")
    assert one_card.n == 2 and one_card.estimate.low is None
    assert cell_text(one_card, 2) == "50.0 [no interval: one card], n=2"
    no_resamples = table(leaderboard_breakdowns(records(), FACETS, min_n=2, n_resamples=0), "language")
    assert cell_text(no_resamples.cell(T1, "en"), 2) == "66.7, n=3"


def test_cells_under_min_n_show_n_not_a_number() -> None:
    tables = leaderboard_breakdowns(records(), FACETS, n_resamples=0)  # min_n 10: every cell too small
    assert not any(c.shown for t in tables for c in t.cells)
    markdown = Report("leaderboard", tuple(breakdown_blocks(tables))).to_markdown()
    assert "| t1 (rp) | n=3 (< 10) | n=1 (< 10) |" in markdown
    assert "| t2 (rp) | n=2 (< 10) | n=0 |" in markdown
    assert "66.7" not in markdown and "50.0" not in markdown
    assert "No problem group reaches n=10 in any row: no table." in markdown
    assert "1 dialogue(s) without any valid judgment" in markdown


def test_tier2_keeps_the_groups_reaching_min_n_and_names_the_rest() -> None:
    tables = leaderboard_breakdowns(records(), FACETS, min_n=2, n_resamples=0)
    tier2 = table(tables, "tier2")
    assert tier2.columns == ["marriage_relationship", UNKNOWN]
    assert tier2.left_out == {"work_study_status": 1}
    # unknown: f/4 (no average), f/5 75; t2's two dialogues
    assert counts(tier2, T1) == {
        "marriage_relationship": (2, 0, 43.75, True),
        "work_study_status": (1, 0, 50.0, False),
        UNKNOWN: (1, 1, 75.0, False),
    }
    report = Report("leaderboard", tuple(breakdown_blocks(tables)))
    markdown = report.to_markdown()
    section = markdown.split("## By problem group (taxonomy tier 2)")[1].split("## By card source")[0]
    assert "| Target (role-player) | marriage_relationship | unknown |" in section
    assert "| t1 (rp) | 43.8, n=2 | n=1 (< 2) |" in section
    assert "1 problem group(s) left out, under n=2 in every row: work_study_status (largest n=1)." in section
    assert "unknown (4 dialogue(s))" in section  # f/4, f/5, g/1, h/1
    shown = [e for e in report.estimates() if e.table == "leaderboard/By problem group (taxonomy tier 2)"]
    cell = next(e for e in shown if dict(e.keys) == {"Target (role-player)": "t1 (rp)", "column": UNKNOWN})
    assert cell.value is None and cell.n == 1 and cell.note == "fewer than 2 dialogues"  # hidden: its n only


def card(id: int, problem: str, topic: str, source: str, category: str | None = None) -> RoleCard:
    return RoleCard(id, "en", "30", "Female", "Teacher", problem, source, topic, category)


def dialogue(card_id: int, problem: str, replies: int) -> Dialogue:
    turns = []
    for i in range(replies):
        turns += [Turn("roleplayer", f"seeker {i}", "stop"), Turn("target", f"reply {i}", "stop")]
    prompt = f"You are a seeker. Problem: {problem}\n"
    return Dialogue(card_id, "en", "rp", "t1", prompt, "Hello!", None, turns, status="complete")


def played(tmp_path: Path) -> tuple[Path, Path, list[ScoreRecord]]:
    """A dialogue file (card 1: 3 exchanges; card 2: played with another problem than the card file's;
    card 3: no card), a card file, and score records of them plus one whose dialogue file is gone."""
    path = tmp_path / "eval" / "dialogues" / "t1__rp__en.jsonl"
    path.parent.mkdir(parents=True)
    played = [dialogue(1, "I broke up.", 3), dialogue(2, "My cat died.", 2), dialogue(3, "Exams.", 1)]
    path.write_text("".join(json.dumps(d.to_dict()) + "\n" for d in played), encoding="utf-8")
    known = [card(1, "I broke up.", "family_life", "ESConv", "romance_start_or_breakup"),
             card(2, "I lost my job.", "work_study", "PsyQA")]  # fmt: skip
    cards = save_cards(known, tmp_path / "cards.json")
    scores = [rec(f"t1__rp__en/{c}", "empathy", 2, c, source=str(path)) for c in (1, 2, 3)]
    scores.append(rec("gone/1", "empathy", 4, 1, source=str(tmp_path / "gone.jsonl")))
    return path, cards, scores


def test_facets_come_from_the_card_and_the_dialogue_file(tmp_path: Path) -> None:
    from esc.reports.breakdown import card_index

    _, cards, scores = played(tmp_path)
    facets, unknown = dialogue_facets(scores, card_index([str(cards)]))
    assert facets == {
        "t1__rp__en/1": Facets("en", "family_life", "marriage_relationship", "ESConv", 3),
        "t1__rp__en/2": Facets("en", turns=2),  # the card file's card 2 is not the one played
        "t1__rp__en/3": Facets("en", turns=1),  # no card 3
        "gone/1": Facets("en", "family_life", "marriage_relationship", "ESConv", None),  # file gone
    }
    assert unknown == {"en": {"no_card": 1, "card_mismatch": 1, "no_dialogue_file": 1}}


def test_score_job_appends_the_sections_and_writes_every_cell(tmp_path: Path) -> None:
    _, cards, scores = played(tmp_path)
    out = tmp_path / "rank"
    out.mkdir()
    cfg = LeaderboardSettings(bootstrap=20, charts=False, breakdowns=True, min_n=1, cards=[str(cards)])
    reports = write_reports(out, scores, cfg, seed=0)
    text = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert text.startswith(reports["markdown"])  # the leaderboard first, unchanged
    titles = [line for line in text.splitlines() if line.startswith("## ")]
    assert titles == ["## By language", "## By topic (taxonomy tier 1)",
                      "## By problem group (taxonomy tier 2)", "## By card source (dataset)",
                      "## By number of turns (role-player/target exchanges)",
                      "## Every breakdown cell"]  # fmt: skip
    assert "| t1 (rp) | family_life | unknown |" not in text
    # tier 1: family_life, one card (1: 50 and 100), no interval | unknown, cards 2 and 3 (both 50)
    assert "| t1 (rp) | 75.0 [no interval: one card], n=2 | 50.0 [50.0, 50.0]*, n=2 |" in text
    assert "1 whose card is not in the cards read" in text
    assert "1 whose card there is not the one played" in text
    with (out / "breakdown.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["facet", "language", "value", "target", "role-player", "judge", "mean",
                             "mean value", "mean low", "mean high", "mean n", "unscored",
                             "shown"]  # fmt: skip
    turns = {r["value"]: (r["mean n"], r["mean value"], r["shown"]) for r in rows if r["facet"] == "turns"}
    assert turns == {"1": ("1", "50.0", "yes"), "2": ("1", "50.0", "yes"), "3": ("1", "50.0", "yes"),
                     UNKNOWN: ("1", "100.0", "yes")}  # fmt: skip
    # 1 row x (en + family_life, unknown + marriage_relationship, unknown + ESConv, unknown + 4 turn counts)
    assert len(rows) == 11
    off = tmp_path / "off"
    off.mkdir()
    write_reports(off, scores, cfg.model_copy(update={"breakdowns": False}), seed=0)
    assert "## By" not in (off / "leaderboard.md").read_text() and not (off / "breakdown.csv").exists()


def test_exchanges_and_turn_columns() -> None:
    lines = [("assistant", "opener"), ("user", "a"), ("assistant", "b"), ("user", "c"), ("user", "d"),
             ("assistant", "e"), ("assistant", "f")]  # fmt: skip
    assert exchanges(lines) == 2 and exchanges([("user", "only")]) == 0
    assert turn_labels([5, 5, 3]) == {3: "3", 5: "5"}
    assert turn_labels(range(9)) == {0: "0", 1: "1", 2: "2", 3: "3-4", 4: "3-4", 5: "5-8", 6: "5-8", 7: "5-8",
                                     8: "5-8"}  # fmt: skip


def test_agreement_breakdown_by_language_and_turns() -> None:
    # en: e1 e2 e3 (human 4 2 0, judge 4 2 1); zh: z1 (3, 3)
    human = {"e1": 4, "e2": 2, "e3": 0, "z1": 3}
    items = [agree.Item((d, "empathy"), h, d) for d, h in human.items()]
    judge = {("e1", "empathy"): 4, ("e2", "empathy"): 2, ("e3", "empathy"): 1, ("z1", "empathy"): 3}
    rows = {
        "judge": {k: agree.Prediction(v) for k, v in judge.items()},
        "const": {(d, "empathy"): agree.Prediction(2) for d in human},
    }

    class Ann:  # what annotation_facets reads of an annotation
        def __init__(self, dialogue_id: str, language: str, exchanges: int) -> None:
            self.dialogue_id, self.language = dialogue_id, language
            self.lines = (("user", "x"), ("assistant", "y")) * exchanges

    facets = annotation_facets(
        [Ann("e1", "en", 5), Ann("e2", "en", 5), Ann("e3", "en", 3), Ann("z1", "zh", 5)]
    )
    cuts = agreement_breakdowns(items, rows, facets, min_n=2, n_resamples=0)
    language, turns = cuts
    assert [(c.value, c.n_units, c.n_items, c.tables is None) for c in language.columns] == [
        ("en", 3, 3, False), ("zh", 1, 1, True)]  # fmt: skip
    en = language.columns[0].tables
    r = agree.find_row(en, agree.POOLED, "judge", "argmax")
    assert r.values["acc"] == pytest.approx(2 / 3) and r.values["acc_soft"] == 1.0
    assert r.values["qwk"] == pytest.approx(12 / 13)  # 1 - (1/3) / (14/9 + 24/9 + 1/9)
    assert agree.find_row(en, agree.POOLED, "const", "argmax").values["acc"] == pytest.approx(1 / 3)
    assert [(c.value, c.n_units) for c in turns.columns] == [("3", 1), ("5", 3)]
    five = agree.find_row(turns.columns[1].tables, agree.POOLED, "judge", "argmax")
    assert five.values["acc"] == 1.0 and five.values["qwk"] == 1.0  # e1, e2, z1: all right
    markdown = Report("agreement", tuple(agreement_breakdown_blocks(cuts))).to_markdown()
    assert "| Judge | reading | figure | en (n=3) | zh (n=1) |" in markdown
    assert "| judge | argmax | ACC | 66.7 | n=1 (< 2) |" in markdown
    assert "| judge | argmax | QWK | 0.923 | n=1 (< 2) |" in markdown
    assert "| const | argmax | ACC | 33.3 | n=1 (< 2) |" in markdown
    assert "| judge | argmax | ACC | n=1 (< 2) | 100.0 |" in markdown
    assert "taxonomy tiers and the card source do not apply" in markdown
    # the same figures as the agreement tables on that subset, with intervals when resampled
    again = agreement_breakdowns(items, rows, facets, min_n=2, n_resamples=50)[0].columns[0].tables
    assert agree.find_row(again, agree.POOLED, "judge", "argmax").values == r.values
    # a value holding every item reuses the tables of all items (the same resamples, not recomputed)
    whole = agree.agreement_tables(items, rows, 50, 0)
    [all_four] = agreement_breakdowns(items, rows, {}, min_n=2, n_resamples=50, whole=whole)[0].columns
    assert all_four.value == UNKNOWN and all_four.n_units == 4 and all_four.tables == whole
    recomputed = agreement_breakdowns(items, rows, {}, min_n=2, n_resamples=50)[0].columns[0].tables
    for reading in agree.READINGS:
        assert (
            agree.find_row(recomputed, agree.POOLED, "judge", reading).intervals
            == agree.find_row(whole, agree.POOLED, "judge", reading).intervals
        )


def test_config_keys_are_checked(tmp_path: Path) -> None:
    base = [f"dialogues={tmp_path}"]
    validate(
        compose([*base, "leaderboard.min_n=3", "leaderboard.breakdowns=false"], config_name="rank"), "rank"
    )
    with pytest.raises(ConfigError, match="leaderboard.min_n"):
        validate(compose([*base, "leaderboard.min_n=0"], config_name="rank"), "rank")
    with pytest.raises(ConfigError, match="leaderboard.cards"):
        validate(compose([*base, f"leaderboard.cards=[{tmp_path / 'no.json'}]"], config_name="rank"), "rank")


def test_with_two_languages_the_other_facets_come_per_language(tmp_path: Path) -> None:
    """A topic's cell never mixes English and Chinese dialogues (Table 2 is per language)."""
    from esc.reports.breakdown import breakdown_sections
    from esc.reports.result import Report

    _, cards, scores = played(tmp_path)
    zh = [
        dataclasses.replace(r, language="zh", dialogue_id=r.dialogue_id.replace("__en", "__zh"))
        for r in scores
    ]
    blocks = breakdown_sections([*scores, *zh], [str(cards)], 1, 20, 0)
    text = Report("leaderboard", tuple(blocks)).to_markdown()
    titles = [line for line in text.splitlines() if line.startswith("## ")]
    assert titles[0] == "## By language" and "## By topic (taxonomy tier 1), en" in titles
    assert "## By topic (taxonomy tier 1), zh" in titles and "## By topic (taxonomy tier 1)" not in titles
    # each language's note counts its own dialogues (issue 52, item 7): en has one card missing from
    # the card file (card 3) and one that is not the card played (card 2); zh has none of its 3 cards
    sections = text.split("\n## ")
    en = next(x for x in sections if x.startswith("By topic (taxonomy tier 1), en"))
    zh = next(x for x in sections if x.startswith("By topic (taxonomy tier 1), zh"))
    assert "1 whose card is not in the cards read" in en and "1 whose card there is not the one played" in en
    assert "3 whose card is not in the cards read" in zh and "not the one played" not in zh
