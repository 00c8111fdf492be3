"""Crisis cards (issue 22): the rule on texts in both languages, on the released cards, as
`cards.subset: crisis` of a run's card selection, and as `esc cards crisis`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from esc.cards import load_cards
from esc.cards.crisis import PATTERNS, crisis_cards, crisis_matches, is_crisis, source_crisis_counts
from esc.cards.selection import CardSelection, select_cards
from esc.cli import main
from esc.config_rules import load_section
from esc.config_schema import validate
from esc.errors import ConfigError
from esc.paths import data_dir
from tests.helpers import compose, conf_node, requires_data

CARD_DIR = data_dir() / "esc_eval"
needs_cards = pytest.mark.skipif(
    not (CARD_DIR / "card_high_en.json").exists() or not (CARD_DIR / "card_high_zh.json").exists(),
    reason=f"released role cards not found under {CARD_DIR}; run `make data`",
)

EN_CRISIS = [
    "I have been cutting myself since the breakup.",
    "She started to self-harm after her father left.",
    "Struggles with self harm and feels ashamed of the scars.",
    "Feels suicidal most nights.",
    "Has had suicidal thoughts since losing the job.",
    "Attempted suicide last year and is afraid it will happen again.",
    "Sometimes I just want to kill myself.",
    "Thinking about killing himself because of the debts.",
    "I want to end my life. It isn't worth it.",
    "Has thought about ending her own life.",
    "I just want to die.",
    "Wanted to be dead since she was twelve.",
    "I wish I were dead.",
    "Everyone would be better off if I was gone; I'm better off dead.",
    "I don't want to live anymore.",
    "I feel like there's no reason to live.",
    "She cut her wrists last winter.",
    "Planning to take my own life after exams.",
    "Plans to hang myself with a belt.",
    "Scared I might hurt myself if this goes on.",
    "SUICIDE has been on my mind.",
]
EN_NOT_CRISIS = [
    # hair, from released card 32416: "cutting it" is not cutting oneself
    "They find it hard to manage, especially after not cutting it for a year; they recently got it cut.",
    "Losing job due to company cutbacks, worried about finding a new one.",
    "Feeling depressed and cut off from family due to COVID-19 restrictions.",
    "I had to cut myself off from toxic friends.",
    "Struggling to cope with the death of their father, who passed away in his sixties.",
    "Grieving a close friend who died in a car accident years ago.",
    "I'm dying to see my family again after the lockdown.",
    "Watched a documentary about a suicide bomber and could not sleep.",
    "I wish I was taller and more confident.",
    "I don't want to live with my parents anymore.",
    "Killing time at work because there is nothing to do.",
    "Afraid of missing the deadline for the project.",
]
ZH_CRISIS = [
    "网络赌博导致巨额债务，自我价值低落，考虑自杀。",
    "有逃避现实和轻生念头。",
    "有时会有自残行为。",
    "最近一直想拿刀自伤。",
    "曾经割腕，被家人送去医院。",
    "真的不想活了。",
    "我好想死，活着太累了。",
    "想结束自己的生命。",
    "想结束生命，一了百了。",
    "站在楼顶想跳楼。",
    "害怕伤害自己或他人。",
    "生气的时候喜欢伤害自己的身体。",
    "想了结自己的生命。",
]
ZH_NOT_CRISIS = [
    "好久没见，想死你了！",
    "妈妈说：想死我了。",
    "我不想死，只是很害怕生病。",
    "商场在搞跳楼价促销，我买了很多东西。",
    "工作压力太大，不想活得这么累。",
    "父亲去世以后一直很难过。",
    "害怕伤害自己的感情，不敢表白。",
    "看到新闻里的自杀式袭击很害怕。",
    "剪头发剪得太短了，很后悔。",
]


@pytest.mark.parametrize("text", EN_CRISIS)
def test_english_crisis_texts_match(text: str) -> None:
    assert is_crisis(text, "en"), text
    assert crisis_matches(text, "en")


@pytest.mark.parametrize("text", EN_NOT_CRISIS)
def test_english_non_crisis_texts_do_not_match(text: str) -> None:
    assert not is_crisis(text, "en"), crisis_matches(text, "en")


@pytest.mark.parametrize("text", ZH_CRISIS)
def test_chinese_crisis_texts_match(text: str) -> None:
    assert is_crisis(text, "zh"), text
    assert crisis_matches(text, "zh")


@pytest.mark.parametrize("text", ZH_NOT_CRISIS)
def test_chinese_non_crisis_texts_do_not_match(text: str) -> None:
    assert not is_crisis(text, "zh"), crisis_matches(text, "zh")


def test_matches_are_the_phrases_in_text_order_each_once() -> None:
    text = "Suicidal thoughts; started cutting myself, then more suicidal thoughts."
    assert crisis_matches(text, "en") == ["Suicidal", "cutting myself", "suicidal"]
    assert crisis_matches("有自残行为和自杀倾向，自杀念头", "zh") == ["自残", "自杀"]
    assert crisis_matches("No crisis here.", "en") == []


def test_patterns_are_per_language_and_an_unknown_language_is_an_error() -> None:
    assert set(PATTERNS) == {"en", "zh"}
    assert not is_crisis("考虑自杀", "en")
    assert not is_crisis("wants to kill myself", "zh")
    with pytest.raises(ValueError, match="unknown language 'fr'"):
        is_crisis("suicide", "fr")


@needs_cards
def test_crisis_cards_of_the_released_cards() -> None:
    cards = load_cards()
    crisis = crisis_cards(cards)
    assert crisis and all(is_crisis(card.problem, card.language) for card in crisis)
    ids = [card.id for card in crisis]
    assert 10366 in ids  # 网络赌博导致巨额债务，自我价值低落，考虑自杀。
    assert 32416 not in ids  # the hair card: "not cutting it for a year"
    assert ids == [card.id for card in cards if card.id in set(ids)]  # file order kept


def _select(selection: dict[str, object]) -> list:
    """`select_cards` on a `cards` node: the Chinese cards, every other key null unless given."""
    node = {"languages": ["zh"], "ids": None, "limit": None, "paths": None, "subset": None, **selection}
    return select_cards(load_section("cards", CardSelection, node))


@needs_cards
def test_select_cards_crisis_subset_before_limit() -> None:
    crisis = _select({"subset": "crisis"})
    assert crisis and all(card.language == "zh" and is_crisis(card.problem, "zh") for card in crisis)
    assert [c.id for c in crisis] == [c.id for c in crisis_cards(load_cards(language="zh"))]
    assert 10366 in {card.id for card in crisis}
    limited = _select({"subset": "crisis", "limit": 2})
    assert [c.id for c in limited] == [c.id for c in crisis[:2]]
    assert _select({"subset": None, "limit": 2}) == load_cards(language="zh")[:2]
    # explicit ids with the subset: a known id that is not a crisis card is dropped, not "unknown"
    both = _select({"ids": [10366, 10000], "subset": "crisis"})
    assert [c.id for c in both] == [10366]
    with pytest.raises(ConfigError, match=r"cards\.ids.*\[1\]"):
        _select({"ids": [10366, 1], "subset": "crisis"})


@pytest.mark.parametrize("value", ["Crisis", "suicide", 1, ["crisis"]])
def test_an_unknown_subset_names_the_key(value: object) -> None:
    with pytest.raises(ConfigError, match=r"config `cards\.subset`: must be 'crisis', got"):
        _select({"subset": value})


def test_the_evaluate_schema_knows_the_subset() -> None:
    validate(compose(["cards.subset=crisis"], config_name="evaluate"), "evaluate")
    validate(compose([], config_name="evaluate"), "evaluate")  # the default: null
    with pytest.raises(ConfigError, match=r"cards\.subset"):
        validate(compose(["cards.subset=suicide"], config_name="evaluate"), "evaluate")


@needs_cards
def test_esc_cards_crisis_prints_the_counts(capsys: pytest.CaptureFixture) -> None:
    cards = load_cards()
    assert main(["cards", "crisis"]) == 0
    out = capsys.readouterr().out
    for language in ("en", "zh"):
        these = [card for card in cards if card.language == language]
        assert f"{language}: {len(crisis_cards(these))} of {len(these)} cards" in out
    assert "  10366  PsyQA" in out and "自杀" in out
    assert "Seeker texts" not in out


def test_esc_cards_crisis_sources_says_which_datasets_are_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    cards = tmp_path / "cards.json"
    record = {"id": 1, "language": "zh", "age": "20", "gender": "女", "occupation": "学生"}
    record |= {"problem": "考试失利，有轻生念头。", "source": "PsyQA", "topic": "work_study"}
    cards.write_text(json.dumps([record], ensure_ascii=False), encoding="utf-8")
    posts = tmp_path / "data" / "psyqa" / "PsyQA_example.json"
    posts.parent.mkdir(parents=True)
    posts.write_text(
        json.dumps(
            [{"question": "不想活了", "description": "怎么办"}, {"question": "失眠"}], ensure_ascii=False
        ),
        encoding="utf-8",
    )
    monkeypatch.setenv("ESC_DATA_DIR", str(tmp_path / "data"))
    assert main(["cards", "crisis", "--cards", str(cards), "--sources"]) == 0
    out = capsys.readouterr().out
    assert "zh: 1 of 1 cards" in out and "  1  PsyQA" in out and "轻生" in out
    assert "ESConv         en        absent:" in out and "make data" in out
    psyqa = next(c for c in source_crisis_counts() if c.dataset == "PsyQA")
    assert (psyqa.texts, psyqa.crisis, psyqa.phrases, psyqa.missing) == (2, 1, {"不想活": 1}, None)


@requires_data
def test_card_construction_takes_the_crisis_records_of_the_sources() -> None:
    """`cards.subset=crisis` (+exp=cards/crisis_en): only records whose seeker text passes the rule,
    the first `limit` of each source after the filter."""
    from esc.cards.construct.run import CardSources, gather_records

    enabled = {"esconv": {"enabled": True}, "epitome": {"enabled": True}}  # the others off, as conf/ has them
    changes = {"languages": ["en"], "limit": 3, "subset": "crisis", "sources": enabled}
    section = conf_node("cards", changes, config_name="cards")
    records = gather_records(load_section("cards", CardSources, section))
    by_source = Counter(r.source for r in records)
    assert by_source == {"ESConv": 3, "EPITOME": 3}
    assert all(is_crisis(r.seeker_text(), "en") for r in records)
    everything = gather_records(load_section("cards", CardSources, {**section, "subset": None}))
    assert not all(
        is_crisis(r.seeker_text(), "en") for r in everything
    )  # the first 3 of each are not all crises
